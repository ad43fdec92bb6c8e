// The training driver shared by train_natsl.c and train_natsl.cu: the flags, the model (a preset, a checkpoint
// to start from, or a run to resume), the data, and the loop around train_step with validation, samples,
// logging (stdout and DIR/main.log) and checkpoints; and the -D comparison dump (common/dump.h).
// It is included at the end of each program and is written on that program's model interface:
//   Model, model_build, model_init, model_alloc_acts, model_forward, model_free, train_step, logits_to_float32,
//   and common/model_io.h (softmax_fraction, save/load of the checkpoint files)
// and on these backend hooks:
//   backend_default_precision  what -p is when not given ("fp32" on the CPU, "bf16" on the GPU)
//   backend_start(args)        set the backend up for the flags (precision, the ranks' GPUs) and print what it runs on
//   backend_allreduce(x, n)    sum n doubles over the ranks, every rank getting the sums (one process: nothing)
//   backend_step_timed(first, dt)  a step took dt seconds (first: the first step of this run)
//   backend_step_note(M, B, T, accum, dt)  print extra fields of the step line (the GPU: MFU)
//   backend_finish()           print reports and release the backend
#ifndef NATSL_TRAIN_MAIN_H
#define NATSL_TRAIN_MAIN_H

#include <sys/stat.h>
#include "baseline.h"
#include "dump.h"

// Mean loss over n batches of the val loader (from its start) into *vloss, and the softmax fraction of every N
// layer's heads into sfr_head; -1 on a data error. Several ranks share the batches out (batch i on rank i mod N) and
// sum what they saw, so every rank gets the numbers one process gets.
static int evaluate(double *vloss, Model *M, DataLoader *val, int n, int B, int T, double *sfr_head, char *err, size_t errlen) {
    const Config *c = &M->cfg;
    int LH = c->L * c->H;
    double *sum = (double *)xcalloc(1 + LH, sizeof(double)); // loss, then the fractions [layer][head]
    dataloader_reset(val);
    for (int i = 0; i < n; i++) {
        if (i % g_world != g_rank) {
            if (dataloader_skip_batch(val, err, errlen)) { free(sum); return -1; }
            continue;
        }
        if (dataloader_next_batch(val, err, errlen)) { free(sum); return -1; }
        model_forward(M, val->inputs, val->targets, B, T);
        sum[0] += M->mean_loss;
        for (int l = 0; l < c->L; l++)
            if (c->pattern[l] == 'N')
                for (int h = 0; h < c->H; h++) sum[1 + l * c->H + h] += softmax_fraction(M, l, h, B, T);
    }
    backend_allreduce(sum, 1 + LH);
    *vloss = sum[0] / n;
    for (int i = 0; i < LH; i++) sfr_head[i] = sum[1 + i] / n;
    free(sum);
    return 0;
}

// ---- several ranks (doc/model.md §9.4): what rank 0 decides reaches every rank; every rank must run the same job
static int from_rank0(int v) {
    double x = g_rank == 0 ? v : 0;
    backend_allreduce(&x, 1);
    return (int)x;
}

// The flags and the model of every rank against rank 0's: a job whose ranks were started differently is refused.
static void check_same_job(int argc, char **argv, const Model *M) {
    if (g_world == 1) return;
    uint64_t h = config_fingerprint(&M->cfg, M->nparams);
    for (int i = 1; i < argc; i++)
        for (const char *p = argv[i]; ; p++) { h = (h ^ (unsigned char)*p) * 0x100000001b3ull; if (!*p) break; }
    double *x = (double *)xcalloc(2 * (size_t)g_world, sizeof(double));
    x[2 * g_rank] = (double)(h & 0xffffffffu); x[2 * g_rank + 1] = (double)(h >> 32);
    backend_allreduce(x, 2 * g_world);
    for (int r = 1; r < g_world; r++)
        if (x[2 * r] != x[0] || x[2 * r + 1] != x[1]) {
            char msg[200];
            snprintf(msg, sizeof(msg), "rank %d's flags or model differ from rank 0's: every rank must run the same command", r);
            die(msg);
        }
    free(x);
}

