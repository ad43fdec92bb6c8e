// masked_attention.cu — flash-attention-style tiled softmax attention for natsl.c (fp32 I/O, TF32 tensor cores).
//
// Serves both the plain causal `A` layer (SPEC §4) and the NAtS-L softmax op (SPEC §5.3, §6.2, §6.3, §8).
// Forward and backward; never materializes T×T. Tiles are 64 queries × 64 keys = one NAtS chunk each way,
// so the routing mask is a per-tile decision: key tiles (chunks) with m == 0 are skipped (never loaded).
// See NOTES.md beside this file for the algorithm, the measured errors and timings.
//
// Matrix products use mma.sync.m16n8k8 TF32 with fp32 accumulation. Two precisions (attention_set_tf32_passes):
//   3 (default): "3xTF32" — x = hi + lo (hi = x with the low 13 mantissa bits cleared), a·b ≈ a_hi·b_hi + a_hi·b_lo +
//                a_lo·b_hi: fp32-level accuracy (measured normwise errors ~1e-6 against a double oracle).
//   1          : plain TF32 (cvt.rna, one pass): ~4e-4..1e-3 normwise error, ~1.4x faster end to end.
//
// Build + test:  nvcc -O3 -arch=sm_90 -o masked_attention dev/cuda/attention/masked_attention.cu
//                ./masked_attention [all|check|time|tiny|prof]      (all = checks vs the CPU oracle, then timings)
// Define MASKED_ATTENTION_NO_MAIN to use it as a library (the two entry points + attention_set_tf32_passes).
//
// Requirements: T % 64 == 0; (dq, dvh) ∈ {(24,48), (64,128), (64,64)} (add more in ATT_SHAPES; dq % 8, dvh % 16);
// q, k, v, dq, dk, dv 16-byte aligned with ldqk % 4 == 0 and ldv % 4 == 0; NH % NHm == 0. Not thread-safe: one static
// scratch buffer of 2·B·NH·T floats (the backward's δ and lse·log2e), grown with cudaMalloc on first use.
// dq is zeroed then accumulated with float4 atomics (run-to-run bit differences in dq, ~1e-7 relative).

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <cmath>

#define CUDA_CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, #x); exit(1); } } while (0)

#define ATT_LOG2E 1.4426950408889634f
#define ATT_LN2   0.6931471805599453f

#ifndef ATT_DQ_ATOMIC
#define ATT_DQ_ATOMIC 4   // dQ accumulation: 4 = float4 atomics (sm_90), 1 = scalar atomics
#endif

static int g_attn_passes = 3;   // 3 = 3xTF32 (fp32-accurate), 1 = plain TF32
void attention_set_tf32_passes(int p) { g_attn_passes = (p == 1) ? 1 : 3; }

// ------------------------------------------------------------------------------------------------------------------
// device helpers
// ------------------------------------------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t f2tf32(float x) {
    uint32_t r; asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x)); return r;
}
// split x into hi (tf32) and lo (tf32 of the remainder); lo unused (0) when !SPLIT
// SPLIT (3xTF32): hi = x with the low 13 mantissa bits cleared (a valid tf32), lo = x - hi exactly (fp32); lo is passed
// as raw fp32 bits and the tensor core uses only its top 19 bits, an error of < 2^-10·|lo| < 2^-20·|x|.
// (ATT_SPLIT_RNA=1: the slower classic form, lo and hi both rounded with cvt.rna.)
#ifndef ATT_SPLIT_RNA
#define ATT_SPLIT_RNA 0
#endif
template <bool SPLIT> __device__ __forceinline__ void splitf(float x, uint32_t &h, uint32_t &l) {
    if (SPLIT) {
#if ATT_SPLIT_RNA
        h = f2tf32(x); l = f2tf32(x - __uint_as_float(h));
#else
        h = __float_as_uint(x) & 0xffffe000u; l = __float_as_uint(x - __uint_as_float(h));
#endif
    } else { h = f2tf32(x); l = 0u; }
}
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// A operand fragment (16x8, row-major) in hi/lo form
struct FragA { uint32_t h[4], l[4]; };
template <bool SPLIT> __device__ __forceinline__ void make_a(FragA &A, float a0, float a1, float a2, float a3) {
    splitf<SPLIT>(a0, A.h[0], A.l[0]); splitf<SPLIT>(a1, A.h[1], A.l[1]);
    splitf<SPLIT>(a2, A.h[2], A.l[2]); splitf<SPLIT>(a3, A.h[3], A.l[3]);
}
// d += A · B where B fragment given as two floats (b0: k=t, n=g; b1: k=t+4, n=g)
template <bool SPLIT> __device__ __forceinline__ void mma_ab(float (&d)[4], const FragA &A, float b0, float b1) {
    uint32_t bh0, bl0, bh1, bl1;
    splitf<SPLIT>(b0, bh0, bl0); splitf<SPLIT>(b1, bh1, bl1);
    if (SPLIT) { mma_tf32(d, A.l, bh0, bh1); mma_tf32(d, A.h, bl0, bl1); }
    mma_tf32(d, A.h, bh0, bh1);
}
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
    uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// 64 rows × D floats (D % 4 == 0) from global (row stride ld floats) to smem (row stride LD floats)
template <int D, int LD, int NT>
__device__ __forceinline__ void load_tile(float *s, const float *g, int ld, int tid) {
    constexpr int V = D / 4;
#pragma unroll 4
    for (int i = tid; i < 64 * V; i += NT) {
        int r = i / V, c = (i - r * V) * 4;
        cp_async16(s + r * LD + c, g + (size_t)r * ld + c);
    }
}

