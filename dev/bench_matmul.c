// Correctness check + benchmark of the linear-layer matmuls of train_natsl.c.
// Build: gcc -O3 -march=native -ffast-math -fopenmp dev/bench_matmul.c -o bench_matmul -lm
// Run:   ./bench_matmul [reps]   (default 7; 0 = correctness checks only;
//        OMP_NUM_THREADS selects the thread count)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#define TESTING
#include "../train_natsl.c" // the matmul_forward / matmul_backward of the CPU reference

static unsigned long long rng_state = 42;
static float frand(void) { // uniform in [-1, 1)
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng_state >> 40) / (double)(1ULL << 24)) * 2.0f - 1.0f;
}
static float *rand_array(size_t n) {
    float *a = (float *)malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) a[i] = frand();
    return a;
}
static float *copy_array(const float *a, size_t n) {
    float *b = (float *)malloc(n * sizeof(float));
    memcpy(b, a, n * sizeof(float));
    return b;
}

// max |got - ref| / max |ref|
static double rel_err(const float *got, const double *ref, size_t n) {
    double maxdiff = 0, maxref = 1e-30;
    for (size_t i = 0; i < n; i++) {
        maxdiff = fmax(maxdiff, fabs(got[i] - ref[i]));
        maxref = fmax(maxref, fabs(ref[i]));
    }
    return maxdiff / maxref;
}

