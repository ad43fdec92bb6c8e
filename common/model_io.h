// What both trainers do with a model in the same way, written once: the router statistics and the checkpoint
// files. Included by train_natsl.c and train_natsl.cu after they define their Model and these four functions
// (the CPU's work on host memory, the GPU's copy to and from the device):
//   to_float32(buf, n)        a new host float32 copy of n values of a model buffer
//   to_float64(buf, n)        a new host double copy (exact: the tests' double build sums router probabilities)
//   from_float32(buf, f, n)   the host float32 values f into a model buffer
//   model_build(M, config)    the parameter and gradient buffers of a model of that config
//   model_alloc_moments(M)    AdamW's two moment buffers (zero), if not there yet
// File formats: common/checkpoint.h.
#ifndef NATSL_MODEL_IO_H
#define NATSL_MODEL_IO_H

// Fraction of softmax-routed chunks of N layer l (the last chunk is excluded: it is forced, §5.2), over the batch
// of the last forward pass, for one head (h >= 0) or all heads (h = -1).
static double softmax_fraction(const Model *M, int l, int h, int B, int T) {
    int Nc = T / NATSL_CHUNK, H = M->cfg.H, n = 0, soft = 0;
    if (Nc < 2) return 0;
    float *mask = to_float32(M->la[l].rmask, (size_t)B * Nc * H * 2);
    for (int b = 0; b < B; b++)
        for (int c = 0; c < Nc - 1; c++)
            for (int k = 0; k < H; k++) {
                if (h >= 0 && k != h) continue;
                n++;
                soft += mask[(((size_t)b * Nc + c) * H + k) * 2] == 1;
            }
    free(mask);
    return (double)soft / n;
}

// ---- §7: the router's auxiliary terms ---------------------------------------------------------------------
// From the forward pass of one micro-batch (called by model_forward when it has targets; nothing when λ = α = 0):
// over its set 𝒮 of (N layer, b, chunk c < Nc−1, head group n), with s = the probability the straight-through
// uses (π, or y under ST-Gumbel routing) and the hard choice s0 ≥ s1:
//   f = fraction of hard softmax choices (7.1a);  L_pen = λ·f, or λ·max(0, f − f*) for f* > 0 (7.1b, 7.1d);
//   L_lb = 2α·(f·P_0 + (1 − f)·P_1), P_m = mean of s[…, m] (7.4a);
// and the gradient dpi[m] of L_pen + L_lb on each s[…, m] (f constant; the penalty's through s0: (7.1c)), which
// model_backward scales as the mean loss and router_backward adds to dÃ. With gradient accumulation each
// micro-batch contributes its own terms, weighted 1/accum (doc/model.md §7.1).
// The S layers' penalty (7.3e) joins L_pen: (λ_S/L)·Σ hard choices of A, its gradient λ_S/L on each y_A
// (model_backward hands it to select_layer_backward).
static void router_aux_forward(Model *M, int B, int T) {
    RouterBudget *rb = &M->rb;
    const Config *c = &M->cfg;
    int Nc = T / NATSL_CHUNK, H = c->H;
    rb->frac = rb->pen = rb->lb = rb->pen_soft = rb->lb_soft = rb->dpi[0] = rb->dpi[1] = 0;
    for (int l = 0; l < c->L; l++)
        if (c->pattern[l] == 'S') {
            rb->pen += rb->sel_lambda / c->L * rb->sel[l].a;
            rb->pen_soft += rb->sel_lambda / c->L * rb->sel[l].y_a;
        }
    if (!budget_aux_on(rb) || Nc < 2) return;
    double n = 0, hard = 0, s0 = 0, s1 = 0;
    size_t per = (size_t)B * Nc * H * 2;
    for (int l = 0; l < c->L; l++) {
        if (c->pattern[l] != 'N') continue;
        double *s = to_float64(M->la[l].rpi, per);
        for (int b = 0; b < B; b++)
            for (int cc = 0; cc < Nc - 1; cc++)
                for (int k = 0; k < H; k++) {
                    size_t i = (((size_t)b * Nc + cc) * H + k) * 2;
                    n++; hard += s[i] >= s[i + 1]; s0 += s[i]; s1 += s[i + 1];
                }
        free(s);
    }
    if (n == 0) return;
    double f = hard / n, gate = rb->target <= 0 || f > rb->target;
    rb->frac = f;
    rb->pen += rb->lambda * (rb->target > 0 ? (f > rb->target ? f - rb->target : 0) : f);
    rb->pen_soft += gate * rb->lambda * s0 / n;
    rb->lb = rb->lb_soft = 2 * rb->alpha * (f * s0 / n + (1 - f) * s1 / n);
    rb->dpi[0] = (gate * rb->lambda + 2 * rb->alpha * f) / n;
    rb->dpi[1] = 2 * rb->alpha * (1 - f) / n;
}

