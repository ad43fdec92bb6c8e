// conv_bench.cu -- the G and N layers' short causal conv + SiLU (doc/model.md §3.1, backward (3.4k, 3.4n)): the
// trainer's kernels (conv_silu_forward_runs / conv_silu_backward_runs, conv_silu_l2norm_forward, included from
// train_natsl.cu with TESTING defined), each checked against a double-precision CPU oracle and timed at the 340m size
// (B=8, T=4096, one launch over Q | K | V = 768 | 768 | 1536 channels; Q | K with their L2 norm: 12 heads of d_k = 128).
// The bf16 forward and backward are compared with variants that batch their loads explicitly (2 or 4 channels a
// thread, time tiles of 32 or 64: the trainer's forward is the batched form in pairs). The forward and the fused L2
// norm are also checked in fp32 mode and on their fallback paths (channel runs that are not multiples of 8; d_k that
// take one value a lane).
// Bytes a pass must move (340m): the conv's forward 4 bytes a value (bf16 x read, y written), its backward 8 (+ the
// dw partial sums); the L2 norm's 4 a value (x, q̂ | k̂), 6 where Q, K are kept (the N layer).
//
// Build + run (device):  nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 --default-stream per-thread -I. dev/cuda/conv/conv_bench.cu -o /tmp/conv_bench \
//                            -lcublasLt -lcublas -lnccl && /tmp/conv_bench
// Prints per variant: the error against the oracle (small problem), whether it matches the trainer's kernels bit for
// bit (340m problem), forward and backward times (median of 20) and the bandwidth their bytes imply; then the fp32 and
// fallback checks and the L2 norm's (PASS/FAIL) and its TIME line; exits 1 on a failure.

#include <vector>
#include <algorithm>
#include <functional>
#include <cuda_runtime.h>

#define TESTING
#include "../../../train_natsl.cu"
#include "../bench_timing.h"

typedef __nv_bfloat16 bf16;

// CPT consecutive channels of a row: bf16 <-> float
template <int CPT> __device__ __forceinline__ void ldc(float (&v)[CPT], const bf16 *p) {
    if constexpr (CPT == 2) {
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(p));
        v[0] = f.x; v[1] = f.y;
    } else {
        const uint2 u = *reinterpret_cast<const uint2 *>(p);
        const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u.x));
        const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u.y));
        v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y;
    }
}
template <int CPT> __device__ __forceinline__ void ldc(float (&v)[CPT], const float *p) {
    if constexpr (CPT == 2) { const float2 f = *reinterpret_cast<const float2 *>(p); v[0] = f.x; v[1] = f.y; }
    else { const float4 f = *reinterpret_cast<const float4 *>(p); v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w; }
}
template <int CPT> __device__ __forceinline__ void stc(bf16 *p, const float (&v)[CPT]) {
    *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(v[0], v[1]);
    if constexpr (CPT == 4) *reinterpret_cast<__nv_bfloat162 *>(p + 2) = __floats2bfloat162_rn(v[2], v[3]);
}

// forward: CPT channels a thread, a tile of TILE steps, the x rows loaded 8 at a time before any is used
template <int CPT, int TILE>
__global__ void conv_fwd_batched(ConvRuns o, const bf16 *__restrict__ x, int ldx, const float *__restrict__ w, int T, int n) {
    const int ch = CPT * (blockIdx.x * blockDim.x + threadIdx.x), tile = blockIdx.y;
    if (ch >= n) return;
    int col = ch, ny;
    bf16 *y = reinterpret_cast<bf16 *>(o.find(col, ny)) + col;
    const int tps = T / TILE, t0 = (tile % tps) * TILE;
    const size_t row0 = (size_t)(tile / tps) * T;
    float wt[CPT][4], x0[CPT], x1[CPT], x2[CPT];
#pragma unroll
    for (int c = 0; c < CPT; c++)
#pragma unroll
        for (int i = 0; i < 4; i++) wt[c][i] = w[(ch + c) * 4 + i];
    auto X = [&](float (&v)[CPT], int t) {
        if (t >= 0) ldc<CPT>(v, x + (row0 + t) * ldx + ch);
        else for (int c = 0; c < CPT; c++) v[c] = 0.f;
    };
    X(x0, t0 - 3); X(x1, t0 - 2); X(x2, t0 - 1);
    for (int tb = t0; tb < t0 + TILE; tb += 8) {
        float xs[8][CPT];
#pragma unroll
        for (int k = 0; k < 8; k++) ldc<CPT>(xs[k], x + (row0 + tb + k) * ldx + ch);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float out[CPT];
#pragma unroll
            for (int c = 0; c < CPT; c++) {  // the trainer's order of the sum
                float p = 0.f;
                p += wt[c][0] * x0[c]; p += wt[c][1] * x1[c]; p += wt[c][2] * x2[c]; p += wt[c][3] * xs[k][c];
                out[c] = siluf_(p);
                x0[c] = x1[c]; x1[c] = x2[c]; x2[c] = xs[k][c];
            }
            stc<CPT>(y + (row0 + tb + k) * ny, out);
        }
    }
}

