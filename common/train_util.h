// Host-side plumbing shared by the two trainers (train_natsl.c, train_natsl.cu): the command line,
// the random number stream, the learning-rate schedule, and the run directory (finding the latest
// checkpoint, trimming main.log on resume, refusing to overwrite another run).
#ifndef NATSL_TRAIN_UTIL_H
#define NATSL_TRAIN_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "config.h"

static inline void die(const char *msg) { fprintf(stderr, "error: %s\n", msg); exit(1); }

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

// ---- the command line (llm.c style: one letter, one value) -----------------------------------------
typedef struct {
    const char *train_glob, *val_glob, *outdir, *init_from, *arch, *dump_path, *precision;
    int B, T, total_batch, warmup, max_steps, val_every, val_batches, sample_every, gen_tokens, ckpt_every;
    int resume, seed, recompute;
    double lr, final_frac, wd;
    int accum; // micro-steps per step: total_batch / (B·T)
    double budget, budget_target, lb_alpha, tau0, tau_min, tau_decay; // §7: -B -F -A -G -M -R
} TrainArgs;

static inline void train_usage(const char *prog) {
    printf("usage: %s [options]\n"
           "  -i <glob>   train shards                      (default data/fineweb_edu_train.bin)\n"
           "  -j <glob>   val shards                        (default data/fineweb_edu_val.bin)\n"
           "  -o <dir>    output dir: main.log, checkpoints (default none)\n"
           "  -e <name>   preset tiny|340m|760m, or a model_*.bin to start from (default tiny)\n"
           "  -a <arch>   natsl-hybrid|natsl|gdn|gdn-hybrid|transformer or a pattern over G/A/N\n"
           "  -b <int>    micro-batch size B                (default 4)\n"
           "  -t <int>    sequence length T, multiple of 64 (default 256)\n"
           "  -d <int>    total batch in tokens, multiple of B*T (default B*T)\n"
           "  -l <float>  peak learning rate                (default 3e-4)\n"
           "  -u <int>    warmup steps                      (default 20)\n"
           "  -q <float>  final LR as a fraction of peak    (default 0.1)\n"
           "  -c <float>  weight decay                      (default 0.1)\n"
           "  -x <int>    max steps                         (default 300)\n"
           "  -v <int>    val loss every N steps            (default 50)\n"
           "  -m <int>    val batches                       (default 8)\n"
           "  -s <int>    sample every N steps              (default 100)\n"
           "  -g <int>    tokens to generate                (default 64)\n"
           "  -n <int>    checkpoint every N steps, 0 = only at the end (default 0)\n"
           "  -y <0|1>    resume from the latest checkpoint in -o (default 0)\n"
           "  -r <int>    seed                              (default 42)\n"
           "  -z <file>   write the CPU-vs-GPU comparison dump of the first batches and exit\n"
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
           "  -h          this help\n", prog);
}

