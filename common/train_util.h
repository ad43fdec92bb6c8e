// Host-side plumbing shared by the two trainers (train_natsl.c, train_natsl.cu): the command line,
// the random number stream, the learning-rate schedule, and the run directory (finding the latest
// checkpoint, trimming main.log on resume, refusing to overwrite another run).
#ifndef NATSL_TRAIN_UTIL_H
#define NATSL_TRAIN_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "config.h"
#include "fileio.h"

// The one-line error that ends the program; in a job of several processes it names the rank (common/dist.h). The
// line goes out in one write: the ranks of a job share their stderr, and glibc writes a long fprintf to the unbuffered
// stream in pieces, which interleaved two ranks' lines (seen on a 16-core machine).
static char g_rank_tag[32] = "";
static inline void die(const char *msg) {
    char line[2048];
    int n = snprintf(line, sizeof(line), "error: %s%s\n", g_rank_tag, msg);
    if (n >= (int)sizeof(line)) { n = sizeof(line) - 1; line[n - 1] = '\n'; }
    if (n > 0 && write(STDERR_FILENO, line, (size_t)n) < 0) fputs(line, stderr);
    exit(1);
}

// A 0/1 switch from the environment (checks and measurements): the variable's integer value, def when unset.
static inline int env_flag(const char *name, int def) {
    const char *e = getenv(name);
    return e && *e ? atoi(e) != 0 : def;
}

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// A non-finite value recognized from its bits (the CPU build uses -ffast-math, which lets the compiler
// assume there are no infinities or NaNs, so isfinite() cannot be trusted there).
static inline int is_finite(double x) { uint64_t u; memcpy(&u, &x, sizeof(u)); return ((u >> 52) & 0x7ff) != 0x7ff; }

// ---- random numbers: xorshift64*, seeded through splitmix64 (one seeded stream: runs are reproducible)
static inline uint64_t rng_seed(uint64_t seed) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (z ^ (z >> 31)) | 1;
}
static inline uint32_t rng_u32(uint64_t *s) {
    *s ^= *s >> 12; *s ^= *s << 25; *s ^= *s >> 27;
    return (uint32_t)((*s * 0x2545F4914F6CDD1Dull) >> 32);
}
static inline double rng_uniform(uint64_t *s) { return (rng_u32(s) + 0.5) / 4294967296.0; } // in (0, 1)
static inline double rng_normal(uint64_t *s) {
    return sqrt(-2.0 * log(rng_uniform(s))) * cos(6.283185307179586 * rng_uniform(s));
}

// ---- learning rate (§9): linear warmup from 0 to the peak, then cosine decay to final_frac · peak
static inline double lr_at(int step, int warmup, int max_steps, double peak, double final_frac) {
    if (step < warmup) return peak * (step + 1) / warmup;
    if (max_steps <= warmup) return peak;
    double progress = (double)(step - warmup) / (max_steps - warmup);
    if (progress > 1) progress = 1;
    return peak * (final_frac + (1 - final_frac) * 0.5 * (1 + cos(3.141592653589793 * progress)));
}