// §7.2: draws one micro-batch's Gumbel noise g = −log(−log u) into M->gnoise from the run's noise stream rb.rng, in
// the order layer, batch, chunk (the forced last one too), head group, op; both programs draw the same values.
// keep = 0: another rank's micro-batch, drawn (the stream moves on as in one process) and not kept.
static void gumbel_draw(Model *M, int B, int T, int keep) {
    size_t n = router_noise_size(&M->cfg, B, T);
    float *g = (float *)calloc(n, sizeof(float));
    if (!g) { fprintf(stderr, "error: out of memory\n"); exit(1); }
    for (size_t i = 0; i < n; i++) g[i] = (float)-log(-log(rng_uniform(&M->rb.rng)));
    if (keep) from_float32(M->gnoise, g, n);
    free(g);
}

// The next micro-batch of this process: its tokens into train->inputs/targets and, under ST-Gumbel routing, its
// noise. With several ranks (doc/model.md §9.4) a step's micro-batches are dealt out in turn, rank r taking the r-th
// of every g_world, so the ranks together train on exactly the tokens and noise that one process would.
static void next_micro_batch(Model *M, DataLoader *train, int B, int T) {
    char err[1024];
    for (int r = 0; r < g_world; r++) {
        if ((r == g_rank ? dataloader_next_batch : dataloader_skip_batch)(train, err, sizeof(err))) die(err);
        if (M->rb.noise) gumbel_draw(M, B, T, r == g_rank);
    }
}

// ---- §7.3: the S layers' gates -------------------------------------------------------------------------------
// The gate of S layer l for a forward pass: from its s_sel, with this step's noise at τ_s during training
// (rb.sel_noise), else noise-free at τ = 1 (evaluation, sampling, -D's first batch, logging, freezing).
static SelGate select_gate(const Model *M, int l) {
    const RouterBudget *rb = &M->rb;
    double *s = to_float64(M->p.layer[l].s_sel, 1);
    SelGate g = sel_gate(*s, rb->kappa, rb->sel_noise ? rb->sel_g[l] : NULL, rb->sel_noise ? rb->sel_tau : 1);
    g.relaxed = M->router_relaxed;
    free(s);
    return g;
}

// The noise of optimizer step t's S gates (7.3b): one draw (g_A, g_G) per S layer, in layer order, from the run's
// noise stream rb.rng (before the step's router noise), at τ_t of (7.2b) when -G τ_0 > 0, else τ = 1. Nothing is
// drawn without S layers (the stream then runs as before §7.3).
static void select_draw(Model *M, int t) {
    RouterBudget *rb = &M->rb;
    rb->sel_noise = strchr(M->cfg.pattern, 'S') != NULL;
    rb->sel_tau = rb->tau0 > 0 ? budget_tau(rb, t) : 1;
    for (int l = 0; rb->sel_noise && l < M->cfg.L; l++)
        if (M->cfg.pattern[l] == 'S')
            for (int m = 0; m < 2; m++) rb->sel_g[l][m] = (float)-log(-log(rng_uniform(&rb->rng)));
}

// The pattern the S layers' noise-free gates choose now (every S replaced by A or G), and per layer p_A = y_A at
// τ = 1 without noise (pa may be NULL).
static void select_pattern(const Model *M, char *out, double *pa) {
    strcpy(out, M->cfg.pattern);
    for (int l = 0; l < M->cfg.L; l++)
        if (out[l] == 'S') {
            SelGate g = select_gate(M, l);
            out[l] = g.a ? 'A' : 'G';
            if (pa) pa[l] = g.y_a;
        }
}

