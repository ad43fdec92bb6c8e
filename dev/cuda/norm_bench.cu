// norm_bench.cu -- the RMSNorm passes of a 340m natsl-hybrid step in bf16 mode (B·T = 32768 rows): the trainer's
// rmsnorm_forward / rmsnorm_backward (included from train_natsl.cu with TESTING defined) against variants that differ
// only in where a warp keeps the row-invariant weight w, each checked bit for bit against the trainer's output and
// timed (median of 20), with the bandwidth its bytes imply.
// Why: the 340m step's profile put the 55 RMSNorm backward passes of a step at 7.2 ms (the 43 over D = 1024 at about
// 2 TB/s) and the forward passes at 3.2 ms. Both kernels read w[i] from global memory with one 4-byte load per value
// and lane, twice a row in the backward, where the row's own data takes one 8-byte load per four values: for a warp
// the weight loads are most of the L1 wavefronts of a row.
// Variants (WMODE): 0 the trainer's form (w by scalar loads per row), 1 w staged once per block in shared memory and
// read as float4 in the V4 layout, 2 w in registers, loaded once per warp (the backward's rows are strided by the grid,
// so a warp serves many rows; the forward takes one row a warp, so mode 2 there runs a grid-strided loop like the
// backward's).
// Shapes: the block norms over D = 1024 (x: the bf16 residual stream; dy bf16 (ln_mlp: W_gu's backward wrote it) or
// fp32 (ln_mix: the mixer's dx); dx: the bf16 residual gradient), and the N layer's q/k norms (12 heads of 64 in rows
// of 768: x bf16, dy and dx fp32; y bf16 in the forward).
// Measured (H100): the trainer's kernels run near the bandwidth a
// pass of this size gets: backward 0.113 ms (2.38 TB/s) with dy in bf16, 0.124 ms (2.70 TB/s) with dy in fp32, the q/k
// norms 0.132 ms (2.66 TB/s); forward 0.054 ms (2.49 TB/s). Where w lives changes nothing (modes 1 and 2 within 2%, w in
// registers 21% slower with dy in fp32: 255 registers); the block per row (four values a thread, the next row loaded
// ahead, 4 blocks an SM) is 8% slower. Only the q/k norms' forward is slow (0.072 ms, 1.40 TB/s: rows of 64 bf16 take
// the scalar path, two bytes a load), 12 calls a step. The trainer keeps the scalar form.
//
// Build + run (device):  nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 --default-stream per-thread -I. dev/cuda/norm_bench.cu -o /tmp/norm_bench \
//                            -lcublasLt -lcublas -lnccl && /tmp/norm_bench

#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

#define TESTING
#include "../../train_natsl.cu"
#include "bench_timing.h"

typedef __nv_bfloat16 bf16;

// w in row_col order, from where WMODE keeps it: 0 global (scalar loads), 1 shared memory (float4 in the V4 layout),
// 2 registers (wreg, loaded once)
template <int NJ, bool V4, int WMODE>
__device__ __forceinline__ float w_at(const float *w, const float *wsh, const float (&wreg)[NJ], int lane, int j, int n) {
    const int i = row_col<V4>(lane, j);
    if constexpr (WMODE == 2) return wreg[j];
    else if constexpr (WMODE == 1) return i < n ? wsh[i] : 0.f;
    else return i < n ? w[i] : 0.f;
}
template <int NJ, bool V4, int WMODE>
__device__ __forceinline__ void w_setup(float *wsh, float (&wreg)[NJ], const float *w, int n, int lane) {
    if constexpr (WMODE == 1) {
        for (int i = threadIdx.x; i < n; i += blockDim.x) wsh[i] = w[i];
        __syncthreads();
    }
    if constexpr (WMODE == 2) row_load_w<NJ, V4>(wreg, w, lane, n);
}

