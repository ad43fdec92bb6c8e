/*
bench_cpu.c — speed of the CPU reference: one training step (forward, backward, AdamW) of a model,
reported as ms/step, tokens/s and achieved GFLOP/s, plus the rate of its linear layers alone.

Model FLOPs per step (what the GFLOP/s count) are those of dev/model_flops.h: 6 per weight per token for
every linear layer, the attention pairs actually computed, and the GDN recurrence.

build: gcc -O3 -march=native -ffast-math -fopenmp -I. dev/bench_cpu.c -o bench_cpu -lm
run:   ./bench_cpu [preset] [pattern or variant or -] [B] [T] [steps]      e.g. ./bench_cpu tiny - 4 256 5
*/
#define TESTING
#include "../train_natsl.c"
#include "model_flops.h"


int main(int argc, char **argv) {
    const char *preset = argc > 1 ? argv[1] : "tiny", *arch = argc > 2 ? argv[2] : "-";
    int B = argc > 3 ? atoi(argv[3]) : 4, T = argc > 4 ? atoi(argv[4]) : 256, steps = argc > 5 ? atoi(argv[5]) : 5;
    Config c;
    char err[256];
    if (config_from_preset(&c, preset, GPT2_VOCAB)) { fprintf(stderr, "unknown preset %s\n", preset); return 1; }
    if (strcmp(arch, "-") && config_set_pattern(&c, arch, err, sizeof(err))) { fprintf(stderr, "%s\n", err); return 1; }
    Model M;
    model_build(&M, &c);
    model_init(&M, 1);
    model_alloc_acts(&M, B, T, 0);
    uint64_t r = rng_seed(2);
    for (int i = 0; i < B * T; i++) { M.inputs[i] = rng_u32(&r) % c.V; M.targets[i] = rng_u32(&r) % c.V; }
    double best = 1e30, total = 0;
    for (int s = 0; s <= steps; s++) { // step 0 is the warm-up
        double t0 = now_s();
        memset(M.grads, 0, M.nparams * sizeof(real));
        model_forward(&M, M.inputs, M.targets, B, T);
        model_backward(&M, M.inputs, M.targets, B, T, (real)1 / (B * T));
        adamw_update(&M, 1e-4, 0.1, 1, s + 1);
        double dt = now_s() - t0;
        if (s > 0) { total += dt; if (dt < best) best = dt; }
    }
    double mm, att, gdn;
    step_flops(&M, B, T, &mm, &att, &gdn);
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
            matmul_forward(y, x, w, (int)BT, C, OC, 0, NULL); // warm-up: first touch of the buffers
            double t0 = now_s();
            matmul_forward(y, x, w, (int)BT, C, OC, 0, NULL);
            matmul_backward(dx, gw, y, x, w, (int)BT, C, OC, DINP_WRITE);
            tm += now_s() - t0;
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