// ------------------------------------------------------------------------------------------------------------------
// forward: one block = (b, h, query chunk qc); 4 warps × 16 query rows; loop over active key chunks (double-buffered)
// ------------------------------------------------------------------------------------------------------------------
template <int DQ, int DV, bool SPLIT>
__global__ void __launch_bounds__(128, 2)
attn_fwd_kernel(float *__restrict__ out, float *__restrict__ lse, const float *__restrict__ q,
                const float *__restrict__ k, int ldqk, const float *__restrict__ v, int ldv,
                const float *__restrict__ m, int T, int NH, int NHm, float sl2) {
    constexpr int LDK = DQ + 4, LDV = DV + 4, KS = DQ / 8, NV = DV / 8;
    extern __shared__ float4 smem_f4[];
    float *smem = reinterpret_cast<float *>(smem_f4);
    float *sK = smem;                    // [2][64*LDK]
    float *sV = smem + 2 * 64 * LDK;     // [2][64*LDV]
    const int Nc = T / 64;
    int *sList = reinterpret_cast<int *>(sV + 2 * 64 * LDV);   // [Nc]
    float *sW = reinterpret_cast<float *>(sList + Nc);         // [Nc]
    __shared__ int sN;

    const int bh = blockIdx.x, b = bh / NH, h = bh - b * NH;
    const int qc = Nc - 1 - (int)blockIdx.y;    // heavy (late) query chunks first
    const int n = h / (NH / NHm);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;

    // ---- compacted list of key chunks this query chunk attends (earlier chunks with m != 0, then itself)
    if (warp == 0) {
        int cnt = 0;
        for (int base = 0; base <= qc; base += 32) {
            int c = base + lane;
            float wv = 0.f; bool act = false;
            if (c < qc) { wv = m ? __ldg(m + ((size_t)(b * Nc + c) * NHm + n) * 2) : 1.f; act = (wv != 0.f); }
            else if (c == qc) { wv = 1.f; act = true; }
            unsigned bal = __ballot_sync(0xffffffffu, act);
            if (act) { int pos = cnt + __popc(bal & ((1u << lane) - 1u)); sList[pos] = c; sW[pos] = wv; }
            cnt += __popc(bal);
        }
        if (lane == 0) sN = cnt;
    }
    __syncthreads();
    const int nact = sN;

    const float *kbase = k + (size_t)b * T * ldqk + h * DQ;
    const float *vbase = v + (size_t)b * T * ldv + h * DV;
    auto issue = [&](int it) {
        const int kc = sList[it], st = it & 1;
        load_tile<DQ, LDK, 128>(sK + st * 64 * LDK, kbase + (size_t)kc * 64 * ldqk, ldqk, tid);
        load_tile<DV, LDV, 128>(sV + st * 64 * LDV, vbase + (size_t)kc * 64 * ldv, ldv, tid);
        cp_async_commit();
    };
    issue(0);

    // ---- Q fragments straight from global (rows g and g+8 of this warp's 16-row strip)
    const int rloc = warp * 16 + g;                 // local row (in chunk) of c0/c1; c2/c3 at rloc+8
    const int r0 = qc * 64 + rloc;
    const float *qrow0 = q + ((size_t)b * T + r0) * ldqk + h * DQ;
    const float *qrow1 = qrow0 + (size_t)8 * ldqk;
    FragA qa[KS];
#pragma unroll
    for (int ks = 0; ks < KS; ++ks)
        make_a<SPLIT>(qa[ks], __ldg(qrow0 + ks * 8 + t), __ldg(qrow1 + ks * 8 + t), __ldg(qrow0 + ks * 8 + t + 4),
                      __ldg(qrow1 + ks * 8 + t + 4));

    float o[NV][4];
#pragma unroll
    for (int i = 0; i < NV; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};

    for (int it = 0; it < nact; ++it) {
        if (it + 1 < nact) { issue(it + 1); cp_async_wait<1>(); } else { cp_async_wait<0>(); }
        __syncthreads();
        const int kc = sList[it];
        const float w = sW[it];
        const bool diag = (kc == qc);
        const float *cK = sK + (it & 1) * 64 * LDK;
        const float *cV = sV + (it & 1) * 64 * LDV;

        // S = Q K^T for this warp's 16 rows × 64 keys
        float s[8][4];
#pragma unroll
        for (int i = 0; i < 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
                const float *kp = cK + (nt * 8 + g) * LDK + ks * 8 + t;
                mma_ab<SPLIT>(s[nt], qa[ks], kp[0], kp[4]);
            }
        }
        // online softmax (log2 domain)
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                float x = s[nt][e] * sl2;
                if (diag) { int key = nt * 8 + 2 * t + (e & 1); int row = rloc + ((e >> 1) << 3); if (key > row) x = -INFINITY; }
                s[nt][e] = x;
                mx[e >> 1] = fmaxf(mx[e >> 1], x);
            }
        float alpha[2], mnew[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            mnew[r] = fmaxf(mrow[r], mx[r]);
            alpha[r] = exp2f(mrow[r] - mnew[r]);
            mrow[r] = mnew[r];
        }
        float ps[2] = {0.f, 0.f};
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                float p = exp2f(s[nt][e] - mnew[e >> 1]);
                ps[e >> 1] += p;
                s[nt][e] = p * w;
            }
        lrow[0] = lrow[0] * alpha[0] + w * ps[0];
        lrow[1] = lrow[1] * alpha[1] + w * ps[1];
#pragma unroll
        for (int i = 0; i < NV; ++i) { o[i][0] *= alpha[0]; o[i][1] *= alpha[0]; o[i][2] *= alpha[1]; o[i][3] *= alpha[1]; }
        // O += P V ; A operand from the C layout with permuted k: logical k=t <-> key 2t, k=t+4 <-> key 2t+1
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) {
            FragA pa;
            make_a<SPLIT>(pa, s[kk][0], s[kk][2], s[kk][1], s[kk][3]);
            const float *vp = cV + (kk * 8 + 2 * t) * LDV + g;
#pragma unroll
            for (int nv = 0; nv < NV; ++nv) mma_ab<SPLIT>(o[nv], pa, vp[nv * 8], vp[LDV + nv * 8]);
        }
        __syncthreads();
    }
    // finalize
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = lrow[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const float inv = 1.f / l;
        const int row = r0 + 8 * r;
        float *op = out + ((size_t)b * T + row) * ((size_t)NH * DV) + h * DV + 2 * t;
#pragma unroll
        for (int nv = 0; nv < NV; ++nv)
            *reinterpret_cast<float2 *>(op + nv * 8) = make_float2(o[nv][2 * r] * inv, o[nv][2 * r + 1] * inv);
        if (t == 0) lse[((size_t)b * NH + h) * T + row] = (mrow[r] + log2f(l)) * ATT_LN2;
    }
}

// ------------------------------------------------------------------------------------------------------------------
// backward pre-pass: δ = dO·O, lse2 = lse·log2e, zero dq (head columns only) and dA[...,0]
// ------------------------------------------------------------------------------------------------------------------
__global__ void attn_bwd_pre_kernel(float *__restrict__ delta, float *__restrict__ lse2, float *__restrict__ dq,
                                    float *__restrict__ dA, const float *__restrict__ dout, const float *__restrict__ out,
                                    const float *__restrict__ lse, int ldqk, int B, int T, int NH, int NHm, int DQ, int DV) {
    const long gw = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    const long total = (long)B * T * NH;
    if (gw >= total) return;
    const int h = (int)(gw % NH);
    const long bt = gw / NH;                 // b*T + i
    const int b = (int)(bt / T), i = (int)(bt - (long)b * T);
    const float *po = out + bt * ((long)NH * DV) + (long)h * DV;
    const float *pd = dout + bt * ((long)NH * DV) + (long)h * DV;
    float acc = 0.f;
    for (int d = lane; d < DV; d += 32) acc += po[d] * pd[d];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) {
        const size_t idx = ((size_t)b * NH + h) * T + i;
        delta[idx] = acc;
        lse2[idx] = lse[idx] * ATT_LOG2E;
    }
    float *pq = dq + bt * (long)ldqk + (long)h * DQ;
    for (int d = lane; d < DQ; d += 32) pq[d] = 0.f;
    if (dA && lane == 0 && gw < (long)B * (T / 64) * NHm) dA[gw * 2] = 0.f;
}

