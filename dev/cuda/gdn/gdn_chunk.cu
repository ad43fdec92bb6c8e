// gdn_chunk.cu -- masked Gated-DeltaNet op of NAtS-L (SPEC §5.4 forward, §6.1 backward, §6.4 router grad)
// in fp32 CUDA, chunked (C = 64) with the WY/UT representation of the delta rule.
//
// Build + run (device):  nvcc -O3 -arch=sm_90 -o gdn_chunk dev/cuda/gdn/gdn_chunk.cu && ./gdn_chunk
//   ./gdn_chunk test   -> correctness only;  ./gdn_chunk time -> timing only; no argument -> both.
// CPU emulation (no GPU, dev only, checks indexing/barriers of the same kernels):
//   g++ -O2 -std=c++17 -x c++ -DGDN_EMU -o gdn_emu dev/cuda/gdn/gdn_chunk.cu -lpthread && ./gdn_emu
//
// Algorithm (per batch b, head h, chunk c of 64 tokens, local index i = 0..63; see NOTES.md):
//   G_i = sum_{t<=i} g_t (within chunk), gam_i = exp(G_i), lam_i = exp(G_63 - G_i), Gam_ij = exp(G_i - G_j)
//   A   = strict_lower( diag(beta) (K K^T) .* Gam ),   T = (I + A)^{-1}
//   W   = T diag(beta gam) K,  U = T diag(beta) V
//   Vn  = U - W S0                      (S0 = committed state before the chunk; Vn_i = u_i of SPEC §5.4)
//   O   = s diag(gam) Q S0 + s (Q K^T .* Gam .* [i>=j]) Vn
//   S1  = gam_63 S0 + m K^T diag(lam) Vn   (= Dec S0 + m dS, dS = Z_last - Dec S0)
// Kernels: fwd = prep (per chunk: G, A, T, Pm, W, U) -> fwd_state (sequential over chunks, per value tile:
//   state[c], Vn) -> fwd_out.  bwd = prep -> bwd_local (Vn, s Pm^T dO) -> bwd_rhs (s Q^T diag(gam) dO) ->
//   bwd_state (reverse sequential: dS^end_c, dVn) -> bwd_vloop x3 (reductions over dv) -> bwd_final (dq, dk,
//   dbeta, dg, dA).  Equations for the backward: NOTES.md.
// Requirements: T % 64 == 0, dv % 32 == 0, dk in {32, 48, 64, 128}. 16-byte aligned pointers and ld % 4 == 0
//   take the cp.async path; anything else falls back to scalar copies (same results).
// Workspace: the op keeps one internal device slab (grown on demand, never freed; not thread safe):
//   floats = BHT*(1 + 4*64 + 4*dk + 2*dv + 1) + BH*Nc*(2*dk*dv + 1)  (~1.8 GB at B=8,T=4096,H=6,dk=128,dv=256).

#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <vector>
#include <algorithm>

#ifdef GDN_EMU
#include "emu.h"
#define LAUNCH(kern, grid, block, smem, st, ...) emu_launch(grid, block, smem, [=] { kern(__VA_ARGS__); })
#define DSMEM(name) float *name = emu_dsmem
#else
#include <cuda_runtime.h>
#define LAUNCH(kern, grid, block, smem, st, ...) kern<<<grid, block, smem, st>>>(__VA_ARGS__)
#define DSMEM(name) extern __shared__ __align__(128) float name##_raw[]; float *name = name##_raw
#endif

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, #x); exit(1); } } while (0)
#define CKL() CK(cudaGetLastError())

// ------------------------------------------------------------------------------------------------
// constants
#define CH 64      // chunk size C
#define NT 256     // threads per block
#define BV 32      // value-dim tile
// smem row strides: multiples of 4 floats (16-byte cp.async rows, wmma ldm rule), == 4 (mod 32) for DK=128
#define L64 68     // padded stride of 64-wide smem rows
#define LBV 36     // padded stride of BV-wide smem rows
#define PADK 4     // LDK = DK + PADK

// GDN_TF32: 0 = fp32 SIMT FMA matmuls (default), 1 = TF32 tensor cores (wmma), 3 = 3xTF32 (split hi/lo)
#ifndef GDN_TF32
#define GDN_TF32 0
#endif
#ifdef GDN_EMU
#undef GDN_TF32
#define GDN_TF32 0
#endif
#if GDN_TF32
#include <mma.h>
#include <type_traits>
#endif

struct GA {
    const float *q, *k, *v, *g, *beta, *m, *dout;
    float *o, *state;
    float *dq, *dk, *dv, *dg, *dbeta, *dA;
    int ldqk, ldv, B, T, H, dvd, Nc;
    int vec;  // all user tensors 16-byte aligned (rows and bases) -> 16B cp.async, else scalar copies
    float scale;
    // workspace
    float *Gc, *Tm, *Pm, *dPm, *dTV, *W, *dQ1, *dWm, *X, *U, *dVn, *dstate, *Rc, *sdot, *dbv;
};

// ------------------------------------------------------------------------------------------------
// async global->shared copies (cp.async, sm_80+). Each thread waits for its own groups; a
// __syncthreads() after the wait makes the data visible to the block.
__device__ __forceinline__ void cpa16(float *s, const float *g) {
#ifdef GDN_EMU
    memcpy(s, g, 16);
#else
    const unsigned sa = (unsigned)__cvta_generic_to_shared(s);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(g));