// " | ETA 2m05s": the time the steps_left steps take at the mean pace of the steps_done so far (elapsed
// seconds, validation and samples included).
static inline void print_eta(int steps_done, int steps_left, double elapsed) {
    double s = steps_done > 0 ? elapsed / steps_done * steps_left : 0;
    if (s < 3600) printf(" | ETA %dm%02ds", (int)(s / 60), (int)s % 60);
    else printf(" | ETA %dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
}

// ---- what a decoder's cache holds (doc/model.md §14; each program's decoder_stats fills it) ----------
// Bytes: held now (held), the keys and values of each layer (kv[l]: an A layer's, an N layer's kept chunks'), and what a
// Transformer of the same width and depth would hold (K and V of every layer and token). sfr[l]: the softmax fraction of N layer l's completed chunk-heads (-1: none).
typedef struct { double held, transformer, kv[NATSL_MAX_LAYERS], sfr[NATSL_MAX_LAYERS]; } DecoderStats;

// ---- one forward pass of the prefill (doc/model.md §14.5; common/train_main.inc decoder_prefill) ----------------
// Its row i is the decoder's sequence seq[i], whose first T tokens (whole chunks) it runs; ends[i]: that prompt ends
// there (its logits are the pass's). The layer being filled, if an N layer: the router's decision per chunk, route
// [n][T/64][H] (1 softmax, 0 GDN), and each head group's softmax chunks, nkept [n][H].
typedef struct { const int *seq, *ends; int n, T; const signed char *route; const int *nkept; } PrefillRows;

// ---- the command line (llm.c style: one letter, one value) -----------------------------------------
typedef struct {
    const char *train_glob, *val_glob, *outdir, *init_from, *arch, *dump_path, *precision;
    int B, T, total_batch, warmup, max_steps, val_every, val_batches, sample_every, gen_tokens, ckpt_every;
    int resume, seed, recompute;
    double lr, final_frac, wd;
    int accum; // micro-steps per step: total_batch / (B·T)
    int init_given; // -e was on the command line
    double budget, budget_target, lb_alpha, tau0, tau_min, tau_decay; // §7: -B -F -A -G -M -R
    double sel_lambda, kappa; // §7.3: -S -K
    const char *freeze_path;  // §7.3: -f, write the model with its S layers frozen and exit
    int zero;                 // several GPUs (§9.4): -z 1 shards AdamW's moments over the ranks (ZeRO-1)
    const char *pi, *pf, *ps; // several GPUs: how the NCCL id reaches the ranks (common/dist.h)
    int eval_only;            // -E 1: evaluate a model on the val shards and exit (doc/recall.md; doc/model.md §13.2)
    int answer_loss;          // -w 1: train on the loss over the answer positions only (§13.1)
    int gen_n, top_k;         // generate (doc/model.md §14): -N tokens after the prompt, then exit; -O top-k (0: all)
    const char *prompt, *prompt_ids; // -P text (a character vocabulary), -I comma-separated token ids
    double temperature;       // -T (0: the most likely token)
    const char *eval_path;    // -H: an eval file (common/evalset.h) scored with every val loss
    const char *gate_act;     // -C: the gated output norm's gate activation, silu|sigmoid (NULL: the preset's, silu)
    int own_sg;               // -L 1: no gradient through the N layers' own-chunk softmax pairs (doc/model.md §6.2 (6.2e))
    const char *route_path;   // -Q: with -E 1, write the routing of the first val row to this file (doc/recall.md)
    const char *nha_window;   // -W: the H layers' windows, one or one per H layer (NULL: NHA_WINDOW; doc/model.md §15)
    int nha_slots;            // -U: the H layers' slots per head (0: NHA_SLOTS)
} TrainArgs;

static inline void train_usage(const char *prog) {
    printf("usage: %s [options]\n"
           "  -i <glob>   train shards                      (default data/tinyshakespeare_char/train.bin)\n"
           "  -j <glob>   val shards                        (default data/tinyshakespeare_char/val.bin)\n"
           "  -o <dir>    output dir: main.log, checkpoints (default none)\n"
           "  -e <name>   preset tiny|small|340m|760m, or a model_*.bin to start from (default tiny)\n"
           "  -a <arch>   natsl-hybrid|natsl|gdn|gdn-hybrid|transformer|nha-hybrid or a pattern over G/A/N/S/H\n"
           "  -W <w,..>   the H (NHA) layers' windows: one for all, or one per H layer; 0 = slots only, >= T =\n"
           "              full attention (doc/model.md §15; default 64)\n"
           "  -U <int>    the H layers' slots per head m (default 64)\n"
           "  -C <act>    silu|sigmoid: the output gate of the G, N and S layers' gated norm, norm(o)*act(x W_g)\n"
           "              (doc/model.md §5.6; default silu, the paper's)\n"
           "  -L <0|1>    1 = the N layers' softmax op passes no gradient through a query's own-chunk pairs, as\n"
           "              the authors' kernel; with -C sigmoid N layers learn recall (doc/model.md §6.2 (6.2e)) (default 0)\n"
           "  -b <int>    micro-batch size B                (default 8)\n"
           "  -t <int>    sequence length T, multiple of 64 (default 256)\n"
           "  -d <int>    total batch in tokens, multiple of B*T (default B*T)\n"
           "  -l <float>  peak learning rate                (default 1.5e-3)\n"
           "  -u <int>    warmup steps                      (default 20)\n"
           "  -q <float>  final LR as a fraction of peak    (default 0.1)\n"
           "  -c <float>  weight decay                      (default 0.1)\n"
           "  -x <int>    max steps                         (default 750)\n"
           "  -v <int>    val loss every N steps            (default 50)\n"
           "  -m <int>    val batches                       (default 8)\n"
           "  -s <int>    sample every N steps              (default 100)\n"
           "  -g <int>    tokens to generate                (default 64)\n"
           "  -n <int>    checkpoint every N steps, 0 = only at the end (default 0)\n"
           "  -y <0|1>    resume from the latest checkpoint in -o (default 0)\n"
           "  -r <int>    seed                              (default 42)\n"
           "  -D <file>   write the CPU-vs-GPU comparison dump of the first batches and exit\n"
           "  -w <0|1>    1 = train on the loss over the answer positions only (the .ans files beside the train\n"
           "              shards: dev/data/recall.py) (default 0)\n"
           "  -E <0|1>    1 = evaluate only: the model of -e (a model_*.bin; else the latest checkpoint in -o, read\n"
           "              only) on -m batches of B x T of the val shards -j, any T a multiple of 64; prints the\n"
           "              loss and accuracy over the answers (every target without .ans files) by position, and\n"
           "              the softmax fraction per layer and head; writes nothing but -Q's file (default 0)\n"
           "  -Q <file>   with -E 1: write the routing of the first val row to <file> (CSV: per N layer, chunk and\n"
           "              head, softmax or GDN and the router's probability; dev/plot_routing.py draws it)\n"
           "  -H <file>   eval file (dev/data/olmo_eval.py: HellaSwag, PIQA, ARC, ...; doc/eval.md) scored with\n"
           "              every val loss: acc, acc_norm, acc_char (default none)\n"
           "  -k <0|1|2>  recompute in the backward pass, for less memory: 1 = keep each layer's input, its\n"
           "              GDN/softmax op outputs and its mixer output, rerun the rest; 2 = keep only the input\n"
           "              (default 0)\n"
           "  -p <prec>   fp32|bf16: train_natsl_cu defaults to bf16 (bf16 matmul operands, fp32\n"
           "              accumulation); train_natsl to fp32, its bf16 rounds the same operands (for checks)\n"
           "  softmax budget (doc/model.md §7; all off by default):\n"
           "  -B <float>  penalty lambda on the softmax fraction of the NAtS-L routers (default 0 = off)\n"
           "  -F <float>  target fraction f*: penalize only max(0, f - f*) (default 0 = the plain lambda*f)\n"
           "  -A <float>  load-balancing loss alpha (Switch style; typical 0.01) (default 0 = off)\n"
           "  -G <float>  ST-Gumbel routing at start temperature tau0 (default 0 = off: argmax routing)\n"
           "  -M <float>  ST-Gumbel: minimum temperature      (default 0.5)\n"
           "  -R <float>  ST-Gumbel: tau decay per step, tau = max(M, G*R^(step-1)) (default 0.99)\n"
           "  layer-level selection (S layers, doc/model.md §7.3; their gates' temperature follows -G -M -R, else 1):\n"
           "  -S <float>  penalty lambda_S on the S layers that choose softmax attention (default 0 = off)\n"
           "  -K <float>  gate scale kappa: logits -+(kappa/2)*tanh(s_sel) (default 10)\n"
           "  -f <file>   write the model of -e (or the resumed run) with every S layer frozen to the A or G\n"
           "              its gate chooses (keeping that mixer's parameters) to <file> and exit\n"
           "  generate (doc/model.md §14) from the model of -e (a model_*.bin) or the resumed run, then exit:\n"
           "  -N <int>    generate this many tokens after <|endoftext|> and the prompt (default: train)\n"
           "  -P <text>   the prompt as text: a character vocabulary (a data set's tokenizer.bin) encodes it\n"
           "  -I <ids>    the prompt as comma-separated token ids (GPT-2 BPE text is not encoded here: e.g.\n"
           "              tiktoken's encoding of the text)\n"
           "  -T <float>  sampling temperature, 0 = always the most likely token (default 1)\n"
           "  -O <int>    top-k: sample from the k most likely tokens, 0 = all (default 0)\n"
           "              (-r seeds the sampling; -i names the data set whose vocabulary decodes the text)\n"
           "  several GPUs (train_natsl_cu, one process per GPU; README \"Several GPUs\"):\n"
           "  -z <0|1>    ZeRO stage: 0 = all-reduce the gradients, 1 = shard AdamW's moments (default 0)\n"
           "  -pi <how>   tcp|fs|mpi: how rank 0's NCCL id reaches the others (default mpi in USE_MPI=1 builds\n"
           "              under mpirun, else tcp)\n"
           "  -pf <dir>   -pi fs: a directory every rank sees (default -o, else /tmp)\n"
           "  -ps <host>  -pi tcp: rank 0's host (default $MASTER_ADDR, else 127.0.0.1)\n"
           "  -h, --help  this help\n", prog);
}

// ---- parsing one flag's number: the whole string must be the number, within [lo, hi] ------------------
static inline void die_flag(char flag, const char *v, const char *why) {
    char msg[1400];
    snprintf(msg, sizeof(msg), "-%c %.1000s: %s", flag, v, why);
    die(msg);
}
static inline int parse_int_flag(char flag, const char *v, long lo, long hi, const char *what) {
    char *end, why[300];
    errno = 0;
    long x = strtol(v, &end, 10);
    if (end == v || *end || errno == ERANGE || x < lo || x > hi) {
        if (end == v || *end) snprintf(why, sizeof(why), "not an integer (%s, %ld to %ld)", what, lo, hi);
        else snprintf(why, sizeof(why), "out of range (%s, %ld to %ld)", what, lo, hi);
        die_flag(flag, v, why);
    }
    return (int)x;
}
static inline double parse_double_flag(char flag, const char *v, double lo, double hi, int lo_open, const char *what) {
    char *end, why[300];
    errno = 0;
    double x = strtod(v, &end);
    int num = end != v && !*end;
    if (!num || errno == ERANGE || !is_finite(x) || x < lo || x > hi || (lo_open && x == lo)) {
        snprintf(why, sizeof(why), "%s (%s, %s%g to %g)", !num ? "not a number" : !is_finite(x) ? "not finite" : "out of range",
                 what, lo_open ? "above " : "", lo, hi);
        die_flag(flag, v, why);
    }
    return x;
}

#define NATSL_MAX_BT (1 << 24) // tokens in one micro-batch B·T: far beyond memory, far from int overflow

// Parses and checks the flags; a bad one ends the program with a one-line error naming that flag, -h or
// --help with the usage. Every number is parsed whole (no trailing characters) and range-checked; the
// products (B·T, the total batch) are checked before they are formed.
// default_precision: the program's default for -p ("fp32" in train_natsl, "bf16" in train_natsl_cu).
static inline void train_args_parse(TrainArgs *a, int argc, char **argv, const char *default_precision) {
    char msg[1400];
    TrainArgs d = {"data/tinyshakespeare_char/train.bin", "data/tinyshakespeare_char/val.bin", NULL, "tiny", NULL, NULL, default_precision,
                   8, 256, -1, 20, 750, 50, 8, 100, 64, 0, 0, 42, 0, 1.5e-3, 0.1, 0.1, 1, 0, 0, 0, 0, 0, 0.5, 0.99,
                   0, SEL_KAPPA, NULL, 0, NULL, NULL, NULL, 0, 0, 0, 0, NULL, NULL, 1.0, NULL, NULL, 0, NULL, NULL, 0};
    *a = d;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { train_usage(argv[0]); exit(0); }
        if (!strcmp(argv[i], "-pi") || !strcmp(argv[i], "-pf") || !strcmp(argv[i], "-ps")) { // llm.c's process flags
            if (i + 1 >= argc || !*argv[i + 1]) { snprintf(msg, sizeof(msg), "%s needs a value (-h for help)", argv[i]); die(msg); }
            const char *v = argv[i + 1];
            if (argv[i][2] == 'i') {
                if (strcmp(v, "tcp") && strcmp(v, "fs") && strcmp(v, "mpi")) {
                    snprintf(msg, sizeof(msg), "-pi %.100s: the NCCL id goes by tcp, fs or mpi", v);
                    die(msg);
                }
                a->pi = v;
            } else if (argv[i][2] == 'f') a->pf = v;
            else a->ps = v;
            i++;
            continue;
        }
        if (argv[i][0] != '-' || strlen(argv[i]) != 2) {
            snprintf(msg, sizeof(msg), "bad argument '%.1000s' (flags are one letter and a value; -h for help)", argv[i]);
            die(msg);
        }
        if (!strchr("ijoeabtdluqcxvmsgnyrzpkBFAGMRSKfDEwNPITOHCLQWU", argv[i][1])) {
            snprintf(msg, sizeof(msg), "unknown flag '%s' (-h for help)", argv[i]);
            die(msg);
        }
        if (i + 1 >= argc) { snprintf(msg, sizeof(msg), "%s needs a value (-h for help)", argv[i]); die(msg); }
        const char *v = argv[++i];
        char f = argv[i - 1][1];
        if (!*v) die_flag(f, v, "empty value");
        const long IMAX = 2147483646; // steps and counts stay below INT_MAX (step + 1 is formed)
        switch (f) {
        case 'i': a->train_glob = v; break;        case 'j': a->val_glob = v; break;
        case 'o': a->outdir = v; break;            case 'e': a->init_from = v; a->init_given = 1; break;
        case 'a': a->arch = v; break;              case 'D': a->dump_path = v; break;
        case 'H': a->eval_path = v; break;
        case 'Q': a->route_path = v; break;
        case 'C':
            if (strcmp(v, "silu") && strcmp(v, "sigmoid")) die_flag(f, v, "the output gate's activation is silu or sigmoid");
            a->gate_act = v;
            break;
        case 'W': a->nha_window = v; break;
        case 'U': a->nha_slots = parse_int_flag(f, v, 1, 4096, "slots per head of the H layers"); break;
        case 'L': a->own_sg = parse_int_flag(f, v, 0, 1, "own-chunk stop-gradient flag"); break;
        case 'z': a->zero = parse_int_flag(f, v, 0, 1, "ZeRO stage"); break;
        case 'p': a->precision = v; break;
        case 'b': a->B = parse_int_flag(f, v, 1, NATSL_MAX_BT / NATSL_CHUNK, "micro-batch size"); break;
        case 't': a->T = parse_int_flag(f, v, 1, NATSL_MAX_BT, "sequence length, a multiple of 64"); break;
        case 'd': a->total_batch = parse_int_flag(f, v, 1, IMAX, "total batch in tokens, a multiple of B*T"); break;
        case 'l': a->lr = parse_double_flag(f, v, 0, 1, 1, "peak learning rate"); break;
        case 'u': a->warmup = parse_int_flag(f, v, 0, IMAX, "warmup steps"); break;
        case 'q': a->final_frac = parse_double_flag(f, v, 0, 1, 0, "final LR as a fraction of the peak"); break;
        case 'c': a->wd = parse_double_flag(f, v, 0, 1, 0, "weight decay"); break;
        case 'x': a->max_steps = parse_int_flag(f, v, 1, IMAX, "steps"); break;
        case 'v': a->val_every = parse_int_flag(f, v, 0, IMAX, "val every N steps, 0 = never"); break;
        case 'm': a->val_batches = parse_int_flag(f, v, 1, 1000000, "val batches"); break;
        case 's': a->sample_every = parse_int_flag(f, v, 0, IMAX, "sample every N steps, 0 = never"); break;
        case 'g': a->gen_tokens = parse_int_flag(f, v, 0, NATSL_MAX_BT, "tokens to generate"); break;
        case 'n': a->ckpt_every = parse_int_flag(f, v, 0, IMAX, "checkpoint every N steps, 0 = at the end"); break;
        case 'y': a->resume = parse_int_flag(f, v, 0, 1, "resume flag"); break;
        case 'r': a->seed = parse_int_flag(f, v, 0, 2147483647, "seed"); break;
        case 'k': a->recompute = parse_int_flag(f, v, 0, 2, "recompute level"); break;
        // §7 softmax budget
        case 'B': a->budget = parse_double_flag(f, v, 0, 1e6, 0, "softmax-budget penalty lambda"); break;
        case 'F':
            a->budget_target = parse_double_flag(f, v, 0, 1, 0, "target softmax fraction, below 1");
            if (a->budget_target >= 1) die_flag(f, v, "out of range (target softmax fraction, 0 to below 1)");
            break;
        case 'A': a->lb_alpha = parse_double_flag(f, v, 0, 1e6, 0, "load-balancing alpha"); break;
        case 'G': a->tau0 = parse_double_flag(f, v, 0, 1e6, 0, "ST-Gumbel start temperature, 0 = off"); break;
        case 'M': a->tau_min = parse_double_flag(f, v, 0, 1e6, 1, "ST-Gumbel minimum temperature"); break;
        case 'R': a->tau_decay = parse_double_flag(f, v, 0, 1, 1, "ST-Gumbel temperature decay per step"); break;
        // §7.3 layer-level selection
        case 'S': a->sel_lambda = parse_double_flag(f, v, 0, 1e6, 0, "S-layer penalty lambda_S"); break;
        case 'K': a->kappa = parse_double_flag(f, v, 0, 1e6, 1, "S-gate scale kappa"); break;
        case 'f': a->freeze_path = v; break;
        case 'E': a->eval_only = parse_int_flag(f, v, 0, 1, "evaluate-only flag"); break;
        case 'w': a->answer_loss = parse_int_flag(f, v, 0, 1, "answer-only loss flag"); break;
        // §14 generation
        case 'N': a->gen_n = parse_int_flag(f, v, 1, NATSL_MAX_BT, "tokens to generate"); break;
        case 'P': a->prompt = v; break;
        case 'I': a->prompt_ids = v; break;
        case 'T': a->temperature = parse_double_flag(f, v, 0, 100, 0, "sampling temperature, 0 = the most likely token"); break;
        case 'O': a->top_k = parse_int_flag(f, v, 0, NATSL_MAX_VOCAB, "top-k, 0 = all tokens"); break;
        }
    }
    if (a->T % NATSL_CHUNK) {
        snprintf(msg, sizeof(msg), "-t %d: sequence length must be a positive multiple of %d (the NAtS chunk size)", a->T, NATSL_CHUNK);
        die(msg);
    }
    if ((long long)a->B * a->T > NATSL_MAX_BT) {
        snprintf(msg, sizeof(msg), "-b %d -t %d: B*T = %lld tokens in one micro-batch, at most %d", a->B, a->T,
                 (long long)a->B * a->T, NATSL_MAX_BT);
        die(msg);
    }
    int BT = a->B * a->T;
    if (a->total_batch < 0) a->total_batch = BT;
    if (a->total_batch % BT) {
        snprintf(msg, sizeof(msg), "-d %d: total batch must be a positive multiple of B*T = %d", a->total_batch, BT);
        die(msg);
    }
    if (a->sample_every > 0 && !a->eval_only && a->gen_tokens >= a->T) {
        snprintf(msg, sizeof(msg), "-g %d: a sample holds at most T-1 = %d tokens (raise -t or lower -g)", a->gen_tokens, a->T - 1);
        die(msg);
    }
    if (a->resume && !a->outdir) die("-y 1 needs -o <dir> to find the checkpoint in");
    if (a->route_path && !a->eval_only) die("-Q writes the routing of an evaluation: it goes with -E 1");
    if (!a->gen_n && (a->prompt || a->prompt_ids || a->temperature != 1 || a->top_k))
        die("-P, -I, -T and -O go with -N <tokens> (generate)");
    if (a->prompt && a->prompt_ids) die("-P and -I both give the prompt: give one");
    if (a->gen_n && (a->dump_path || a->freeze_path)) die("-N generates and exits: not with -D or -f");
    if (a->eval_path && a->val_every == 0) die("-H is scored with the val loss, and -v 0 turns that off (give -v N)");
    if (strcmp(a->precision, "fp32") && strcmp(a->precision, "bf16")) {
        snprintf(msg, sizeof(msg), "-p %.1000s: precision must be fp32 or bf16", a->precision);
        die(msg);
    }
    a->accum = a->total_batch / BT;
}