static int check(int BT, int C, int OC) {
    float *inp = rand_array((size_t)BT * C), *w = rand_array((size_t)OC * C);
    float *dout = rand_array((size_t)BT * OC);
    float *out = rand_array((size_t)BT * OC);           // garbage: must be overwritten
    float *dinp = rand_array((size_t)BT * C);           // nonzero: must be accumulated into
    float *dw = rand_array((size_t)OC * C);
    float *dw2 = copy_array(dw, (size_t)OC * C);
    double *ref_out = (double *)malloc(sizeof(double) * BT * OC);
    double *ref_dinp = (double *)malloc(sizeof(double) * BT * C);
    double *ref_dw = (double *)malloc(sizeof(double) * OC * C);
    for (int t = 0; t < BT; t++)
        for (int o = 0; o < OC; o++) {
            double s = 0;
            for (int c = 0; c < C; c++) s += (double)inp[t * C + c] * w[o * C + c];
            ref_out[t * OC + o] = s;
        }
    for (int t = 0; t < BT; t++)
        for (int c = 0; c < C; c++) {
            double s = dinp[t * C + c];
            for (int o = 0; o < OC; o++) s += (double)dout[t * OC + o] * w[o * C + c];
            ref_dinp[t * C + c] = s;
        }
    for (int o = 0; o < OC; o++)
        for (int c = 0; c < C; c++) {
            double s = dw[o * C + c];
            for (int t = 0; t < BT; t++) s += (double)dout[t * OC + o] * inp[t * C + c];
            ref_dw[o * C + c] = s;
        }
    matmul_forward(out, inp, w, BT, C, OC, 0, NULL);
    matmul_backward(dinp, dw, dout, inp, w, BT, C, OC, DINP_ADD);
    matmul_backward(NULL, dw2, dout, inp, w, BT, C, OC, DINP_ADD);  // dinp == NULL: dweight only
    double e1 = rel_err(out, ref_out, (size_t)BT * OC);
    double e2 = rel_err(dinp, ref_dinp, (size_t)BT * C);
    double e3 = rel_err(dw, ref_dw, (size_t)OC * C);
    double e4 = rel_err(dw2, ref_dw, (size_t)OC * C);
    int ok = e1 < 1e-4 && e2 < 1e-4 && e3 < 1e-4 && e4 < 1e-4;
    printf("check BT=%4d C=%4d OC=%4d  err out %.1e dinp %.1e dweight %.1e %.1e  %s\n",
           BT, C, OC, e1, e2, e3, e4, ok ? "OK" : "FAIL");
    free(inp); free(w); free(dout); free(out); free(dinp); free(dw); free(dw2);
    free(ref_out); free(ref_dinp); free(ref_dw);
    return ok;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// Returns median seconds for forward (t[0]) and backward (t[1]).
static void bench(int BT, int C, int OC, int reps, double t[2]) {
    float *inp = rand_array((size_t)BT * C), *w = rand_array((size_t)OC * C);
    float *dout = rand_array((size_t)BT * OC), *out = rand_array((size_t)BT * OC);
    float *dinp = rand_array((size_t)BT * C), *dw = rand_array((size_t)OC * C);
    double *ts = (double *)malloc(sizeof(double) * reps);
    for (int pass = 0; pass < 2; pass++) {
        for (int r = -1; r < reps; r++) { // r == -1: warm-up
            double t0 = now_s();
            if (pass == 0) matmul_forward(out, inp, w, BT, C, OC, 0, NULL);
            else matmul_backward(dinp, dw, dout, inp, w, BT, C, OC, DINP_ADD);
            if (r >= 0) ts[r] = now_s() - t0;
        }
        qsort(ts, reps, sizeof(double), cmp_double);
        t[pass] = ts[reps / 2];
    }
    free(inp); free(w); free(dout); free(out); free(dinp); free(dw); free(ts);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 7;
    int checks[][3] = {{37, 40, 5}, {1, 1, 1}, {1, 3, 17}, {13, 7, 3}, {50, 33, 17},
                       {101, 259, 70}, {7, 300, 129}, {97, 515, 33}, {19, 23, 517},
                       {300, 45, 29}, {301, 613, 701}, {1024, 128, 4}, {1000, 1, 1000}};
    int nchecks = sizeof(checks) / sizeof(checks[0]), allok = 1;
    for (int i = 0; i < nchecks; i++) allok &= check(checks[i][0], checks[i][1], checks[i][2]);
    if (!allok) { printf("CORRECTNESS FAILED\n"); return 1; }
    if (reps <= 0) return 0; // checks only

    struct { const char *model; int BT, C, OC, count; } shapes[] = {
        {"gpt2-124M B4T64", 256, 768, 2304, 1}, {"gpt2-124M B4T64", 256, 768, 768, 1},
        {"gpt2-124M B4T64", 256, 768, 3072, 1}, {"gpt2-124M B4T64", 256, 3072, 768, 1},
        {"gpt2-124M B4T64", 256, 768, 50304, 1},
        {"tiny B4T256", 1024, 128, 384, 1}, {"tiny B4T256", 1024, 128, 192, 1},
        {"tiny B4T256", 1024, 128, 4, 1}, {"tiny B4T256", 1024, 192, 128, 1},
        {"tiny B4T256", 1024, 128, 512, 2}, {"tiny B4T256", 1024, 512, 128, 1},
        {"tiny B4T256", 1024, 128, 50304, 1},
    };
    int nshapes = sizeof(shapes) / sizeof(shapes[0]);
    printf("\n%-16s %5s %5s %6s %3s | %9s %9s  (GFLOP/s, median of %d)\n",
           "model", "BT", "C", "OC", "cnt", "forward", "backward", reps);
    double flops[2][2] = {{0}}, secs[2][2] = {{0}}; // [gpt2|tiny][fwd|bwd]
    for (int s = 0; s < nshapes; s++) {
        double t[2], f = 2.0 * shapes[s].BT * shapes[s].C * shapes[s].OC;
        bench(shapes[s].BT, shapes[s].C, shapes[s].OC, reps, t);
        printf("%-16s %5d %5d %6d  x%d | %9.1f %9.1f\n", shapes[s].model, shapes[s].BT, shapes[s].C,
               shapes[s].OC, shapes[s].count, f / t[0] * 1e-9, 2 * f / t[1] * 1e-9);
        int m = s >= 5, n = shapes[s].count; // model index, occurrences per model
        flops[m][0] += n * f; flops[m][1] += n * 2 * f;
        secs[m][0] += n * t[0]; secs[m][1] += n * t[1];
    }
    // overall = total flops / total time over the listed shapes (x count)
    for (int m = 0; m < 2; m++)
        printf("%-16s overall                | %9.1f %9.1f   (fwd+bwd %.1f)\n",
               m ? "tiny" : "gpt2-124M", flops[m][0] / secs[m][0] * 1e-9,
               flops[m][1] / secs[m][1] * 1e-9,
               (flops[m][0] + flops[m][1]) / (secs[m][0] + secs[m][1]) * 1e-9);
    return 0;
}
