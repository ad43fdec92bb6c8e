// nha_bench.cu -- harness of the H layer's op (Native Hybrid Attention, doc/model.md §15): nha_forward and nha_backward
// of train_natsl.cu (included with TESTING: the trainer's kernels, no copies) against a double-precision oracle written
// the plain way, token by token from §15's equations (15.1a-b, 15.2a-c, 15.3a-f), then their times at the 340m size.
//
// Build (repository root):
//   nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 --default-stream per-thread -I. dev/cuda/nha/nha_bench.cu -o nha_bench -lcublasLt -lcublas -lnccl
// Run: ./nha_bench [test|time|all]   (default all)
//
// test: B = 2 (one case B = 1), two heads (one case three), T = 192 (three chunks, not a multiple of the windows 70 and
// 1000; one case T = 256), windows w = 0, 3, 64, 70, T, 1000 (≥ T) and m = 1, 4, 8, 9, 17 slots (one, two and three
// tiles of NHA_J = 8), the layer's strides and strides padded by 8, in fp32 and bf16 modes. The inputs are the values
// the GPU reads (bf16-rounded in bf16 mode); the oracle's Δ_t = do_t·o_t takes the GPU's stored o (the backward's
// input, as in the trainer). Every output (o, lse, the chunk-start slots) and gradient (dq, dk, dv, dq̂, dk̂, dz) is
// compared: max |gpu − oracle| / max |oracle| over the tensor (for a gradient at least 1e-2 of the case's largest
// gradient value) against the bar (1e-4; o in bf16 mode 8e-3: its one rounding to bf16). The gradients' buffers are
// filled with NaN before the backward: an element it does not write fails. A second forward and backward must give
// the same bits ("repeat same").
// time: B = 8, T = 4096, 16 heads, the nha-hybrid preset's m = NHA_SLOTS and w = NHA_WINDOW, then w = 4096 (full
// causal) and m = 8: forward and backward ms (median of 10) in both modes.
#define TESTING
#include "../../../train_natsl.cu"
#include "../bench_timing.h"
#include <vector>
#include <cmath>
#include <cstring>