// ---- the run directory ---------------------------------------------------------------------------

// Latest step with both model_%08d.bin and state_%08d.bin in dir, or -1.
static inline int latest_checkpoint(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int best = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        int step;
        char tail[8];
        if (sscanf(e->d_name, "state_%8d.bin%1s", &step, tail) == 1 && step > best) {
            char p[4096];
            snprintf(p, sizeof(p), "%s/model_%08d.bin", dir, step);
            if (access(p, R_OK) == 0) best = step;
        }
    }
    closedir(d);
    return best;
}

// Whether name is one of the files a run writes (main.log, model_/state_%08d.bin, zero1_%08d_r%03d.bin), or their temporary
// versions (tmp = 1: the same name + ".tmp").
static inline int is_run_file(const char *name, int tmp) {
    char rest[16];
    int step, n = -1;
    size_t len = strlen(name);
    if (tmp) {
        if (len < 5 || strcmp(name + len - 4, ".tmp")) return 0;
        len -= 4;
    } else if (len >= 4 && !strcmp(name + len - 4, ".tmp")) return 0;
    if (len == 8 && !strncmp(name, "main.log", 8)) return 1;
    if ((sscanf(name, "model_%8d.bi%1[n]%n", &step, rest, &n) == 2 || sscanf(name, "state_%8d.bi%1[n]%n", &step, rest, &n) == 2) &&
        (size_t)n == len && len == 18)
        return 1;
    int rank; // a rank's ZeRO-1 shard of the moments (common/checkpoint.h)
    if (sscanf(name, "zero1_%8d_r%3d.bi%1[n]%n", &step, &rank, rest, &n) == 3 && (size_t)n == len && len == 23) return 1;
    return 0;
}