// A step's statistics over the ranks: each rank's are the means over its micro-batches, the job's their mean.
static void reduce_step_stats(StepStats *s, double *sfr, int L) {
    if (g_world == 1) return;
    double x[4 + NATSL_MAX_LAYERS] = {s->loss, s->pen, s->lb, s->frac};
    for (int l = 0; l < L; l++) x[4 + l] = sfr[l];
    backend_allreduce(x, 4 + L);
    s->loss = x[0] / g_world; s->pen = x[1] / g_world; s->lb = x[2] / g_world; s->frac = x[3] / g_world;
    for (int l = 0; l < L; l++) sfr[l] = x[4 + l] / g_world;
}

// Checkpoint `step` in dir: the model file (rank 0), under ZeRO-1 every rank's shard of the moments, and last, once
// every rank has written its part, the state file (rank 0): a state file marks a complete checkpoint
// (run_dir_resume_step resumes only from one). A checkpoint that fails (a full disk) ends the run with the error and
// leaves none of its files: each rank removes what it wrote of it (each file went through a temporary name, so no
// half-written file is left either), and the run's earlier checkpoints stay as they were.
static void remove_checkpoint_part(const TrainState *st, const char *dir) {
    char path[4200];
    if (g_rank == 0) { snprintf(path, sizeof(path), "%s/model_%08d.bin", dir, st->step); remove(path); }
    if (st->zero) { snprintf(path, sizeof(path), "%s/zero1_%08d_r%03d.bin", dir, st->step, g_rank); remove(path); }
}
static void save_checkpoint(Model *M, const TrainState *st, const char *dir) {
    char path[4200], err[1024] = "";
    int failed = 0;
    if (g_rank == 0) {
        snprintf(path, sizeof(path), "%s/model_%08d.bin", dir, st->step);
        failed = save_model(M, path, err, sizeof(err)) != 0;
    }
    if (!failed && st->zero) {
        snprintf(path, sizeof(path), "%s/zero1_%08d_r%03d.bin", dir, st->step, g_rank);
        failed = save_zero_shard(M, st, path, err, sizeof(err)) != 0;
    }
    double any = failed;
    backend_allreduce(&any, 1);
    if (any > 0) remove_checkpoint_part(st, dir);
    if (failed) die(err);
    if (any > 0) {
        snprintf(err, sizeof(err), "checkpoint of step %d: another rank could not write its part (its error names it); "
                 "no state file was written, so the checkpoint is incomplete", st->step);
        die(err);
    }
    if (g_rank == 0) {
        snprintf(path, sizeof(path), "%s/state_%08d.bin", dir, st->step);
        failed = save_state(M, st, path, err, sizeof(err)) != 0;
    }
    any = failed;
    backend_allreduce(&any, 1);
    if (any > 0) {
        remove_checkpoint_part(st, dir);
        if (failed) die(err);
        snprintf(err, sizeof(err), "checkpoint of step %d: rank 0 could not write the state file (its error names it)", st->step);
        die(err);
    }
    printf("saved %s/{model,state}_%08d.bin%s\n", dir, st->step, st->zero ? " and the ranks' zero1_ shards" : "");
}

// A run stops after NATSL_MAX_SKIPPED consecutive steps that were skipped (a gradient norm that is not finite, no
// update): the error names the likely cause; main.log and the checkpoints already saved stay. first: the run's first
// step; loss_finite: that of the last step; resumed: the model file resumed from ("" when not resumed).
#define NATSL_MAX_SKIPPED 5
static void stop_nonfinite(int step, int first, int loss_finite, const char *resumed, const TrainArgs *a) {
    char msg[4600], from[4300];
    Config preset;
    if (*resumed) snprintf(from, sizeof(from), "the parameters of the checkpoint %s", resumed);
    else if (a->init_given && config_from_preset(&preset, a->init_from, 0)) snprintf(from, sizeof(from), "the parameters of -e %s", a->init_from);
    else snprintf(from, sizeof(from), "the initialization or the data");
    if (step - NATSL_MAX_SKIPPED + 1 == first)
        snprintf(msg, sizeof(msg), "steps %d-%d: the %s is not finite from the run's first step on, %d steps skipped in a row: %s "
                 "(a huge or broken value)?", first, step, loss_finite ? "gradient norm" : "loss", NATSL_MAX_SKIPPED, from);
    else
        snprintf(msg, sizeof(msg), "steps %d-%d: the %s is not finite, %d steps skipped in a row: the training diverged "
                 "(lower -l, raise -u); main.log and the checkpoints saved so far are kept", step - NATSL_MAX_SKIPPED + 1,
                 step, loss_finite ? "gradient norm" : "loss", NATSL_MAX_SKIPPED);
    die(msg);
}