// backward: as conv_silu_backward_kernel (ConvChannel per channel), with x and dy loaded 8 rows at a time
template <int CPT, int TILE>
__global__ void conv_bwd_batched(bf16 *__restrict__ dx, float *__restrict__ dw_part, ConvRuns o, const bf16 *__restrict__ x,
                                 int ldx, const float *__restrict__ w, int T, int n) {
    const int ch = CPT * (blockIdx.x * blockDim.x + threadIdx.x), tile = blockIdx.y;
    if (ch >= n) return;
    int col = ch, ny;
    const float *dy = reinterpret_cast<const float *>(o.find(col, ny)) + col;
    const int tps = T / TILE, t0 = (tile % tps) * TILE, t1 = t0 + TILE, t_end = min(t1 + NATSL_CONV - 1, T);
    const size_t row0 = (size_t)(tile / tps) * T;
    auto X = [&](float (&v)[CPT], int t) {
        if (t >= 0) ldc<CPT>(v, x + (row0 + t) * ldx + ch);
        else for (int c = 0; c < CPT; c++) v[c] = 0.f;
    };
    float xm3[CPT], xm2[CPT], xm1[CPT];
    X(xm3, t0 - 3); X(xm2, t0 - 2); X(xm1, t0 - 1);
    ConvChannel C[CPT];
#pragma unroll
    for (int c = 0; c < CPT; c++)
        C[c].init(make_float4(w[(ch + c) * 4], w[(ch + c) * 4 + 1], w[(ch + c) * 4 + 2], w[(ch + c) * 4 + 3]), xm3[c], xm2[c], xm1[c]);
    for (int tb = t0; tb < t_end; tb += 8) {
        float xs[8][CPT], gs[8][CPT];
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (tb + k < t_end) { ldc<CPT>(xs[k], x + (row0 + tb + k) * ldx + ch); ldc<CPT>(gs[k], dy + (row0 + tb + k) * ny); }
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int t = tb + k;
            if (t >= t_end) break;
            float d[CPT];
#pragma unroll
            for (int c = 0; c < CPT; c++) d[c] = C[c].step(xs[k][c], gs[k][c], t < t1);
            if (t - 3 >= t0) stc<CPT>(dx + (row0 + t - 3) * ldx + ch, d);
        }
    }
    for (int j = 0; j < 3; j++) {  // dx_{t_end−3..t_end−1}: complete at the sequence end
        const int tau = t_end - 3 + j;
        if (tau < t0 || tau >= t1) continue;
        float d[CPT];
#pragma unroll
        for (int c = 0; c < CPT; c++) d[c] = j == 0 ? C[c].a0 : j == 1 ? C[c].a1 : C[c].a2;
        stc<CPT>(dx + (row0 + tau) * ldx + ch, d);
    }
    float4 *pp = reinterpret_cast<float4 *>(dw_part + (size_t)tile * n * NATSL_CONV + ch * NATSL_CONV);
#pragma unroll
    for (int c = 0; c < CPT; c++) pp[c] = make_float4(C[c].d0, C[c].d1, C[c].d2, C[c].d3);
}