#endif
}
__device__ __forceinline__ void cpa_commit() {
#ifndef GDN_EMU
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N> __device__ __forceinline__ void cpa_wait() {
#ifndef GDN_EMU
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}
__device__ __forceinline__ void cpa_wait_dyn(int n) {  // n in {0,1,2}
    if (n <= 0) cpa_wait<0>(); else if (n == 1) cpa_wait<1>(); else cpa_wait<2>();
}
// dst[r*lds + c] = src[r*ldg + c], r < ROWS, c < COLS (COLS % 4 == 0)
template <int ROWS, int COLS>
__device__ __forceinline__ void ld_tile(float *dst, int lds, const float *src, size_t ldg, bool vec) {
    if (vec) {
        constexpr int C4 = COLS / 4;
#pragma unroll 1
        for (int idx = threadIdx.x; idx < ROWS * C4; idx += NT) {
            const int r = idx / C4, c = (idx % C4) * 4;
            cpa16(dst + r * lds + c, src + r * ldg + c);
        }
    } else {
        for (int idx = threadIdx.x; idx < ROWS * COLS; idx += NT) {
            const int r = idx / COLS, c = idx % COLS;
            dst[r * lds + c] = src[r * ldg + c];
        }
    }
}

// ------------------------------------------------------------------------------------------------
// block-level small matmul on shared memory:  C[M][N] = beta*C + alpha * diag(rs) op(A) op(B)
//   A: TA ? stored K x M (A[k*lda+i]) : stored M x K (A[i*lda+k])
//   B: TB ? stored N x K (B[j*ldb+k]) : stored K x N (B[k*ldb+j])
//   rs: optional row scale (nullptr = 1). beta == 0 -> C not read.
#if GDN_TF32 == 0
__host__ __device__ constexpr int mm_pick_rn(int N, int per) {
    return (N % 8 == 0 && (N / 8) * (N / 8) <= per) ? N / 8
         : (N % 16 == 0 && (N / 16) * (N / 16) <= per) ? N / 16
         : (N % 32 == 0) ? N / 32 : 1;
}
// load W consecutive floats from shared memory (16/8-byte vector loads when W allows; p aligned accordingly)
template <int W> __device__ __forceinline__ void lds_vec(float (&d)[W], const float *p) {
    if constexpr (W % 4 == 0) {
#pragma unroll
        for (int q = 0; q < W / 4; q++) { const float4 v = *reinterpret_cast<const float4 *>(p + 4 * q); d[4 * q] = v.x; d[4 * q + 1] = v.y; d[4 * q + 2] = v.z; d[4 * q + 3] = v.w; }
    } else if constexpr (W % 2 == 0) {
#pragma unroll
        for (int q = 0; q < W / 2; q++) { const float2 v = *reinterpret_cast<const float2 *>(p + 2 * q); d[2 * q] = v.x; d[2 * q + 1] = v.y; }
    } else {
#pragma unroll
        for (int q = 0; q < W; q++) d[q] = p[q];
    }
}
// SIMT: thread grid TR x TC (TR*TC == NT); each warp covers 4 (rows) x 8 (cols) threads. A thread owns RM rows
// and RN cols: rows are contiguous (tr*RM + r) when A is transposed (so one vector load along i), strided
// (tr + r*TR) otherwise (vector loads along k); cols contiguous (tc*RN + s) when B is not transposed, strided
// (tc + s*TC) otherwise. With row strides == 4 (mod 32) (or 20) every shared load is conflict-free.
// NOTE: the element->thread mapping depends on <M,N,TA,TB>: calls with different TA/TB on the same C need a barrier.
template <int M, int N, int K, bool TA, bool TB>
__device__ __forceinline__ void mm(float *__restrict__ C, int ldc, const float *__restrict__ A, int lda,
                                   const float *__restrict__ Bm, int ldb, float alpha, float beta, const float *rs = nullptr) {
    constexpr int per = (M * N) / NT;
    constexpr int RN = mm_pick_rn(N, per);
    constexpr int RM = per / RN;
    constexpr int TR = M / RM, TC = N / RN;
    static_assert((M * N) % NT == 0 && per % RN == 0 && M % RM == 0 && N % RN == 0 && K % 4 == 0, "mm tile");
    static_assert(TR * TC == NT && TR % 4 == 0 && TC % 8 == 0, "mm thread grid");
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    constexpr int WC = TC / 8;  // warps along columns
    const int tr = (w / WC) * 4 + (lane >> 3), tc = (w % WC) * 8 + (lane & 7);
    float acc[RM][RN];
#pragma unroll
    for (int r = 0; r < RM; r++)
#pragma unroll
        for (int s = 0; s < RN; s++) acc[r][s] = 0.f;
#pragma unroll 2
    for (int k0 = 0; k0 < K; k0 += 4) {
        float a[4][RM], b[4][RN];
        if constexpr (TA) {
#pragma unroll
            for (int kk = 0; kk < 4; kk++) lds_vec<RM>(a[kk], A + (k0 + kk) * lda + tr * RM);
        } else {
#pragma unroll
            for (int r = 0; r < RM; r++) {
                float t[4];
                lds_vec<4>(t, A + (tr + r * TR) * lda + k0);
#pragma unroll
                for (int kk = 0; kk < 4; kk++) a[kk][r] = t[kk];
            }
        }
        if constexpr (TB) {
#pragma unroll
            for (int s = 0; s < RN; s++) {
                float t[4];
                lds_vec<4>(t, Bm + (tc + s * TC) * ldb + k0);
#pragma unroll
                for (int kk = 0; kk < 4; kk++) b[kk][s] = t[kk];
            }
        } else {
#pragma unroll
            for (int kk = 0; kk < 4; kk++) lds_vec<RN>(b[kk], Bm + (k0 + kk) * ldb + tc * RN);
        }
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
#pragma unroll
            for (int r = 0; r < RM; r++)
#pragma unroll
                for (int s = 0; s < RN; s++) acc[r][s] = fmaf(a[kk][r], b[kk][s], acc[r][s]);
    }
#pragma unroll
    for (int r = 0; r < RM; r++) {
        const int i = TA ? tr * RM + r : tr + r * TR;
        const float al = rs ? alpha * rs[i] : alpha;
#pragma unroll
        for (int s = 0; s < RN; s++) {
            const int j = TB ? tc + s * TC : tc * RN + s;
            float *c = &C[i * ldc + j];
            *c = (beta == 0.f) ? al * acc[r][s] : fmaf(beta, *c, al * acc[r][s]);
        }
    }
}
#else
// tensor-core version: each warp owns 16x16 output tiles (mapping depends only on <M,N>).
template <int M, int N, int K, bool TA, bool TB>
__device__ __forceinline__ void mm(float *C, int ldc, const float *A, int lda, const float *Bm, int ldb, float alpha, float beta,
                                   const float *rs = nullptr) {
    using namespace nvcuda;
    static_assert(M % 16 == 0 && N % 16 == 0 && K % 8 == 0, "mm wmma shape");
    constexpr int TN = N / 16, NTILE = (M / 16) * TN;
    typedef typename std::conditional<TA, wmma::col_major, wmma::row_major>::type LA;
    typedef typename std::conditional<TB, wmma::col_major, wmma::row_major>::type LB;
    const int lane = threadIdx.x & 31;
    for (int t = threadIdx.x >> 5; t < NTILE; t += NT / 32) {
        const int i0 = (t / TN) * 16, j0 = (t % TN) * 16;
        wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
        wmma::fill_fragment(acc, 0.f);
#pragma unroll 2
        for (int k0 = 0; k0 < K; k0 += 8) {
            wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, LA> a;
            wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, LB> b;
            wmma::load_matrix_sync(a, TA ? A + k0 * lda + i0 : A + i0 * lda + k0, lda);
            wmma::load_matrix_sync(b, TB ? Bm + j0 * ldb + k0 : Bm + k0 * ldb + j0, ldb);
#if GDN_TF32 == 3
            wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, LA> alo;
            wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, LB> blo;
#pragma unroll
            for (int e = 0; e < a.num_elements; e++) {
                const float x = a.x[e], hi = wmma::__float_to_tf32(x);
                alo.x[e] = wmma::__float_to_tf32(x - hi); a.x[e] = hi;
            }
#pragma unroll
            for (int e = 0; e < b.num_elements; e++) {
                const float x = b.x[e], hi = wmma::__float_to_tf32(x);
                blo.x[e] = wmma::__float_to_tf32(x - hi); b.x[e] = hi;
            }
            wmma::mma_sync(acc, alo, b, acc);
            wmma::mma_sync(acc, a, blo, acc);
#else
#pragma unroll
            for (int e = 0; e < a.num_elements; e++) a.x[e] = wmma::__float_to_tf32(a.x[e]);
#pragma unroll
            for (int e = 0; e < b.num_elements; e++) b.x[e] = wmma::__float_to_tf32(b.x[e]);
#endif
            wmma::mma_sync(acc, a, b, acc);
        }
        float *pc = C + i0 * ldc + j0;
        if (rs) {  // row scale through memory: store AB, scale rows, then combine
            wmma::fragment<wmma::accumulator, 16, 16, 8, float> cf;
            if (beta != 0.f) wmma::load_matrix_sync(cf, pc, ldc, wmma::mem_row_major);
            __syncwarp();
            wmma::store_matrix_sync(pc, acc, ldc, wmma::mem_row_major);
            __syncwarp();
            for (int e = lane; e < 256; e += 32) pc[(e >> 4) * ldc + (e & 15)] *= alpha * rs[i0 + (e >> 4)];
            __syncwarp();
            if (beta != 0.f) {
                wmma::load_matrix_sync(acc, pc, ldc, wmma::mem_row_major);
#pragma unroll
                for (int e = 0; e < acc.num_elements; e++) acc.x[e] = fmaf(beta, cf.x[e], acc.x[e]);
                __syncwarp();
                wmma::store_matrix_sync(pc, acc, ldc, wmma::mem_row_major);
            }
        } else {
            if (beta != 0.f) {
                wmma::fragment<wmma::accumulator, 16, 16, 8, float> cf;
                wmma::load_matrix_sync(cf, pc, ldc, wmma::mem_row_major);
#pragma unroll
                for (int e = 0; e < acc.num_elements; e++) acc.x[e] = fmaf(beta, cf.x[e], alpha * acc.x[e]);
            } else {
#pragma unroll
                for (int e = 0; e < acc.num_elements; e++) acc.x[e] *= alpha;
            }
            wmma::store_matrix_sync(pc, acc, ldc, wmma::mem_row_major);
        }
        __syncwarp();
    }
}
#endif

__device__ __forceinline__ float mval_of(const GA &a, int b, int c, int h) {
    return a.m ? a.m[((size_t)(b * a.Nc + c) * a.H + h) * 2 + 1] : 1.f;
}

// ------------------------------------------------------------------------------------------------
// K1 prep (fwd and bwd): per chunk: G (cumsum), A, T = (I+A)^-1, Pm = QK^T.*Gam.*[i>=j], W, U.
// grid (Nc, H, B)
template <int DK>
__global__ void __launch_bounds__(NT) prep_kernel(GA a) {
    constexpr int LDK = DK + PADK;
    DSMEM(sm);
    float *Ks = sm, *Qs = Ks + CH * LDK, *As = Qs + CH * LDK, *Ts = As + CH * L64, *Gs = Ts + CH * L64, *bs = Gs + CH, *es = bs + CH;
    const int c = blockIdx.x, h = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
    const int H = a.H, T = a.T, dv = a.dvd, Nc = a.Nc, nvt = dv / BV;
    const size_t tok0 = (size_t)b * T + (size_t)c * CH;
    const size_t bh = (size_t)b * H + h;
    const size_t wrow0 = bh * T + (size_t)c * CH;  // row index into [BH,T,*] workspace
    const size_t cc = bh * Nc + c;                  // chunk index into [BH,Nc,*] workspace

    ld_tile<CH, DK>(Ks, LDK, a.k + tok0 * a.ldqk + (size_t)h * DK, a.ldqk, a.vec);
    ld_tile<CH, DK>(Qs, LDK, a.q + tok0 * a.ldqk + (size_t)h * DK, a.ldqk, a.vec);
    cpa_commit();
    if (tid < CH) { Gs[tid] = a.g[(tok0 + tid) * H + h]; bs[tid] = a.beta[(tok0 + tid) * H + h]; }
    cpa_wait<0>();
    __syncthreads();
    if (tid == 0) { float s = 0.f; for (int i = 0; i < CH; i++) { s += Gs[i]; Gs[i] = s; } }
    mm<CH, CH, DK, false, true>(As, L64, Ks, LDK, Ks, LDK, 1.f, 0.f);  // K K^T
    mm<CH, CH, DK, false, true>(Ts, L64, Qs, LDK, Ks, LDK, 1.f, 0.f);  // Q K^T
    __syncthreads();
    if (tid < CH) { es[tid] = expf(Gs[tid]); a.Gc[wrow0 + tid] = Gs[tid]; }
    for (int idx = tid; idx < CH * CH; idx += NT) {
        const int i = idx >> 6, j = idx & 63;
        const float d = (i >= j) ? expf(Gs[i] - Gs[j]) : 0.f;
        As[i * L64 + j] = (i > j) ? bs[i] * As[i * L64 + j] * d : 0.f;
        const float p = (i >= j) ? Ts[i * L64 + j] * d : 0.f;
        a.Pm[cc * CH * CH + idx] = p;
    }
    __syncthreads();
    for (int idx = tid; idx < CH * CH; idx += NT) { const int i = idx >> 6, j = idx & 63; Ts[i * L64 + j] = (i == j) ? 1.f : 0.f; }
    __syncthreads();
    // right-looking forward substitution: (I + A) T = I, A strictly lower. Step l: rows i > l, cols j <= l.
    {
        const int j = tid & 63, r0 = tid >> 6;
        for (int l = 0; l < CH - 1; l++) {
            if (j <= l) {
                const float tl = Ts[l * L64 + j];
                for (int i = l + 1 + r0; i < CH; i += NT / CH) Ts[i * L64 + j] -= As[i * L64 + l] * tl;
            }
            __syncthreads();
        }
    }
    for (int idx = tid; idx < CH * CH; idx += NT) a.Tm[cc * CH * CH + idx] = Ts[(idx >> 6) * L64 + (idx & 63)];
    for (int idx = tid; idx < CH * DK; idx += NT) { const int i = idx / DK, d = idx % DK; Ks[i * LDK + d] *= bs[i] * es[i]; }
    __syncthreads();
    mm<CH, DK, CH, false, false>(Qs, LDK, Ts, L64, Ks, LDK, 1.f, 0.f);  // W = T diag(beta gam) K
    __syncthreads();
    for (int idx = tid; idx < CH * DK; idx += NT) { const int i = idx / DK, d = idx % DK; a.W[(wrow0 + i) * DK + d] = Qs[i * LDK + d]; }
    for (int idx = tid; idx < CH * CH; idx += NT) { const int i = idx >> 6, j = idx & 63; Ts[i * L64 + j] *= bs[j]; }  // T diag(beta)
    __syncthreads();
    // U = T diag(beta) V over value tiles, double-buffered (buffers in the free Ks / Qs regions, U tile in As)
    const float *vsrc = a.v + tok0 * a.ldv + (size_t)h * dv;
    ld_tile<CH, BV>(Ks, LBV, vsrc, a.ldv, a.vec); cpa_commit();
    if (nvt > 1) { ld_tile<CH, BV>(Qs, LBV, vsrc + BV, a.ldv, a.vec); cpa_commit(); }
    for (int vt = 0; vt < nvt; vt++) {
        if (vt + 1 < nvt) cpa_wait<1>(); else cpa_wait<0>();
        __syncthreads();
        mm<CH, BV, CH, false, false>(As, LBV, Ts, L64, (vt & 1) ? Qs : Ks, LBV, 1.f, 0.f);
        __syncthreads();
        if (vt + 2 < nvt) { ld_tile<CH, BV>((vt & 1) ? Qs : Ks, LBV, vsrc + (vt + 2) * BV, a.ldv, a.vec); cpa_commit(); }
        for (int idx = tid; idx < CH * BV; idx += NT) {
            const int i = idx / BV, j = idx % BV;
            a.U[(wrow0 + i) * dv + vt * BV + j] = As[i * LBV + j];
        }
    }
}
template <int DK> constexpr size_t prep_smem() { return sizeof(float) * (2 * CH * (DK + PADK) + 2 * CH * L64 + 3 * CH); }

// ------------------------------------------------------------------------------------------------
// K2 forward state recurrence over chunks (sequential), one block per (value tile, h, b).
// Writes state[c] (committed state before chunk c) and Vn (over U). Loads of the next chunk overlap compute.
template <int DK>
__global__ void __launch_bounds__(NT) fwd_state_kernel(GA a) {
    constexpr int LDK = DK + PADK;
    DSMEM(sm);
    float *Ss = sm, *Ws = Ss + DK * LBV, *Ks = Ws + CH * LDK, *Ub0 = Ks + CH * LDK, *Gs = Ub0 + 2 * CH * LBV;
    const int v0 = blockIdx.x * BV, h = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
    const int H = a.H, T = a.T, dv = a.dvd, Nc = a.Nc;
    const size_t bh = (size_t)b * H + h;
    for (int idx = tid; idx < DK * BV; idx += NT) Ss[(idx / BV) * LBV + idx % BV] = 0.f;
    // prologue: W_0, U_0
    ld_tile<CH, DK>(Ws, LDK, a.W + (bh * T) * DK, DK, true);
    ld_tile<CH, BV>(Ub0, LBV, a.U + (bh * T) * dv + v0, dv, true);
    cpa_commit();
    float mv_next = mval_of(a, b, 0, h);
    for (int c = 0; c < Nc; c++) {
        const size_t tok0 = (size_t)b * T + (size_t)c * CH, wrow0 = bh * T + (size_t)c * CH;
        float *Ub = Ub0 + (c & 1) * CH * LBV;
        const float mv = mv_next;
        if (c + 1 < Nc) mv_next = mval_of(a, b, c + 1, h);
        ld_tile<CH, DK>(Ks, LDK, a.k + tok0 * a.ldqk + (size_t)h * DK, a.ldqk, a.vec);
        ld_tile<1, CH>(Gs, CH, a.Gc + wrow0, CH, true);
        cpa_commit();
        float *st = a.state + (bh * Nc + c) * DK * dv;
        for (int idx = tid; idx < DK * BV; idx += NT) { const int d = idx / BV, j = idx % BV; st[(size_t)d * dv + v0 + j] = Ss[d * LBV + j]; }
        cpa_wait<1>();
        __syncthreads();
        mm<CH, BV, DK, false, false>(Ub, LBV, Ws, LDK, Ss, LBV, -1.f, 1.f);  // Vn = U - W S
        __syncthreads();
        if (c + 1 < Nc) {
            ld_tile<CH, DK>(Ws, LDK, a.W + (wrow0 + CH) * DK, DK, true);
            ld_tile<CH, BV>(Ub0 + ((c + 1) & 1) * CH * LBV, LBV, a.U + (wrow0 + CH) * dv + v0, dv, true);
            cpa_commit();
        }
        for (int idx = tid; idx < CH * BV; idx += NT) { const int i = idx / BV, j = idx % BV; a.U[(wrow0 + i) * dv + v0 + j] = Ub[i * LBV + j]; }
        if (c + 1 < Nc) cpa_wait<1>(); else cpa_wait<0>();
        __syncthreads();
        const float GL = Gs[CH - 1];
        for (int idx = tid; idx < CH * DK; idx += NT) { const int i = idx / DK, d = idx % DK; Ks[i * LDK + d] *= mv * expf(GL - Gs[i]); }
        __syncthreads();
        mm<DK, BV, CH, true, false>(Ss, LBV, Ks, LDK, Ub, LBV, 1.f, expf(GL));  // S = gam_L S + m K^T diag(lam) Vn
        __syncthreads();
    }
}
template <int DK> constexpr size_t fwd_state_smem() { return sizeof(float) * (DK * LBV + 2 * CH * (DK + PADK) + 2 * CH * LBV + CH); }

// ------------------------------------------------------------------------------------------------
// K3 forward output, grid (dv/BV, Nc, B*H):  O = s diag(gam) Q S0 + s Pm Vn
template <int DK>
__global__ void __launch_bounds__(NT) fwd_out_kernel(GA a) {
    constexpr int LDK = DK + PADK;
    DSMEM(sm);
    float *Qs = sm, *S0 = Qs + CH * LDK, *Ps = S0 + DK * LBV, *Vs = Ps + CH * L64, *Os = Vs + CH * LBV, *es = Os + CH * LBV;
    const int v0 = blockIdx.x * BV, c = blockIdx.y, tid = threadIdx.x;
    const int H = a.H, T = a.T, dv = a.dvd, Nc = a.Nc;
    const int bh = blockIdx.z, b = bh / H, h = bh % H;
    const size_t tok0 = (size_t)b * T + (size_t)c * CH, wrow0 = (size_t)bh * T + (size_t)c * CH, cc = (size_t)bh * Nc + c;
    ld_tile<CH, DK>(Qs, LDK, a.q + tok0 * a.ldqk + (size_t)h * DK, a.ldqk, a.vec);
    ld_tile<DK, BV>(S0, LBV, a.state + cc * DK * dv + v0, dv, a.vec);
    ld_tile<CH, CH>(Ps, L64, a.Pm + cc * CH * CH, CH, true);
    ld_tile<CH, BV>(Vs, LBV, a.U + wrow0 * dv + v0, dv, true);
    cpa_commit();
    if (tid < CH) es[tid] = expf(a.Gc[wrow0 + tid]);
    cpa_wait<0>();
    __syncthreads();
    mm<CH, BV, DK, false, false>(Os, LBV, Qs, LDK, S0, LBV, a.scale, 0.f, es);
    mm<CH, BV, CH, false, false>(Os, LBV, Ps, L64, Vs, LBV, a.scale, 1.f);
    __syncthreads();
    for (int idx = tid; idx < CH * BV; idx += NT) {
        const int i = idx / BV, j = idx % BV;
        a.o[(tok0 + i) * (size_t)(H * dv) + (size_t)h * dv + v0 + j] = Os[i * LBV + j];
    }
}
template <int DK> constexpr size_t fwd_out_smem() { return sizeof(float) * (CH * (DK + PADK) + DK * LBV + CH * L64 + 2 * CH * LBV + CH); }

// ------------------------------------------------------------------------------------------------
// B1 backward local, grid (dv/BV, Nc, B*H): Vn = U - W S0 (over U), dVn_local = s Pm^T dO
template <int DK>
__global__ void __launch_bounds__(NT) bwd_local_kernel(GA a) {
    constexpr int LDK = DK + PADK;
    DSMEM(sm);
    float *Ws = sm, *S0 = Ws + CH * LDK, *Ps = S0 + DK * LBV, *Vs = Ps + CH * L64, *dOs = Vs + CH * LBV, *dVs = dOs + CH * LBV;
    const int v0 = blockIdx.x * BV, c = blockIdx.y;
    const int H = a.H, T = a.T, dv = a.dvd, Nc = a.Nc;
    const int bh = blockIdx.z, b = bh / H, h = bh % H;
    const size_t tok0 = (size_t)b * T + (size_t)c * CH, wrow0 = (size_t)bh * T + (size_t)c * CH, cc = (size_t)bh * Nc + c;
    ld_tile<CH, DK>(Ws, LDK, a.W + wrow0 * DK, DK, true);
    ld_tile<DK, BV>(S0, LBV, a.state + cc * DK * dv + v0, dv, a.vec);
    ld_tile<CH, CH>(Ps, L64, a.Pm + cc * CH * CH, CH, true);
    ld_tile<CH, BV>(Vs, LBV, a.U + wrow0 * dv + v0, dv, true);
    ld_tile<CH, BV>(dOs, LBV, a.dout + tok0 * (size_t)(H * dv) + (size_t)h * dv + v0, (size_t)H * dv, a.vec);
    cpa_commit();
    cpa_wait<0>();
    __syncthreads();
    mm<CH, BV, DK, false, false>(Vs, LBV, Ws, LDK, S0, LBV, -1.f, 1.f);
    mm<CH, BV, CH, true, false>(dVs, LBV, Ps, L64, dOs, LBV, a.scale, 0.f);
    __syncthreads();
    for (int idx = threadIdx.x; idx < CH * BV; idx += NT) {
        const int i = idx / BV, j = idx % BV;
        a.U[(wrow0 + i) * dv + v0 + j] = Vs[i * LBV + j];
        a.dVn[(wrow0 + i) * dv + v0 + j] = dVs[i * LBV + j];
    }
}
template <int DK> constexpr size_t bwd_local_smem() { return sizeof(float) * (CH * (DK + PADK) + DK * LBV + CH * L64 + 3 * CH * LBV); }

// ------------------------------------------------------------------------------------------------
// B1b rhs of the dS recurrence, grid (dv/BV, Nc, B*H): R_c = s Q^T diag(gam) dO (DK x dv) -> workspace Rc.
template <int DK>
__global__ void __launch_bounds__(NT) bwd_rhs_kernel(GA a) {
    constexpr int LDK = DK + PADK;
    DSMEM(sm);
    float *Qs = sm, *dOs = Qs + CH * LDK, *Rs = dOs + CH * LBV, *es = Rs + DK * LBV;
    const int v0 = blockIdx.x * BV, c = blockIdx.y, tid = threadIdx.x;
    const int H = a.H, T = a.T, dv = a.dvd, Nc = a.Nc;
    const int bh = blockIdx.z, b = bh / H, h = bh % H;
    const size_t tok0 = (size_t)b * T + (size_t)c * CH, wrow0 = (size_t)bh * T + (size_t)c * CH, cc = (size_t)bh * Nc + c;
    ld_tile<CH, DK>(Qs, LDK, a.q + tok0 * a.ldqk + (size_t)h * DK, a.ldqk, a.vec);
    ld_tile<CH, BV>(dOs, LBV, a.dout + tok0 * (size_t)(H * dv) + (size_t)h * dv + v0, (size_t)H * dv, a.vec);
    cpa_commit();
    if (tid < CH) es[tid] = a.scale * expf(a.Gc[wrow0 + tid]);
    cpa_wait<0>();
    __syncthreads();
    for (int idx = tid; idx < CH * BV; idx += NT) { const int i = idx / BV, j = idx % BV; dOs[i * LBV + j] *= es[i]; }
    __syncthreads();
    mm<DK, BV, CH, true, false>(Rs, LBV, Qs, LDK, dOs, LBV, 1.f, 0.f);
    __syncthreads();
    float *dst = a.Rc + cc * DK * dv;
    for (int idx = tid; idx < DK * BV; idx += NT) { const int d = idx / BV, j = idx % BV; dst[(size_t)d * dv + v0 + j] = Rs[d * LBV + j]; }
}
template <int DK> constexpr size_t bwd_rhs_smem() { return sizeof(float) * (CH * (DK + PADK) + CH * LBV + DK * LBV + CH); }

// ------------------------------------------------------------------------------------------------
// B2 backward state recurrence (reverse, sequential), grid (dv/BV, H, B).
//   dstate[c] = dS^end_c;  dVn += m diag(lam) K dS;  dS <- gam_L dS - W^T dVn + R_c
// Prefetch: K_{c-1}, G_{c-1}, dVn_{c-1} issued after mm1 of c; W_{c-1} after mm2 of c; R_c prefetched to L2
// after mm1, added after mm2.
template <int DK>
__global__ void __launch_bounds__(NT, 2) bwd_state_kernel(GA a) {
    constexpr int LDK = DK + PADK;
    constexpr int EPT = DK * BV / NT;  // elements of the dS tile per thread (elementwise mapping)
    static_assert((DK * BV) % NT == 0, "EPT");
    DSMEM(sm);
    float *dSs = sm, *Ks = dSs + DK * LBV, *Ws = Ks + CH * LDK, *dV0 = Ws + CH * LDK, *G0 = dV0 + 2 * CH * LBV;
    const int v0 = blockIdx.x * BV, h = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
    const int H = a.H, T = a.T, dv = a.dvd, Nc = a.Nc;
    const size_t bh = (size_t)b * H + h;
    for (int idx = tid; idx < DK * BV; idx += NT) dSs[(idx / BV) * LBV + idx % BV] = 0.f;
    auto issue_k = [&](int c) {
        const size_t tok0 = (size_t)b * T + (size_t)c * CH, wrow0 = bh * T + (size_t)c * CH;
        ld_tile<CH, DK>(Ks, LDK, a.k + tok0 * a.ldqk + (size_t)h * DK, a.ldqk, a.vec);
        ld_tile<1, CH>(G0 + (c & 1) * CH, CH, a.Gc + wrow0, CH, true);
        cpa_commit();
        ld_tile<CH, BV>(dV0 + (c & 1) * CH * LBV, LBV, a.dVn + wrow0 * dv + v0, dv, true);
        cpa_commit();
    };
    auto issue_w = [&](int c) {
        ld_tile<CH, DK>(Ws, LDK, a.W + (bh * T + (size_t)c * CH) * DK, DK, true);
        cpa_commit();
    };
    issue_k(Nc - 1);
    issue_w(Nc - 1);
    float mv_next = mval_of(a, b, Nc - 1, h);
    for (int c = Nc - 1; c >= 0; c--) {
        const size_t wrow0 = bh * T + (size_t)c * CH;
        float *dVb = dV0 + (c & 1) * CH * LBV, *Gs = G0 + (c & 1) * CH;
        const float mv = mv_next;
        if (c > 0) mv_next = mval_of(a, b, c - 1, h);
        float *dst = a.dstate + (bh * Nc + c) * DK * dv + v0;
        const float *rsrc = a.Rc + (bh * Nc + c) * DK * dv + v0;
        for (int idx = tid; idx < DK * BV; idx += NT) { const int d = idx / BV, j = idx % BV; dst[(size_t)d * dv + j] = dSs[d * LBV + j]; }
        cpa_wait<1>();  // K, G, dVn of chunk c
        __syncthreads();
        const float GL = Gs[CH - 1];
        for (int idx = tid; idx < CH * DK; idx += NT) { const int i = idx / DK, d = idx % DK; Ks[i * LDK + d] *= mv * expf(GL - Gs[i]); }
        __syncthreads();
        mm<CH, BV, DK, false, false>(dVb, LBV, Ks, LDK, dSs, LBV, 1.f, 1.f);
        __syncthreads();
        if (c > 0) issue_k(c - 1);
#ifndef GDN_EMU
        if (tid < DK) asm volatile("prefetch.global.L2 [%0];" ::"l"(rsrc + (size_t)tid * dv));  // R_c rows (BV*4 = 128 B each)
#endif
        for (int idx = tid; idx < CH * BV; idx += NT) { const int i = idx / BV, j = idx % BV; a.dVn[(wrow0 + i) * dv + v0 + j] = dVb[i * LBV + j]; }
        if (c > 0) cpa_wait<2>(); else cpa_wait<0>();  // W of chunk c
        __syncthreads();
        mm<DK, BV, CH, true, false>(dSs, LBV, Ws, LDK, dVb, LBV, -1.f, expf(GL));
        __syncthreads();
#pragma unroll
        for (int k = 0; k < EPT; k++) { const int e = tid + k * NT; dSs[(e / BV) * LBV + e % BV] += rsrc[(size_t)(e / BV) * dv + e % BV]; }
        if (c > 0) issue_w(c - 1);
    }
}
template <int DK> constexpr size_t bwd_state_smem() { return sizeof(float) * (DK * LBV + 2 * CH * (DK + PADK) + 2 * CH * LBV + 2 * CH); }

// ------------------------------------------------------------------------------------------------
// B3 loops over the value dim, grid (Nc, B*H). PART 0: dQ1 = dO S0^T, dPm = s dO Vn^T
// PART 1: dWm = dVn S0^T, dTV = dVn V^T diag(beta), dv = diag(beta) T^T dVn, dbv = rowdot(V, T^T dVn)
// PART 2: X = diag(lam) Vn dSe^T, sdot = <dSe, S0>
template <int DK, int PART>
__global__ void __launch_bounds__(NT) bwd_vloop_kernel(GA a) {
    constexpr int LDK = DK + PADK;
    DSMEM(sm);
    const int c = blockIdx.x, tid = threadIdx.x;
    const int H = a.H, T = a.T, dv = a.dvd, Nc = a.Nc;
    const int bh = blockIdx.y, b = bh / H, h = bh % H;
    const size_t tok0 = (size_t)b * T + (size_t)c * CH, wrow0 = (size_t)bh * T + (size_t)c * CH, cc = (size_t)bh * Nc + c;
    const float *st = a.state + cc * DK * dv;
    float *accA = sm, *accB = accA + CH * LDK;
    float *S0s = (PART == 2) ? accB : accB + CH * L64;  // PART2 has no accB
    float *R1 = S0s + DK * LBV;                           // PART2 only
    float *R2 = (PART == 2) ? R1 + DK * LBV : R1;
    // PART0: T1 = dO tile, T2 = Vn tile
    // PART1: T1 = dVn tile, T2 = V tile, T3 = Y tile, then Ts (CH*L64), then bsm[64], dbvs[64]
    // PART2: R1 = dSe tile, T1 = Vn tile, then red[NT]
    float *T1 = R2, *T2 = R2 + CH * LBV, *T3 = R2 + 2 * CH * LBV, *Ts = R2 + 3 * CH * LBV, *bsm = Ts + CH * L64, *dbvs = bsm + CH;
    float *red = R2 + CH * LBV;
    float part = 0.f;
    if (PART == 1) {
        ld_tile<CH, CH>(Ts, L64, a.Tm + cc * CH * CH, CH, true);
        if (tid < CH) { bsm[tid] = a.beta[(tok0 + tid) * H + h]; dbvs[tid] = 0.f; }
    }
    const size_t ldo = (size_t)H * dv;
    for (int v0 = 0; v0 < dv; v0 += BV) {
        const float bb = v0 ? 1.f : 0.f;
        ld_tile<DK, BV>(S0s, LBV, st + v0, dv, a.vec);
        if (PART == 0) {
            ld_tile<CH, BV>(T1, LBV, a.dout + tok0 * ldo + (size_t)h * dv + v0, ldo, a.vec);
            ld_tile<CH, BV>(T2, LBV, a.U + wrow0 * dv + v0, dv, true);
        } else if (PART == 1) {
            ld_tile<CH, BV>(T1, LBV, a.dVn + wrow0 * dv + v0, dv, true);
            ld_tile<CH, BV>(T2, LBV, a.v + tok0 * a.ldv + (size_t)h * dv + v0, a.ldv, a.vec);
        } else {
            ld_tile<DK, BV>(R1, LBV, a.dstate + cc * DK * dv + v0, dv, true);
            ld_tile<CH, BV>(T1, LBV, a.U + wrow0 * dv + v0, dv, true);
        }
        cpa_commit();
        cpa_wait<0>();
        __syncthreads();
        if (PART == 0) {
            mm<CH, DK, BV, false, true>(accA, LDK, T1, LBV, S0s, LBV, 1.f, bb);
            mm<CH, CH, BV, false, true>(accB, L64, T1, LBV, T2, LBV, a.scale, bb);
        } else if (PART == 1) {
            mm<CH, DK, BV, false, true>(accA, LDK, T1, LBV, S0s, LBV, 1.f, bb);
            mm<CH, CH, BV, false, true>(accB, L64, T1, LBV, T2, LBV, 1.f, bb);
            mm<CH, BV, CH, true, false>(T3, LBV, Ts, L64, T1, LBV, 1.f, 0.f);
        } else {
            mm<CH, DK, BV, false, true>(accA, LDK, T1, LBV, R1, LBV, 1.f, bb);
            for (int idx = tid; idx < DK * BV; idx += NT) part += S0s[(idx / BV) * LBV + idx % BV] * R1[(idx / BV) * LBV + idx % BV];
        }
        __syncthreads();
        if (PART == 1) {
            for (int idx = tid; idx < CH * BV; idx += NT) {
                const int i = idx / BV, j = idx % BV;
                a.dv[(tok0 + i) * a.ldv + (size_t)h * dv + v0 + j] = bsm[i] * T3[i * LBV + j];
            }
            if (tid < CH) {
                float s = 0.f;
                for (int j = 0; j < BV; j++) s += T2[tid * LBV + j] * T3[tid * LBV + j];
                dbvs[tid] += s;
            }
            __syncthreads();
        }
    }
    if (PART == 0) {
        for (int idx = tid; idx < CH * DK; idx += NT) a.dQ1[(wrow0 + idx / DK) * DK + idx % DK] = accA[(idx / DK) * LDK + idx % DK];
        for (int idx = tid; idx < CH * CH; idx += NT) a.dPm[cc * CH * CH + idx] = accB[(idx >> 6) * L64 + (idx & 63)];
    } else if (PART == 1) {
        for (int idx = tid; idx < CH * DK; idx += NT) a.dWm[(wrow0 + idx / DK) * DK + idx % DK] = accA[(idx / DK) * LDK + idx % DK];
        for (int idx = tid; idx < CH * CH; idx += NT) a.dTV[cc * CH * CH + idx] = accB[(idx >> 6) * L64 + (idx & 63)] * bsm[idx & 63];
        if (tid < CH) a.dbv[wrow0 + tid] = dbvs[tid];
    } else {
        const float GL = a.Gc[wrow0 + CH - 1];
        for (int idx = tid; idx < CH * DK; idx += NT) {
            const int i = idx / DK, d = idx % DK;
            a.X[(wrow0 + i) * DK + d] = accA[i * LDK + d] * expf(GL - a.Gc[wrow0 + i]);
        }
        red[tid] = part;
        __syncthreads();
        if (tid == 0) { float s = 0.f; for (int i = 0; i < NT; i++) s += red[i]; a.sdot[cc] = s; }
    }
}
template <int DK, int PART> constexpr size_t bwd_vloop_smem() {
    return sizeof(float) * (CH * (DK + PADK) + DK * LBV +
                            (PART == 0 ? CH * L64 + 2 * CH * LBV : PART == 1 ? CH * L64 + 3 * CH * LBV + CH * L64 + 2 * CH : DK * LBV + CH * LBV + NT));
}

// ------------------------------------------------------------------------------------------------
// B4 final per-chunk gradients, grid (Nc, B*H): dq, dk, dbeta, dg, dA.
template <int DK>
__global__ void __launch_bounds__(NT) bwd_final_kernel(GA a) {
    constexpr int LDK = DK + PADK;
    DSMEM(sm);
    float *Qs = sm, *Ks = Qs + CH * LDK, *D1 = Ks + CH * LDK, *D2 = D1 + CH * LDK;
    float *M1 = D2 + CH * LDK, *M2 = M1 + CH * L64, *M3 = M2 + CH * L64, *M4 = M3 + CH * L64;
    float *Gs = M4 + CH * L64, *es = Gs + CH, *bs = es + CH, *dG = bs + CH, *dB = dG + CH, *red = dB + CH;
    const int c = blockIdx.x, tid = threadIdx.x;
    const int H = a.H, T = a.T, Nc = a.Nc;
    const int bh = blockIdx.y, b = bh / H, h = bh % H;
    const size_t tok0 = (size_t)b * T + (size_t)c * CH, wrow0 = (size_t)bh * T + (size_t)c * CH, cc = (size_t)bh * Nc + c;
    const float mv = mval_of(a, b, c, h);
    const float scale = a.scale;

    ld_tile<CH, DK>(Qs, LDK, a.q + tok0 * a.ldqk + (size_t)h * DK, a.ldqk, a.vec);
    ld_tile<CH, DK>(Ks, LDK, a.k + tok0 * a.ldqk + (size_t)h * DK, a.ldqk, a.vec);
    ld_tile<CH, DK>(D1, LDK, a.dQ1 + wrow0 * DK, DK, true);
    ld_tile<CH, DK>(D2, LDK, a.X + wrow0 * DK, DK, true);
    ld_tile<CH, CH>(M1, L64, a.Tm + cc * CH * CH, CH, true);
    ld_tile<CH, CH>(M2, L64, a.Pm + cc * CH * CH, CH, true);
    ld_tile<CH, CH>(M3, L64, a.dPm + cc * CH * CH, CH, true);
    ld_tile<CH, CH>(M4, L64, a.dTV + cc * CH * CH, CH, true);
    ld_tile<1, CH>(Gs, CH, a.Gc + wrow0, CH, true);
    cpa_commit();
    if (tid < CH) { bs[tid] = a.beta[(tok0 + tid) * H + h]; dG[tid] = 0.f; dB[tid] = a.dbv[wrow0 + tid]; }
    const float sdot = a.sdot[cc];
    cpa_wait<0>();
    __syncthreads();
    // E = dPm .* Pm (-> dG) in M2, dPmm = dPm .* Gam .* [i>=j] in M3; xk_j = k_j . X_j
    for (int idx = tid; idx < CH * CH; idx += NT) {
        const int i = idx >> 6, j = idx & 63, o = i * L64 + j;
        const float dp = M3[o];
        M2[o] = dp * M2[o];
        M3[o] = (i >= j) ? dp * expf(Gs[i] - Gs[j]) : 0.f;
    }
    if (tid < CH) {
        es[tid] = expf(Gs[tid]);
        float xk = 0.f;
        for (int d = 0; d < DK; d++) xk += Ks[tid * LDK + d] * D2[tid * LDK + d];
        red[tid] = xk;
    }
    __syncthreads();
    if (tid < CH) {
        float rs = 0.f, cs = 0.f, qd = 0.f;
        for (int j = 0; j < CH; j++) { rs += M2[tid * L64 + j]; cs += M2[j * L64 + tid]; }
        for (int d = 0; d < DK; d++) qd += Qs[tid * LDK + d] * D1[tid * LDK + d];
        dG[tid] += rs - cs + scale * es[tid] * qd - mv * red[tid];
    }
    __syncthreads();
    for (int idx = tid; idx < CH * DK; idx += NT) {
        const int i = idx / DK, d = idx % DK;
        D1[i * LDK + d] *= scale * es[i];
        D2[i * LDK + d] *= mv;
    }
    if (tid == 0) {
        float s = 0.f;
        for (int j = 0; j < CH; j++) s += red[j];
        dG[CH - 1] += mv * s + es[CH - 1] * sdot;
        if (a.dA) a.dA[((size_t)(b * Nc + c) * H + h) * 2 + 1] = (mv != 0.f) ? s : 0.f;
    }
    __syncthreads();
    mm<CH, DK, CH, false, false>(D1, LDK, M3, L64, Ks, LDK, 1.f, 1.f);  // dQ
    mm<CH, DK, CH, true, false>(D2, LDK, M3, L64, Qs, LDK, 1.f, 1.f);   // dK = m X + dPmm^T Q
    mm<CH, CH, DK, false, true>(M2, L64, Ks, LDK, Ks, LDK, 1.f, 0.f);   // KK^T
    __syncthreads();
    for (int idx = tid; idx < CH * DK; idx += NT) {
        const int i = idx / DK, d = idx % DK;
        a.dq[(tok0 + i) * a.ldqk + (size_t)h * DK + d] = D1[i * LDK + d];
    }
    __syncthreads();
    ld_tile<CH, DK>(D1, LDK, a.dWm + wrow0 * DK, DK, true);  // dW = -D1
    cpa_commit();
    cpa_wait<0>();
    __syncthreads();
    mm<CH, DK, CH, true, false>(Qs, LDK, M1, L64, D1, LDK, -1.f, 0.f);  // R = T^T dW
    __syncthreads();
    if (tid < CH) {
        float kr = 0.f;
        for (int d = 0; d < DK; d++) kr += Ks[tid * LDK + d] * Qs[tid * LDK + d];
        dB[tid] += es[tid] * kr;
        dG[tid] += bs[tid] * es[tid] * kr;
    }
    for (int idx = tid; idx < CH * DK; idx += NT) { const int i = idx / DK, d = idx % DK; D2[i * LDK + d] += bs[i] * es[i] * Qs[i * LDK + d]; }
    __syncthreads();
    for (int idx = tid; idx < CH * DK; idx += NT) { const int i = idx / DK, d = idx % DK; Qs[i * LDK + d] = bs[i] * es[i] * Ks[i * LDK + d]; }
    __syncthreads();
    mm<CH, CH, DK, false, true>(M4, L64, D1, LDK, Qs, LDK, -1.f, 1.f);  // dT = dTV + dW Kb^T
    __syncthreads();
    mm<CH, CH, CH, false, true>(M3, L64, M4, L64, M1, L64, 1.f, 0.f);  // dT T^T
    __syncthreads();
    mm<CH, CH, CH, true, false>(M4, L64, M1, L64, M3, L64, -1.f, 0.f);  // dA = -T^T dT T^T
    __syncthreads();
    for (int idx = tid; idx < CH * CH; idx += NT) {
        const int i = idx >> 6, j = idx & 63, o = i * L64 + j;
        if (i > j) {
            const float gm = expf(Gs[i] - Gs[j]), da = M4[o];
            M2[o] = da * gm * M2[o];
            M3[o] = da * bs[i] * gm;
        } else { M2[o] = 0.f; M3[o] = 0.f; }
    }
    __syncthreads();
    if (tid < CH) {
        float rs = 0.f, cs = 0.f;
        for (int j = 0; j < CH; j++) { rs += M2[tid * L64 + j]; cs += bs[j] * M2[j * L64 + tid]; }
        dB[tid] += rs;
        dG[tid] += bs[tid] * rs - cs;
    }
    mm<CH, DK, CH, false, false>(D2, LDK, M3, L64, Ks, LDK, 1.f, 1.f);
    __syncthreads();  // different TA -> different element mapping on D2
    mm<CH, DK, CH, true, false>(D2, LDK, M3, L64, Ks, LDK, 1.f, 1.f);
    __syncthreads();
    for (int idx = tid; idx < CH * DK; idx += NT) {
        const int i = idx / DK, d = idx % DK;
        a.dk[(tok0 + i) * a.ldqk + (size_t)h * DK + d] = D2[i * LDK + d];
    }
    if (tid == 0) {
        float s = 0.f;
        for (int i = CH - 1; i >= 0; i--) { s += dG[i]; a.dg[(tok0 + i) * H + h] = s; }
    }
    if (tid < CH) a.dbeta[(tok0 + tid) * H + h] = dB[tid];
}
template <int DK> constexpr size_t bwd_final_smem() { return sizeof(float) * (4 * CH * (DK + PADK) + 4 * CH * L64 + 6 * CH); }

// ------------------------------------------------------------------------------------------------
// host side
static float *g_ws = nullptr;
static size_t g_ws_cap = 0;

static GA make_ga(int B, int T, int H, int dk, int dv) {
    if (T % CH != 0) { fprintf(stderr, "gdn_op: T=%d must be a multiple of %d\n", T, CH); exit(1); }
    if (dv % BV != 0) { fprintf(stderr, "gdn_op: dv=%d must be a multiple of %d\n", dv, BV); exit(1); }
    GA a;
    memset(&a, 0, sizeof(a));
    a.B = B; a.T = T; a.H = H; a.dvd = dv; a.Nc = T / CH;
    a.scale = 1.f / sqrtf((float)dk);
    const size_t BH = (size_t)B * H, BT = BH * T, Nc = a.Nc;
    size_t need = BT /*Gc*/ + 4 * BT * CH /*Tm,Pm,dPm,dTV*/ + 4 * BT * dk /*W,dQ1,dWm,X*/ + 2 * BT * dv /*U,dVn*/ +
                  2 * BH * Nc * dk * dv /*dstate, Rc*/ + BH * Nc /*sdot*/ + BT /*dbv*/;
    if (need > g_ws_cap) {
        if (g_ws) CK(cudaFree(g_ws));
        CK(cudaMalloc(&g_ws, need * sizeof(float)));
        g_ws_cap = need;
    }
    float *p = g_ws;
    a.Gc = p; p += BT;
    a.Tm = p; p += BT * CH; a.Pm = p; p += BT * CH; a.dPm = p; p += BT * CH; a.dTV = p; p += BT * CH;
    a.W = p; p += BT * dk; a.dQ1 = p; p += BT * dk; a.dWm = p; p += BT * dk; a.X = p; p += BT * dk;
    a.U = p; p += BT * dv; a.dVn = p; p += BT * dv;
    a.dstate = p; p += BH * Nc * dk * dv;
    a.Rc = p; p += BH * Nc * dk * dv;
    a.sdot = p; p += BH * Nc;
    a.dbv = p; p += BT;
    return a;
}

template <int DK> static void set_attrs() {
    static bool done = false;
    if (done) return;
    done = true;
    CK(cudaFuncSetAttribute(prep_kernel<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)prep_smem<DK>()));
    CK(cudaFuncSetAttribute(fwd_state_kernel<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fwd_state_smem<DK>()));
    CK(cudaFuncSetAttribute(fwd_out_kernel<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fwd_out_smem<DK>()));
    CK(cudaFuncSetAttribute(bwd_local_kernel<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bwd_local_smem<DK>()));
    CK(cudaFuncSetAttribute(bwd_rhs_kernel<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bwd_rhs_smem<DK>()));
    CK(cudaFuncSetAttribute(bwd_state_kernel<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bwd_state_smem<DK>()));
    CK(cudaFuncSetAttribute(bwd_vloop_kernel<DK, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bwd_vloop_smem<DK, 0>()));
    CK(cudaFuncSetAttribute(bwd_vloop_kernel<DK, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bwd_vloop_smem<DK, 1>()));
    CK(cudaFuncSetAttribute(bwd_vloop_kernel<DK, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bwd_vloop_smem<DK, 2>()));
    CK(cudaFuncSetAttribute(bwd_final_kernel<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bwd_final_smem<DK>()));
}

