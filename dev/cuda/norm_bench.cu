// norm_bench.cu -- RMSNorm (doc/model.md (0.3), (3.4j)): the trainer's rmsnorm_forward and rmsnorm_backward (included
// from train_natsl.cu with TESTING defined) against a double-precision CPU oracle, then timed at the 340m step's shapes
// with the bandwidth the bytes a pass must move imply.
//
// Checks, a case per storage of x, y, dy, dx and shape (the callers' in bf16 mode: the block norms over D = 1024 with x
// the bf16 residual stream, dy bf16 (ln_mlp, ln_f) or fp32 (ln_mix), dx the bf16 residual gradient; the N layer's q/k
// norms, 12 heads of 64 in rows of 768, x and y bf16, dy and dx fp32; fp32 mode; the 760m's D = 1536; the tiny preset's
// heads of 24; heads of 256 (4, 8, 16 and 32 lanes a row among the cases); the one-value-a-lane path: n = 102 in rows
// with gaps, and a pointer off 16-byte alignment), every value against the oracle on the same stored inputs (the
// backward on the forward's rstd, as the trainer runs it):
//   rstd  |got − ref| ≤ 1e-5 |ref|
//   y     |got − ref| ≤ (q + 2e-5) |ref|, q the storage's rounding (2^-8 in bf16, 0 in fp32)
//   dx    |got − ref| ≤ q |ref| + 1e-5 (|dx₀| + ρ|w dy| + ρ²|x| Σ|x ρ w dy| / n)
//   dw    |got − ref| ≤ 2e-5 (|dw₀| + Σ_rows |dy x ρ|)
// a second backward from the same dx₀, dw₀ repeats every bit, and the values outside the rows (gaps, past the end) keep
// their bytes.
//
// Build + run (device):  nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 --default-stream per-thread -I. dev/cuda/norm_bench.cu \
//                            -o /tmp/norm_bench -lcublasLt -lcublas -lnccl && /tmp/norm_bench
// Prints a PASS/FAIL line a case (largest error over its bound), then TIME lines; exits 1 on a failure.

#include <vector>
#include <cmath>
#include <cstring>
#include <cuda_runtime.h>

#define TESTING
#include "../../train_natsl.cu"
#include "bench_timing.h"

typedef __nv_bfloat16 bf16;

