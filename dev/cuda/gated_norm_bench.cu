// gated_norm_bench.cu -- the fused gated output norm (doc/model.md §3.3, §5.6): the trainer's gated_norm_forward and
// gated_norm_backward (included from train_natsl.cu with TESTING defined), in both forms (the G layer's one input, the
// N layer's two inputs mixed by ω) and both gate activations, checked against a double-precision CPU oracle in fp32
// and in bf16 mode (row widths that take the 16-byte path and ones that take the one-value-a-lane path), then timed
// at the 340m step's shape (B·T = 32768 tokens, 6 heads of d_v = 256: 196608 rows of 256, bf16) with the bandwidth
// the bytes a pass must move imply.
//
// Build + run (device):  nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 --default-stream per-thread -I. dev/cuda/gated_norm_bench.cu \
//                            -o /tmp/gated_norm_bench -lcublasLt -lcublas -lnccl && /tmp/gated_norm_bench
// Prints per case the normwise errors against the oracle (PASS/FAIL), then TIME lines; exits 1 on a failure.

#include <vector>
#include <cmath>
#include <cuda_runtime.h>

#define TESTING
#include "../../train_natsl.cu"
#include "bench_timing.h"
#include "bench_data.h"

typedef __nv_bfloat16 bf16;


template <class MP> static double to_d(MP v) { return (double)(float)v; }
static double err(const std::vector<double> &ref, const std::vector<double> &got) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); i++) { const double d = got[i] - ref[i]; num += d * d; den += ref[i] * ref[i]; }
    return sqrt(num / fmax(den, 1e-300));
}
template <class T> static std::vector<double> as_d(const std::vector<T> &v) {
    std::vector<double> o(v.size());
    for (size_t i = 0; i < v.size(); i++) o[i] = to_d(v[i]);
    return o;
}

// The problem: R rows of n; o1, o2, gate, dy in the matmul precision MP; w1, w2, omega fp32
template <class MP> struct Gn {
    int R, n, two, act;
    std::vector<MP> o1, o2, gate, dy;
    std::vector<float> w1, w2, omega;
    MP *d_o1 = NULL, *d_o2 = NULL, *d_gate, *d_dy, *d_y, *d_do1, *d_do2, *d_dgate;
    float *d_w1, *d_w2, *d_omega = NULL, *d_rstd, *d_dw1, *d_dw2, *d_domega;
    GatedNormArgs args() const {
        return GatedNormArgs{(const real *)d_o1, d_w1, two ? (const real *)d_o2 : NULL, two ? d_w2 : NULL,
                             two ? d_omega : NULL, (const real *)d_gate, R, n, 1, n, act};
    }
    void make(int R_, int n_, int two_, int act_) {
        R = R_; n = n_; two = two_; act = act_;
        const size_t N = (size_t)R * n;
        auto fill = [&](std::vector<MP> &v, double lo, double hi) { v.resize(N); for (auto &e : v) e = (MP)(float)(lo + (hi - lo) * urand()); };
        fill(o1, -2, 2); fill(o2, -1, 1); fill(gate, -5, 5); fill(dy, -1, 1);
        w1.resize(n); w2.resize(n); omega.resize(2 * (size_t)R);
        for (auto &e : w1) e = (float)(0.5 + urand());
        for (auto &e : w2) e = (float)(0.5 + urand());
        for (auto &e : omega) e = (float)urand();
        d_o1 = upload(o1); d_o2 = upload(o2); d_gate = upload(gate); d_dy = upload(dy);
        d_w1 = upload(w1); d_w2 = upload(w2); d_omega = upload(omega);
        for (MP **p : {&d_y, &d_do1, &d_do2, &d_dgate}) *p = (MP *)xcudamalloc(N * sizeof(MP));
        d_rstd = (float *)xcudamalloc(2 * (size_t)R * sizeof(float));
        d_dw1 = (float *)xcudamalloc(n * sizeof(float)); d_dw2 = (float *)xcudamalloc(n * sizeof(float));
        d_domega = (float *)xcudamalloc(2 * (size_t)R * sizeof(float));
    }
    void forward() { GatedNormArgs a = args(); gated_norm_forward((real *)d_y, d_rstd, &a); }
    void backward() {
        GatedNormArgs a = args();
        gated_norm_backward((real *)d_do1, d_dw1, (real *)d_do2, d_dw2, d_domega, (real *)d_dgate, (const real *)d_dy, d_rstd, &a);
    }
    void release() {
        for (void *p : std::initializer_list<void *>{d_o1, d_o2, d_gate, d_dy, d_y, d_do1, d_do2, d_dgate, d_w1, d_w2, d_omega,
                                                     d_rstd, d_dw1, d_dw2, d_domega})
            CUDA_CHECK(cudaFree(p));
    }
};

