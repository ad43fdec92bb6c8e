// conv_bench.cu -- the G and N layers' short causal conv + SiLU (doc/model.md §3.1, backward (3.4k, 3.4n)) in bf16
// mode: the trainer's kernels (conv_silu_forward_runs / conv_silu_backward_runs, included from train_natsl.cu with
// TESTING defined) against variants that batch their loads explicitly, each checked against a double-precision CPU
// oracle and timed at the 340m size (B=8, T=4096, one launch over Q | K | V = 768 | 768 | 1536 channels).
// Why: in the 340m step both passes ran at about 45% of the bandwidth their bytes allow. When the loads of a thread's
// time tile are not in flight together (each output row waits for its x row), batching them pays.
// Measured (H100, 340m size): the forward with batched loads 0.155 ms against 0.257 unbatched (the trainer batches);
// the backward's batched variants 0.54-0.60 ms against the trainer's 0.49. The trainer's backward sums dw per block of
// 8 tiles before storing it and loads four rows of x and dy before using any in the tile's interior: 0.368 ms (ncu:
// latency-bound, 12.4 cycles between a warp's instructions; silu' from __expf / __fdividef was slower, 0.618 ms).
// Forms measured slower and not used: the L2 norm's forward folded into a block of d_k threads per two heads (0.279 /
// 0.267 ms against the two passes' 0.240); the backward staged in shared memory by cp.async (0.509 against 0.367 ms).
// The trainer's conv_silu_l2norm_forward (one warp a (head, tile), the sums without a barrier) is checked here against
// the two passes (bit for bit) and the double oracle: 0.128-0.139 ms with the rows kept packed until used (6 blocks an
// SM), against 0.164 with them as floats.
//
// Build + run (device):  nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 --default-stream per-thread -I. dev/cuda/conv/conv_bench.cu -o /tmp/conv_bench \
//                            -lcublasLt -lcublas -lnccl && /tmp/conv_bench
// Prints per variant: the error against the oracle (small problem), whether it matches the trainer's kernels bit for
// bit (340m problem), forward and backward times (median of 20) and the bandwidth their bytes imply.

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

// ---- Q | K with their L2 norm (§0, (0.4)): the trainer's conv_silu_l2norm_forward against the two passes it
// replaced (the conv over the Q | K runs, then one warp a row of l2norm_forward, kept here as l2_rows) and the double
// oracle
template <int NJ, bool V4>
__global__ void __launch_bounds__(256) l2_rows(bf16 *__restrict__ y, float *__restrict__ rho, const bf16 *__restrict__ x,
                                               int R, int n) {
    int r = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= R) return;
    float xv[NJ], ss = 0.f;
    row_load<NJ, V4>(xv, x + (size_t)r * n, lane, n);
#pragma unroll
    for (int j = 0; j < NJ; j++) ss += xv[j] * xv[j];
    float s = 1.f / sqrtf(warp_sum(ss) + NATSL_EPS);