// optional per-kernel profiling (test harness only)
#ifndef GDN_EMU
static bool g_prof = false;
static int g_nev = 0;
static cudaEvent_t g_ev[32];
static const char *g_evname[32];
#define PROF(name) do { if (g_prof && g_nev < 32) { g_evname[g_nev] = name; CK(cudaEventRecord(g_ev[g_nev++], st)); } } while (0)
#else
#define PROF(name) do { } while (0)
#endif

template <int DK> static void fwd_impl(const GA &a, cudaStream_t st) {
    set_attrs<DK>();
    const int B = a.B, H = a.H, Nc = a.Nc, nvt = a.dvd / BV;
    LAUNCH(prep_kernel<DK>, dim3(Nc, H, B), dim3(NT), prep_smem<DK>(), st, a); CKL(); PROF("prep_kernel");
    LAUNCH(fwd_state_kernel<DK>, dim3(nvt, H, B), dim3(NT), fwd_state_smem<DK>(), st, a); CKL(); PROF("fwd_state_kernel");
    LAUNCH(fwd_out_kernel<DK>, dim3(nvt, Nc, B * H), dim3(NT), fwd_out_smem<DK>(), st, a); CKL(); PROF("fwd_out_kernel");
}
template <int DK> static void bwd_impl(const GA &a, cudaStream_t st) {
    set_attrs<DK>();
    const int B = a.B, H = a.H, Nc = a.Nc, nvt = a.dvd / BV;
    LAUNCH(prep_kernel<DK>, dim3(Nc, H, B), dim3(NT), prep_smem<DK>(), st, a); CKL(); PROF("prep_kernel");
    LAUNCH(bwd_local_kernel<DK>, dim3(nvt, Nc, B * H), dim3(NT), bwd_local_smem<DK>(), st, a); CKL(); PROF("bwd_local_kernel");
    LAUNCH(bwd_rhs_kernel<DK>, dim3(nvt, Nc, B * H), dim3(NT), bwd_rhs_smem<DK>(), st, a); CKL(); PROF("bwd_rhs_kernel");
    LAUNCH(bwd_state_kernel<DK>, dim3(nvt, H, B), dim3(NT), bwd_state_smem<DK>(), st, a); CKL(); PROF("bwd_state_kernel");
    void (*kv0)(GA) = bwd_vloop_kernel<DK, 0>;
    void (*kv1)(GA) = bwd_vloop_kernel<DK, 1>;
    void (*kv2)(GA) = bwd_vloop_kernel<DK, 2>;
    const size_t sm0 = bwd_vloop_smem<DK, 0>(), sm1 = bwd_vloop_smem<DK, 1>(), sm2 = bwd_vloop_smem<DK, 2>();
    LAUNCH(kv0, dim3(Nc, B * H), dim3(NT), sm0, st, a); CKL(); PROF("kv0");
    LAUNCH(kv1, dim3(Nc, B * H), dim3(NT), sm1, st, a); CKL(); PROF("kv1");
    LAUNCH(kv2, dim3(Nc, B * H), dim3(NT), sm2, st, a); CKL(); PROF("kv2");
    LAUNCH(bwd_final_kernel<DK>, dim3(Nc, B * H), dim3(NT), bwd_final_smem<DK>(), st, a); CKL(); PROF("bwd_final_kernel");
}