// A fresh run (no -y 1) never overwrites another run's log and checkpoints: any of main.log, model_*.bin,
// state_*.bin (a pair or not) in the directory makes it refuse.
static inline void check_fresh_outdir(const char *dir) {
    char msg[4400];
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!is_run_file(e->d_name, 0)) continue;
        snprintf(msg, sizeof(msg), "-o %s already holds a run (%s): resume it with -y 1 or choose another -o", dir, e->d_name);
        closedir(d);
        die(msg);
    }
    closedir(d);
}

// Whether dir holds a main.log.
static inline int run_dir_has_log(const char *dir) {
    char p[4200];
    snprintf(p, sizeof(p), "%s/main.log", dir);
    return access(p, F_OK) == 0;
}

// mkdir -p: creates dir and its missing parents. 0, or -1 with mkdir's own error in err.
static inline int mkdir_p(const char *dir, char *err, size_t errlen) {
    char p[4096];
    if (!*dir) { snprintf(err, errlen, "-o: empty path"); return -1; }
    if (snprintf(p, sizeof(p), "%s", dir) >= (int)sizeof(p)) { snprintf(err, errlen, "%.200s...: path too long", dir); return -1; }
    for (char *q = p + 1;; q++) {
        if (*q != '/' && *q) continue;
        char c = *q;
        *q = 0;
        struct stat sb;
        if (mkdir(p, 0777) && errno != EEXIST) {
            snprintf(err, errlen, "-o %s: cannot create directory %s (%s)", dir, p, strerror(errno));
            return -1;
        }
        if (stat(p, &sb) || !S_ISDIR(sb.st_mode)) {
            snprintf(err, errlen, "-o %s: %s exists and is not a directory", dir, p);
            return -1;
        }
        *q = c;
        if (!c) break;
    }
    return 0;
}