// The vocabulary of the shards a glob matches (§1): the decoding table tokenizer.bin beside them where there is
// one (a data set with its own vocabulary, such as data/tinyshakespeare_char/ of dev/data/char_shards.py), else
// GPT-2's, the ids of llm.c's shards, decoded by data/gpt2_tokenizer.bin. Returns V with the table in *tok and
// where V comes from in src (the table's path, or "GPT-2 ids: ..."); a missing or unreadable GPT-2 table leaves
// tok->ok = 0 and the reason in err (samples then print ids). -1 with a message: no shard matches, or the data
// set's own table is unreadable or larger than the shards' uint16 ids.
static int data_vocab(const char *glob, Tokenizer *tok, char *src, size_t srclen, char *err, size_t errlen) {
    char path[4096];
    int own = dataloader_tokenizer_path(glob, path, sizeof(path), err, errlen);
    if (own < 0) return -1;
    if (!own) {
        snprintf(src, srclen, "GPT-2 ids: no tokenizer.bin beside %s", glob);
        tokenizer_init(tok, "data/gpt2_tokenizer.bin", err, errlen);
        return GPT2_VOCAB;
    }
    snprintf(src, srclen, "%s", path);
    if (tokenizer_init(tok, path, err, errlen)) return -1;
    if (tok->vocab_size > 65536) {
        snprintf(err, errlen, "%s: %u tokens, but shards hold uint16 ids (at most 65536 tokens)", path, tok->vocab_size);
        tokenizer_free(tok);
        return -1;
    }
    return (int)tok->vocab_size;
}

// Generates n tokens after an end-of-text token, sampling from the softmax. The forward runs on the
// shortest multiple of 64 that holds the sequence: a position's logits depend only on earlier
// tokens (routing of the current chunk only affects later chunks, §5.3-5.4), so this is exact.
static void sample_text(Model *M, const Tokenizer *tok, int n, int T, uint64_t *rng) {
    int *ids = (int *)xcalloc(T, sizeof(int));
    ids[0] = tok->ok ? (int)tok->eot : GPT2_EOT;
    printf("---\n");
    for (int t = 1; t < n + 1 && t < T; t++) {
        int Tt = ((t + NATSL_CHUNK - 1) / NATSL_CHUNK) * NATSL_CHUNK;
        model_forward(M, ids, NULL, 1, Tt);
        float *z = logits_to_float32(M, t - 1, 1);
        double mx = -1e30, s = 0, u = rng_uniform(rng), cum = 0;
        for (int i = 0; i < M->cfg.V; i++) if (z[i] > mx) mx = z[i];
        for (int i = 0; i < M->cfg.V; i++) s += exp(z[i] - mx);
        int next = M->cfg.V - 1;
        for (int i = 0; i < M->cfg.V; i++) {
            cum += exp(z[i] - mx) / s;
            if (u < cum) { next = i; break; }
        }
        free(z);
        ids[t] = next;
        const char *piece = tokenizer_decode(tok, next);
        if (piece) tokenizer_print_safe(piece);
        else printf("<%d>", next);
        fflush(stdout);
    }
    printf("\n---\n");
    free(ids);
}