#define DISPATCH_DK(dk, F, ...) do { switch (dk) { \
    case 32: F<32>(__VA_ARGS__); break; case 48: F<48>(__VA_ARGS__); break; \
    case 64: F<64>(__VA_ARGS__); break; case 128: F<128>(__VA_ARGS__); break; \
    default: fprintf(stderr, "gdn_op: dk=%d not instantiated (32/48/64/128)\n", dk); exit(1); } } while (0)

void gdn_op_forward(float *o, float *state, const float *q, const float *k, int ldqk, const float *v, int ldv,
                    const float *g, const float *beta, const float *m, int B, int T, int H, int dk, int dv, cudaStream_t st) {
    GA a = make_ga(B, T, H, dk, dv);
    a.o = o; a.state = state; a.q = q; a.k = k; a.ldqk = ldqk; a.v = v; a.ldv = ldv; a.g = g; a.beta = beta; a.m = m;
    a.vec = (((uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)state | (uintptr_t)o) % 16 == 0) && ldqk % 4 == 0 && ldv % 4 == 0 &&
            dk % 4 == 0;
    DISPATCH_DK(dk, fwd_impl, a, st);
}

void gdn_op_backward(float *dq, float *dk, float *dv, float *dg, float *dbeta, float *dA,
                     const float *dout, const float *state, const float *q, const float *k, int ldqk, const float *v, int ldv,
                     const float *g, const float *beta, const float *m, int B, int T, int H, int dkd, int dvd, cudaStream_t st) {
    GA a = make_ga(B, T, H, dkd, dvd);
    a.dq = dq; a.dk = dk; a.dv = dv; a.dg = dg; a.dbeta = dbeta; a.dA = dA; a.dout = dout;
    a.state = (float *)state; a.q = q; a.k = k; a.ldqk = ldqk; a.v = v; a.ldv = ldv; a.g = g; a.beta = beta; a.m = m;
    a.vec = (((uintptr_t)q | (uintptr_t)k | (uintptr_t)v | (uintptr_t)state | (uintptr_t)dout | (uintptr_t)dq | (uintptr_t)dk |
              (uintptr_t)dv) % 16 == 0) && ldqk % 4 == 0 && ldv % 4 == 0 && dkd % 4 == 0;
    DISPATCH_DK(dkd, bwd_impl, a, st);
}