template <int NJ, bool V4, int WMODE, class X, class Y>
__global__ void __launch_bounds__(256) fwd_v(Y *__restrict__ y, float *__restrict__ rstd, const X *__restrict__ x,
                                             const float *__restrict__ w, int N, int nh, int n, int ldx, int ldy) {
    __shared__ float wsh[WMODE == 1 ? 32 * NJ : 1];
    float wreg[NJ];
    const int lane = threadIdx.x % 32;
    w_setup<NJ, V4, WMODE>(wsh, wreg, w, n, lane);
    const int stride = WMODE == 2 ? gridDim.x * 8 : N * nh;
    for (int r = blockIdx.x * 8 + threadIdx.x / 32; r < N * nh; r += stride) {
        const X *xr = x + (size_t)(r / nh) * ldx + (r % nh) * n;
        Y *yr = y + (size_t)(r / nh) * ldy + (r % nh) * n;
        float xv[NJ], ss = 0.f;
        row_load<NJ, V4>(xv, xr, lane, n);
#pragma unroll
        for (int j = 0; j < NJ; j++) ss += xv[j] * xv[j];
        ss = warp_sum(ss);
        float s = 1.f / sqrtf(ss / n + NATSL_EPS);
#pragma unroll
        for (int j = 0; j < NJ; j++) xv[j] = xv[j] * s * w_at<NJ, V4, WMODE>(w, wsh, wreg, lane, j, n);
        row_store<NJ, V4>(yr, xv, lane, n);
        if (lane == 0) rstd[r] = s;
    }
}

template <int NJ, bool V4, int WMODE, class X, class DY, class DX>
__global__ void __launch_bounds__(256) bwd_v(DX *__restrict__ dx, float *__restrict__ part, const DY *__restrict__ dy,
                                             const X *__restrict__ x, const float *__restrict__ w,
                                             const float *__restrict__ rstd, int N, int nh, int n, int ldx, int ldy) {
    __shared__ float sh[32 * NJ];
    __shared__ float wsh[WMODE == 1 ? 32 * NJ : 1];
    float wreg[NJ];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    w_setup<NJ, V4, WMODE>(wsh, wreg, w, n, lane);
    float acc[NJ];
#pragma unroll
    for (int j = 0; j < NJ; j++) acc[j] = 0.f;
    for (int r = blockIdx.x * 8 + warp; r < N * nh; r += gridDim.x * 8) {
        size_t ox = (size_t)(r / nh) * ldx + (r % nh) * n, oy = (size_t)(r / nh) * ldy + (r % nh) * n;
        float s = rstd[r], dot = 0.f, xv[NJ], dyv[NJ], dxv[NJ];
        row_load<NJ, V4>(xv, x + ox, lane, n);
        row_load<NJ, V4>(dyv, dy + oy, lane, n);
        row_load<NJ, V4>(dxv, dx + ox, lane, n);
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            dot += xv[j] * s * w_at<NJ, V4, WMODE>(w, wsh, wreg, lane, j, n) * dyv[j];
            acc[j] += dyv[j] * xv[j] * s;
        }
        dot = warp_sum(dot) / n;
#pragma unroll
        for (int j = 0; j < NJ; j++) dxv[j] = dxv[j] + s * (w_at<NJ, V4, WMODE>(w, wsh, wreg, lane, j, n) * dyv[j] - xv[j] * s * dot);
        row_store<NJ, V4>(dx + ox, dxv, lane, n);
    }
    for (int i = threadIdx.x; i < n; i += blockDim.x) sh[i] = 0.f;
    for (int k = 0; k < 8; k++) {
        __syncthreads();
        if (warp == k)
#pragma unroll
            for (int j = 0; j < NJ; j++) { const int i = row_col<V4>(lane, j); if (i < n) sh[i] += acc[j]; }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) part[(size_t)blockIdx.x * n + i] = sh[i];
}