// ------------------------------------------------------------------------------------------------------------------
// backward: one block = (b, h, key chunk kc); 8 warps: key strip ks = warp&3 (16 keys), query half qh = warp>>2
// (32 of the 64 queries of each query tile). dK, dV accumulated in registers; dQ via smem dS + atomics.
// ------------------------------------------------------------------------------------------------------------------
template <int DQ, int DV, bool SPLIT>
__global__ void __launch_bounds__(256, 1)
attn_bwd_kernel(float *__restrict__ dq, float *__restrict__ dk, float *__restrict__ dv, float *__restrict__ dA,
                const float *__restrict__ dout, const float *__restrict__ lse2, const float *__restrict__ delta,
                const float *__restrict__ q, const float *__restrict__ k, int ldqk, const float *__restrict__ v, int ldv,
                const float *__restrict__ m, int T, int NH, int NHm, float scale, float sl2) {
    constexpr int LDK = DQ + 4, LDV = DV + 4, LDS = 68, KS = DQ / 8, NV = DV / 8, NQ = DQ / 8, NQH = (NQ + 1) / 2;
    static_assert(DQ % 8 == 0 && DV % 16 == 0, "head dims: dq % 8 == 0, dvh % 16 == 0");
    extern __shared__ float4 smem_f4[];
    float *smem = reinterpret_cast<float *>(smem_f4);
    float *sK = smem;                         // 64*LDK
    float *sV = sK + 64 * LDK;                // 64*LDV
    float *sQ = sV + 64 * LDV;                // [2][64*LDK]
    float *sO = sQ + 2 * 64 * LDK;            // [2][64*LDV]   (dO tiles)
    float *sL = sO + 2 * 64 * LDV;            // [2][64]
    float *sD = sL + 2 * 64;                  // [2][64]
    float *sdS = sD + 2 * 64;                 // 64*LDS, dS^T [key][query]
    __shared__ float sRed[8];

    const int Nc = T / 64;
    const int bh = blockIdx.x, b = bh / NH, h = bh - b * NH;
    const int kc = blockIdx.y;                 // heavy (early) key chunks first
    const int n = h / (NH / NHm);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int ks = warp & 3, qh = warp >> 2;

    const float wkc = m ? __ldg(m + ((size_t)(b * Nc + kc) * NHm + n) * 2) : 1.f;
    const bool act = (wkc != 0.f);
    const int nq = act ? (Nc - kc) : 1;        // query chunks kc .. kc+nq-1

    const int ldo = NH * DV;
    const float *qbase = q + (size_t)b * T * ldqk + h * DQ;
    const float *obase = dout + (size_t)b * T * ldo + h * DV;
    const float *lbase = lse2 + ((size_t)b * NH + h) * T;
    const float *dbase = delta + ((size_t)b * NH + h) * T;

    load_tile<DQ, LDK, 256>(sK, k + ((size_t)b * T + (size_t)kc * 64) * ldqk + h * DQ, ldqk, tid);
    load_tile<DV, LDV, 256>(sV, v + ((size_t)b * T + (size_t)kc * 64) * ldv + h * DV, ldv, tid);
    auto issue = [&](int it) {
        const int qc = kc + it, st = it & 1;
        load_tile<DQ, LDK, 256>(sQ + st * 64 * LDK, qbase + (size_t)qc * 64 * ldqk, ldqk, tid);
        load_tile<DV, LDV, 256>(sO + st * 64 * LDV, obase + (size_t)qc * 64 * ldo, ldo, tid);
        if (tid < 16) cp_async16(sL + st * 64 + tid * 4, lbase + qc * 64 + tid * 4);
        else if (tid < 32) cp_async16(sD + st * 64 + (tid - 16) * 4, dbase + qc * 64 + (tid - 16) * 4);
        cp_async_commit();
    };
    issue(0);

    float dKa[NQ][4], dVa[NV][4];
#pragma unroll
    for (int i = 0; i < NQ; ++i) dKa[i][0] = dKa[i][1] = dKa[i][2] = dKa[i][3] = 0.f;
#pragma unroll
    for (int i = 0; i < NV; ++i) dVa[i][0] = dVa[i][1] = dVa[i][2] = dVa[i][3] = 0.f;
    float dAacc = 0.f;

    const int kr0 = 16 * ks + g;   // local key rows kr0, kr0+8

    for (int it = 0; it < nq; ++it) {
        if (it + 1 < nq) { issue(it + 1); cp_async_wait<1>(); } else { cp_async_wait<0>(); }
        __syncthreads();
        const int qc = kc + it;
        const bool diag = (it == 0);
        const float w = diag ? 1.f : wkc;
        const float *cQ = sQ + (it & 1) * 64 * LDK;
        const float *cO = sO + (it & 1) * 64 * LDV;
        const float *cL = sL + (it & 1) * 64;
        const float *cD = sD + (it & 1) * 64;

        // S^T = K Q^T : 16 keys × 32 queries
        float s[4][4], dp[4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i) { s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f; dp[i][0] = dp[i][1] = dp[i][2] = dp[i][3] = 0.f; }
        auto st_step = [&](float (&acc)[4][4], int kst) {
            FragA a;
            const float *kp = sK + kr0 * LDK + kst * 8 + t;
            make_a<SPLIT>(a, kp[0], kp[8 * LDK], kp[4], kp[8 * LDK + 4]);
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
                const float *qp = cQ + (32 * qh + 8 * nt + g) * LDK + kst * 8 + t;
                mma_ab<SPLIT>(acc[nt], a, qp[0], qp[4]);
            }
        };
        // dP^T = V dO^T : 16 keys × 32 queries
        auto dp_step = [&](float (&acc)[4][4], int kst) {
            FragA a;
            const float *vp = sV + kr0 * LDV + kst * 8 + t;
            make_a<SPLIT>(a, vp[0], vp[8 * LDV], vp[4], vp[8 * LDV + 4]);
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
                const float *op = cO + (32 * qh + 8 * nt + g) * LDV + kst * 8 + t;
                mma_ab<SPLIT>(acc[nt], a, op[0], op[4]);
            }
        };
#pragma unroll
        for (int kst = 0; kst < KS; ++kst) st_step(s, kst);
#pragma unroll 4
        for (int kst = 0; kst < NV; ++kst) dp_step(dp, kst);
        // P, dS
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int qi = 32 * qh + 8 * nt + 2 * t + (e & 1);
                const int ki = kr0 + ((e >> 1) << 3);
                float p = exp2f(fmaf(s[nt][e], sl2, -cL[qi]));
                if (diag && ki > qi) p = 0.f;
                const float dd = dp[nt][e] - cD[qi];
                if (!diag) dAacc = fmaf(p, dd, dAacc);
                const float P = w * p;
                s[nt][e] = P;
                dp[nt][e] = P * dd;     // dS (= dE)
            }
        // dV += P^T dO ; dK += dS^T Q   (k = queries, permuted: logical t <-> query 2t, t+4 <-> 2t+1)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
            FragA pa, sa;
            make_a<SPLIT>(pa, s[nt][0], s[nt][2], s[nt][1], s[nt][3]);
            make_a<SPLIT>(sa, dp[nt][0], dp[nt][2], dp[nt][1], dp[nt][3]);
            const float *op = cO + (32 * qh + 8 * nt + 2 * t) * LDV + g;