// Parses and checks the flags; a bad one ends the program with a one-line error, -h with the usage.
// default_precision: the program's default for -p ("fp32" in train_natsl, "bf16" in train_natsl_cu).
static inline void train_args_parse(TrainArgs *a, int argc, char **argv, const char *default_precision) {
    char msg[1200];
    TrainArgs d = {"data/fineweb_edu_train.bin", "data/fineweb_edu_val.bin", NULL, "tiny", NULL, NULL, default_precision,
                   4, 256, -1, 20, 300, 50, 8, 100, 64, 0, 0, 42, 0, 3e-4, 0.1, 0.1, 1, 0, 0, 0, 0, 0.5, 0.99};
    *a = d;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h")) { train_usage(argv[0]); exit(0); }
        if (argv[i][0] != '-' || strlen(argv[i]) != 2 || i + 1 >= argc) {
            snprintf(msg, sizeof(msg), "bad argument '%s' (every flag takes a value; -h for help)", argv[i]);
            die(msg);
        }
        const char *v = argv[++i];
        switch (argv[i - 1][1]) {
        case 'i': a->train_glob = v; break;        case 'j': a->val_glob = v; break;
        case 'o': a->outdir = v; break;            case 'e': a->init_from = v; break;
        case 'a': a->arch = v; break;              case 'b': a->B = atoi(v); break;
        case 't': a->T = atoi(v); break;           case 'd': a->total_batch = atoi(v); break;
        case 'l': a->lr = atof(v); break;          case 'u': a->warmup = atoi(v); break;
        case 'q': a->final_frac = atof(v); break;  case 'c': a->wd = atof(v); break;
        case 'x': a->max_steps = atoi(v); break;   case 'v': a->val_every = atoi(v); break;
        case 'm': a->val_batches = atoi(v); break; case 's': a->sample_every = atoi(v); break;
        case 'g': a->gen_tokens = atoi(v); break;  case 'n': a->ckpt_every = atoi(v); break;
        case 'y': a->resume = atoi(v); break;      case 'r': a->seed = atoi(v); break;
        case 'z': a->dump_path = v; break;         case 'p': a->precision = v; break;
        case 'k': a->recompute = atoi(v); break;
        // §7 softmax budget
        case 'B': a->budget = atof(v); break;      case 'F': a->budget_target = atof(v); break;
        case 'A': a->lb_alpha = atof(v); break;    case 'G': a->tau0 = atof(v); break;
        case 'M': a->tau_min = atof(v); break;     case 'R': a->tau_decay = atof(v); break;
        default: snprintf(msg, sizeof(msg), "unknown flag '%s' (-h for help)", argv[i - 1]); die(msg);
        }
    }
    if (a->T <= 0 || a->T % NATSL_CHUNK) {
        snprintf(msg, sizeof(msg), "-t %d: sequence length must be a positive multiple of %d (the NAtS chunk size)", a->T, NATSL_CHUNK);
        die(msg);
    }
    if (a->B <= 0) { snprintf(msg, sizeof(msg), "-b %d: micro-batch size must be positive", a->B); die(msg); }
    if (a->total_batch < 0) a->total_batch = a->B * a->T;
    if (a->total_batch <= 0 || a->total_batch % (a->B * a->T)) {
        snprintf(msg, sizeof(msg), "-d %d: total batch must be a positive multiple of B*T = %d", a->total_batch, a->B * a->T);
        die(msg);
    }
    if (a->max_steps <= 0 || a->warmup < 0 || a->val_batches <= 0) die("-x and -m must be positive and -u not negative");
    if (a->resume && !a->outdir) die("-y 1 needs -o <dir> to find the checkpoint in");
    if (a->recompute < 0 || a->recompute > 2) { snprintf(msg, sizeof(msg), "-k %d: recompute must be 0, 1 or 2", a->recompute); die(msg); }
    if (strcmp(a->precision, "fp32") && strcmp(a->precision, "bf16")) {
        snprintf(msg, sizeof(msg), "-p %s: precision must be fp32 or bf16", a->precision);
        die(msg);
    }
    if (!(a->budget >= 0) || !(a->lb_alpha >= 0) || !(a->budget_target >= 0 && a->budget_target < 1))
        die("-B and -A must be >= 0 and -F in [0, 1)");
    if (!(a->tau0 >= 0) || (a->tau0 > 0 && !(a->tau_min > 0 && a->tau_decay > 0 && a->tau_decay <= 1)))
        die("-G must be >= 0; with -G > 0, -M must be > 0 and -R in (0, 1]");
    a->accum = a->total_batch / (a->B * a->T);
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

// A fresh run (no -y 1) never overwrites another run's log and checkpoints.
static inline void check_fresh_outdir(const char *dir) {
    char p[4200], msg[4400];
    snprintf(p, sizeof(p), "%s/main.log", dir);
    if (access(p, F_OK) == 0 || latest_checkpoint(dir) >= 0) {
        snprintf(msg, sizeof(msg), "-o %s already holds a run (main.log or checkpoints): resume it with -y 1 or choose another -o", dir);
        die(msg);
    }
}

// On resume from step s, main.log keeps only the events of steps <= s: the later ones were logged by
// the run that is being replaced and are about to be logged again. Rewritten atomically.
static inline int log_truncate_after(const char *path, int step, char *err, size_t errlen) {
    FILE *in = fopen(path, "r");
    if (!in) return 0; // no log yet
    char tmp[4200], line[512];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *out = fopen(tmp, "w");
    if (!out) { fclose(in); snprintf(err, errlen, "%s: cannot open for writing (%s)", tmp, strerror(errno)); return -1; }
    while (fgets(line, sizeof(line), in)) {
        int s;
        if (sscanf(line, "s:%d", &s) != 1 || s <= step) fputs(line, out);
    }
    fclose(in);
    if (fclose(out) || rename(tmp, path)) { snprintf(err, errlen, "%s: cannot rewrite (%s)", path, strerror(errno)); return -1; }
    return 0;
}

#endif