// ================================================================================================
// test harness
// ================================================================================================
static unsigned long long rng_s = 0x9E3779B97F4A7C15ULL;
static double urand() { rng_s ^= rng_s << 13; rng_s ^= rng_s >> 7; rng_s ^= rng_s << 17; return ((rng_s >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
static double nrand() { return sqrt(-2.0 * log(urand())) * cos(6.283185307179586 * urand()); }

struct Prob {
    int B, T, H, dk, dv, Nc, ldqk, ldv;
    std::vector<float> qk, v, g, beta, m, dout;  // q at qk[row*ldqk + h*dk], k at qk[row*ldqk + H*dk + h*dk]
    bool use_m;
};

static void make_prob(Prob &p, int B, int T, int H, int dk, int dv, int mmode /*0 none,1 binary p=frac,2 real*/, double frac, int pad = 0) {
    p.B = B; p.T = T; p.H = H; p.dk = dk; p.dv = dv; p.Nc = T / CH;
    p.ldqk = 2 * H * dk + pad; p.ldv = H * dv + 32 + pad;
    p.qk.assign((size_t)B * T * p.ldqk, 0.f);
    p.v.assign((size_t)B * T * p.ldv, 0.f);
    p.g.resize((size_t)B * T * H); p.beta.resize((size_t)B * T * H);
    p.dout.resize((size_t)B * T * H * dv);
    for (size_t r = 0; r < (size_t)B * T; r++) {
        for (int w = 0; w < 2 * H; w++) {
            double n2 = 0; std::vector<double> x(dk);
            for (int d = 0; d < dk; d++) { x[d] = nrand(); n2 += x[d] * x[d]; }
            double inv = 1.0 / sqrt(n2 + 1e-6);
            for (int d = 0; d < dk; d++) p.qk[r * p.ldqk + (size_t)w * dk + d] = (float)(x[d] * inv);
        }
        for (int j = 0; j < H * dv; j++) p.v[r * p.ldv + j] = (float)nrand();
        for (int h = 0; h < H; h++) {
            double A = 0.03 * (1 + h % 3);  // exp(A_log)
            double z = std::min(1.5, std::max(-3.0, nrand()));
            p.g[r * H + h] = (float)(-A * log1p(exp(z)));  // alpha in (0.85, 1)
            p.beta[r * H + h] = (float)(1.0 / (1.0 + exp(-nrand())));
        }
    }
    for (auto &x : p.dout) x = (float)nrand();
    p.use_m = mmode != 0;
    p.m.assign((size_t)B * p.Nc * H * 2, 0.f);
    for (int b = 0; b < B; b++)
        for (int c = 0; c < p.Nc; c++)
            for (int h = 0; h < H; h++) {
                float mv = mmode == 2 ? (float)urand() : (urand() < frac ? 1.f : 0.f);
                if (c == p.Nc - 1) mv = 1.f;
                size_t i = ((size_t)(b * p.Nc + c) * H + h) * 2;
                p.m[i + 1] = mv; p.m[i] = 1.f - mv;
            }
}

struct Grads { std::vector<double> o, dq, dk, dv, dg, dbeta, dA; };

// CPU oracle: token-by-token recurrence with chunk commits (SPEC §5.4) and its BPTT (§6.1, §6.4), double.
static void cpu_ref(const Prob &p, Grads &r) {
    const int B = p.B, T = p.T, H = p.H, dk = p.dk, dv = p.dv, Nc = p.Nc;
    const double s = 1.0 / sqrt((double)dk);
    const size_t KV = (size_t)dk * dv;
    r.o.assign((size_t)B * T * H * dv, 0); r.dq.assign((size_t)B * T * H * dk, 0); r.dk = r.dq;
    r.dv.assign((size_t)B * T * H * dv, 0); r.dg.assign((size_t)B * T * H, 0); r.dbeta = r.dg;
    r.dA.assign((size_t)B * Nc * H, 0);
    std::vector<double> Zp((size_t)T * KV), U((size_t)T * dv), R((size_t)T * dv), Ss((size_t)Nc * KV), DS((size_t)Nc * KV);
    std::vector<double> S(KV), Z(KV), D(KV), dZ(KV), dSe(KV), q(dk), k(dk), dO(dv), du(dv), dr(dv), Pk(dv);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            auto Q = [&](int t, int d) { return (double)p.qk[((size_t)b * T + t) * p.ldqk + (size_t)h * dk + d]; };
            auto Kf = [&](int t, int d) { return (double)p.qk[((size_t)b * T + t) * p.ldqk + (size_t)H * dk + (size_t)h * dk + d]; };
            auto V = [&](int t, int j) { return (double)p.v[((size_t)b * T + t) * p.ldv + (size_t)h * dv + j]; };
            auto G = [&](int t) { return (double)p.g[((size_t)b * T + t) * H + h]; };
            auto Be = [&](int t) { return (double)p.beta[((size_t)b * T + t) * H + h]; };
            auto M = [&](int c) { return p.use_m ? (double)p.m[((size_t)(b * Nc + c) * H + h) * 2 + 1] : 1.0; };
            std::fill(S.begin(), S.end(), 0.0);
            for (int c = 0; c < Nc; c++) {
                std::copy(S.begin(), S.end(), Ss.begin() + c * KV);
                Z = S;
                double sg = 0;
                for (int t = c * CH; t < (c + 1) * CH; t++) {
                    std::copy(Z.begin(), Z.end(), Zp.begin() + (size_t)t * KV);
                    const double al = exp(G(t)), be = Be(t);
                    sg += G(t);
                    for (auto &x : Z) x *= al;  // P
                    for (int j = 0; j < dv; j++) Pk[j] = 0;
                    for (int d = 0; d < dk; d++) { const double kd = Kf(t, d); for (int j = 0; j < dv; j++) Pk[j] += Z[(size_t)d * dv + j] * kd; }
                    for (int j = 0; j < dv; j++) { R[(size_t)t * dv + j] = V(t, j) - Pk[j]; U[(size_t)t * dv + j] = be * R[(size_t)t * dv + j]; }
                    for (int d = 0; d < dk; d++) { const double kd = Kf(t, d); for (int j = 0; j < dv; j++) Z[(size_t)d * dv + j] += kd * U[(size_t)t * dv + j]; }
                    for (int j = 0; j < dv; j++) { double acc = 0; for (int d = 0; d < dk; d++) acc += Z[(size_t)d * dv + j] * Q(t, d); r.o[(((size_t)b * T + t) * H + h) * dv + j] = s * acc; }
                }
                const double dec = exp(sg), mc = M(c);
                for (size_t e = 0; e < KV; e++) { DS[c * KV + e] = Z[e] - dec * S[e]; S[e] = dec * S[e] + mc * DS[c * KV + e]; }
            }
            // backward
            std::fill(dSe.begin(), dSe.end(), 0.0);
            for (int c = Nc - 1; c >= 0; c--) {
                const double mc = M(c);
                double sg = 0; for (int t = c * CH; t < (c + 1) * CH; t++) sg += G(t);
                const double dec = exp(sg);
                if (mc != 0) { double a = 0; for (size_t e = 0; e < KV; e++) a += dSe[e] * DS[c * KV + e]; r.dA[(size_t)(b * Nc + c) * H + h] = a; }
                for (size_t e = 0; e < KV; e++) dZ[e] = mc * dSe[e];
                for (int t = (c + 1) * CH - 1; t >= c * CH; t--) {
                    const double al = exp(G(t)), be = Be(t);
                    const size_t row = ((size_t)b * T + t) * H + h;
                    const double *zp = &Zp[(size_t)t * KV];
                    for (int d = 0; d < dk; d++) { q[d] = Q(t, d); k[d] = Kf(t, d); }
                    for (int j = 0; j < dv; j++) dO[j] = p.dout[row * dv + j];
                    // Z_t = al*zp + k u^T;  D = dZ + s q dO^T
                    for (int d = 0; d < dk; d++)
                        for (int j = 0; j < dv; j++) {
                            const size_t e = (size_t)d * dv + j;
                            Z[e] = al * zp[e] + k[d] * U[(size_t)t * dv + j];
                            D[e] = dZ[e] + s * q[d] * dO[j];
                        }
                    for (int d = 0; d < dk; d++) {
                        double a1 = 0, a2 = 0;
                        for (int j = 0; j < dv; j++) { a1 += Z[(size_t)d * dv + j] * dO[j]; a2 += D[(size_t)d * dv + j] * U[(size_t)t * dv + j]; }
                        r.dq[row * dk + d] = s * a1;
                        r.dk[row * dk + d] = a2;
                    }
                    for (int j = 0; j < dv; j++) { double a = 0; for (int d = 0; d < dk; d++) a += D[(size_t)d * dv + j] * k[d]; du[j] = a; }
                    double dbe = 0;
                    for (int j = 0; j < dv; j++) { dbe += du[j] * R[(size_t)t * dv + j]; dr[j] = be * du[j]; r.dv[row * dv + j] = dr[j]; }
                    r.dbeta[row] = dbe;
                    // dP = D - k dr^T ; dk -= P dr ; dg = <dP, P> ; dZ = al dP
                    double dgt = 0;
                    for (int d = 0; d < dk; d++) {
                        double pdr = 0;
                        for (int j = 0; j < dv; j++) {
                            const size_t e = (size_t)d * dv + j;
                            const double P = al * zp[e];
                            const double dP = D[e] - k[d] * dr[j];
                            pdr += P * dr[j];
                            dgt += dP * P;
                            dZ[e] = al * dP;
                        }
                        r.dk[row * dk + d] -= pdr;
                    }
                    r.dg[row] = dgt;
                }
                if (mc != 1.0) {
                    double a = 0; for (size_t e = 0; e < KV; e++) a += dSe[e] * dec * Ss[c * KV + e];
                    for (int t = c * CH; t < (c + 1) * CH; t++) r.dg[((size_t)b * T + t) * H + h] += (1 - mc) * a;
                }
                for (size_t e = 0; e < KV; e++) dSe[e] = dZ[e] + (1 - mc) * dec * dSe[e];
            }
        }
}

struct Dev {
    float *qk, *v, *g, *beta, *m, *dout, *o, *state, *dqk, *dv, *dg, *dbeta, *dA;
};
static void dev_alloc(const Prob &p, Dev &d) {
    const size_t BT = (size_t)p.B * p.T;
    CK(cudaMalloc(&d.qk, BT * p.ldqk * 4)); CK(cudaMalloc(&d.v, BT * p.ldv * 4));
    CK(cudaMalloc(&d.g, BT * p.H * 4)); CK(cudaMalloc(&d.beta, BT * p.H * 4));
    CK(cudaMalloc(&d.m, p.m.size() * 4)); CK(cudaMalloc(&d.dout, p.dout.size() * 4));
    CK(cudaMalloc(&d.o, p.dout.size() * 4)); CK(cudaMalloc(&d.state, (size_t)p.B * p.H * p.Nc * p.dk * p.dv * 4));
    CK(cudaMalloc(&d.dqk, BT * p.ldqk * 4)); CK(cudaMalloc(&d.dv, BT * p.ldv * 4));
    CK(cudaMalloc(&d.dg, BT * p.H * 4)); CK(cudaMalloc(&d.dbeta, BT * p.H * 4)); CK(cudaMalloc(&d.dA, p.m.size() * 4));
    CK(cudaMemcpy(d.qk, p.qk.data(), BT * p.ldqk * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d.v, p.v.data(), BT * p.ldv * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d.g, p.g.data(), BT * p.H * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d.beta, p.beta.data(), BT * p.H * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d.m, p.m.data(), p.m.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d.dout, p.dout.data(), p.dout.size() * 4, cudaMemcpyHostToDevice));
}
static void dev_free(Dev &d) {
    float *ps[] = {d.qk, d.v, d.g, d.beta, d.m, d.dout, d.o, d.state, d.dqk, d.dv, d.dg, d.dbeta, d.dA};
    for (float *x : ps) CK(cudaFree(x));
}
static void run_op(const Prob &p, Dev &d, cudaStream_t st) {
    const float *mm_ = p.use_m ? d.m : nullptr;
    gdn_op_forward(d.o, d.state, d.qk, d.qk + (size_t)p.H * p.dk, p.ldqk, d.v, p.ldv, d.g, d.beta, mm_, p.B, p.T, p.H, p.dk, p.dv, st);
    gdn_op_backward(d.dqk, d.dqk + (size_t)p.H * p.dk, d.dv, d.dg, d.dbeta, d.dA, d.dout, d.state, d.qk, d.qk + (size_t)p.H * p.dk, p.ldqk,
                    d.v, p.ldv, d.g, d.beta, mm_, p.B, p.T, p.H, p.dk, p.dv, st);
}

static double relerr(const std::vector<float> &a, const std::vector<double> &r) {
    double n = 0, dd = 0;
    for (size_t i = 0; i < r.size(); i++) { const double e = (double)a[i] - r[i]; dd += e * e; n += r[i] * r[i]; }
    if (!(dd == dd)) return NAN;
    return n > 0 ? sqrt(dd / n) : sqrt(dd);
}

static bool test_case(const char *name, int B, int T, int H, int dk, int dv, int mmode, int pad = 0) {
    Prob p;
    make_prob(p, B, T, H, dk, dv, mmode, 0.5, pad);
    Grads r;
    cpu_ref(p, r);
    Dev d;
    dev_alloc(p, d);
    const size_t BT = (size_t)B * T;
    CK(cudaMemset(d.o, 0xFF, p.dout.size() * 4)); CK(cudaMemset(d.state, 0xFF, (size_t)B * H * p.Nc * dk * dv * 4));
    CK(cudaMemset(d.dqk, 0xFF, BT * p.ldqk * 4)); CK(cudaMemset(d.dv, 0xFF, BT * p.ldv * 4));
    CK(cudaMemset(d.dg, 0xFF, BT * H * 4)); CK(cudaMemset(d.dbeta, 0xFF, BT * H * 4)); CK(cudaMemset(d.dA, 0xFF, p.m.size() * 4));
    run_op(p, d, 0);
    CK(cudaDeviceSynchronize());
    std::vector<float> o(p.dout.size()), dqk(BT * p.ldqk), dvv(BT * p.ldv), dg(BT * H), db(BT * H), dA(p.m.size());
    CK(cudaMemcpy(o.data(), d.o, o.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(dqk.data(), d.dqk, dqk.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(dvv.data(), d.dv, dvv.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(dg.data(), d.dg, dg.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(db.data(), d.dbeta, db.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(dA.data(), d.dA, dA.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<float> gq(BT * H * dk), gk(BT * H * dk), gv(BT * H * dv), gA(r.dA.size());
    for (size_t rr = 0; rr < BT; rr++) {
        for (int e = 0; e < H * dk; e++) { gq[rr * H * dk + e] = dqk[rr * p.ldqk + e]; gk[rr * H * dk + e] = dqk[rr * p.ldqk + H * dk + e]; }
        for (int e = 0; e < H * dv; e++) gv[rr * H * dv + e] = dvv[rr * p.ldv + e];
    }
    bool untouched = true;
    for (size_t i = 0; i < gA.size(); i++) {
        gA[i] = dA[2 * i + 1];
        uint32_t bits; memcpy(&bits, &dA[2 * i], 4);
        if (bits != 0xFFFFFFFFu) untouched = false;
    }
    for (size_t rr = 0; rr < BT; rr++)
        for (int e = H * dv; e < p.ldv; e++) { uint32_t bits; memcpy(&bits, &dvv[rr * p.ldv + e], 4); if (bits != 0xFFFFFFFFu) untouched = false; }
    double e[7] = {relerr(o, r.o), relerr(gq, r.dq), relerr(gk, r.dk), relerr(gv, r.dv), relerr(dg, r.dg), relerr(db, r.dbeta), relerr(gA, r.dA)};
    // dA must be exactly 0 where m == 0 and at the last chunk
    bool zeros_ok = true;
    for (int b = 0; b < B; b++) for (int c = 0; c < p.Nc; c++) for (int h = 0; h < H; h++) {
        size_t i = (size_t)(b * p.Nc + c) * H + h;
        if ((p.use_m && p.m[2 * i + 1] == 0.f) || c == p.Nc - 1) if (gA[i] != 0.f) zeros_ok = false;
    }
    bool ok = untouched && zeros_ok;
    for (double x : e) if (!(x < 1e-4)) ok = false;
    printf("%-34s o %.2e dq %.2e dk %.2e dv %.2e dg %.2e dbeta %.2e dA %.2e  untouched %s zeros %s -> %s\n", name, e[0], e[1], e[2], e[3],
           e[4], e[5], e[6], untouched ? "y" : "N", zeros_ok ? "y" : "N", ok ? "PASS" : "FAIL");
    fflush(stdout);
    dev_free(d);
    return ok;
}

#ifndef GDN_EMU
static void time_all() {
    const int B = 8, T = 4096, H = 6, dk = 128, dv = 256;
    Prob p;
    make_prob(p, B, T, H, dk, dv, 1, 1.0);
    Dev d;
    dev_alloc(p, d);
    const float *mm_ = d.m;
    cudaEvent_t e0, e1, e2;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1)); CK(cudaEventCreate(&e2));
    for (int i = 0; i < 32; i++) CK(cudaEventCreate(&g_ev[i]));
    for (double frac : {1.0, 0.5}) {
        for (int b = 0; b < B; b++) for (int c = 0; c < p.Nc; c++) for (int h = 0; h < H; h++) {
            float mv = (urand() < frac || c == p.Nc - 1) ? 1.f : 0.f;
            size_t i = ((size_t)(b * p.Nc + c) * H + h) * 2;
            p.m[i + 1] = mv; p.m[i] = 1.f - mv;
        }
        CK(cudaMemcpy(d.m, p.m.data(), p.m.size() * 4, cudaMemcpyHostToDevice));
        for (int w = 0; w < 3; w++) run_op(p, d, 0);
        CK(cudaDeviceSynchronize());
        std::vector<float> tf, tb, tt;
        for (int rep = 0; rep < 15; rep++) {
            CK(cudaEventRecord(e0));
            gdn_op_forward(d.o, d.state, d.qk, d.qk + (size_t)H * dk, p.ldqk, d.v, p.ldv, d.g, d.beta, mm_, B, T, H, dk, dv, 0);
            CK(cudaEventRecord(e1));
            gdn_op_backward(d.dqk, d.dqk + (size_t)H * dk, d.dv, d.dg, d.dbeta, d.dA, d.dout, d.state, d.qk, d.qk + (size_t)H * dk, p.ldqk,
                            d.v, p.ldv, d.g, d.beta, mm_, B, T, H, dk, dv, 0);
            CK(cudaEventRecord(e2));
            CK(cudaEventSynchronize(e2));
            float a, b2; CK(cudaEventElapsedTime(&a, e0, e1)); CK(cudaEventElapsedTime(&b2, e1, e2));
            tf.push_back(a); tb.push_back(b2); tt.push_back(a + b2);
        }
        CKL();
        auto med = [](std::vector<float> x) { std::sort(x.begin(), x.end()); return x[x.size() / 2]; };
        printf("TIME B=%d T=%d H=%d dk=%d dv=%d mask_frac=%.1f: fwd %.3f ms  bwd %.3f ms  fwd+bwd %.3f ms (median of 15; min %.3f)\n", B, T, H,
               dk, dv, frac, med(tf), med(tb), med(tt), *std::min_element(tt.begin(), tt.end()));
        g_prof = true; g_nev = 0;
        { cudaStream_t st = 0; PROF("start"); }
        run_op(p, d, 0);
        g_prof = false;
        CK(cudaDeviceSynchronize());
        printf("  kernels (ms):");
        for (int i = 1; i < g_nev; i++) { float ms; CK(cudaEventElapsedTime(&ms, g_ev[i - 1], g_ev[i])); printf(" %s %.3f", g_evname[i], ms); }
        printf("\n");
        fflush(stdout);
    }
    dev_free(d);
}
#endif

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "all";
    bool ok = true;
    if (strcmp(mode, "time") != 0) {
        ok &= test_case("tiny B2 T256 H2 dk48 dv96 m01", 2, 256, 2, 48, 96, 1);
        ok &= test_case("tiny B2 T256 H2 dk48 dv96 m-real", 2, 256, 2, 48, 96, 2);
        ok &= test_case("tiny B2 T256 H2 dk48 dv96 m=NULL", 2, 256, 2, 48, 96, 0);
        ok &= test_case("tiny m01 unaligned ld (scalar path)", 2, 256, 2, 48, 96, 1, 1);
        ok &= test_case("B1 T512 H2 dk128 dv256 m01", 1, 512, 2, 128, 256, 1);
        printf("CORRECTNESS %s\n", ok ? "PASS" : "FAIL");
    }
#ifndef GDN_EMU
    if (strcmp(mode, "test") != 0) {
        time_all();
    }
#endif
    return ok ? 0 : 1;
}