#pragma unroll
    for (int j = 0; j < NJ; j++) xv[j] *= s;
    row_store<NJ, V4>(y + (size_t)r * n, xv, lane, n);
    if (lane == 0) rho[r] = s;
}
static void l2_two_pass(bf16 *yqk, bf16 *hat, float *rho, const bf16 *x, int ldx, const float *w, int B, int T, int H, int dk) {
    const size_t BT = (size_t)B * T, K = (size_t)H * dk;
    conv_silu_forward_runs(ConvRuns{{yqk, yqk + BT * K}, {(int)K, (int)K}, 2}, (const real *)x, ldx, 0, w, B, T);
    const int R = (int)(2 * BT * H), g = CEIL_DIV(R, 8);
    if (dk == 128) l2_rows<4, true><<<g, 256>>>(hat, rho, yqk, R, dk);
    else if (dk == 64) l2_rows<2, false><<<g, 256>>>(hat, rho, yqk, R, dk);
    else l2_rows<8, false><<<g, 256>>>(hat, rho, yqk, R, dk);
    CUDA_CHECK(cudaGetLastError());
}
// one shape: B, T, H heads of d_k in Q and in K (V = 2K channels after them in x's rows, not touched)
static bool l2_case(int B, int T, int H, int dk, bool oracle_check) {
    const size_t BT = (size_t)B * T, K = (size_t)H * dk, n = 4 * K;
    std::vector<bf16> x(BT * n);
    std::vector<float> w(n * 4);
    for (auto &e : x) e = __float2bfloat16((float)(2 * urand() - 1));
    for (auto &e : w) e = (float)(urand() - 0.5);
    bf16 *dx, *y1, *h1, *y2, *h2;
    float *dw, *r1, *r2;
    CUDA_CHECK(cudaMalloc(&dx, x.size() * 2)); CUDA_CHECK(cudaMalloc(&dw, w.size() * 4));
    CUDA_CHECK(cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dw, w.data(), w.size() * 4, cudaMemcpyHostToDevice));
    for (bf16 **p : {&y1, &h1, &y2, &h2}) CUDA_CHECK(cudaMalloc(p, 2 * BT * K * 2));
    CUDA_CHECK(cudaMalloc(&r1, 2 * BT * H * 4)); CUDA_CHECK(cudaMalloc(&r2, 2 * BT * H * 4));
    auto fused = [&](bool keep) {
        conv_silu_l2norm_forward((real *)h1, (real *)(h1 + BT * K), (real *)r1, keep ? (real *)y1 : NULL,
                                 keep ? (real *)(y1 + BT * K) : NULL, (const real *)dx, (int)n, dw, B, T, H, dk);
    };
    auto two = [&] { l2_two_pass(y2, h2, r2, dx, (int)n, dw, B, T, H, dk); };
    fused(true); two(); CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<bf16> a(2 * BT * K), b(2 * BT * K), ya(2 * BT * K), yb(2 * BT * K);
    std::vector<float> ra(2 * BT * H), rb(2 * BT * H);
    CUDA_CHECK(cudaMemcpy(a.data(), h1, a.size() * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(b.data(), h2, b.size() * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(ya.data(), y1, ya.size() * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(yb.data(), y2, yb.size() * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(ra.data(), r1, ra.size() * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(rb.data(), r2, rb.size() * 4, cudaMemcpyDeviceToHost));
    bool bits = !memcmp(a.data(), b.data(), a.size() * 2) && !memcmp(ya.data(), yb.data(), ya.size() * 2) &&
                !memcmp(ra.data(), rb.data(), ra.size() * 4);
    // and the G layer's form, which does not store Q, K (compiled apart)
    CUDA_CHECK(cudaMemset(h1, 0, 2 * BT * K * 2)); CUDA_CHECK(cudaMemset(r1, 0, 2 * BT * H * 4));
    fused(false); CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(b.data(), h1, b.size() * 2, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(rb.data(), r1, rb.size() * 4, cudaMemcpyDeviceToHost));
    bits &= !memcmp(a.data(), b.data(), a.size() * 2) && !memcmp(ra.data(), rb.data(), ra.size() * 4);
    bool ok = bits;
    printf("  B=%d T=%d H=%d d_k=%3d: fused (Q, K stored or not) = two passes, bit for bit: %s", B, T, H, dk,
           bits ? "yes" : "NO");
    if (oracle_check) { // q̂, k̂ from the exact conv (double): normwise, bar 1e-2 (bf16 storage of y and ŷ)
        double num = 0, den = 0;
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
                        if (tau >= 0) pre += w[c * 4 + i] * (double)__bfloat162float(x[((size_t)b * T + tau) * n + c]);
                    }
                    yv[j] = pre / (1 + exp(-pre));
                    ss += yv[j] * yv[j];
                }
                const size_t o = (size_t)(hd / H) * BT * K + bt * K + (size_t)(hd % H) * dk;
                for (int j = 0; j < dk; j++) {
                    const double ref = yv[j] / sqrt(ss + NATSL_EPS), d = __bfloat162float(a[o + j]) - ref;
                    num += d * d; den += ref * ref;
                }
            }
        const double e = sqrt(num / den);
        ok &= e < 1e-2;
        printf("  q̂, k̂ against the oracle %.2e", e);
    }
    printf(" -> %s\n", ok ? "PASS" : "FAIL");
    if (!oracle_check) { // timing (median of 20): the fused pass without and with Q, K stored, the two passes
        const double mb = 2.0 * BT * K * 2 / 1e6; // the Q | K columns of x, and q̂ | k̂, each this many MB
        const float tg = median_ms([&] { fused(false); }), tn = median_ms([&] { fused(true); }), t2 = median_ms(two);
        printf("TIME Q|K + L2 norm: fused %.4f ms (%4.0f GB/s), fused keeping Q, K %.4f ms, two passes %.4f ms\n", tg,
               2 * mb / tg, tn, t2);
    }
    for (void *p : std::initializer_list<void *>{dx, dw, y1, h1, y2, h2, r1, r2}) CUDA_CHECK(cudaFree(p));
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
    printf("== Q | K with the L2 norm (conv_silu_l2norm_forward)\n");
    for (int dk : {64, 128, 192}) ok &= l2_case(2, 256, 2, dk, true);
    ok &= l2_case(8, 4096, 6, 128, false); // the 340m size
    printf("CORRECTNESS %s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