// The run directory, for the life of the run: created (with its parents) if needed, then locked with an
// exclusive flock on DIR/.lock, which holds the pid of the trainer that has it. A second trainer on the
// same directory (fresh or -y 1) is refused instead of mixing checkpoints and logs. The lock goes away
// with the process (exit, crash or kill). Then the leftover temporary files of a killed run
// (model_/state_*.bin.tmp, main.log.tmp) are removed: nobody else can be writing them.
static inline void run_dir_open(const char *dir) {
    char p[4200], msg[4600], err[4400];
    if (mkdir_p(dir, err, sizeof(err))) die(err);
    snprintf(p, sizeof(p), "%s/.lock", dir);
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) { snprintf(msg, sizeof(msg), "-o %s: cannot create the lock file %s (%s)", dir, p, strerror(errno)); die(msg); }
    if (flock(fd, LOCK_EX | LOCK_NB)) {
        int e = errno;
        char pid[32] = "";
        ssize_t n = pread(fd, pid, sizeof(pid) - 1, 0);
        pid[n > 0 ? n : 0] = 0;
        if (n > 0 && pid[n - 1] == '\n') pid[n - 1] = 0;
        if (e == EWOULDBLOCK)
            snprintf(msg, sizeof(msg), "-o %s is in use by another trainer (pid %s holds %s): wait for it to end or choose another -o",
                     dir, *pid ? pid : "?", p);
        else snprintf(msg, sizeof(msg), "-o %s: cannot lock %s (%s)", dir, p, strerror(e));
        die(msg);
    }
    char pid[32];
    int n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) || pwrite(fd, pid, n, 0) != n) {
        snprintf(msg, sizeof(msg), "%s: cannot write (%s)", p, strerror(errno));
        die(msg);
    }
    // fd stays open (and locked) until the process ends
    DIR *d = opendir(dir);
    if (!d) { snprintf(msg, sizeof(msg), "-o %s: cannot list (%s)", dir, strerror(errno)); die(msg); }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!is_run_file(e->d_name, 1)) continue;
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        if (remove(p)) { snprintf(msg, sizeof(msg), "%s: cannot remove a leftover temporary file (%s)", p, strerror(errno)); die(msg); }
        printf("removed %s (left by a killed run)\n", p);
    }
    closedir(d);
}