// The whole program: flags, model (preset, checkpoint, or resume), data, then the training loop with
// val loss, samples, per-step logging (stdout and DIR/main.log) and checkpoints.
static int train_main(int argc, char **argv) {
    TrainArgs a;
    train_args_parse(&a, argc, argv, backend_default_precision);
    int B = a.B, T = a.T;
    char err[1024], msg[1200];
    // the job: one process, or one rank of several (common/dist.h; doc/model.md §9.4); only rank 0 prints, logs and
    // writes the model and state files
    if (dist_env(&g_job, err, sizeof(err))) die(err);
    g_rank = g_job.rank; g_world = g_job.world; g_local_rank = g_job.local_rank;
    g_zero = a.zero && g_world > 1;
    if (g_world > 1) {
        snprintf(g_rank_tag, sizeof(g_rank_tag), "rank %d: ", g_rank);
        if (g_rank > 0 && !freopen("/dev/null", "w", stdout)) die("cannot send stdout to /dev/null");
        if (a.dump_path || a.freeze_path) die("-D and -f run in one process, not in a job of several");
        if (a.accum % g_world) {
            snprintf(msg, sizeof(msg), "-d %d: with %d ranks the total batch must be a multiple of B*T*ranks = %lld",
                     a.total_batch, g_world, (long long)B * T * g_world);
            die(msg);
        }
    }
    backend_start(&a);

    // the data, each set of shards checked against its vocabulary; the model's is the train shards' (§1), and the
    // val shards must have the same
    Tokenizer tok, vtok;
    char vocab_src[4200], val_src[4200];
    int V = data_vocab(a.train_glob, &tok, vocab_src, sizeof(vocab_src), err, sizeof(err));
    if (V < 0) die(err);
    if (!tok.ok) printf("note: %s (samples print token ids)\n", err);
    int Vval = data_vocab(a.val_glob, &vtok, val_src, sizeof(val_src), err, sizeof(err));
    if (Vval < 0) die(err);
    tokenizer_free(&vtok);
    DataLoader train, val;
    if (dataloader_init(&train, a.train_glob, B, T, V, err, sizeof(err))) die(err);
    if (dataloader_init(&val, a.val_glob, B, T, Vval, err, sizeof(err))) die(err);
    if (Vval != V) {
        snprintf(msg, sizeof(msg), "-j %.400s: the val shards' vocabulary is V=%d (%.300s), the train shards' V=%d (%.300s)",
                 a.val_glob, Vval, val_src, V, vocab_src);
        die(msg);
    }
    if (a.val_every > 0 && (size_t)a.val_batches > val.nbatches) { // (more would repeat batches, and take that long)
        snprintf(msg, sizeof(msg), "-m %d: the val shards (%.400s) hold %zu batches of B*T = %d tokens: give -m %zu or less",
                 a.val_batches, a.val_glob, val.nbatches, B * T, val.nbatches);
        die(msg);
    }

    // the model: a preset (+ pattern), a checkpoint to start from, or the latest checkpoint in -o
    Model M;
    TrainState st = {0, rng_seed(a.seed + 1), 0, 0, 0, rng_seed(a.seed + 2), 1, 0}; // sampling stream, §7.2 noise stream
    if (a.outdir && g_rank == 0) run_dir_open(a.outdir); // created, locked for the life of the run, leftover *.tmp removed
    int resume_step = from_rank0(g_rank == 0 ? run_dir_resume_step(a.outdir, a.resume) : 0);
    char model_path[4200] = "", state_path[4200] = ""; // the checkpoint resumed from
    if (resume_step >= 0) {
        snprintf(model_path, sizeof(model_path), "%s/model_%08d.bin", a.outdir, resume_step);
        if (load_model(&M, model_path, err, sizeof(err))) die(err);
        snprintf(state_path, sizeof(state_path), "%s/state_%08d.bin", a.outdir, resume_step);
        snprintf(msg, sizeof(msg), "%s", state_path);
        if (load_state(&M, &st, msg, err, sizeof(err))) die(err);
        if (resume_check_state(&st, &M.cfg, M.nparams, resume_step, a.max_steps, msg, err, sizeof(err)) ||
            check_model_for_data(&M.cfg, V, vocab_src, model_path, err, sizeof(err)) ||
            resume_check_flags(&M.cfg, &a, V, model_path, err, sizeof(err))) die(err);
        if (st.zero != g_zero || (st.zero && st.world != g_world)) {
            if (st.zero)
                snprintf(err, sizeof(err), "%s: written by %d ranks with -z 1 (the moments are in their zero1_ shards): resume it "
                         "on %d GPUs with -z 1, or start a new run from its weights with -e %s/model_%08d.bin", msg, st.world,
                         st.world, a.outdir, resume_step);
            else
                snprintf(err, sizeof(err), "%s: written with -z 0 (it holds all the moments): resume it with -z 0, or start a "
                         "new run from its weights with -e %s/model_%08d.bin", msg, a.outdir, resume_step);
            die(err);
        }
        if (st.zero) {
            snprintf(msg, sizeof(msg), "%s/zero1_%08d_r%03d.bin", a.outdir, resume_step, g_rank);
            if (load_zero_shard(&M, &st, msg, err, sizeof(err))) die(err);
        }
        printf("resuming from %s/state_%08d.bin (step %d)\n", a.outdir, resume_step, st.step);
        if (!st.noise_rng) { // a state file from before §7.2 (version 1): no noise was drawn in that run
            st.noise_rng = rng_seed(a.seed + 2);
            if (a.tau0 > 0) printf("note: %s holds no Gumbel noise stream (older file): it starts from the seed\n", msg);
        }
    } else {
        Config c;
        if (config_from_preset(&c, a.init_from, V) == 0) {
            if (a.arch && config_set_pattern(&c, a.arch, err, sizeof(err))) die(err);
            if (config_check(&c, err, sizeof(err))) die(err);
            model_build(&M, &c);
            model_init(&M, a.seed);
        } else {
            struct stat sb;
            if (stat(a.init_from, &sb)) { snprintf(msg, sizeof(msg), "-e %s: not a preset (tiny, 340m, 760m) and no such file", a.init_from); die(msg); }
            if (load_model(&M, a.init_from, err, sizeof(err))) die(err);
            if (a.arch) printf("note: -a is ignored when starting from a checkpoint\n");
            if (check_model_for_data(&M.cfg, V, vocab_src, a.init_from, err, sizeof(err))) die(err);
        }
    }
    const Config *c = &M.cfg;
    check_same_job(argc, argv, &M);
    // §7: the softmax-budget options (off by default) and the Gumbel stream
    M.rb.lambda = a.budget; M.rb.target = a.budget_target; M.rb.alpha = a.lb_alpha;
    M.rb.tau0 = a.tau0; M.rb.tau_min = a.tau_min; M.rb.tau_decay = a.tau_decay; M.rb.rng = st.noise_rng;
    M.rb.sel_lambda = a.sel_lambda; M.rb.kappa = a.kappa; // §7.3
    printf("model: D=%d L=%d H=%d dk=%d dv=%d Ha=%d F=%d V=%d pattern=%s rope=%d\n",
           c->D, c->L, c->H, c->dk, c->dv, c->Ha, c->F, c->V, c->pattern, c->rope);
    printf("vocabulary: %d tokens (%s)\n", V, vocab_src);
    printf("parameters: %zu\n", M.nparams);
    char pat[NATSL_MAX_LAYERS + 1];
    double *p_a = (double *)xcalloc(c->L, sizeof(double)); // §7.3: each S layer's p_A
    if (a.freeze_path) { // §7.3: every S layer frozen to the mixer its gate chooses
        Model F;
        freeze_selection(&F, &M);
        if (save_model(&F, a.freeze_path, err, sizeof(err))) die(err);
        printf("froze pattern %s to %s (%zu parameters): wrote %s\n", c->pattern, F.cfg.pattern, F.nparams, a.freeze_path);
        model_free(&F); model_free(&M); free(p_a);
        dataloader_free(&train); dataloader_free(&val); tokenizer_free(&tok);
        backend_finish();
        return 0;
    }
    if (strchr(c->pattern, 'S'))
        printf("layer selection (§7.3): penalty lambda_S %g, kappa %g, gate temperature %s\n", M.rb.sel_lambda, M.rb.kappa,
               M.rb.tau0 > 0 ? "as -G -M -R" : "1");
    printf("batch: B=%d T=%d, %d micro-steps = %d tokens per step", B, T, a.accum, a.total_batch);
    if (g_world > 1) printf(" (%d micro-steps on each of %d ranks)", a.accum / g_world, g_world);
    printf("\n");
    if (a.zero && g_world == 1) printf("note: -z 1 shards the optimizer over several ranks; one process keeps it whole\n");
    if (budget_aux_on(&M.rb) || M.rb.tau0 > 0)
        printf("softmax budget (§7): penalty lambda %g (f* %g), load balancing alpha %g, routing %s (tau0 %g, min %g, decay %g)\n",
               M.rb.lambda, M.rb.target, M.rb.alpha, M.rb.tau0 > 0 ? "ST-Gumbel" : "argmax", M.rb.tau0, M.rb.tau_min, M.rb.tau_decay);

    if (st.step > 0 && dataloader_seek(&train, st.shard, st.pos, err, sizeof(err))) { // the state file's position
        snprintf(msg, sizeof(msg), "%s: its data position (shard %d, token %zu) is not in the train shards: %s", state_path,
                 st.shard, st.pos, err);
        die(msg);
    }
    double baseline[2] = {0, 0}; // unigram, bigram: what the val loss must beat
    if (a.val_every > 0 && !a.dump_path && g_rank == 0) print_baselines(&train, &val, a.val_batches, c->V, baseline);
    model_alloc_acts(&M, B, T, a.recompute);
    const char *kept[3] = {"off", "1: layer inputs, op and mixer outputs kept", "2: layer inputs kept"};
    printf("activations: %.2f GiB + %.2f GiB of gradient scratch (recompute %s)\n", M.acts_size * sizeof(real) / 1073741824.0,
           M.dacts_size * sizeof(real) / 1073741824.0, kept[a.recompute]);
    if (a.dump_path) {
        dump_write(&M, &train, a.dump_path, a.lr, a.warmup, a.final_frac, a.wd, B, T);
        model_free(&M); free(p_a);
        dataloader_free(&train); dataloader_free(&val); tokenizer_free(&tok);
        backend_finish();
        return 0;
    }

    FILE *logf = NULL;
    if (a.outdir && g_rank == 0) {
        snprintf(msg, sizeof(msg), "%s/main.log", a.outdir);
        if (st.step > 0 && log_truncate_after(msg, st.step, err, sizeof(err))) die(err);
        logf = log_open(msg, st.step > 0); // every write checked (log_flush)
    }
    double *sfr = (double *)xcalloc((size_t)c->L * c->H, sizeof(double)); // val softmax fractions [layer][head]
    double *sfr_step = (double *)xcalloc(c->L, sizeof(double));            // a step's, per layer

    double t_start = now_s(), t_steps = 0, vl = 0; // for the ETA and the summary
    int first = st.step + 1, skipped_run = 0, vl_step = 0; // skipped_run: consecutive steps skipped so far
    for (int step = first; step <= a.max_steps; step++) {
        int last = step == a.max_steps;
        if (a.val_every > 0 && (step % a.val_every == 0 || last || step == 1)) {
            vl_step = step;
            if (evaluate(&vl, &M, &val, a.val_batches, B, T, sfr, err, sizeof(err))) die(err);
            printf("step %d: val loss %.6f", step, vl);
            for (int l = 0; l < c->L; l++) {
                if (c->pattern[l] != 'N') continue;
                printf(" | softmax frac l%d:", l);
                for (int h = 0; h < c->H; h++) printf(" %.2f", sfr[l * c->H + h]);
            }
            printf("\n");
            if (logf) { fprintf(logf, "s:%d tel:%.4f\n", step, vl); log_flush(logf); }
        }
        if (a.sample_every > 0 && a.gen_tokens > 0 && (step % a.sample_every == 0 || last) && g_rank == 0) {
            printf("step %d: sample\n", step);
            sample_text(&M, &tok, a.gen_tokens, T, &st.rng);
        }

        double t0 = now_s(), step_lr = lr_at(step - 1, a.warmup, a.max_steps, a.lr, a.final_frac);
        StepStats s = train_step(&M, &train, a.accum / g_world, B, T, step_lr, a.wd, step, sfr_step);
        reduce_step_stats(&s, sfr_step, c->L);
        double dt = now_s() - t0;
        t_steps += dt;
        backend_step_timed(step == st.step + 1, dt);
        printf("step %4d/%d | loss %.6f | lr %.2e | norm %.6f | %.0f ms | %.0f tok/s", step, a.max_steps, s.loss,
               step_lr, s.norm, dt * 1e3, a.total_batch / dt);
        backend_step_note(&M, B, T, a.accum / g_world, dt); // the GPU's MFU (per GPU)
        print_eta(step - st.step, a.max_steps - step, now_s() - t_start);
        for (int l = 0; l < c->L; l++) if (c->pattern[l] == 'N') printf(" | sfr l%d %.2f", l, sfr_step[l]);
        if (M.rb.lambda > 0 || M.rb.sel_lambda > 0) printf(" | pen %.4f", s.pen);
        if (M.rb.lambda > 0) printf(" (f %.3f)", s.frac);
        if (M.rb.alpha > 0) printf(" | lb %.4f", s.lb);
        if (M.rb.tau0 > 0) printf(" | tau %.3f", s.tau);
        select_pattern(&M, pat, p_a);
        if (strchr(c->pattern, 'S')) printf(" | pat %s→%s", c->pattern, pat);
        printf("%s\n", s.skipped ? " | SKIPPED (gradient norm not finite)" : "");
        if (logf) {
            fprintf(logf, "s:%d trl:%.4f\n", step, s.loss);
            for (int l = 0; l < c->L; l++) if (c->pattern[l] == 'N') fprintf(logf, "s:%d sfr:%d:%.4f\n", step, l, sfr_step[l]);
            for (int l = 0; l < c->L; l++)
                if (c->pattern[l] == 'S') fprintf(logf, "s:%d sel:%d:%c:%.4f\n", step, l, pat[l], p_a[l]);
            if (M.rb.lambda > 0 || M.rb.sel_lambda > 0) fprintf(logf, "s:%d pen:%.6f\n", step, s.pen);
            if (M.rb.alpha > 0) fprintf(logf, "s:%d lb:%.6f\n", step, s.lb);
            if (s.skipped) fprintf(logf, "s:%d skip:nonfinite-grad\n", step);
            log_flush(logf);
        }
        skipped_run = s.skipped ? skipped_run + 1 : 0;
        if (skipped_run == NATSL_MAX_SKIPPED) stop_nonfinite(step, first, is_finite(s.loss), model_path, &a);

        if (a.outdir && ((a.ckpt_every > 0 && step % a.ckpt_every == 0) || last)) {
            st.step = step; st.shard = train.shard; st.pos = train.pos; st.model_fp = config_fingerprint(c, M.nparams);
            st.noise_rng = M.rb.rng; st.world = g_world; st.zero = g_zero;
            save_checkpoint(&M, &st, a.outdir);
        }
    }
    if (logf) log_close(logf);
    double t_all = now_s() - t_start;
    int steps = a.max_steps - first + 1;
    printf("done: %d steps in %.1f s (%.0f tok/s over the steps, %.0f with validation and samples)", steps, t_all,
           (double)steps * a.total_batch / (t_steps > 0 ? t_steps : 1), (double)steps * a.total_batch / (t_all > 0 ? t_all : 1));
    if (vl_step) printf(" | val loss %.4f at step %d", vl, vl_step);
    if (vl_step && baseline[0] > 0) printf(" against the baselines unigram %.3f, bigram %.3f", baseline[0], baseline[1]);
    printf("\n");
    free(sfr); free(sfr_step); free(p_a);
    dataloader_free(&train); dataloader_free(&val);
    tokenizer_free(&tok);
    model_free(&M);
    backend_finish();
    return 0;
}

#endif