#pragma unroll
            for (int nv = 0; nv < NV; ++nv) mma_ab<SPLIT>(dVa[nv], pa, op[nv * 8], op[LDV + nv * 8]);
            const float *qp = cQ + (32 * qh + 8 * nt + 2 * t) * LDK + g;
#pragma unroll
            for (int nd = 0; nd < NQ; ++nd) mma_ab<SPLIT>(dKa[nd], sa, qp[nd * 8], qp[LDK + nd * 8]);
        }
        // dS^T to smem
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
            *reinterpret_cast<float2 *>(sdS + kr0 * LDS + 32 * qh + 8 * nt + 2 * t) = make_float2(dp[nt][0], dp[nt][1]);
            *reinterpret_cast<float2 *>(sdS + (kr0 + 8) * LDS + 32 * qh + 8 * nt + 2 * t) = make_float2(dp[nt][2], dp[nt][3]);
        }
        __syncthreads();
        // dQ (64 q × DQ) = dS (64 q × 64 keys) · K ; warp: query strip qs = warp&3, n-tiles nd ≡ half (mod 2)
        {
            const int qs = warp & 3, half = warp >> 2;
            float acc[NQH][4];
#pragma unroll
            for (int i = 0; i < NQH; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < 8; ++kk) {
                FragA a;
                const float *sp = sdS + (8 * kk + 2 * t) * LDS + 16 * qs + g;
                make_a<SPLIT>(a, sp[0], sp[8], sp[LDS], sp[LDS + 8]);
                const float *kp = sK + (8 * kk + 2 * t) * LDK + g;
#pragma unroll
                for (int i = 0; i < NQH; ++i) {
                    const int nd = half + 2 * i;
                    if (nd < NQ) mma_ab<SPLIT>(acc[i], a, kp[nd * 8], kp[LDK + nd * 8]);
                }
            }
            const size_t qrow0 = (size_t)b * T + (size_t)qc * 64 + 16 * qs + g;
#pragma unroll
            for (int i = 0; i < NQH; ++i) {
                const int nd = half + 2 * i;
                if (nd < NQ) {      // warp-uniform
#if ATT_DQ_ATOMIC == 4
                    // pair lanes t, t^1: even lane takes row g cols 2t..2t+3, odd lane row g+8 cols 2t-2..2t+1
                    const bool odd = (t & 1);
                    const float x0 = acc[i][0] * scale, x1 = acc[i][1] * scale, x2 = acc[i][2] * scale, x3 = acc[i][3] * scale;
                    const float r0 = __shfl_xor_sync(0xffffffffu, odd ? x0 : x2, 1);
                    const float r1 = __shfl_xor_sync(0xffffffffu, odd ? x1 : x3, 1);
                    const float4 val = odd ? make_float4(r0, r1, x2, x3) : make_float4(x0, x1, r0, r1);
                    float *p = dq + (qrow0 + (odd ? 8 : 0)) * ldqk + h * DQ + nd * 8 + 2 * (t & ~1);
                    atomicAdd(reinterpret_cast<float4 *>(p), val);
#else
                    float *p = dq + qrow0 * ldqk + h * DQ + nd * 8 + 2 * t;
                    atomicAdd(p, acc[i][0] * scale);
                    atomicAdd(p + 1, acc[i][1] * scale);
                    atomicAdd(p + (size_t)8 * ldqk, acc[i][2] * scale);
                    atomicAdd(p + (size_t)8 * ldqk + 1, acc[i][3] * scale);
#endif
                }
            }
        }
        __syncthreads();
    }

    // ---- reduce dK, dV over the two query halves, write out; dA block reduction
    float *rK = sQ, *rV = sO;
    if (qh == 1) {
#pragma unroll
        for (int nd = 0; nd < NQ; ++nd) {
            *reinterpret_cast<float2 *>(rK + kr0 * LDK + nd * 8 + 2 * t) = make_float2(dKa[nd][0], dKa[nd][1]);
            *reinterpret_cast<float2 *>(rK + (kr0 + 8) * LDK + nd * 8 + 2 * t) = make_float2(dKa[nd][2], dKa[nd][3]);
        }
#pragma unroll
        for (int nv = 0; nv < NV; ++nv) {
            *reinterpret_cast<float2 *>(rV + kr0 * LDV + nv * 8 + 2 * t) = make_float2(dVa[nv][0], dVa[nv][1]);
            *reinterpret_cast<float2 *>(rV + (kr0 + 8) * LDV + nv * 8 + 2 * t) = make_float2(dVa[nv][2], dVa[nv][3]);
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) dAacc += __shfl_xor_sync(0xffffffffu, dAacc, o);
    if (lane == 0) sRed[warp] = dAacc;
    __syncthreads();
    if (qh == 0) {
        const size_t row0 = (size_t)b * T + (size_t)kc * 64 + kr0;
        float *dkp = dk + row0 * ldqk + h * DQ + 2 * t;
        float *dvp = dv + row0 * ldv + h * DV + 2 * t;
#pragma unroll
        for (int nd = 0; nd < NQ; ++nd) {
            float2 a = *reinterpret_cast<const float2 *>(rK + kr0 * LDK + nd * 8 + 2 * t);
            float2 c = *reinterpret_cast<const float2 *>(rK + (kr0 + 8) * LDK + nd * 8 + 2 * t);
            *reinterpret_cast<float2 *>(dkp + nd * 8) = make_float2((dKa[nd][0] + a.x) * scale, (dKa[nd][1] + a.y) * scale);
            *reinterpret_cast<float2 *>(dkp + (size_t)8 * ldqk + nd * 8) =
                make_float2((dKa[nd][2] + c.x) * scale, (dKa[nd][3] + c.y) * scale);
        }
#pragma unroll
        for (int nv = 0; nv < NV; ++nv) {
            float2 a = *reinterpret_cast<const float2 *>(rV + kr0 * LDV + nv * 8 + 2 * t);
            float2 c = *reinterpret_cast<const float2 *>(rV + (kr0 + 8) * LDV + nv * 8 + 2 * t);
            *reinterpret_cast<float2 *>(dvp + nv * 8) = make_float2(dVa[nv][0] + a.x, dVa[nv][1] + a.y);
            *reinterpret_cast<float2 *>(dvp + (size_t)8 * ldv + nv * 8) = make_float2(dVa[nv][2] + c.x, dVa[nv][3] + c.y);
        }
    }
    if (tid == 0 && m && dA && act && kc < Nc - 1) {
        float tot = 0.f;
#pragma unroll
        for (int i = 0; i < 8; ++i) tot += sRed[i];
        atomicAdd(dA + ((size_t)(b * Nc + kc) * NHm + n) * 2, tot);
    }
}