static unsigned long long rng_s = 0x9E3779B97F4A7C15ULL;
static double urand() { rng_s ^= rng_s << 13; rng_s ^= rng_s >> 7; rng_s ^= rng_s << 17; return ((rng_s >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static double nrand() { return sqrt(-2.0 * log(urand())) * cos(6.283185307179586 * urand()); }
static float bf16r(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

struct Prob {
    int B, T, Hh, m, w, pad;
    size_t D, ld3, ldr, HM;
    std::vector<float> proj, rot, z, dout; // q | k | v [B*T][ld3], q̂ | k̂ [B*T][ldr], z [B*T][Hh·m], do [B*T][D]
};
static void make_prob(Prob &p, int B, int T, int Hh, int m, int w, int pad, int bf16) {
    p.B = B; p.T = T; p.Hh = Hh; p.m = m; p.w = w; p.pad = pad; p.D = (size_t)Hh * 64;
    p.ld3 = 3 * p.D + pad; p.ldr = 2 * p.D + pad; p.HM = (size_t)Hh * m;
    size_t BT = (size_t)B * T;
    p.proj.assign(BT * p.ld3, 0.f); p.rot.assign(BT * p.ldr, 0.f); p.z.resize(BT * p.HM); p.dout.resize(BT * p.D);
    auto r = [&](double s) { float x = (float)(s * nrand()); return bf16 ? bf16r(x) : x; };
    for (size_t i = 0; i < BT; i++) {
        for (size_t c = 0; c < 3 * p.D; c++) p.proj[i * p.ld3 + c] = r(1.0);
        for (size_t c = 0; c < 2 * p.D; c++) p.rot[i * p.ldr + c] = r(1.0);
        for (size_t c = 0; c < p.D; c++) p.dout[i * p.D + c] = r(1.0);
        for (size_t c = 0; c < p.HM; c++) p.z[i * p.HM + c] = (float)(3.0 * nrand()); // α from ~0.5 to ~1: fast and slow slots
    }
}

// ---- the oracle (double), token by token ----
static double o_alpha(double z) { double sp = -z > 30 ? -z : log1p(exp(-z)); return exp(-sp / NHA_TAU); } // (15.1a)
struct Ref { std::vector<double> out, lse, slots, dproj, drot, dz; };
static void oracle_forward(const Prob &p, Ref &R) {
    const int B = p.B, T = p.T, Hh = p.Hh, m = p.m, w = p.w, D = p.D, Nc = T / 64;
    const size_t SZ = 2 * (size_t)m * 64;
    R.out.assign((size_t)B * T * D, 0); R.lse.assign((size_t)B * Hh * T, 0); R.slots.assign((size_t)B * Hh * Nc * SZ, 0);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < Hh; h++) {
            std::vector<double> S(SZ, 0.0), e(m + T);
            for (int t = 0; t < T; t++) {
                size_t bt = (size_t)b * T + t;
                if (t % 64 == 0) std::copy(S.begin(), S.end(), R.slots.begin() + (((size_t)b * Hh + h) * Nc + t / 64) * SZ);
                if (t >= w) { // token s = t − w enters (15.1b)
                    size_t bs = bt - w;
                    for (int j = 0; j < m; j++) {
                        double al = o_alpha(p.z[bs * p.HM + h * m + j]);
                        for (int d = 0; d < 64; d++) {
                            S[j * 64 + d] = al * S[j * 64 + d] + (1 - al) * p.proj[bs * p.ld3 + D + h * 64 + d];
                            S[(m + j) * 64 + d] = al * S[(m + j) * 64 + d] + (1 - al) * p.proj[bs * p.ld3 + 2 * D + h * 64 + d];
                        }
                    }
                }
                int nslot = t >= w ? m : 0, lo = std::max(0, t - w + 1), n = nslot + t + 1 - lo; // (15.2a)
                for (int j = 0; j < nslot; j++) {
                    double s = 0;
                    for (int d = 0; d < 64; d++) s += (double)p.proj[bt * p.ld3 + h * 64 + d] * S[j * 64 + d];
                    e[j] = s / 8;
                }
                for (int i = lo; i <= t; i++) {
                    double s = 0;
                    for (int d = 0; d < 64; d++) s += (double)p.rot[bt * p.ldr + h * 64 + d] * p.rot[(bt - t + i) * p.ldr + D + h * 64 + d];
                    e[nslot + i - lo] = s / 8;
                }
                double mx = -1e300, sum = 0, o[64] = {0};
                for (int i = 0; i < n; i++) mx = std::max(mx, e[i]);
                for (int i = 0; i < n; i++) { // (15.2b-c)
                    double pr = exp(e[i] - mx);
                    sum += pr;
                    for (int d = 0; d < 64; d++)
                        o[d] += pr * (i < nslot ? S[(m + i) * 64 + d] : p.proj[(bt - t + lo + i - nslot) * p.ld3 + 2 * D + h * 64 + d]);
                }
                for (int d = 0; d < 64; d++) R.out[bt * D + h * 64 + d] = o[d] / sum;
                R.lse[((size_t)b * Hh + h) * T + t] = mx + log(sum);
            }
        }
}
// (15.3a-f), as train_natsl.c's nha_backward; Δ_t from o_gpu (the stored o the GPU's backward reads)
static void oracle_backward(const Prob &p, Ref &R, const std::vector<float> &o_gpu) {
    const int B = p.B, T = p.T, Hh = p.Hh, m = p.m, w = p.w, D = p.D, Nc = T / 64;
    const size_t SZ = 2 * (size_t)m * 64;
    R.dproj.assign((size_t)B * T * p.ld3, 0); R.drot.assign((size_t)B * T * p.ldr, 0); R.dz.assign((size_t)B * T * p.HM, 0);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < Hh; h++) {
            std::vector<double> St((65) * SZ), dS(SZ, 0.0), Dt(T);
            for (int t = 0; t < T; t++) {
                size_t bt = (size_t)b * T + t;
                double s = 0;
                for (int d = 0; d < 64; d++) s += (double)p.dout[bt * D + h * 64 + d] * o_gpu[bt * D + h * 64 + d];
                Dt[t] = s;
            }
            for (int t = 0; t < T; t++) { // the window (15.3a-c)
                size_t bt = (size_t)b * T + t;
                double L = R.lse[((size_t)b * Hh + h) * T + t];
                for (int i = std::max(0, t - w + 1); i <= t && w > 0; i++) {
                    size_t bi = bt - t + i;
                    double s = 0, dp = 0;
                    for (int d = 0; d < 64; d++) {
                        s += (double)p.rot[bt * p.ldr + h * 64 + d] * p.rot[bi * p.ldr + D + h * 64 + d];
                        dp += (double)p.dout[bt * D + h * 64 + d] * p.proj[bi * p.ld3 + 2 * D + h * 64 + d];
                    }
                    double pr = exp(s / 8 - L), de = pr * (dp - Dt[t]) / 8;
                    for (int d = 0; d < 64; d++) {
                        R.drot[bt * p.ldr + h * 64 + d] += de * p.rot[bi * p.ldr + D + h * 64 + d];
                        R.drot[bi * p.ldr + D + h * 64 + d] += de * p.rot[bt * p.ldr + h * 64 + d];
                        R.dproj[bi * p.ld3 + 2 * D + h * 64 + d] += pr * p.dout[bt * D + h * 64 + d];
                    }
                }
            }
            for (int c = Nc - 1; c >= 0; c--) { // the slots, in reverse time (15.3d-f)
                std::copy(R.slots.begin() + (((size_t)b * Hh + h) * Nc + c) * SZ, R.slots.begin() + (((size_t)b * Hh + h) * Nc + c + 1) * SZ, St.begin());
                for (int i = 0; i < 64; i++) { // St[i+1]: the slots query 64c + i reads
                    int t = c * 64 + i;
                    std::copy(St.begin() + i * SZ, St.begin() + (i + 1) * SZ, St.begin() + (i + 1) * SZ);
                    if (t < w) continue;
                    size_t bs = (size_t)b * T + t - w;
                    for (int j = 0; j < m; j++) {
                        double al = o_alpha(p.z[bs * p.HM + h * m + j]);
                        for (int d = 0; d < 64; d++) {
                            double *K = &St[(i + 1) * SZ + j * 64 + d], *V = &St[(i + 1) * SZ + (m + j) * 64 + d];
                            *K = al * *K + (1 - al) * p.proj[bs * p.ld3 + D + h * 64 + d];
                            *V = al * *V + (1 - al) * p.proj[bs * p.ld3 + 2 * D + h * 64 + d];
                        }
                    }
                }
                for (int i = 63; i >= 0; i--) {
                    int t = c * 64 + i;
                    if (t < w) continue;
                    size_t bt = (size_t)b * T + t, bs = bt - w;
                    const double *S = &St[(i + 1) * SZ], *Sp = &St[i * SZ];
                    double L = R.lse[((size_t)b * Hh + h) * T + t];
                    for (int j = 0; j < m; j++) { // query t reads the slots (15.3d)
                        double s = 0, dp = 0;
                        for (int d = 0; d < 64; d++) {
                            s += (double)p.proj[bt * p.ld3 + h * 64 + d] * S[j * 64 + d];
                            dp += (double)p.dout[bt * D + h * 64 + d] * S[(m + j) * 64 + d];
                        }
                        double pr = exp(s / 8 - L), de = pr * (dp - Dt[t]) / 8;
                        for (int d = 0; d < 64; d++) {
                            R.dproj[bt * p.ld3 + h * 64 + d] += de * S[j * 64 + d];
                            dS[j * 64 + d] += de * p.proj[bt * p.ld3 + h * 64 + d];
                            dS[(m + j) * 64 + d] += pr * p.dout[bt * D + h * 64 + d];
                        }
                    }
                    for (int j = 0; j < m; j++) { // token s entered them (15.3e-f)
                        double zj = p.z[bs * p.HM + h * m + j], al = o_alpha(zj), da = 0;
                        for (int d = 0; d < 64; d++) {
                            double ks = p.proj[bs * p.ld3 + D + h * 64 + d], vs = p.proj[bs * p.ld3 + 2 * D + h * 64 + d];
                            da += dS[j * 64 + d] * (Sp[j * 64 + d] - ks) + dS[(m + j) * 64 + d] * (Sp[(m + j) * 64 + d] - vs);
                            R.dproj[bs * p.ld3 + D + h * 64 + d] += (1 - al) * dS[j * 64 + d];
                            R.dproj[bs * p.ld3 + 2 * D + h * 64 + d] += (1 - al) * dS[(m + j) * 64 + d];
                            dS[j * 64 + d] *= al;
                            dS[(m + j) * 64 + d] *= al;
                        }
                        R.dz[bs * p.HM + h * m + j] += da * al * (1 - 1 / (1 + exp(-zj))) / NHA_TAU;
                    }
                }
            }
        }
}

// ---- the GPU side ----
static void *to_dev(const std::vector<float> &x, int bf16) {
    void *d = xcudamalloc(x.size() * (bf16 ? 2 : 4));
    if (bf16) {
        std::vector<__nv_bfloat16> h(x.size());
        for (size_t i = 0; i < x.size(); i++) h[i] = __float2bfloat16_rn(x[i]);
        CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
    } else CUDA_CHECK(cudaMemcpy(d, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
    return d;
}
static std::vector<float> from_dev(const void *d, size_t n, int bf16) {
    std::vector<float> x(n);
    if (bf16) {
        std::vector<__nv_bfloat16> h(n);
        CUDA_CHECK(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) x[i] = __bfloat162float(h[i]);
    } else CUDA_CHECK(cudaMemcpy(x.data(), d, n * 4, cudaMemcpyDeviceToHost));
    return x;
}
static double max_abs(const double *r, size_t ldr_, size_t rows, int cols) {
    double s = 0;
    for (size_t i = 0; i < rows; i++)
        for (int c = 0; c < cols; c++) s = std::max(s, fabs(r[i * ldr_ + c]));
    return s;
}
// max |g − r| / max(max |r|, floor) over rows × cols (strides ldg, ldr_); NaN counts as an error
static double rel_err(const float *g, size_t ldg, const double *r, size_t ldr_, size_t rows, int cols, double floor_,
                      double *scale) {
    double e = 0, s = floor_;
    for (size_t i = 0; i < rows; i++)
        for (int c = 0; c < cols; c++) {
            double x = g[i * ldg + c], y = r[i * ldr_ + c], d = fabs(x - y);
            if (!(d <= e)) e = std::isnan(d) ? INFINITY : d;
            s = std::max(s, fabs(y));
        }
    *scale = s;
    return s > 0 ? e / s : e;
}

static int run_case(int B, int T, int Hh, int m, int w, int pad, int bf16) {
    Prob p;
    make_prob(p, B, T, Hh, m, w, pad, bf16);
    g_bf16 = bf16;
    const size_t BT = (size_t)B * T, Nc = T / 64, D = p.D, es = bf16 ? 2 : 4;
    char *proj = (char *)to_dev(p.proj, bf16), *rot = (char *)to_dev(p.rot, bf16), *dout = (char *)to_dev(p.dout, bf16);
    float *z = (float *)to_dev(p.z, 0);
    void *out = xcudamalloc(BT * D * es);
    float *lse = (float *)xcudamalloc((size_t)B * Hh * T * 4), *slots = (float *)xcudamalloc((size_t)B * Hh * Nc * 2 * m * 64 * 4);
    float *dproj = (float *)xcudamalloc(BT * p.ld3 * 4), *drot = (float *)xcudamalloc(BT * p.ldr * 4), *dz = (float *)xcudamalloc(BT * p.HM * 4);
    CUDA_CHECK(cudaMemset(dproj, 0xff, BT * p.ld3 * 4)); // NaN: every element the backward must write
    CUDA_CHECK(cudaMemset(drot, 0xff, BT * p.ldr * 4));
    CUDA_CHECK(cudaMemset(dz, 0xff, BT * p.HM * 4));
    NhaArgs a = {(const real *)proj, (const real *)(proj + D * es), (const real *)(proj + 2 * D * es), (int)p.ld3,
                 (const real *)rot, (const real *)(rot + D * es), (int)p.ldr, z, B, T, Hh, m, w};
    nha_forward((real *)out, lse, slots, &a);
    nha_backward(dproj, dproj + D, dproj + 2 * D, drot, drot + D, dz, (const real *)dout, (const real *)out, lse, slots, &a);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> g_out = from_dev(out, BT * D, bf16), g_lse = from_dev(lse, (size_t)B * Hh * T, 0);
    std::vector<float> g_slots = from_dev(slots, (size_t)B * Hh * Nc * 2 * m * 64, 0), g_dproj = from_dev(dproj, BT * p.ld3, 0);
    std::vector<float> g_drot = from_dev(drot, BT * p.ldr, 0), g_dz = from_dev(dz, BT * p.HM, 0);
    // the same call again: every output and gradient the same bits (no atomics; a race would likely show here)
    nha_forward((real *)out, lse, slots, &a);
    nha_backward(dproj, dproj + D, dproj + 2 * D, drot, drot + D, dz, (const real *)dout, (const real *)out, lse, slots, &a);
    CUDA_CHECK(cudaDeviceSynchronize());
    auto bits = [](const std::vector<float> &x, const std::vector<float> &y) {
        return x.size() == y.size() && !memcmp(x.data(), y.data(), x.size() * sizeof(float));
    };
    int same = bits(from_dev(out, BT * D, bf16), g_out) && bits(from_dev(lse, g_lse.size(), 0), g_lse) &&
               bits(from_dev(slots, g_slots.size(), 0), g_slots) && bits(from_dev(drot, g_drot.size(), 0), g_drot) &&
               bits(from_dev(dz, g_dz.size(), 0), g_dz) && bits(from_dev(dproj, g_dproj.size(), 0), g_dproj);
    Ref R;
    oracle_forward(p, R);
    oracle_backward(p, R, g_out);
    struct { const char *name; const float *g; size_t ldg; const double *r; size_t ldr_; size_t rows; int cols; double bar; } t[] = {
        {"o", g_out.data(), D, R.out.data(), D, BT, (int)D, bf16 ? 8e-3 : 1e-4},
        {"lse", g_lse.data(), 1, R.lse.data(), 1, g_lse.size(), 1, 1e-4},
        {"slots", g_slots.data(), 1, R.slots.data(), 1, g_slots.size(), 1, 1e-4},
        {"dq", g_dproj.data(), p.ld3, R.dproj.data(), p.ld3, BT, (int)D, 1e-4},
        {"dk", g_dproj.data() + D, p.ld3, R.dproj.data() + D, p.ld3, BT, (int)D, 1e-4},
        {"dv", g_dproj.data() + 2 * D, p.ld3, R.dproj.data() + 2 * D, p.ld3, BT, (int)D, 1e-4},
        {"dq^", g_drot.data(), p.ldr, R.drot.data(), p.ldr, BT, (int)D, 1e-4},
        {"dk^", g_drot.data() + D, p.ldr, R.drot.data() + D, p.ldr, BT, (int)D, 1e-4},
        {"dz", g_dz.data(), 1, R.dz.data(), 1, g_dz.size(), 1, 1e-4},
    };
    int ok = 1;
    char line[1024];
    int n = snprintf(line, sizeof(line), "%s B=%d T=%d heads=%d m=%2d w=%4d pad=%d:", bf16 ? "bf16" : "fp32", B, T, Hh, m, w, pad);
    double worst = 0;
    double gmax = 0; // the gradients' largest value: 1e-2 of it floors each gradient's scale (a gradient that is zero
                     // in exact arithmetic, e.g. dq and dk at w = 0, m = 1 where the one probability is 1, is not
                     // measured against its rounding noise)
    for (int i = 3; i < 9; i++) gmax = std::max(gmax, max_abs(t[i].r, t[i].ldr_, t[i].rows, t[i].cols));
    for (int i = 0; i < 9; i++) {
        auto &x = t[i];
        double scale, e = rel_err(x.g, x.ldg, x.r, x.ldr_, x.rows, x.cols, i >= 3 ? 1e-2 * gmax : 0, &scale);
        int pass = e <= x.bar;
        ok &= pass;
        worst = std::max(worst, e);
        n += snprintf(line + n, sizeof(line) - n, " %s %.1e%s", x.name, e, pass ? "" : "(!)");
        if (!pass) printf("  FAIL %s: max abs err %.3e, scale %.3e, bar %.0e (relative)\n", x.name, e * (scale > 0 ? scale : 1), scale, x.bar);
    }
    if (!same) printf("  FAIL: a second call gave different bits\n");
    ok &= same;
    n += snprintf(line + n, sizeof(line) - n, " repeat %s", same ? "same" : "DIFFERS");
    printf("%s %s\n", ok ? "PASS" : "FAIL", line);
    fflush(stdout);
    for (void *x : {(void *)proj, (void *)rot, (void *)dout, (void *)z, out, (void *)lse, (void *)slots, (void *)dproj, (void *)drot, (void *)dz})
        CUDA_CHECK(cudaFree(x));
    return ok;
}

static int run_tests(void) {
    int ok = 1, n = 0, nf = 0;
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        for (int w : {0, 3, 64, 70, 192, 1000})
            for (int m : {1, 4, 8, 9, 17}) {
                int r = run_case(2, 192, 2, m, w, (n % 2) * 8, bf16);
                ok &= r; n++; nf += !r;
            }
        int r = run_case(1, 256, 3, 12, 100, 8, bf16);
        ok &= r; n++; nf += !r;
    }
    printf("%s: %d of %d cases passed\n", ok ? "ALL PASS" : "SOME FAILED", n - nf, n);
    return ok;
}

// ---- timing ----
__global__ void nha_fill_kernel(float *x, size_t n, uint32_t seed, float scale) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint32_t h = (uint32_t)i * 2654435761u ^ seed * 40503u;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
    x[i] = scale * ((h >> 8) * (1.f / 16777216.f) * 2.f - 1.f);
}
__global__ void nha_to_bf16_kernel(__nv_bfloat16 *y, const float *x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2bfloat16_rn(x[i]);
}
static void time_case(int B, int T, int Hh, int m, int w, int bf16) {
    g_bf16 = bf16;
    const size_t BT = (size_t)B * T, D = (size_t)Hh * 64, HM = (size_t)Hh * m, Nc = T / 64, es = bf16 ? 2 : 4;
    const size_t nproj = BT * 3 * D, nrot = BT * 2 * D, ndo = BT * D;
    float *tmp = (float *)xcudamalloc(nproj * 4);
    auto make = [&](size_t n, uint32_t seed, float scale) {
        char *d = (char *)xcudamalloc(n * es);
        nha_fill_kernel<<<(unsigned)CEIL_DIV(n, 256), 256>>>(bf16 ? tmp : (float *)d, n, seed, scale);
        if (bf16) nha_to_bf16_kernel<<<(unsigned)CEIL_DIV(n, 256), 256>>>((__nv_bfloat16 *)d, tmp, n);
        CUDA_CHECK(cudaGetLastError());
        return d;
    };
    char *proj = make(nproj, 1, 1.7f), *rot = make(nrot, 2, 1.7f), *dout = make(ndo, 3, 1.f);
    float *z = (float *)xcudamalloc(BT * HM * 4);
    nha_fill_kernel<<<(unsigned)CEIL_DIV(BT * HM, 256), 256>>>(z, BT * HM, 4, 4.f);
    void *out = xcudamalloc(ndo * es);
    float *lse = (float *)xcudamalloc((size_t)B * Hh * T * 4), *slots = (float *)xcudamalloc((size_t)B * Hh * Nc * 2 * m * 64 * 4);
    float *dproj = (float *)xcudamalloc(BT * 3 * D * 4), *drot = (float *)xcudamalloc(BT * 2 * D * 4), *dz = (float *)xcudamalloc(BT * HM * 4);
    NhaArgs a = {(const real *)proj, (const real *)(proj + D * es), (const real *)(proj + 2 * D * es), (int)(3 * D),
                 (const real *)rot, (const real *)(rot + D * es), (int)(2 * D), z, B, T, Hh, m, w};
    float fwd = median_ms([&] { nha_forward((real *)out, lse, slots, &a); }, 10);
    float bwd = median_ms([&] {
        nha_backward(dproj, dproj + D, dproj + 2 * D, drot, drot + D, dz, (const real *)dout, (const real *)out, lse, slots, &a);
    }, 10);
    printf("RESULT nha %s B=%d T=%d heads=%d m=%d w=%d: fwd %8.2f ms  bwd %8.2f ms  fwd+bwd %8.2f ms\n", bf16 ? "bf16" : "fp32",
           B, T, Hh, m, w, fwd, bwd, fwd + bwd);
    fflush(stdout);
    for (void *x : {(void *)tmp, (void *)proj, (void *)rot, (void *)dout, (void *)z, out, (void *)lse, (void *)slots, (void *)dproj,
                    (void *)drot, (void *)dz})
        CUDA_CHECK(cudaFree(x));
}
static void run_times(void) {
    for (int bf16 = 1; bf16 >= 0; bf16--) {
        time_case(8, 4096, 16, NHA_SLOTS, NHA_WINDOW, bf16); // the nha-hybrid preset's H layer at the 340m size
        time_case(8, 4096, 16, NHA_SLOTS, 4096, bf16);       // full causal window: no slot is read
        time_case(8, 4096, 16, 8, NHA_WINDOW, bf16);
    }
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "all";
    if (strcmp(mode, "test") && strcmp(mode, "time") && strcmp(mode, "all")) {
        fprintf(stderr, "usage: %s [test|time|all]\n", argv[0]);
        return 1;
    }
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s\n", prop.name);
    int ok = 1;
    if (strcmp(mode, "time")) ok = run_tests();
    if (strcmp(mode, "test")) run_times();
    return ok ? 0 : 1;
}