// ------------------------------------------------------------------------------------------------
struct Variant {
    const char *name;
    void (*fwd)(const ConvRuns &, const bf16 *, int, const float *, int, int, int);
    void (*bwd)(bf16 *, float *, const ConvRuns &, const bf16 *, int, const float *, int, int, int);
};
static void trainer_fwd(const ConvRuns &o, const bf16 *x, int ldx, const float *w, int B, int T, int) {
    conv_silu_forward_runs(o, (const real *)x, ldx, 0, w, B, T);
}
static void trainer_bwd(bf16 *dx, float *dw, const ConvRuns &o, const bf16 *x, int ldx, const float *w, int B, int T, int) {
    conv_silu_backward_runs((real *)dx, ldx, dw, o, (const real *)x, ldx, 0, w, B, T, 0); // dy fp32 (an N layer's)
}
template <int CPT, int TILE> static void batched_fwd(const ConvRuns &o, const bf16 *x, int ldx, const float *w, int B, int T, int n) {
    dim3 grid(CEIL_DIV(n / CPT, 128), B * (T / TILE));
    conv_fwd_batched<CPT, TILE><<<grid, 128>>>(o, x, ldx, w, T, n);
    CUDA_CHECK(cudaGetLastError());
}
template <int CPT, int TILE>
static void batched_bwd(bf16 *dx, float *dw, const ConvRuns &o, const bf16 *x, int ldx, const float *w, int B, int T, int n) {
    const int tiles = B * (T / TILE);
    float *part = colpart((size_t)tiles * n * NATSL_CONV);
    dim3 grid(CEIL_DIV(n / CPT, 128), tiles);
    conv_bwd_batched<CPT, TILE><<<grid, 128>>>(dx, part, o, x, ldx, w, T, n);
    CUDA_CHECK(cudaGetLastError());
    colsum_finish(dw, part, tiles, n * NATSL_CONV, n * NATSL_CONV, 0);
}
static const Variant variants[] = {
    {"trainer (2 ch, tile 32)", trainer_fwd, trainer_bwd},
    {"batched 2 ch, tile 32", batched_fwd<2, 32>, batched_bwd<2, 32>},
    {"batched 2 ch, tile 64", batched_fwd<2, 64>, batched_bwd<2, 64>},
    {"batched 4 ch, tile 32", batched_fwd<4, 32>, batched_bwd<4, 32>},
    {"batched 4 ch, tile 64", batched_fwd<4, 64>, batched_bwd<4, 64>},
};

