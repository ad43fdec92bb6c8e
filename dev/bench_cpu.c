/*
bench_cpu.c — speed of the CPU reference: one training step (forward, backward, AdamW) of a model,
reported as ms/step, tokens/s and achieved GFLOP/s, plus the rate of its linear layers alone.

Model FLOPs per step (what the GFLOP/s count):
  linear layers   6 · tokens · Σ(weights of every matmul)        (2 forward + 4 backward per weight)
  softmax attn    6 · Σ_heads Σ_queries (keys attended) · (d_q + d_v)   (allowed pairs counted exactly)
  GDN recurrence  12 · tokens · H · d_k · d_v                    (state update + read-out, forward and backward)
The embedding lookup and the norms/elementwise work are not counted.

build: gcc -O3 -march=native -ffast-math -fopenmp -I. dev/bench_cpu.c -o bench_cpu -lm
run:   ./bench_cpu [preset] [pattern or variant or -] [B] [T] [steps]      e.g. ./bench_cpu tiny - 4 256 5
*/
#define TESTING
#include "../train_natsl.c"

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }

// Σ over the model's linear layers of (rows of the input) × (weights): the matmul FLOP count / 2
static double matmul_macs(const Model *M, int B, int T) {
    const Config *c = &M->cfg;
    double BT = (double)B * T, macs = BT * c->Vp * c->D; // head
    for (int i = 0; i < M->ntensors; i++) {
        const ParamTensor *t = &M->tensors[i];
        if (t->layer < 0) continue;
        int s = t->slot;
        if (s == P_WQKV || s == P_WG || s == P_WAB || s == P_WO || s == P_WOW || s == P_WGU || s == P_WDOWN) macs += BT * t->numel;
        if (s == P_WR) macs += (double)B * (T / CH) * t->numel;
    }
    return macs;
}

// attention pairs × (d_q + d_v), counted from the routing of the last forward
static double attention_macs(const Model *M, int B, int T) {
    const Config *c = &M->cfg;
    double macs = 0;
    int Nc = T / CH;
    for (int l = 0; l < c->L; l++) {
        if (c->pattern[l] == 'A') macs += (double)B * cfg_HA(c) * T * (T + 1) / 2.0 * 2 * NATSL_ATTN_HEAD;
        if (c->pattern[l] != 'N') continue;
        for (int b = 0; b < B; b++)
            for (int j = 0; j < c->Ha; j++)
                for (int cq = 0; cq < Nc; cq++) {
                    double keys = CH * (CH + 1) / 2.0; // own chunk, causal
                    for (int ck = 0; ck < cq; ck++)
                        keys += CH * CH * M->la[l].rmask[(((size_t)b * Nc + ck) * c->H + j / (c->Ha / c->H)) * 2];
                    macs += keys * (cfg_dka(c) + cfg_dva(c));
                }
    }
    return macs;
}

int main(int argc, char **argv) {
    const char *preset = argc > 1 ? argv[1] : "tiny", *arch = argc > 2 ? argv[2] : "-";
    int B = argc > 3 ? atoi(argv[3]) : 4, T = argc > 4 ? atoi(argv[4]) : 256, steps = argc > 5 ? atoi(argv[5]) : 5;
    Config c;
    char err[256];
    if (config_from_preset(&c, preset)) { fprintf(stderr, "unknown preset %s\n", preset); return 1; }
    if (strcmp(arch, "-") && config_set_pattern(&c, arch, err, sizeof(err))) { fprintf(stderr, "%s\n", err); return 1; }
    Model M;
    model_build(&M, &c);
    model_init(&M, 1);
    model_alloc_acts(&M, B, T);
    uint64_t r = rng_seed(2);
    for (int i = 0; i < B * T; i++) { M.inputs[i] = rng_u32(&r) % c.V; M.targets[i] = rng_u32(&r) % c.V; }
    double best = 1e30, total = 0;
    for (int s = 0; s <= steps; s++) { // step 0 is the warm-up
        double t0 = now();
        memset(M.grads, 0, M.nparams * sizeof(real));
        model_forward(&M, M.inputs, M.targets, B, T);
        model_backward(&M, M.inputs, M.targets, B, T, (real)1 / (B * T));
        adamw_update(&M, 1e-4, 0.9, 0.95, 1e-8, 0.1, 1, s + 1);
        double dt = now() - t0;
        if (s > 0) { total += dt; if (dt < best) best = dt; }
    }
    double mm = 6 * matmul_macs(&M, B, T), att = 6 * attention_macs(&M, B, T), gdn = 0;
    for (int l = 0; l < c.L; l++) if (c.pattern[l] != 'A') gdn += 12.0 * B * T * c.H * c.dk * c.dv;
    double flops = mm + att + gdn;
    // the linear layers alone: the same matmuls, timed in isolation
    double tm = 0;
    {
        size_t BT = (size_t)B * T;
        real *x = xcalloc(BT * c.F * 2, sizeof(real)), *y = xcalloc(BT * (size_t)c.Vp, sizeof(real));
        real *dx = xcalloc(BT * c.F * 2, sizeof(real));
        uint64_t rs = rng_seed(3);
        for (size_t i = 0; i < BT * c.F * 2; i++) x[i] = (real)rng_normal(&rs);
        for (int i = 0; i < M.ntensors + 1; i++) {
            int C, OC;
            if (i == M.ntensors) { C = c.D; OC = c.Vp; }
            else {
                const ParamTensor *t = &M.tensors[i];
                int s = t->slot;
                if (t->layer < 0 || !(s == P_WQKV || s == P_WG || s == P_WAB || s == P_WO || s == P_WOW || s == P_WGU || s == P_WDOWN)) continue;
                size_t rows, cols;
                slot_shape(&c, c.pattern[t->layer], s, &rows, &cols);
                OC = (int)rows; C = (int)cols;
            }
            real *w = M.params + (i == M.ntensors ? (size_t)(M.p.head - M.params) : M.tensors[i].offset);
            real *gw = M.grads + (w - M.params);
            matmul_forward(y, x, w, (int)BT, C, OC); // warm-up: first touch of the buffers
            double t0 = now();
            matmul_forward(y, x, w, (int)BT, C, OC);
            matmul_backward(dx, gw, y, x, w, (int)BT, C, OC);
            tm += now() - t0;
        }
        free(x); free(y); free(dx);
    }
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    printf("model %s pattern %s (%zu params), B=%d T=%d, %d threads\n", preset, c.pattern, M.nparams, B, T, threads);
    printf("step: best %.1f ms, mean %.1f ms, %.0f tokens/s\n", best * 1e3, total / steps * 1e3, B * T / best);
    printf("model FLOPs/step: %.2f G (linear %.2f, attention %.2f, GDN %.2f)\n", flops / 1e9, mm / 1e9, att / 1e9, gdn / 1e9);
    printf("achieved: %.1f GFLOP/s over the whole step (best)\n", flops / best / 1e9);
    printf("linear layers alone: %.1f ms, %.1f GFLOP/s (%.0f%% of the step)\n", tm * 1e3, mm / tm / 1e9, 100 * tm / best);
    model_free(&M);
    return 0;
}