static unsigned long long rng_s = 0x9E3779B97F4A7C15ULL;
static double urand() { rng_s ^= rng_s << 13; rng_s ^= rng_s >> 7; rng_s ^= rng_s << 17; return ((rng_s >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

// A tensor of `count` values stored in bf16 or fp32 (`bf`), `off` values into its allocation (off the 16-byte alignment
// where off % 8 ≠ 0); h: the stored values as floats.
struct Buf {
    bool bf;
    size_t count, off;
    std::vector<float> h;
    void *base = NULL;
    size_t esize() const { return bf ? 2 : 4; }
    real *dev() const { return (real *)((char *)base + off * esize()); }
    void make(bool bf_, size_t count_, size_t off_, double lo, double hi) {
        bf = bf_; count = count_; off = off_;
        h.resize(count);
        for (auto &e : h) { const float v = (float)(lo + (hi - lo) * urand()); e = bf ? (float)(bf16)v : v; }
        base = xcudamalloc((count + off) * esize());
        upload();
    }
    void upload() const {
        if (bf) {
            std::vector<bf16> t(count);
            for (size_t i = 0; i < count; i++) t[i] = (bf16)h[i];
            CUDA_CHECK(cudaMemcpy(dev(), t.data(), count * 2, cudaMemcpyHostToDevice));
        } else CUDA_CHECK(cudaMemcpy(dev(), h.data(), count * 4, cudaMemcpyHostToDevice));
    }
    std::vector<float> download() const {
        std::vector<float> o(count);
        if (bf) {
            std::vector<bf16> t(count);
            CUDA_CHECK(cudaMemcpy(t.data(), dev(), count * 2, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < count; i++) o[i] = (float)t[i];
        } else CUDA_CHECK(cudaMemcpy(o.data(), dev(), count * 4, cudaMemcpyDeviceToHost));
        return o;
    }
    void release() { CUDA_CHECK(cudaFree(base)); }
};
static bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
    return a.size() == b.size() && !memcmp(a.data(), b.data(), a.size() * sizeof(float));
}

// One case: N rows of nh heads of n values at stride ld (x, y, dy, dx share it); bf16 mode or fp32 mode; y, dy, dx
// stored in bf16 where y_mp, dy_mp, dx_mp (bf16 mode; x in bf16 in bf16 mode, as every caller has it); off: values
// before x's first.
static bool check(const char *what, int bf16_mode, int N, int nh, int n, int ld, int y_mp, int dy_mp, int dx_mp, int off) {
    g_bf16 = bf16_mode;
    const size_t cnt = (size_t)N * ld, R = (size_t)N * nh;
    const double qy = bf16_mode && y_mp ? 1.0 / 256 : 0, qx = bf16_mode && dx_mp ? 1.0 / 256 : 0;
    Buf x, y, dy, dx, w, dw;
    x.make(bf16_mode, cnt, off, -3, 3);
    y.make(bf16_mode && y_mp, cnt, 0, 500, 600); // the bytes before the call: kept outside the rows
    dy.make(bf16_mode && dy_mp, cnt, 0, -1, 1);
    dx.make(bf16_mode && dx_mp, cnt, 0, -0.5, 0.5);
    w.make(false, n, 1, 0.5, 1.5); // a parameter: no alignment to rely on
    dw.make(false, n, 0, -0.1, 0.1);
    for (size_t r = 0; r < R; r += 97) // rows of other scales (ρ from 1/30 to 30)
        for (int i = 0; i < n; i++) {
            float &v = x.h[(r / nh) * ld + (r % nh) * n + i];
            v = r % 2 ? v * 10 : v / 10;
            if (bf16_mode) v = (float)(bf16)v;
        }
    x.upload();
    float *rstd = (float *)xcudamalloc(R * sizeof(float));
    rmsnorm_forward(y.dev(), rstd, x.dev(), (const real *)w.dev(), N, nh, n, ld, ld, 1, y_mp);
    const std::vector<float> y1 = y.download(), dx0 = dx.h, dw0 = dw.h;
    std::vector<float> s(R);
    CUDA_CHECK(cudaMemcpy(s.data(), rstd, R * sizeof(float), cudaMemcpyDeviceToHost));
    rmsnorm_backward(dx.dev(), (real *)dw.dev(), dy.dev(), x.dev(), (const real *)w.dev(), rstd, N, nh, n, ld, ld, 1, dy_mp, dx_mp);
    const std::vector<float> dx1 = dx.download(), dw1 = dw.download();
    dx.upload(); dw.upload(); // dx₀, dw₀ again: the second call must repeat every bit
    rmsnorm_backward(dx.dev(), (real *)dw.dev(), dy.dev(), x.dev(), (const real *)w.dev(), rstd, N, nh, n, ld, ld, 1, dy_mp, dx_mp);
    const bool again = same_bits(dx1, dx.download()) && same_bits(dw1, dw.download());

    double ws = 0, wy = 0, wx = 0, ww = 0;
    bool kept = true;
    std::vector<char> in_row(cnt, 0);
    std::vector<double> dwr(n, 0), dwm(n, 0);
    for (size_t r = 0; r < R; r++) {
        const size_t o = (r / nh) * ld + (r % nh) * n;
        double ss = 0;
        for (int i = 0; i < n; i++) ss += (double)x.h[o + i] * x.h[o + i];
        const double sr = 1 / sqrt(ss / n + NATSL_EPS), sd = s[r]; // the oracle's ρ; the one the backward is given
        ws = fmax(ws, fabs(sd - sr) / (1e-5 * sr));
        double dot = 0, adot = 0;
        for (int i = 0; i < n; i++) {
            const double xi = x.h[o + i], yr = xi * sr * w.h[i], t = xi * sd * w.h[i] * dy.h[o + i];
            wy = fmax(wy, fabs(y1[o + i] - yr) / ((qy + 2e-5) * fabs(yr) + 1e-300));
            dot += t; adot += fabs(t);
            dwr[i] += dy.h[o + i] * xi * sd;
            dwm[i] += fabs(dy.h[o + i] * xi * sd);
            in_row[o + i] = 1;
        }
        dot /= n; adot /= n;
        for (int i = 0; i < n; i++) {
            const double xi = x.h[o + i], wd = w.h[i] * dy.h[o + i], ref = dx0[o + i] + sd * (wd - xi * sd * dot);
            const double m = fabs(dx0[o + i]) + sd * fabs(wd) + sd * sd * fabs(xi) * adot;
            wx = fmax(wx, fabs(dx1[o + i] - ref) / (qx * fabs(ref) + 1e-5 * m + 1e-300));
        }
    }
    for (int i = 0; i < n; i++) ww = fmax(ww, fabs(dw1[i] - (dw0[i] + dwr[i])) / (2e-5 * (fabs(dw0[i]) + dwm[i]) + 1e-300));
    for (size_t i = 0; i < cnt; i++)
        if (!in_row[i] && (memcmp(&y1[i], &y.h[i], 4) || memcmp(&dx1[i], &dx0[i], 4))) kept = false;
    const bool ok = ws <= 1 && wy <= 1 && wx <= 1 && ww <= 1 && again && kept;
    printf("%s  %-44s %s: error/bound rstd %.3f, y %.3f, dx %.3f, dw %.3f; second call %s; outside the rows %s\n",
           ok ? "PASS" : "FAIL", what, bf16_mode ? "bf16" : "fp32", ws, wy, wx, ww, again ? "same bits" : "DIFFERS",
           kept ? "untouched" : "WRITTEN");
    for (Buf *b : {&x, &y, &dy, &dx, &w, &dw}) b->release();
    CUDA_CHECK(cudaFree(rstd));
    return ok;
}

// Time of one shape in bf16 mode: x bf16; y bf16; dy, dx as dy_mp, dx_mp. Bytes a value: the forward reads x and writes
// y, the backward reads x, dy, dx and writes dx (plus rstd's 4 bytes a row); fwd: time the forward too.
static void timing(const char *what, int N, int nh, int n, int ld, int dy_mp, int dx_mp, bool fwd) {
    g_bf16 = 1;
    const size_t cnt = (size_t)N * ld, R = (size_t)N * nh;
    Buf x, y, dy, dx, w, dw;
    x.make(true, cnt, 0, -3, 3);
    y.make(true, cnt, 0, 0, 0);
    dy.make(dy_mp, cnt, 0, -1, 1);
    dx.make(dx_mp, cnt, 0, -1e-3, 1e-3);
    w.make(false, n, 0, 0.5, 1.5);
    dw.make(false, n, 0, 0, 0);
    float *rstd = (float *)xcudamalloc(R * sizeof(float));
    rmsnorm_forward(y.dev(), rstd, x.dev(), (const real *)w.dev(), N, nh, n, ld, ld, 1, 1);
    const double tf = median_ms([&] { rmsnorm_forward(y.dev(), rstd, x.dev(), (const real *)w.dev(), N, nh, n, ld, ld, 1, 1); });
    const double tb = median_ms([&] {
        rmsnorm_backward(dx.dev(), (real *)dw.dev(), dy.dev(), x.dev(), (const real *)w.dev(), rstd, N, nh, n, ld, ld, 1, dy_mp, dx_mp);
    });
    const double vals = (double)R * n, at80 = 0.8 * 4.8e12;
    const double bf = vals * 4 + R * 4.0, bb = vals * (2 + (dy_mp ? 2 : 4) + 2 * (dx_mp ? 2 : 4)) + R * 4.0;
    printf("TIME %s: %zu rows of %d, dy %s, dx %s\n", what, R, n, dy_mp ? "bf16" : "fp32", dx_mp ? "bf16" : "fp32");
    if (fwd)
        printf("TIME   forward  %.4f ms  %5.0f GB/s  (%.0f MB; 80%% of 4.8 TB/s: %.4f ms)\n", tf, bf / tf / 1e6, bf / 1e6,
               bf / at80 * 1e3);
    printf("TIME   backward %.4f ms  %5.0f GB/s  (%.0f MB; 80%% of 4.8 TB/s: %.4f ms; with colsum_finish)\n", tb,
           bb / tb / 1e6, bb / 1e6, bb / at80 * 1e3);
    for (Buf *b : {&x, &y, &dy, &dx, &w, &dw}) b->release();
    CUDA_CHECK(cudaFree(rstd));
}

int main() {
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s\n", prop.name);
    bool ok = true;
    ok &= check("block norm, dy bf16 (ln_mlp, ln_f)", 1, 4099, 1, 1024, 1024, 1, 1, 1, 0);
    ok &= check("block norm, dy fp32 (ln_mix)", 1, 4099, 1, 1024, 1024, 1, 0, 1, 0);
    ok &= check("q/k norms: 12 heads of 64 in rows of 768", 1, 2051, 12, 64, 768, 1, 0, 0, 0);
    ok &= check("760m block norm, D = 1536", 1, 1029, 1, 1536, 1536, 1, 1, 1, 0);
    ok &= check("760m block norm, D = 1536, dy fp32", 1, 1029, 1, 1536, 1536, 1, 0, 1, 0);
    ok &= check("tiny q/k norms: 4 heads of 24 in rows of 96", 1, 1003, 4, 24, 96, 1, 0, 0, 0);
    ok &= check("2 heads of 256 (16 lanes a row)", 1, 1001, 2, 256, 512, 1, 1, 1, 0);
    ok &= check("one value a lane: 3 heads of 102 in rows of 320", 1, 1003, 3, 102, 320, 1, 1, 1, 0);
    ok &= check("one value a lane: x off 16-byte alignment", 1, 1003, 1, 1024, 1024, 1, 1, 1, 1);
    ok &= check("block norm, D = 1024", 0, 2053, 1, 1024, 1024, 1, 1, 1, 0);
    ok &= check("q/k norms: 12 heads of 64 in rows of 768", 0, 1027, 12, 64, 768, 1, 0, 0, 0);
    ok &= check("760m block norm, D = 1536", 0, 1029, 1, 1536, 1536, 1, 1, 1, 0);
    ok &= check("tiny block norm, D = 128", 0, 1001, 1, 128, 128, 1, 1, 1, 0);
    ok &= check("one value a lane: 3 heads of 102 in rows of 320", 0, 1003, 3, 102, 320, 1, 1, 1, 0);
    ok &= check("one value a lane: x off 16-byte alignment", 0, 1003, 1, 1024, 1024, 1, 1, 1, 2);

    // the 340m step's calls in bf16 mode (B·T = 32768): ln_mlp and ln_f (21 + 1 a step), ln_mix (21; the forwards of both
    // block norms: 43, plus block_rebuild's 20), the N layers' q and k norms (12)
    const int BT = 32768;
    timing("block norms, D = 1024 (ln_mlp, ln_f backward)", BT, 1, 1024, 1024, 1, 1, true);
    timing("ln_mix backward, D = 1024", BT, 1, 1024, 1024, 0, 1, false);
    timing("the N layer's q/k norms, 12 heads of 64 (rows of 768)", BT, 12, 64, 768, 0, 0, true);
    printf("%s\n", ok ? "ALL PASS" : "SOME FAILED");
    return ok ? 0 : 1;
}