// The step to resume from: with -y 1 the latest complete pair (model_ and state_ of one step; a newer
// file without its partner, left by a run killed between the two writes, is named and ignored: the run
// overwrites it when it gets there). A directory with checkpoint files but no complete pair is refused, as a
// fresh run would refuse it; an empty or new one starts fresh, and so does one that holds only the main.log of
// a run that saved no checkpoint (killed, or its first save failed): the log starts over, as a resume's log
// drops the steps after the checkpoint. Without -y 1 the directory must hold no run (check_fresh_outdir).
// -1: start fresh.
static inline int run_dir_resume_step(const char *dir, int resume) {
    char msg[4600];
    if (!dir) return -1;
    if (!resume) { check_fresh_outdir(dir); return -1; }
    int best = latest_checkpoint(dir);
    DIR *d = opendir(dir);
    if (!d) { snprintf(msg, sizeof(msg), "-o %s: cannot list (%s)", dir, strerror(errno)); die(msg); }
    struct dirent *e;
    char found[300] = "";
    while ((e = readdir(d))) {
        int step = -1;
        if (!is_run_file(e->d_name, 0) || !strcmp(e->d_name, "main.log")) continue;
        if (!found[0]) snprintf(found, sizeof(found), "%s", e->d_name);
        int model = sscanf(e->d_name, "model_%8d", &step) == 1;
        if (!model && sscanf(e->d_name, "state_%8d", &step) != 1) continue;
        char partner[4400];
        snprintf(partner, sizeof(partner), "%s/%s_%08d.bin", dir, model ? "state" : "model", step);
        if (access(partner, R_OK) != 0)
            printf("note: %s/%s has no partner file of step %d%s: ignored\n", dir, e->d_name, step,
                   step > best ? " (the run was killed while saving)" : "");
    }
    closedir(d);
    if (best < 0 && found[0]) {
        snprintf(msg, sizeof(msg), "-y 1: -o %s holds no complete checkpoint pair (model_N.bin and state_N.bin of one step) "
                 "but a run's files (%s): refusing to start over them; move them away or choose another -o", dir, found);
        die(msg);
    }
    if (best < 0) printf("no checkpoint in %s: starting fresh%s\n", dir, run_dir_has_log(dir) ? " (its main.log starts over)" : "");
    return best;
}