// Freezing (§7.3, -f): F becomes M with every S layer resolved to the mixer its noise-free gate chooses (A iff
// z_A > z_G, as evaluation does) and that mixer's parameters (an A keeps W_qkv_a and W_o_a as its W_qkv and W_o);
// every other tensor is copied. F's forward pass equals M's noise-free one.
static void freeze_selection(Model *F, const Model *M) {
    Config c = M->cfg;
    select_pattern(M, c.pattern, NULL);
    model_build(F, &c);
    float *src = to_float32(M->params, M->nparams), *dst = (float *)calloc(F->nparams, sizeof(float));
    if (!dst) { fprintf(stderr, "error: out of memory\n"); exit(1); }
    for (int i = 0; i < F->ntensors; i++) {
        const ParamTensor *t = &F->tensors[i];
        int slot = t->slot, l = t->layer;
        if (l >= 0 && M->cfg.pattern[l] == 'S' && c.pattern[l] == 'A') slot = slot == P_WQKV ? P_WQKV_A : slot == P_WO ? P_WO_A : slot;
        int j = 0;
        while (j < M->ntensors && !(M->tensors[j].layer == l && (l >= 0 ? M->tensors[j].slot == slot : !strcmp(M->tensors[j].name, t->name))))
            j++;
        if (j == M->ntensors || M->tensors[j].numel != t->numel) { fprintf(stderr, "error: freezing: no source for %s\n", t->name); exit(1); }
        memcpy(dst + t->offset, src + M->tensors[j].offset, t->numel * sizeof(float));
    }
    from_float32(F->params, dst, F->nparams);
    free(src); free(dst);
}

// ---- checkpoints: model_%08d.bin (header + float32 parameters), state_%08d.bin (AdamW moments, step, RNG,
// data position); each returns 0, or -1 with a one-line message in err

static int save_model(const Model *M, const char *path, char *err, size_t errlen) {
    float *f = to_float32(M->params, M->nparams);
    int rc = ckpt_write_model(path, &M->cfg, f, M->nparams, err, errlen);
    free(f);
    return rc;
}

// Reads a model checkpoint: builds M from its header and loads the parameters.
static int load_model(Model *M, const char *path, char *err, size_t errlen) {
    Config c;
    if (ckpt_read_model_config(path, &c, err, errlen)) return -1;
    model_build(M, &c);
    float *f = (float *)calloc(M->nparams, sizeof(float));
    if (!f) { snprintf(err, errlen, "%s: out of memory for %zu parameters", path, M->nparams); return -1; }
    int rc = ckpt_read_model_params(path, f, M->nparams, err, errlen);
    if (!rc) from_float32(M->params, f, M->nparams);
    free(f);
    if (rc) model_free(M); // nothing of a model that failed to load is kept
    return rc;
}

// The moments exist after the first update; a state saved before (every step so far skipped) holds zeros.
// Under ZeRO-1 (s->zero) the state file holds no moments: save_zero_shard writes each rank's.
static int save_state(Model *M, const TrainState *s, const char *path, char *err, size_t errlen) {
    if (s->zero) return ckpt_write_state(path, s, NULL, NULL, M->nparams, err, errlen);
    model_alloc_moments(M);
    float *m = to_float32(M->adam_m, M->nparams), *v = to_float32(M->adam_v, M->nparams);
    int rc = ckpt_write_state(path, s, m, v, M->nparams, err, errlen);
    free(m); free(v);
    return rc;
}

static int load_state(Model *M, TrainState *s, const char *path, char *err, size_t errlen) {
    size_t n = M->nparams;
    float *f = (float *)calloc(2 * n, sizeof(float));
    if (!f) { snprintf(err, errlen, "%s: out of memory for %zu moments", path, 2 * n); return -1; }
    int rc = ckpt_read_state(path, s, f, n, err, errlen);
    if (!rc && !s->zero) { // under ZeRO-1 the moments come from the ranks' shards (load_zero_shard)
        model_alloc_moments(M);
        from_float32(M->adam_m, f, n);
        from_float32(M->adam_v, f + n, n);
    }
    free(f);
    return rc;
}

// ZeRO-1 (doc/model.md §9.4): this rank's shard of the moments, M->nmom of them, in zero1_%08d_r%03d.bin.
static int save_zero_shard(Model *M, const TrainState *s, const char *path, char *err, size_t errlen) {
    model_alloc_moments(M);
    float *m = to_float32(M->adam_m, M->nmom), *v = to_float32(M->adam_v, M->nmom);
    int rc = ckpt_write_zero_shard(path, s->step, g_rank, g_world, s->model_fp, m, v, M->nmom, err, errlen);
    free(m); free(v);
    return rc;
}

static int load_zero_shard(Model *M, const TrainState *s, const char *path, char *err, size_t errlen) {
    size_t n = M->nmom;
    float *f = (float *)calloc(2 * n, sizeof(float));
    if (!f) { snprintf(err, errlen, "%s: out of memory for %zu moments", path, 2 * n); return -1; }
    int rc = ckpt_read_zero_shard(path, s->step, g_rank, g_world, s->model_fp, f, n, err, errlen);
    if (!rc) {
        model_alloc_moments(M);
        from_float32(M->adam_m, f, n);
        from_float32(M->adam_v, f + n, n);
    }
    free(f);
    return rc;
}

#endif