// the double oracle of one case's forward (y, rstd) and backward (do1, do2, dgate, dω, dw1, dw2)   (§3.3, 5.6d-g)
template <class MP> static bool check(int R, int n, int two, int act) {
    Gn<MP> g;
    g.make(R, n, two, act);
    const size_t N = (size_t)R * n;
    std::vector<double> y(N), s(2 * (size_t)R, 0.0), do1(N), do2(N, 0.0), dgate(N), dom(2 * (size_t)R, 0.0), dw1(n, 0.0), dw2(n, 0.0);
    for (int r = 0; r < R; r++) {
        const size_t o = (size_t)r * n;
        auto rs = [&](const std::vector<MP> &x) { double q = 0; for (int i = 0; i < n; i++) q += to_d(x[o + i]) * to_d(x[o + i]); return 1 / sqrt(q / n + NATSL_EPS); };
        const double s1 = rs(g.o1), s2 = two ? rs(g.o2) : 0, om0 = two ? g.omega[2 * r] : 1, om1 = two ? g.omega[2 * r + 1] : 0;
        s[r] = s1; if (two) s[R + r] = s2;
        std::vector<double> dn(n), n1(n), n2(n);
        double d1 = 0, d2 = 0, e1 = 0, e2 = 0;
        for (int i = 0; i < n; i++) {
            const double x = to_d(g.gate[o + i]), sg = 1 / (1 + exp(-x));
            const double phi = act == GATE_SIGMOID ? sg : x * sg, dphi = act == GATE_SIGMOID ? sg * (1 - sg) : sg * (1 + x * (1 - sg));
            n1[i] = to_d(g.o1[o + i]) * s1 * g.w1[i];
            n2[i] = two ? to_d(g.o2[o + i]) * s2 * g.w2[i] : 0;
            const double m = om0 * n1[i] + om1 * n2[i], d = to_d(g.dy[o + i]);
            y[o + i] = m * phi;
            dn[i] = d * phi;
            dgate[o + i] = d * m * dphi;
            e1 += dn[i] * n1[i]; e2 += dn[i] * n2[i];
            d1 += n1[i] * om0 * dn[i]; d2 += n2[i] * om1 * dn[i];
        }
        if (two) { dom[2 * r] = e1; dom[2 * r + 1] = e2; }
        d1 /= n; d2 /= n;
        for (int i = 0; i < n; i++) {
            const double x1 = to_d(g.o1[o + i]) * s1, x2 = two ? to_d(g.o2[o + i]) * s2 : 0;
            do1[o + i] = s1 * (g.w1[i] * om0 * dn[i] - x1 * d1);
            dw1[i] += om0 * dn[i] * x1;
            if (two) { do2[o + i] = s2 * (g.w2[i] * om1 * dn[i] - x2 * d2); dw2[i] += om1 * dn[i] * x2; }
        }
    }
    g.forward();
    CUDA_CHECK(cudaMemset(g.d_dw1, 0, n * sizeof(float))); CUDA_CHECK(cudaMemset(g.d_dw2, 0, n * sizeof(float)));
    g.backward();
    CUDA_CHECK(cudaDeviceSynchronize());
    auto rstd = download(g.d_rstd, 2 * (size_t)R);
    if (!two) for (int r = 0; r < R; r++) rstd[R + r] = 0.f; // unused half
    const bool bf = sizeof(MP) == 2;
    const double bar = bf ? 1e-2 : 1e-5, bar32 = bf ? 1e-4 : 1e-5; // bf16-stored outputs; fp32 ones (rstd, dω, dw)
    const double ey = err(y, as_d(download(g.d_y, N))), es = err(s, as_d(rstd)), e1 = err(do1, as_d(download(g.d_do1, N))),
                 eg = err(dgate, as_d(download(g.d_dgate, N))), ew1 = err(dw1, as_d(download(g.d_dw1, n)));
    const double e2 = two ? err(do2, as_d(download(g.d_do2, N))) : 0, eo = two ? err(dom, as_d(download(g.d_domega, 2 * (size_t)R))) : 0,
                 ew2 = two ? err(dw2, as_d(download(g.d_dw2, n))) : 0;
    const bool ok = ey < bar && es < bar32 && e1 < bar && eg < bar && e2 < bar && eo < bar32 && ew1 < bar32 && ew2 < bar32;
    printf("  %s %-7s %s R=%4d n=%3d: y %.1e rstd %.1e | do1 %.1e do2 %.1e dgate %.1e dw %.1e %.1e domega %.1e -> %s\n",
           bf ? "bf16" : "fp32", act == GATE_SIGMOID ? "sigmoid" : "silu", two ? "two inputs" : "one input ", R, n, ey, es,
           e1, e2, eg, ew1, ew2, eo, ok ? "PASS" : "FAIL");
    g.release();
    return ok;
}

// the 340m shape in bf16: R rows of n, forward and backward timed (median of 20)
static void timing(int R, int n, int two) {
    Gn<bf16> g;
    g.make(R, n, two, GATE_SILU);
    const double mb = (double)R * n * 2 / 1e6; // one [R][n] bf16 tensor
    const double fwd = (two ? 4 : 3) * mb, bwd = (two ? 7 : 5) * mb; // fwd: o1 (o2) gate -> y; bwd: o1 (o2) gate dy -> do1 (do2) dgate
    const float tf = median_ms([&] { g.forward(); }), tb = median_ms([&] { g.backward(); });
    printf("TIME gated norm, %s, %d rows of %d (bf16): forward %.4f ms (%4.0f GB/s)  backward %.4f ms (%4.0f GB/s)\n",
           two ? "two inputs (N layer)" : "one input (G layer)", R, n, tf, fwd / tf, tb, bwd / tb);
    g.release();
}

int main() {
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s\n== correctness against the double oracle (normwise; bars: 1e-2 bf16-stored, 1e-4 fp32 in bf16 mode, "
           "1e-5 fp32 mode)\n", prop.name);
    bool ok = true;
    for (int two : {0, 1})
        for (int act : {GATE_SILU, GATE_SIGMOID}) {
            g_bf16 = 1;
            for (int n : {256, 384, 128, 96}) ok &= check<bf16>(389, n, two, act);
            g_bf16 = 0;
            for (int n : {128, 192, 256, 96}) ok &= check<float>(389, n, two, act);
        }
    g_bf16 = 1;
    printf("== the 340m shape (B·T = 32768, 6 heads of d_v = 256)\n");
    timing(32768 * 6, 256, 0);
    timing(32768 * 6, 256, 1);
    printf("CORRECTNESS %s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