static unsigned long long rng_s = 0x9E3779B97F4A7C15ULL;
static double urand() { rng_s ^= rng_s << 13; rng_s ^= rng_s >> 7; rng_s ^= rng_s << 17; return ((rng_s >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

struct Prob {  // the projection's Q | K | V columns (ldx = n) in bf16, the conv weights, the output gradients (fp32)
    int B, T, K, Vt, n;
    std::vector<bf16> x;
    std::vector<float> w, dq, dk, dv;
    bf16 *d_x, *d_q, *d_k, *d_v, *d_dx;
    float *d_w, *d_dq, *d_dk, *d_dv, *d_dw;
};
static void make_prob(Prob &p, int B, int T, int K, int Vt) {
    p.B = B; p.T = T; p.K = K; p.Vt = Vt; p.n = 2 * K + Vt;
    const size_t BT = (size_t)B * T;
    p.x.resize(BT * p.n); p.w.resize((size_t)p.n * 4); p.dq.resize(BT * K); p.dk.resize(BT * K); p.dv.resize(BT * Vt);
    for (auto &e : p.x) e = __float2bfloat16((float)(2 * urand() - 1));
    for (auto &e : p.w) e = (float)(urand() - 0.5);
    for (auto *v : {&p.dq, &p.dk, &p.dv}) for (auto &e : *v) e = (float)(2 * urand() - 1);
    auto up = [](auto *&d, const auto &h) { CUDA_CHECK(cudaMalloc(&d, h.size() * sizeof(h[0]))); CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(h[0]), cudaMemcpyHostToDevice)); };
    up(p.d_x, p.x); up(p.d_w, p.w); up(p.d_dq, p.dq); up(p.d_dk, p.dk); up(p.d_dv, p.dv);
    CUDA_CHECK(cudaMalloc(&p.d_q, BT * K * 2)); CUDA_CHECK(cudaMalloc(&p.d_k, BT * K * 2)); CUDA_CHECK(cudaMalloc(&p.d_v, BT * Vt * 2));
    CUDA_CHECK(cudaMalloc(&p.d_dx, BT * p.n * 2)); CUDA_CHECK(cudaMalloc(&p.d_dw, (size_t)p.n * 4 * 4));
}
static ConvRuns out_runs(const Prob &p) { return ConvRuns{{p.d_q, p.d_k, p.d_v}, {p.K, p.K, p.Vt}, 3}; }
static ConvRuns dy_runs(const Prob &p) { return ConvRuns{{p.d_dq, p.d_dk, p.d_dv}, {p.K, p.K, p.Vt}, 3}; }

struct Result { std::vector<bf16> q, k, v, dx; std::vector<float> dw; };
static void run_variant(const Variant &vr, Prob &p, Result &res) {
    const size_t BT = (size_t)p.B * p.T;
    vr.fwd(out_runs(p), p.d_x, p.n, p.d_w, p.B, p.T, p.n);
    CUDA_CHECK(cudaMemset(p.d_dw, 0, (size_t)p.n * 16));
    CUDA_CHECK(cudaMemset(p.d_dx, 0xff, BT * p.n * 2));  // poison: every element must be written
    vr.bwd(p.d_dx, p.d_dw, dy_runs(p), p.d_x, p.n, p.d_w, p.B, p.T, p.n);
    CUDA_CHECK(cudaDeviceSynchronize());
    res.q.resize(BT * p.K); res.k.resize(BT * p.K); res.v.resize(BT * p.Vt); res.dx.resize(BT * p.n); res.dw.resize((size_t)p.n * 4);
    CUDA_CHECK(cudaMemcpy(res.q.data(), p.d_q, BT * p.K * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(res.k.data(), p.d_k, BT * p.K * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(res.v.data(), p.d_v, BT * p.Vt * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(res.dx.data(), p.d_dx, BT * p.n * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(res.dw.data(), p.d_dw, (size_t)p.n * 16, cudaMemcpyDeviceToHost));
}
// the double-precision oracle: y, dx, dw of the conv over all n channels (y and dy as one [BT][n] array each)
static void oracle(const Prob &p, std::vector<double> &y, std::vector<double> &dx, std::vector<double> &dw) {
    const int n = p.n, T = p.T;
    const size_t BT = (size_t)p.B * T;
    y.assign(BT * n, 0); dx.assign(BT * n, 0); dw.assign((size_t)n * 4, 0);
    auto X = [&](int b, int t, int c) { return t < 0 ? 0.0 : (double)__bfloat162float(p.x[((size_t)b * T + t) * n + c]); };
    auto DY = [&](size_t bt, int c) {
        return c < p.K ? p.dq[bt * p.K + c] : c < 2 * p.K ? p.dk[bt * p.K + c - p.K] : p.dv[bt * p.Vt + c - 2 * p.K];
    };
    for (int b = 0; b < p.B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < n; c++) {
                double pre = 0;
                for (int i = 0; i < 4; i++) pre += p.w[c * 4 + i] * X(b, t - 3 + i, c);
                const double s = 1 / (1 + exp(-pre));
                const size_t bt = (size_t)b * T + t;
                y[bt * n + c] = pre * s;
                const double dp = DY(bt, c) * s * (1 + pre * (1 - s));
                for (int i = 0; i < 4; i++) {
                    const int tau = t - 3 + i;
                    if (tau < 0) continue;
                    dw[c * 4 + i] += dp * X(b, tau, c);
                    dx[((size_t)b * T + tau) * n + c] += dp * p.w[c * 4 + i];
                }
            }
}
static double rel(const std::vector<double> &ref, const std::function<double(size_t)> &got) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); i++) { const double d = got(i) - ref[i]; num += d * d; den += ref[i] * ref[i]; }
    return sqrt(num / den);
}
static bool same(const Result &a, const Result &b) {
    auto eq = [](const auto &x, const auto &y) { return x.size() == y.size() && !memcmp(x.data(), y.data(), x.size() * sizeof(x[0])); };
    return eq(a.q, b.q) && eq(a.k, b.k) && eq(a.v, b.v) && eq(a.dx, b.dx) && eq(a.dw, b.dw);
}

// ---- the forward in both precisions, runs of channels whose lengths are and are not multiples of 8: y of the three
// runs against the double oracle
template <class MP> static bool fwd_case(int B, int T, int K, int Vt) {
    const size_t BT = (size_t)B * T, n = 2 * (size_t)K + Vt;
    std::vector<MP> x(BT * n);
    std::vector<float> w(n * 4);
    for (auto &e : x) e = (MP)(float)(2 * urand() - 1);
    for (auto &e : w) e = (float)(urand() - 0.5);
    MP *dx, *y;
    float *dw;
    CUDA_CHECK(cudaMalloc(&dx, x.size() * sizeof(MP))); CUDA_CHECK(cudaMalloc(&y, x.size() * sizeof(MP)));
    CUDA_CHECK(cudaMalloc(&dw, w.size() * 4));
    CUDA_CHECK(cudaMemcpy(dx, x.data(), x.size() * sizeof(MP), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dw, w.data(), w.size() * 4, cudaMemcpyHostToDevice));
    MP *yq = y, *yk = y + BT * K, *yv = y + 2 * BT * K;
    conv_silu_forward_runs(ConvRuns{{yq, yk, yv}, {K, K, Vt}, 3}, (const real *)dx, (int)n, 0, dw, B, T);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<MP> got(x.size());
    CUDA_CHECK(cudaMemcpy(got.data(), y, got.size() * sizeof(MP), cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    for (size_t bt = 0; bt < BT; bt++)
        for (size_t c = 0; c < n; c++) {
            const int b = (int)(bt / T), t = (int)(bt % T);
            double pre = 0;
            for (int i = 0; i < 4; i++)
                if (t - 3 + i >= 0) pre += w[c * 4 + i] * (double)(float)x[((size_t)b * T + t - 3 + i) * n + c];
            const double ref = pre / (1 + exp(-pre));
            const size_t at = c < (size_t)K ? bt * K + c : c < 2 * (size_t)K ? BT * K + bt * K + c - K : 2 * BT * K + bt * Vt + c - 2 * K;
            const double d = (double)(float)got[at] - ref;
            num += d * d; den += ref * ref;
        }
    const double e = sqrt(num / den), bar = sizeof(MP) == 2 ? 1e-2 : 1e-5;
    printf("  forward %s, channels %d | %d | %d: y against the oracle %.2e -> %s\n", sizeof(MP) == 2 ? "bf16" : "fp32", K, K, Vt,
           e, e < bar ? "PASS" : "FAIL");
    for (void *p : std::initializer_list<void *>{dx, y, dw}) CUDA_CHECK(cudaFree(p));
    return e < bar;
}

// ---- Q | K with their L2 norm (§0, (0.4)): the trainer's conv_silu_l2norm_forward, the G layer's form (q̂, k̂, ρ) and
// the N layer's (Q, K stored too: the same q̂, k̂, ρ bit for bit), against the double oracle; at the 340m size, timed
template <class MP> static bool l2_case(int B, int T, int H, int dk, bool oracle_check) {
    const size_t BT = (size_t)B * T, K = (size_t)H * dk, n = 4 * K;
    std::vector<MP> x(BT * n);
    std::vector<float> w(n * 4);
    for (auto &e : x) e = (MP)(float)(2 * urand() - 1);
    for (auto &e : w) e = (float)(urand() - 0.5);
    MP *dx, *y1, *h1, *h2;
    float *dw, *r1, *r2;
    CUDA_CHECK(cudaMalloc(&dx, x.size() * sizeof(MP))); CUDA_CHECK(cudaMalloc(&dw, w.size() * 4));
    CUDA_CHECK(cudaMemcpy(dx, x.data(), x.size() * sizeof(MP), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dw, w.data(), w.size() * 4, cudaMemcpyHostToDevice));
    for (MP **p : {&y1, &h1, &h2}) CUDA_CHECK(cudaMalloc(p, 2 * BT * K * sizeof(MP)));
    CUDA_CHECK(cudaMalloc(&r1, 2 * BT * H * 4)); CUDA_CHECK(cudaMalloc(&r2, 2 * BT * H * 4));
    auto fused = [&](bool keep, MP *h, float *r) {
        conv_silu_l2norm_forward((real *)h, (real *)(h + BT * K), r, keep ? (real *)y1 : NULL,
                                 keep ? (real *)(y1 + BT * K) : NULL, (const real *)dx, (int)n, dw, B, T, H, dk);
    };
    fused(true, h1, r1); fused(false, h2, r2); CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<MP> a(2 * BT * K), b(2 * BT * K), ya(2 * BT * K);
    std::vector<float> ra(2 * BT * H), rb(2 * BT * H);
    CUDA_CHECK(cudaMemcpy(a.data(), h1, a.size() * sizeof(MP), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(b.data(), h2, b.size() * sizeof(MP), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(ya.data(), y1, ya.size() * sizeof(MP), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(ra.data(), r1, ra.size() * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(rb.data(), r2, rb.size() * 4, cudaMemcpyDeviceToHost));
    const bool bits = !memcmp(a.data(), b.data(), a.size() * sizeof(MP)) && !memcmp(ra.data(), rb.data(), ra.size() * 4);
    bool ok = bits;
    const bool bf = sizeof(MP) == 2;
    printf("  %s B=%d T=%d H=%d d_k=%3d: Q, K stored or not, the same q̂, k̂, ρ: %s", bf ? "bf16" : "fp32", B, T, H, dk,
           bits ? "yes" : "NO");
    if (oracle_check) { // q̂, k̂, ρ and Q, K from the exact conv (double), normwise; bars 1e-2 (bf16 storage), 1e-5 (fp32)
        double num = 0, den = 0, ny = 0, dy = 0, nr = 0, dr = 0;
        for (size_t bt = 0; bt < BT; bt++)
            for (int hd = 0; hd < 2 * H; hd++) {
                const int b = (int)(bt / T), t = (int)(bt % T);
                std::vector<double> yv(dk);
                double ss = 0;
                for (int j = 0; j < dk; j++) {
                    const size_t c = (size_t)hd * dk + j;
                    double pre = 0;
                    for (int i = 0; i < 4; i++) {
                        const int tau = t - 3 + i;
                        if (tau >= 0) pre += w[c * 4 + i] * (double)(float)x[((size_t)b * T + tau) * n + c];
                    }
                    yv[j] = pre / (1 + exp(-pre));
                    ss += yv[j] * yv[j];
                }
                const size_t o = (size_t)(hd / H) * BT * K + bt * K + (size_t)(hd % H) * dk;
                const double rho = 1 / sqrt(ss + NATSL_EPS), gr = ra[(size_t)(hd / H) * BT * H + bt * H + hd % H];
                nr += (gr - rho) * (gr - rho); dr += rho * rho;
                for (int j = 0; j < dk; j++) {
                    const double ref = yv[j] * rho, d = (double)(float)a[o + j] - ref, e = (double)(float)ya[o + j] - yv[j];
                    num += d * d; den += ref * ref; ny += e * e; dy += yv[j] * yv[j];
                }
            }
        const double e = sqrt(num / den), ey = sqrt(ny / dy), er = sqrt(nr / dr), bar = bf ? 1e-2 : 1e-5;
        ok &= e < bar && ey < bar && er < bar;
        printf("  against the oracle: q̂, k̂ %.2e  Q, K %.2e  ρ %.2e", e, ey, er);
    }
    printf(" -> %s\n", ok ? "PASS" : "FAIL");
    if (!oracle_check) { // timing (median of 20): the G layer's form and the N layer's (Q, K stored too)
        const double mb = 2.0 * BT * K * sizeof(MP) / 1e6; // the Q | K columns of x, q̂ | k̂ and Q | K: each this many MB
        const float tg = median_ms([&] { fused(false, h2, r2); }), tn = median_ms([&] { fused(true, h1, r1); });
        printf("TIME Q|K conv + SiLU + L2 norm: G layer's %.4f ms (%4.0f GB/s), N layer's (Q, K kept) %.4f ms (%4.0f GB/s)\n",
               tg, 2 * mb / tg, tn, 3 * mb / tn);
    }
    for (void *p : std::initializer_list<void *>{dx, dw, y1, h1, h2, r1, r2}) CUDA_CHECK(cudaFree(p));
    return ok;
}

int main() {
    g_bf16 = 1;
    int nv = sizeof(variants) / sizeof(variants[0]);
    bool ok = true;
    // correctness: B=2, T=256, Q | K | V = 64 | 64 | 128, against the oracle (y, dx rounded to bf16: bar 1e-2; dw fp32: 1e-5)
    Prob s;
    make_prob(s, 2, 256, 64, 128);
    std::vector<double> y, dx, dw;
    oracle(s, y, dx, dw);
    printf("== correctness (B=2 T=256, channels 64 | 64 | 128), normwise error against the double oracle\n");
    for (int i = 0; i < nv; i++) {
        Result r;
        run_variant(variants[i], s, r);
        const size_t n = s.n;
        const double ey = rel(y, [&](size_t j) {
            const size_t bt = j / n, c = j % n;
            const bf16 v = c < (size_t)s.K ? r.q[bt * s.K + c] : c < 2 * (size_t)s.K ? r.k[bt * s.K + c - s.K] : r.v[bt * s.Vt + c - 2 * s.K];
            return (double)__bfloat162float(v);
        });
        const double ex = rel(dx, [&](size_t j) { return (double)__bfloat162float(r.dx[j]); });
        const double ew = rel(dw, [&](size_t j) { return (double)r.dw[j]; });
        const bool pass = ey < 1e-2 && ex < 1e-2 && ew < 1e-5;
        ok &= pass;
        printf("  %-26s y %.2e  dx %.2e  dw %.2e -> %s\n", variants[i].name, ey, ex, ew, pass ? "PASS" : "FAIL");
    }
    // timing at the 340m size, and whether each variant computes the trainer's bits
    Prob p;
    make_prob(p, 8, 4096, 768, 1536);
    const double BT = 8.0 * 4096, fwd_bytes = BT * p.n * 4, bwd_bytes = BT * p.n * 8;
    printf("== 340m size (B=8 T=4096, channels 768 | 768 | 1536 in one launch); bytes a pass must move: forward %.0f MB, "
           "backward %.0f MB (+ the dw partial sums)\n", fwd_bytes / 1e6, bwd_bytes / 1e6);
    Result ref;
    run_variant(variants[0], p, ref);
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0)); CUDA_CHECK(cudaEventCreate(&e1));
    for (int i = 0; i < nv; i++) {
        Result r;
        run_variant(variants[i], p, r);
        float tf[20], tb[20];
        for (int rep = -3; rep < 20; rep++) {
            CUDA_CHECK(cudaEventRecord(e0));
            variants[i].fwd(out_runs(p), p.d_x, p.n, p.d_w, p.B, p.T, p.n);
            CUDA_CHECK(cudaEventRecord(e1)); CUDA_CHECK(cudaEventSynchronize(e1));
            if (rep >= 0) CUDA_CHECK(cudaEventElapsedTime(&tf[rep], e0, e1));
            CUDA_CHECK(cudaEventRecord(e0));
            variants[i].bwd(p.d_dx, p.d_dw, dy_runs(p), p.d_x, p.n, p.d_w, p.B, p.T, p.n);
            CUDA_CHECK(cudaEventRecord(e1)); CUDA_CHECK(cudaEventSynchronize(e1));
            if (rep >= 0) CUDA_CHECK(cudaEventElapsedTime(&tb[rep], e0, e1));
        }
        std::sort(tf, tf + 20); std::sort(tb, tb + 20);
        printf("TIME %-26s fwd %.4f ms (%4.0f GB/s)  bwd %.4f ms (%4.0f GB/s)  trainer's bits: %s\n", variants[i].name, tf[10],
               fwd_bytes / tf[10] / 1e6, tb[10], bwd_bytes / tb[10] / 1e6, same(r, ref) ? "yes" : "no");
    }
    printf("== the forward in both precisions, runs of 64 | 64 | 128 and of 36 | 36 | 74 channels\n");
    g_bf16 = 1;
    ok &= fwd_case<bf16>(2, 256, 64, 128) && fwd_case<bf16>(2, 256, 36, 74);
    g_bf16 = 0;
    ok &= fwd_case<float>(2, 256, 64, 128) && fwd_case<float>(2, 256, 34, 70);
    printf("== Q | K with the L2 norm (conv_silu_l2norm_forward): d_k in 16-byte runs on 8, 16, 32 lanes, in pairs (192), "
           "one value a lane (48)\n");
    g_bf16 = 1;
    for (int dk : {64, 128, 256, 192, 48}) ok &= l2_case<bf16>(2, 256, 3, dk, true);
    g_bf16 = 0;
    for (int dk : {32, 64, 128, 192}) ok &= l2_case<float>(2, 256, 3, dk, true);
    g_bf16 = 1;
    ok &= l2_case<bf16>(8, 4096, 6, 128, false); // the 340m size
    printf("CORRECTNESS %s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