// Block per row (n = 4·blockDim.x, rows 8-byte aligned): thread k holds values 4k..4k+3 of the row (one 8-byte bf16
// load a tensor), the next row's x, dy, dx are loaded before this row's sum is reduced (over the warp by shuffles,
// over the block through shared memory, one barrier a row: the slot alternates), and dw's partial sums are the
// thread's own four columns (no reduction over warps). Registers stay few, so the SM holds many blocks.
template <class X, class DY, class DX>
__global__ void __launch_bounds__(256) bwd_row_block(DX *__restrict__ dx, float *__restrict__ part, const DY *__restrict__ dy,
                                                     const X *__restrict__ x, const float *__restrict__ w,
                                                     const float *__restrict__ rstd, int R, int n) {
    __shared__ float red[2][32];
    const int k = 4 * threadIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    const float4 wv = make_float4(w[k], w[k + 1], w[k + 2], w[k + 3]);
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    int r = blockIdx.x;
    float4 xa, ya, da;
    if (r < R) { xa = ld4(x + (size_t)r * n + k); ya = ld4(dy + (size_t)r * n + k); da = ld4(dx + (size_t)r * n + k); }
    for (int it = 0; r < R; r += gridDim.x, it ^= 1) {
        const int rn = r + gridDim.x;
        float4 xb, yb, db;
        if (rn < R) { xb = ld4(x + (size_t)rn * n + k); yb = ld4(dy + (size_t)rn * n + k); db = ld4(dx + (size_t)rn * n + k); }
        const float s = rstd[r];
        float dot = xa.x * s * wv.x * ya.x;
        dot += xa.y * s * wv.y * ya.y; dot += xa.z * s * wv.z * ya.z; dot += xa.w * s * wv.w * ya.w;
        acc.x += ya.x * xa.x * s; acc.y += ya.y * xa.y * s; acc.z += ya.z * xa.z * s; acc.w += ya.w * xa.w * s;
        dot = warp_sum(dot);
        if (lane == 0) red[it][warp] = dot;
        __syncthreads();
        dot = 0.f;
        for (int q = 0; q < nw; q++) dot += red[it][q];
        dot /= n;
        st4(dx + (size_t)r * n + k, da.x + s * (wv.x * ya.x - xa.x * s * dot), da.y + s * (wv.y * ya.y - xa.y * s * dot),
            da.z + s * (wv.z * ya.z - xa.z * s * dot), da.w + s * (wv.w * ya.w - xa.w * s * dot));
        xa = xb; ya = yb; da = db;
    }
    *reinterpret_cast<float4 *>(part + (size_t)blockIdx.x * n + k) = acc;
}