// ------------------------------------------------------------------------------------------------------------------
// host side
// ------------------------------------------------------------------------------------------------------------------
static void attn_check_args(const char *who, const void *q, const void *k, int ldqk, const void *v, int ldv, int T,
                            int NH, int NHm, int dq, int dvh) {
    bool ok = (T % 64 == 0) && (ldqk % 4 == 0) && (ldv % 4 == 0) && NHm > 0 && (NH % NHm == 0) &&
              ((uintptr_t)q % 16 == 0) && ((uintptr_t)k % 16 == 0) && ((uintptr_t)v % 16 == 0);
    if (!ok) {
        fprintf(stderr, "%s: unsupported arguments (need T%%64==0, ldqk%%4==0, ldv%%4==0, 16B-aligned q/k/v, NH%%NHm==0): "
                "T=%d ldqk=%d ldv=%d NH=%d NHm=%d dq=%d dvh=%d\n", who, T, ldqk, ldv, NH, NHm, dq, dvh);
        exit(1);
    }
}

template <int DQ, int DV, bool SPLIT>
static void launch_fwd(float *out, float *lse, const float *q, const float *k, int ldqk, const float *v, int ldv,
                       const float *m, int B, int T, int NH, int NHm, cudaStream_t st) {
    const int Nc = T / 64;
    const size_t smem = (size_t)2 * 64 * ((DQ + 4) + (DV + 4)) * sizeof(float) + (size_t)Nc * 8;
    static size_t set = 0;
    if (smem > set) {
        CUDA_CHECK(cudaFuncSetAttribute(attn_fwd_kernel<DQ, DV, SPLIT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        set = smem;
    }
    const float sl2 = (1.0f / sqrtf((float)DQ)) * ATT_LOG2E;
    attn_fwd_kernel<DQ, DV, SPLIT><<<dim3(B * NH, Nc), 128, smem, st>>>(out, lse, q, k, ldqk, v, ldv, m, T, NH, NHm, sl2);
    CUDA_CHECK(cudaGetLastError());
}

template <int DQ, int DV, bool SPLIT>
static void launch_bwd(float *dq, float *dk, float *dv, float *dA, const float *dout, const float *lse2,
                       const float *delta, const float *q, const float *k, int ldqk, const float *v, int ldv,
                       const float *m, int B, int T, int NH, int NHm, cudaStream_t st) {
    const int Nc = T / 64;
    const size_t smem = (size_t)(3 * 64 * (DQ + 4) + 3 * 64 * (DV + 4) + 4 * 64 + 64 * 68) * sizeof(float);
    static bool set = false;
    if (!set) {
        CUDA_CHECK(cudaFuncSetAttribute(attn_bwd_kernel<DQ, DV, SPLIT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        set = true;
    }
    const float scale = 1.0f / sqrtf((float)DQ);
    attn_bwd_kernel<DQ, DV, SPLIT><<<dim3(B * NH, Nc), 256, smem, st>>>(dq, dk, dv, dA, dout, lse2, delta, q, k, ldqk, v,
                                                                       ldv, m, T, NH, NHm, scale, scale * ATT_LOG2E);
    CUDA_CHECK(cudaGetLastError());
}

#define ATT_SHAPES(X) X(24, 48) X(64, 128) X(64, 64)

void attention_forward(float *out, float *lse, const float *q, const float *k, int ldqk, const float *v, int ldv,
                       const float *m, int B, int T, int NH, int NHm, int dq, int dvh, cudaStream_t st) {
    if (!m) NHm = NH;
    attn_check_args("attention_forward", q, k, ldqk, v, ldv, T, NH, NHm, dq, dvh);
#define ATT_FWD_CASE(A, C)                                                                                          \
    if (dq == A && dvh == C) {                                                                                      \
        if (g_attn_passes == 3) launch_fwd<A, C, true>(out, lse, q, k, ldqk, v, ldv, m, B, T, NH, NHm, st);         \
        else launch_fwd<A, C, false>(out, lse, q, k, ldqk, v, ldv, m, B, T, NH, NHm, st);                           \
        return;                                                                                                     \
    }
    ATT_SHAPES(ATT_FWD_CASE)
#undef ATT_FWD_CASE
    fprintf(stderr, "attention_forward: unsupported head dims dq=%d dvh=%d\n", dq, dvh);
    exit(1);
}

static float *g_att_scratch = nullptr;
static size_t g_att_scratch_n = 0;

void attention_backward(float *dq, float *dk, float *dv, float *dA, const float *dout, const float *out, const float *lse,
                        const float *q, const float *k, int ldqk, const float *v, int ldv, const float *m,
                        int B, int T, int NH, int NHm, int dq_, int dvh, cudaStream_t st) {
    if (!m) NHm = NH;
    attn_check_args("attention_backward", q, k, ldqk, v, ldv, T, NH, NHm, dq_, dvh);
    if (((uintptr_t)dq % 16) || ((uintptr_t)dk % 16) || ((uintptr_t)dv % 16)) {
        fprintf(stderr, "attention_backward: dq/dk/dv must be 16-byte aligned\n"); exit(1);
    }
    const size_t need = (size_t)2 * B * NH * T;
    if (need > g_att_scratch_n) {
        if (g_att_scratch) CUDA_CHECK(cudaFree(g_att_scratch));
        CUDA_CHECK(cudaMalloc(&g_att_scratch, need * sizeof(float)));
        g_att_scratch_n = need;
    }
    float *delta = g_att_scratch, *lse2 = g_att_scratch + (size_t)B * NH * T;
    {
        const long warps = (long)B * T * NH;
        const int threads = 256;
        const long blocks = (warps * 32 + threads - 1) / threads;
        attn_bwd_pre_kernel<<<(unsigned)blocks, threads, 0, st>>>(delta, lse2, dq, (m && dA) ? dA : nullptr, dout, out, lse, ldqk,
                                                                  B, T, NH, NHm, dq_, dvh);
        CUDA_CHECK(cudaGetLastError());
    }
#define ATT_BWD_CASE(A, C)                                                                                          \
    if (dq_ == A && dvh == C) {                                                                                     \
        if (g_attn_passes == 3)                                                                                     \
            launch_bwd<A, C, true>(dq, dk, dv, dA, dout, lse2, delta, q, k, ldqk, v, ldv, m, B, T, NH, NHm, st);    \
        else launch_bwd<A, C, false>(dq, dk, dv, dA, dout, lse2, delta, q, k, ldqk, v, ldv, m, B, T, NH, NHm, st);  \
        return;                                                                                                     \
    }
    ATT_SHAPES(ATT_BWD_CASE)
#undef ATT_BWD_CASE
    fprintf(stderr, "attention_backward: unsupported head dims dq=%d dvh=%d\n", dq_, dvh);
    exit(1);
}

#ifndef MASKED_ATTENTION_NO_MAIN
// ==================================================================================================================
// test harness: double-precision CPU oracle (SPEC §5.3 / §6.2 / §6.3 / §8, materializing scores), then timings
// ==================================================================================================================
#include <vector>
#include <algorithm>
#include <string.h>

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double urand() {   // xorshift64*
    g_rng ^= g_rng >> 12; g_rng ^= g_rng << 25; g_rng ^= g_rng >> 27;
    return (double)((g_rng * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0);
}
static float nrand() {    // approx N(0,1)
    double s = 0; for (int i = 0; i < 12; ++i) s += urand(); return (float)(s - 6.0);
}

static float frand() { return (float)(urand() * 3.4641016 - 1.7320508); }   // uniform, std 1 (timing data)

struct Shape { int B, T, NH, NHm, dq, dv; };

// layouts used by the test: one packed row per token [q | k | v | pad], ld = W for all three
struct Packed { int W, oq, ok, ov; };
static Packed make_packed(const Shape &s) { Packed p; p.oq = 0; p.ok = s.NH * s.dq; p.ov = 2 * s.NH * s.dq; p.W = p.ov + s.NH * s.dv + 4; return p; }

static void cpu_reference(const Shape &S, const Packed &P, const std::vector<float> &qkv, const float *m,
                          const std::vector<float> &dout, std::vector<double> &O, std::vector<double> &L,
                          std::vector<double> &dqkv, std::vector<double> &dA) {
    const int B = S.B, T = S.T, NH = S.NH, NHm = m ? S.NHm : S.NH, Dq = S.dq, Dv = S.dv, W = P.W, Nc = T / 64;
    const int G = NH / NHm;
    const double sc = 1.0 / sqrt((double)Dq);
    O.assign((size_t)B * T * NH * Dv, 0.0); L.assign((size_t)B * NH * T, 0.0);
    dqkv.assign((size_t)B * T * W, 0.0); dA.assign((size_t)B * Nc * NHm * 2, 0.0);
    std::vector<double> e(T), wgt(T), dP(T);
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h) {
            const int n = h / G;
            for (int i = 0; i < T; ++i) {
                const int ci = i / 64;
                const float *qi = &qkv[((size_t)b * T + i) * W + P.oq + h * Dq];
                double mx = -1e300;
                for (int j = 0; j <= i; ++j) {
                    const int cj = j / 64;
                    wgt[j] = (cj == ci) ? 1.0 : (m ? (double)m[((size_t)(b * Nc + cj) * NHm + n) * 2] : 1.0);
                    if (wgt[j] == 0.0) continue;
                    const float *kj = &qkv[((size_t)b * T + j) * W + P.ok + h * Dq];
                    double d = 0; for (int x = 0; x < Dq; ++x) d += (double)qi[x] * kj[x];
                    e[j] = d * sc; mx = std::max(mx, e[j]);
                }
                double Z = 0; for (int j = 0; j <= i; ++j) if (wgt[j] != 0.0) Z += wgt[j] * exp(e[j] - mx);
                const double lse = mx + log(Z);
                L[((size_t)b * NH + h) * T + i] = lse;
                double *oi = &O[((size_t)b * T + i) * NH * Dv + h * Dv];
                for (int j = 0; j <= i; ++j) {
                    if (wgt[j] == 0.0) continue;
                    const double p = wgt[j] * exp(e[j] - lse);
                    const float *vj = &qkv[((size_t)b * T + j) * W + P.ov + h * Dv];
                    for (int x = 0; x < Dv; ++x) oi[x] += p * vj[x];
                }
                // backward for row i
                const float *doi = &dout[((size_t)b * T + i) * NH * Dv + h * Dv];
                double delta = 0; for (int x = 0; x < Dv; ++x) delta += (double)doi[x] * oi[x];
                double *dqi = &dqkv[((size_t)b * T + i) * W + P.oq + h * Dq];
                for (int j = 0; j <= i; ++j) {
                    if (wgt[j] == 0.0) continue;
                    const int cj = j / 64;
                    const float *vj = &qkv[((size_t)b * T + j) * W + P.ov + h * Dv];
                    const float *kj = &qkv[((size_t)b * T + j) * W + P.ok + h * Dq];
                    double dp = 0; for (int x = 0; x < Dv; ++x) dp += (double)doi[x] * vj[x];
                    const double pe = exp(e[j] - lse), p = wgt[j] * pe;
                    const double dE = p * (dp - delta);
                    double *dkj = &dqkv[((size_t)b * T + j) * W + P.ok + h * Dq];
                    double *dvj = &dqkv[((size_t)b * T + j) * W + P.ov + h * Dv];
                    for (int x = 0; x < Dq; ++x) { dqi[x] += sc * dE * kj[x]; dkj[x] += sc * dE * qi[x]; }
                    for (int x = 0; x < Dv; ++x) dvj[x] += p * doi[x];
                    if (m && cj < ci) dA[((size_t)(b * Nc + cj) * NHm + n) * 2] += pe * (dp - delta);
                }
            }
        }
}

static double nrel(const double *ref, const float *got, size_t n, size_t stride_sel_count, const std::vector<size_t> *idx) {
    double num = 0, den = 0;
    if (idx) {
        for (size_t ii = 0; ii < idx->size(); ++ii) { size_t i = (*idx)[ii]; double d = (double)got[i] - ref[i]; num += d * d; den += ref[i] * ref[i]; }
    } else {
        for (size_t i = 0; i < n; ++i) { double d = (double)got[i] - ref[i]; num += d * d; den += ref[i] * ref[i]; }
    }
    (void)stride_sel_count;
    if (den == 0) return sqrt(num);
    return sqrt(num / den);
}

// mask_kind: 0 = none (plain causal), 1 = random 0/1 (p active 0.5), 2 = real in [0,1] (some exact zeros)
static bool run_check(const char *name, const Shape &S, int mask_kind, int passes, double tol) {
    attention_set_tf32_passes(passes);
    const int B = S.B, T = S.T, NH = S.NH, NHm = S.NHm, Nc = T / 64;
    const Packed P = make_packed(S);
    const size_t nqkv = (size_t)B * T * P.W, nout = (size_t)B * T * NH * S.dv, nl = (size_t)B * NH * T, nm = (size_t)B * Nc * NHm * 2;
    std::vector<float> qkv(nqkv), dout(nout), mh(nm);
    for (auto &x : qkv) x = nrand();
    for (auto &x : dout) x = nrand();
    for (int b = 0; b < B; ++b) for (int c = 0; c < Nc; ++c) for (int n = 0; n < NHm; ++n) {
        float a;
        if (c == Nc - 1) a = 1.f;
        else if (mask_kind == 1) a = urand() < 0.5 ? 1.f : 0.f;
        else { double r = urand(); a = r < 0.25 ? 0.f : (float)urand(); }
        mh[((size_t)(b * Nc + c) * NHm + n) * 2 + 0] = a;
        mh[((size_t)(b * Nc + c) * NHm + n) * 2 + 1] = (c == Nc - 1) ? 1.f : 1.f - a;
    }
    const float *mptr_h = mask_kind ? mh.data() : nullptr;
    std::vector<double> O, L, dqkv, dA;
    cpu_reference(S, P, qkv, mptr_h, dout, O, L, dqkv, dA);

    float *d_qkv, *d_out, *d_lse, *d_dout, *d_m, *d_dqkv, *d_dA;
    CUDA_CHECK(cudaMalloc(&d_qkv, nqkv * 4)); CUDA_CHECK(cudaMalloc(&d_out, nout * 4)); CUDA_CHECK(cudaMalloc(&d_lse, nl * 4));
    CUDA_CHECK(cudaMalloc(&d_dout, nout * 4)); CUDA_CHECK(cudaMalloc(&d_m, nm * 4)); CUDA_CHECK(cudaMalloc(&d_dqkv, nqkv * 4));
    CUDA_CHECK(cudaMalloc(&d_dA, nm * 4));
    CUDA_CHECK(cudaMemcpy(d_qkv, qkv.data(), nqkv * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_dout, dout.data(), nout * 4, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(d_m, mh.data(), nm * 4, cudaMemcpyHostToDevice));
    // poison: NaN everywhere in outputs; dA with a sentinel so we can check [...,1] is untouched
    CUDA_CHECK(cudaMemset(d_out, 0xFF, nout * 4)); CUDA_CHECK(cudaMemset(d_lse, 0xFF, nl * 4));
    CUDA_CHECK(cudaMemset(d_dqkv, 0xFF, nqkv * 4));
    std::vector<float> sentinel(nm, 12345.0f);
    CUDA_CHECK(cudaMemcpy(d_dA, sentinel.data(), nm * 4, cudaMemcpyHostToDevice));
    const float *dm = mask_kind ? d_m : nullptr;
    const int NHm_arg = mask_kind ? NHm : NH;

    attention_forward(d_out, d_lse, d_qkv + P.oq, d_qkv + P.ok, P.W, d_qkv + P.ov, P.W, dm, B, T, NH, NHm_arg, S.dq, S.dv, 0);
    CUDA_CHECK(cudaDeviceSynchronize());
    attention_backward(d_dqkv + P.oq, d_dqkv + P.ok, d_dqkv + P.ov, d_dA, d_dout, d_out, d_lse, d_qkv + P.oq, d_qkv + P.ok, P.W,
                       d_qkv + P.ov, P.W, dm, B, T, NH, NHm_arg, S.dq, S.dv, 0);
    CUDA_CHECK(cudaDeviceSynchronize());

    std::vector<float> go(nout), gl(nl), gd(nqkv), gA(nm);
    CUDA_CHECK(cudaMemcpy(go.data(), d_out, nout * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(gl.data(), d_lse, nl * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(gd.data(), d_dqkv, nqkv * 4, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(gA.data(), d_dA, nm * 4, cudaMemcpyDeviceToHost));

    std::vector<size_t> iq, ik, iv, ipad, iA0;
    for (size_t r = 0; r < (size_t)B * T; ++r) {
        for (int x = 0; x < NH * S.dq; ++x) { iq.push_back(r * P.W + P.oq + x); ik.push_back(r * P.W + P.ok + x); }
        for (int x = 0; x < NH * S.dv; ++x) iv.push_back(r * P.W + P.ov + x);
        for (int x = P.ov + NH * S.dv; x < P.W; ++x) ipad.push_back(r * P.W + x);
    }
    for (size_t i = 0; i < nm; i += 2) iA0.push_back(i);
    const double eo = nrel(O.data(), go.data(), nout, 0, nullptr);
    const double el = nrel(L.data(), gl.data(), nl, 0, nullptr);
    const double eq = nrel(dqkv.data(), gd.data(), 0, 0, &iq);
    const double ek = nrel(dqkv.data(), gd.data(), 0, 0, &ik);
    const double ev = nrel(dqkv.data(), gd.data(), 0, 0, &iv);
    double eA = 0; int badA = 0, touched1 = 0, padw = 0;
    if (mask_kind) {
        eA = nrel(dA.data(), gA.data(), 0, 0, &iA0);
        for (size_t i = 0; i < nm; i += 2) {
            if (mh[i] == 0.f && gA[i] != 0.f) ++badA;            // inactive chunk must be exactly 0
            if (gA[i + 1] != 12345.0f) ++touched1;               // [...,1] never touched
        }
        for (int b = 0; b < B; ++b) for (int n = 0; n < NHm; ++n)   // last chunk must be exactly 0
            if (gA[((size_t)(b * Nc + Nc - 1) * NHm + n) * 2] != 0.f) ++badA;
    }
    for (size_t i : ipad) if (!std::isnan(gd[i])) ++padw;                   // gradient pad columns untouched
    double worst = std::max(std::max(std::max(eo, el), std::max(eq, ek)), std::max(ev, eA));
    if (std::isnan(worst)) worst = 1e30;
    for (auto x : go) if (std::isnan(x)) worst = 1e30;
    const bool ok = worst < tol && badA == 0 && touched1 == 0 && padw == 0;
    printf("%-28s %s  out %.2e lse %.2e dq %.2e dk %.2e dv %.2e dA %.2e  (dA bad %d, dA[1] touched %d, pad written %d) %s\n",
           name, passes == 3 ? "3xTF32" : "1xTF32", eo, el, eq, ek, ev, eA, badA, touched1, padw, ok ? "PASS" : "FAIL");
    cudaFree(d_qkv); cudaFree(d_out); cudaFree(d_lse); cudaFree(d_dout); cudaFree(d_m); cudaFree(d_dqkv); cudaFree(d_dA);
    return ok;
}

static int g_reps = 10;
static void time_case(const char *name, int B, int T, int NH, int NHm, int Dq, int Dv, double frac, int passes) {
    attention_set_tf32_passes(passes);
    const int Nc = T / 64;
    const bool masked = frac >= 0;
    const size_t nq = (size_t)B * T * NH * Dq, nv = (size_t)B * T * NH * Dv, nl = (size_t)B * NH * T, nm = (size_t)B * Nc * NHm * 2;
    std::vector<float> hq(nq), hv(nv), hm(nm);
    float *dq_, *dk_, *dv_, *dQ, *dK, *dV, *dO, *dOut, *dL, *dM, *dA;
    CUDA_CHECK(cudaMalloc(&dq_, nq * 4)); CUDA_CHECK(cudaMalloc(&dk_, nq * 4)); CUDA_CHECK(cudaMalloc(&dv_, nv * 4));
    CUDA_CHECK(cudaMalloc(&dQ, nq * 4)); CUDA_CHECK(cudaMalloc(&dK, nq * 4)); CUDA_CHECK(cudaMalloc(&dV, nv * 4));
    CUDA_CHECK(cudaMalloc(&dO, nv * 4)); CUDA_CHECK(cudaMalloc(&dOut, nv * 4)); CUDA_CHECK(cudaMalloc(&dL, nl * 4));
    CUDA_CHECK(cudaMalloc(&dM, nm * 4)); CUDA_CHECK(cudaMalloc(&dA, nm * 4));
    for (auto &x : hq) x = frand(); CUDA_CHECK(cudaMemcpy(dq_, hq.data(), nq * 4, cudaMemcpyHostToDevice));
    for (auto &x : hq) x = frand(); CUDA_CHECK(cudaMemcpy(dk_, hq.data(), nq * 4, cudaMemcpyHostToDevice));
    for (auto &x : hv) x = frand(); CUDA_CHECK(cudaMemcpy(dv_, hv.data(), nv * 4, cudaMemcpyHostToDevice));
    for (auto &x : hv) x = frand(); CUDA_CHECK(cudaMemcpy(dO, hv.data(), nv * 4, cudaMemcpyHostToDevice));
    double act = 0;
    for (int b = 0; b < B; ++b) for (int c = 0; c < Nc; ++c) for (int n = 0; n < NHm; ++n) {
        float a = (c == Nc - 1) ? 1.f : (urand() < frac ? 1.f : 0.f);
        hm[((size_t)(b * Nc + c) * NHm + n) * 2] = a; hm[((size_t)(b * Nc + c) * NHm + n) * 2 + 1] = 1.f - a; act += a;
    }
    act /= (double)B * Nc * NHm;
    CUDA_CHECK(cudaMemcpy(dM, hm.data(), nm * 4, cudaMemcpyHostToDevice));
    const float *mp = masked ? dM : nullptr;
    const int nhm = masked ? NHm : NH;
    cudaEvent_t e0, e1, e2;
    CUDA_CHECK(cudaEventCreate(&e0)); CUDA_CHECK(cudaEventCreate(&e1)); CUDA_CHECK(cudaEventCreate(&e2));
    std::vector<float> tf, tb;
    const int warm = g_reps > 1 ? 3 : 0;
    for (int r = 0; r < g_reps + warm; ++r) {
        CUDA_CHECK(cudaEventRecord(e0));
        attention_forward(dOut, dL, dq_, dk_, NH * Dq, dv_, NH * Dv, mp, B, T, NH, nhm, Dq, Dv, 0);
        CUDA_CHECK(cudaEventRecord(e1));
        attention_backward(dQ, dK, dV, dA, dO, dOut, dL, dq_, dk_, NH * Dq, dv_, NH * Dv, mp, B, T, NH, nhm, Dq, Dv, 0);
        CUDA_CHECK(cudaEventRecord(e2));
        CUDA_CHECK(cudaEventSynchronize(e2));
        float a, b2; CUDA_CHECK(cudaEventElapsedTime(&a, e0, e1)); CUDA_CHECK(cudaEventElapsedTime(&b2, e1, e2));
        if (r >= warm) { tf.push_back(a); tb.push_back(b2); }
    }
    std::sort(tf.begin(), tf.end()); std::sort(tb.begin(), tb.end());
    const double f = tf[tf.size() / 2], bw = tb[tb.size() / 2];
    // useful attention FLOPs: pairs × 2·(dq + dv) forward, pairs × 2·(2dq + 2dv + dq) backward (incl. S recompute)
    double pairs = 0;
    {   // pairs actually attended (per head, averaged mask): own chunk causal + active earlier chunks
        for (int b = 0; b < B; ++b) for (int n = 0; n < nhm; ++n) for (int c = 0; c < Nc; ++c) {
            double own = 64.0 * 65.0 / 2.0, earlier = 0;
            for (int c2 = 0; c2 < c; ++c2) earlier += masked ? (hm[((size_t)(b * Nc + c2) * NHm + n) * 2] != 0.f) : 1.0;
            pairs += (own + earlier * 64.0 * 64.0) * (NH / nhm);
        }
    }
    const double ff = pairs * 2.0 * (Dq + Dv), fb = pairs * 2.0 * (3.0 * Dq + 2.0 * Dv);
    printf("%-34s %s active %.3f  fwd %8.3f ms (%5.1f TFLOP/s)  bwd %8.3f ms (%5.1f TFLOP/s)  total %8.3f ms\n", name,
           passes == 3 ? "3xTF32" : "1xTF32", masked ? act : 1.0, f, ff / f * 1e-9, bw, fb / bw * 1e-9, f + bw);
    cudaFree(dq_); cudaFree(dk_); cudaFree(dv_); cudaFree(dQ); cudaFree(dK); cudaFree(dV); cudaFree(dO); cudaFree(dOut);
    cudaFree(dL); cudaFree(dM); cudaFree(dA);
    cudaEventDestroy(e0); cudaEventDestroy(e1); cudaEventDestroy(e2);
}

int main(int argc, char **argv) {
    int dev = 0; cudaDeviceProp prop; CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    printf("device: %s, %d SMs, smem/block optin %zu\n", prop.name, prop.multiProcessorCount, prop.sharedMemPerBlockOptin);
    const char *mode = argc > 1 ? argv[1] : "all";          // all | check | time | prof
    if (strcmp(mode, "prof") == 0) {
        g_reps = 1;
        for (int passes : {3, 1}) time_case("NAtS B8 T4096 NH12 64/128 f=1.0", 8, 4096, 12, 6, 64, 128, 1.0, passes);
        return 0;
    }
    bool ok = true;
    if (strcmp(mode, "tiny") == 0) {   // small run for compute-sanitizer
        const Shape tiny = {2, 256, 4, 2, 24, 48}, causal = {2, 256, 2, 2, 64, 64}, mid = {1, 256, 12, 6, 64, 128};
        for (int passes : {3, 1}) {
            ok &= run_check("tiny 0/1 mask", tiny, 1, passes, passes == 3 ? 1e-4 : 2e-3);
            ok &= run_check("T256 NH12 real mask", mid, 2, passes, passes == 3 ? 1e-4 : 2e-3);
            ok &= run_check("causal B2 T256 NH2 d64", causal, 0, passes, passes == 3 ? 1e-4 : 2e-3);
        }
        printf("TINY %s\n", ok ? "ALL PASS" : "SOME FAIL");
        return ok ? 0 : 1;
    }
    if (strcmp(mode, "time") != 0) {
        const Shape tiny = {2, 256, 4, 2, 24, 48}, mid = {1, 512, 12, 6, 64, 128}, causal = {2, 256, 2, 2, 64, 64};
        for (int passes : {3, 1}) {
            const double tol = passes == 3 ? 1e-4 : 1e-3;
            ok &= run_check("tiny 0/1 mask", tiny, 1, passes, tol);
            ok &= run_check("tiny real mask", tiny, 2, passes, tol);
            ok &= run_check("B1 T512 NH12 0/1 mask", mid, 1, passes, tol);
            ok &= run_check("B1 T512 NH12 real mask", mid, 2, passes, tol);
            ok &= run_check("causal B2 T256 NH2 d64", causal, 0, passes, tol);
        }
        printf("CORRECTNESS %s (3xTF32 tol 1e-4, 1xTF32 tol 1e-3)\n", ok ? "ALL PASS" : "SOME FAIL");
    }
    if (strcmp(mode, "check") != 0) {
        for (int passes : {3, 1}) {
            time_case("NAtS B8 T4096 NH12 64/128 f=1.0", 8, 4096, 12, 6, 64, 128, 1.0, passes);
            time_case("NAtS B8 T4096 NH12 64/128 f=0.5", 8, 4096, 12, 6, 64, 128, 0.5, passes);
            time_case("NAtS B8 T4096 NH12 64/128 f=0.25", 8, 4096, 12, 6, 64, 128, 0.25, passes);
            time_case("causal B8 T4096 NH16 64/64", 8, 4096, 16, 16, 64, 64, -1.0, passes);
        }
    }
    return ok ? 0 : 1;
}
#endif