// main.log: every write is checked (a full disk or a quota ends the run with the error, it does not leave
// a silently empty log).
static char g_log_path[4200];
static inline FILE *log_open(const char *path, int append) {
    snprintf(g_log_path, sizeof(g_log_path), "%s", path);
    char msg[4400];
    FILE *f = fopen_regular(path, append ? "a" : "w", "a log file", msg, sizeof(msg));
    if (!f) die(msg);
    return f;
}
static inline void log_flush(FILE *f) {
    if (fflush(f) || ferror(f)) {
        char msg[4400];
        snprintf(msg, sizeof(msg), "%s: write failed (%s)", g_log_path, strerror(errno));
        die(msg);
    }
}
static inline void log_close(FILE *f) {
    log_flush(f);
    if (fclose(f)) {
        char msg[4400];
        snprintf(msg, sizeof(msg), "%s: write failed (%s)", g_log_path, strerror(errno));
        die(msg);
    }
}

// On resume from step s, main.log keeps only the events of steps <= s: the later ones were logged by
// the run that is being replaced and are about to be logged again. Rewritten atomically.
static inline int log_truncate_after(const char *path, int step, char *err, size_t errlen) {
    if (access(path, F_OK)) return 0; // no log yet
    FILE *in = fopen_regular(path, "r", "a log file", err, errlen);
    if (!in) return -1;
    char tmp[4200], line[512];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *out = fopen_regular(tmp, "w", "a log file", err, errlen);
    if (!out) { fclose(in); return -1; }
    while (fgets(line, sizeof(line), in)) {
        int s;
        if (sscanf(line, "s:%d", &s) != 1 || s <= step) fputs(line, out);
    }
    fclose(in);
    int ok = !ferror(out) && fflush(out) == 0 && fsync(fileno(out)) == 0;
    ok = fclose(out) == 0 && ok;
    if (!ok || rename(tmp, path)) { snprintf(err, errlen, "%s: cannot rewrite (%s)", path, strerror(errno)); remove(tmp); return -1; }
    return 0;
}

#endif