template <class T> static T *dev_fill(size_t n, uint64_t seed, float scale) {
    std::vector<T> h(n);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = (T)(scale * ((float)(seed >> 40) / (float)(1 << 24) - 0.5f));
    }
    T *d = (T *)xcudamalloc(n * sizeof(T));
    CUDA_CHECK(cudaMemcpy(d, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}
static bool same_bytes(const void *a, const void *b, size_t bytes) {
    std::vector<unsigned char> x(bytes), y(bytes);
    CUDA_CHECK(cudaMemcpy(x.data(), a, bytes, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(y.data(), b, bytes, cudaMemcpyDeviceToHost));
    return !memcmp(x.data(), y.data(), bytes);
}

// One shape: N rows of nh heads of n values (row stride ld), x bf16, dy of type DY (dy_mp: bf16), dx of type DX.
template <int NJ, class DY, class DX>
static void bench_shape(const char *what, int N, int nh, int n, int ld, bool fwd_too) {
    const size_t cnt = (size_t)N * ld, R = (size_t)N * nh;
    const int dy_mp = sizeof(DY) == 2, dx_mp = sizeof(DX) == 2;
    bf16 *x = dev_fill<bf16>(cnt, 1, 4.f);
    DY *dy = dev_fill<DY>(cnt, 2, 1e-2f);
    DX *dx0 = dev_fill<DX>(cnt, 3, 1e-2f), *dx = (DX *)xcudamalloc(cnt * sizeof(DX)), *dxr = (DX *)xcudamalloc(cnt * sizeof(DX));
    float *w = dev_fill<float>(n, 4, 2.f), *rstd = (float *)xcudamalloc(R * sizeof(float));
    float *dw = (float *)xcudamalloc(n * sizeof(float)), *dwr = (float *)xcudamalloc(n * sizeof(float));
    bf16 *y = (bf16 *)xcudamalloc(cnt * sizeof(bf16)), *yr = (bf16 *)xcudamalloc(cnt * sizeof(bf16));
    const double fwd_bytes = (double)R * n * 2 * 2, bwd_bytes = (double)R * n * (2 + sizeof(DY) + 2 * sizeof(DX));
    printf("-- %s: %zu rows of %d, dy %s, dx %s\n", what, R, n, dy_mp ? "bf16" : "fp32", dx_mp ? "bf16" : "fp32");
    // the trainer's passes (their outputs are the reference)
    const bool v4 = row_v4<NJ>(n, x, ld, dy, ld) && (uintptr_t)dx % 16 == 0;
    auto train_fwd = [&] { rmsnorm_forward((real *)yr, rstd, (const real *)x, w, N, nh, n, ld, ld, 1, 1); };
    auto train_bwd = [&] {
        CUDA_CHECK(cudaMemcpyAsync(dxr, dx0, cnt * sizeof(DX), cudaMemcpyDeviceToDevice));
        rmsnorm_backward((real *)dxr, dwr, (const real *)dy, (const real *)x, w, rstd, N, nh, n, ld, ld, 1, dy_mp, dx_mp);
    };
    const double copy_ms = median_ms([&] { CUDA_CHECK(cudaMemcpyAsync(dx, dx0, cnt * sizeof(DX), cudaMemcpyDeviceToDevice)); });
    train_fwd();
    const double tf = median_ms(train_fwd), tb = median_ms(train_bwd) - copy_ms;
    CUDA_CHECK(cudaMemset(dwr, 0, n * sizeof(float)));
    train_bwd(); // the reference dx, dw (timing added into dw)
    printf("  trainer        fwd %.4f ms (%4.0f GB/s)   bwd %.4f ms (%4.0f GB/s)   (V4 %d; the bwd time less the dx reset's %.4f ms)\n",
           fwd_too ? tf : 0., fwd_too ? fwd_bytes / tf / 1e6 : 0., tb, bwd_bytes / tb / 1e6, (int)v4, copy_ms);
    int per_sm = 0;
    auto variant = [&](auto wmode) {
        constexpr int WM = decltype(wmode)::value;
        auto run = [&](auto v4c) {
            constexpr bool V4 = decltype(v4c)::value;
            auto bk = bwd_v<NJ, V4, WM, bf16, DY, DX>;
            auto fk = fwd_v<NJ, V4, WM, bf16, bf16>;
            CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, bk, 256, 0));
            const int blocks = std::min((int)CEIL_DIV(R, 8), std::max(per_sm, 1) * num_sms());
            int fper = 0;
            CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fper, fk, 256, 0));
            const int fblocks = WM == 2 ? std::min((int)CEIL_DIV(R, 8), std::max(fper, 1) * num_sms()) : (int)CEIL_DIV(R, 8);
            float *part = colpart((size_t)blocks * n);
            auto f = [&] { fk<<<fblocks, 256>>>(y, rstd, x, w, N, nh, n, ld, ld); };
            auto b = [&] {
                CUDA_CHECK(cudaMemcpyAsync(dx, dx0, cnt * sizeof(DX), cudaMemcpyDeviceToDevice));
                bk<<<blocks, 256>>>(dx, part, dy, x, w, rstd, N, nh, n, ld, ld);
                colsum_finish(dw, part, blocks, n, n, 0);
            };
            const double t1 = median_ms(f), t2 = median_ms(b) - copy_ms;
            CUDA_CHECK(cudaMemset(dw, 0, n * sizeof(float)));
            f(); b();
            CUDA_CHECK(cudaDeviceSynchronize());
            const bool okf = same_bytes(y, yr, cnt * sizeof(bf16)), okb = same_bytes(dx, dxr, cnt * sizeof(DX)) &&
                                                                          same_bytes(dw, dwr, n * sizeof(float));
            printf("  w mode %d       fwd %.4f ms (%4.0f GB/s) %s   bwd %.4f ms (%4.0f GB/s) %s   (bwd %d blocks an SM, fwd %d)\n", WM,
                   fwd_too ? t1 : 0., fwd_too ? fwd_bytes / t1 / 1e6 : 0., okf ? "same bits" : "DIFFERS", t2,
                   bwd_bytes / t2 / 1e6, okb ? "same bits" : "DIFFERS", per_sm, fper);
        };
        if (v4) run(std::true_type()); else run(std::false_type());
    };
    variant(std::integral_constant<int, 0>());
    variant(std::integral_constant<int, 1>());
    variant(std::integral_constant<int, 2>());
    if (nh == 1 && n % 128 == 0 && n / 4 <= 256 && v4) { // block per row (another sum order: checked to 1e-2 relative)
        auto bk = bwd_row_block<bf16, DY, DX>;
        for (int per : {4, 8, 16}) {
            int maxb = 0;
            CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&maxb, bk, n / 4, 0));
            const int blocks = std::min((int)R, std::min(per, maxb) * num_sms());
            float *part = colpart((size_t)blocks * n);
            auto b = [&] {
                CUDA_CHECK(cudaMemcpyAsync(dx, dx0, cnt * sizeof(DX), cudaMemcpyDeviceToDevice));
                bk<<<blocks, n / 4>>>(dx, part, dy, x, w, rstd, (int)R, n);
                colsum_finish(dw, part, blocks, n, n, 0);
            };
            const double t2 = median_ms(b) - copy_ms;
            CUDA_CHECK(cudaMemset(dw, 0, n * sizeof(float)));
            b();
            CUDA_CHECK(cudaDeviceSynchronize());
            std::vector<DX> h1(cnt), h2(cnt);
            std::vector<float> w1(n), w2(n);
            CUDA_CHECK(cudaMemcpy(h1.data(), dx, cnt * sizeof(DX), cudaMemcpyDeviceToHost));
            CUDA_CHECK(cudaMemcpy(h2.data(), dxr, cnt * sizeof(DX), cudaMemcpyDeviceToHost));
            CUDA_CHECK(cudaMemcpy(w1.data(), dw, n * sizeof(float), cudaMemcpyDeviceToHost));
            CUDA_CHECK(cudaMemcpy(w2.data(), dwr, n * sizeof(float), cudaMemcpyDeviceToHost));
            double e = 0, m = 0, ew = 0, mw = 0;
            for (size_t i = 0; i < cnt; i++) { double a = (float)h1[i], b2 = (float)h2[i]; e = fmax(e, fabs(a - b2)); m = fmax(m, fabs(b2)); }
            for (int i = 0; i < n; i++) { ew = fmax(ew, fabs(w1[i] - w2[i])); mw = fmax(mw, fabs(w2[i])); }
            printf("  block per row  bwd %.4f ms (%4.0f GB/s), %d blocks an SM (of %d): dx max diff %.2e of %.2e, dw %.2e of %.2e %s\n",
                   t2, bwd_bytes / t2 / 1e6, std::min(per, maxb), maxb, e, m, ew, mw, e <= 1e-2 * m && ew <= 1e-3 * mw ? "ok" : "DIFFERS");
        }
    }
    for (void *p : std::initializer_list<void *>{x, dy, dx0, dx, dxr, w, rstd, dw, dwr, y, yr}) CUDA_CHECK(cudaFree(p));
}

int main() {
    g_bf16 = 1; // the trainer's bf16 mode (with_mp reads it)
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s\n", prop.name);
    const int BT = 32768;
    bench_shape<32, bf16, bf16>("ln_mlp backward / block norm forward, D = 1024", BT, 1, 1024, 1024, true);
    bench_shape<32, float, bf16>("ln_mix backward, D = 1024", BT, 1, 1024, 1024, false);
    bench_shape<2, float, float>("the N layer's q/k norms, 12 heads of 64 (rows of 768)", BT, 12, 64, 768, true);
    return 0;
}
