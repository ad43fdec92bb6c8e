/*
train_natsl.cu — the NAtS-L trainer on NVIDIA GPUs, one or several (the GPU twin of train_natsl.c).

Same program as train_natsl.c: the same flags (plus -p fp32|bf16), the same model, presets and patterns,
the same main.log lines, the same checkpoint files and -D comparison dump (common/). The file mirrors
train_natsl.c section by section with the same function names and contracts, so the two can be read side by
side: every layer's _forward/_backward here launches CUDA kernels (or cuBLAS) that compute what the C loop
computes. The comments cite doc/model.md as "§5.3".

The file reads in train_natsl.c's order, then the appendices, each one family of GPU code:
  1. conventions and the layers: each layer's host function beside its simple kernels (embedding, linear, norms,
     SwiGLU, short conv, gates, RoPE, the classifier's loss, ...)
  2. the two NAtS-L token mixers (their entry points; kernels in appendices C and D) and the router, the gated norm
  3. the model: parameters, activations, the G, A, N and S layers, the forward and backward passes
  3b. decoding with the cache: the per-token kernels and the decoder of the samples and -N (doc/model.md §14)
  4. the training step: gradient norm, clipping, AdamW (the reduction over several GPUs: appendix F)
  5. the program: the GPU backend of the training driver common/train_main.inc
  Appendix A. CUDA plumbing and tensor-core primitives (error checks, storage types, cp.async, mma.sync, swizzled
     tiles, deterministic column sums, bf16 row copies, scratch)  } placed before section 1:
  Appendix B. the profiler (NATSL_PROFILE)                         } every section uses them
  Appendix C. the attention kernels (masked flash attention: TF32/3xTF32, bf16 wgmma) and the softmax op's host code
  Appendix D. the GDN kernels (the token recurrence, the chunked WY/UT form) and the GDN op's host code
  Appendix E. GEMM selection (cuBLAS; cuBLASLt with a timed choice of algorithm in bf16 mode)
  Appendix F. several GPUs (NCCL: the gradient buckets' reduction, ZeRO-1)
A section that calls into a later appendix declares what it takes from there ("From appendix E: ...").

GPU organization (see dev/cuda/README.md):
  * parameters, gradients, AdamW moments and all activations live on the GPU in flat buffers with the
    C program's layouts (config.h's parameter layout; layer_acts_layout for activations);
  * linear layers go through cuBLAS (row-major y = x Wᵀ mapped onto column-major products; bf16 mode through
    cuBLASLt with a per-shape algorithm search); in fp32 mode cuBLAS runs in CUBLAS_PEDANTIC_MATH (true fp32,
    no TF32);
  * the softmax ops (A layers, NAtS-L softmax op) use the masked flash-attention kernels (appendix C; their
    test harness: dev/cuda/attention/masked_attention.cu), in their 3xTF32 (fp32-accurate) mode;
  * TESTING defined before including this file leaves out main (dev/bench_gpu.cu and the harnesses in
    dev/cuda/ include it);
  * the GDN op is the chunked WY/UT form (64-token chunks; its test harness and notes: dev/cuda/gdn): in bf16
    mode on the bf16 tensor cores for dk ∈ {64, 128, 192} (TF32 block matmuls for dk 32, 48), in fp32 mode fp32
    FMA for dk ∈ {32, 48, 64, 128}, dv % 32 == 0; other shapes (fp32 mode at the 760m preset's dk = 192) fall
    back to the plain token recurrence of train_natsl.c, parallel over (batch, head, value-column tiles). Its
    workspace is one explicit buffer shared by all G/N/S layers and with the logits (logits_ws_reals);
  * column sums of weight gradients (norm weights, conv weights, gate biases) are two-pass and
    deterministic, and so is the embedding backward (each token's positions summed in order); the attention
    dq and the router's dA use float atomics (so do the token-recurrence fallback's dq/dk/dg/dβ/dA): runs
    with softmax layers may differ from run to run at the 1e-7 level;
  * several GPUs (doc/model.md §9.4; appendix F): one process per GPU, NCCL on a second stream; each gradient
    bucket (a layer's tensors) is all-reduced, or reduce-scattered under ZeRO-1, as soon as the last
    micro-step's backward pass has finished it (grads_ready);
  * one host round trip per micro-step for the loss, one per step for the gradient norm (plus the small
    router masks read back for the "sfr" statistics of N layers, and per S layer its s_sel in every forward
    pass and two dot products in every backward pass, §7.3);
  * -p bf16 (the default): matmuls on bf16 tensor cores with fp32 accumulation (CUBLAS_COMPUTE_32F);
    tensors that only feed matmuls, and matmul outputs read only by kernels that take bf16, are stored in
    bf16 (the normalized block inputs, the gated norm's and SwiGLU's outputs, the projection into the short
    conv, the gate, the MLP's gate/up, the logits, and the gradients those kernels write for matmuls);
    the matmul weights' bf16 copies are made once per parameter update (AdamW writes them), the other fp32
    operands are copied to bf16 per call; the token mixers' operands (the conv's
    Q, K, V, q̂ and k̂, the N layer's qa and ka, the A layer's projection) are stored in bf16 by their producers,
    and attention runs on the bf16 tensor cores for head dims (64,64) and (64,128) (the A layer, the 340m/760m
    N layers; else 1xTF32), the GDN op as above; the residual stream, the op outputs, the other norms' inputs,
    master weights and AdamW stay fp32 (train_natsl -p bf16 rounds the same values on the CPU);
  * NATSL_PROFILE=1 in the environment: per-op-kind GPU times printed at the end of training (each op waited
    for); NATSL_PROFILE=2: the same without waiting, with the GPU time between the ops (launch gaps).
Build: make train_natsl_cu (nvcc -O3 -arch=compute_90a -code=sm_90a (Hopper: the attention forward uses wgmma), links cuBLAS, cuBLASLt and NCCL; make train_natsl_cu_mpi adds MPI).
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <errno.h>
#include <dirent.h>
#include <sys/stat.h>
#include <algorithm>
#include <vector>
#include <deque>
#include <type_traits>
#include <cuda.h>          // CUtensorMap (the attention kernels' TMA loads)
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#include <nccl.h>
#ifdef USE_MPI
#define OMPI_SKIP_MPICXX 1  // the C interface only (MPI's C++ bindings do not build warning-free)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif
#include "common/config.h"
#include "common/dataloader.h"
#include "common/tokenizer.h"
#include "common/checkpoint.h"
#include "common/train_util.h"
#include "common/budget.h"
#include "common/dist.h"

typedef float real;
#include "common/layout.h" // LayerParams, LayerActs: named pointers into the flat buffers (shared with the C file)

#define CH NATSL_CHUNK

// ================================================================================================
// Appendix A (first: every section uses it). CUDA plumbing and tensor-core primitives
// ================================================================================================

// Every launch goes to the calling thread's default stream (nvcc --default-stream per-thread, the Makefile's), a stream
// like any other: the decoder captures its step into a CUDA graph on it (section 3b), which the legacy default stream
// does not allow. The libraries take it explicitly (cudaStreamPerThread).
#ifndef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error "train_natsl.cu is built with nvcc --default-stream per-thread (see the Makefile's NVCCFLAGS)"
#endif

#define CUDA_CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, #x); exit(1); } } while (0)
#define CUBLAS_CHECK(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { \
    fprintf(stderr, "cuBLAS error %d at %s:%d: %s\n", (int)s_, __FILE__, __LINE__, #x); exit(1); } } while (0)
#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

__device__ __forceinline__ float sigmoidf_(float x) { return 1.f / (1.f + expf(-x)); }
// SiLU and the gate activation in the glue kernels' passes, from the fast exp and division (__expf, __fdividef:
// MUFU.EX2 and MUFU.RCP, no IEEE division's correction): relative error (4 + 1.2|x|) ulp, below 1e-5 for |x| < 80; 0
// where x < −87, as silu underflows. Far inside fp32 mode's bar (8.3a: 1e-4); bf16 rounds to 4e-3.
__device__ __forceinline__ float fsigmoidf_(float x) { return __fdividef(1.f, 1.f + __expf(-x)); }
__device__ __forceinline__ float siluf_(float x) { return __fdividef(x, 1.f + __expf(-x)); }
// the gated norm's gate activation φ (5.6g): GATE_SILU or GATE_SIGMOID (Config.gate_act); and φ with its derivative
__device__ __forceinline__ float gate_actf_(float x, int act) {
    const float s = fsigmoidf_(x);
    return act == GATE_SIGMOID ? s : x * s;
}
__device__ __forceinline__ void gate_act_dphi_(float x, int act, float &phi, float &dphi) {
    const float s = fsigmoidf_(x);
    phi = act == GATE_SIGMOID ? s : x * s;
    dphi = act == GATE_SIGMOID ? s * (1.f - s) : s * (1.f + x * (1.f - s));
}
// element access in either storage precision (the matmul inputs are bf16 in -p bf16, see matmul_forward)
__device__ __forceinline__ float ld(const float *p) { return *p; }
__device__ __forceinline__ float ld(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ void st(float *p, float v) { *p = v; }
__device__ __forceinline__ void st(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }
// pairs of adjacent values (p 4-byte aligned for bf16, 8-byte for fp32)
__device__ __forceinline__ float2 ld2(const float *p) { return *reinterpret_cast<const float2 *>(p); }
__device__ __forceinline__ float2 ld2(const __nv_bfloat16 *p) { return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(p)); }
__device__ __forceinline__ void st2(float *p, float a, float b) { *reinterpret_cast<float2 *>(p) = make_float2(a, b); }
__device__ __forceinline__ void st2(__nv_bfloat16 *p, float a, float b) { *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(a, b); }
__device__ __forceinline__ float4 ld4(const float *p) { return *reinterpret_cast<const float4 *>(p); }
__device__ __forceinline__ float4 ld4(const __nv_bfloat16 *p) { // 8-byte aligned
    const uint2 u = *reinterpret_cast<const uint2 *>(p);
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u.x));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u.y));
    return make_float4(a.x, a.y, b.x, b.y);
}
__device__ __forceinline__ void st4(float *p, float a, float b, float c, float d) {
    *reinterpret_cast<float4 *>(p) = make_float4(a, b, c, d);
}
__device__ __forceinline__ void st4(__nv_bfloat16 *p, float a, float b, float c, float d) { // 8-byte aligned
    __nv_bfloat162 lo = __floats2bfloat162_rn(a, b), hi = __floats2bfloat162_rn(c, d);
    uint2 u;
    u.x = *reinterpret_cast<const unsigned *>(&lo);
    u.y = *reinterpret_cast<const unsigned *>(&hi);
    *reinterpret_cast<uint2 *>(p) = u;
}
// x rounded to the precision MP stores (what a store of x and a load give back)
template <class MP> __device__ __forceinline__ float mp_round(float x) {
    if constexpr (std::is_same<MP, __nv_bfloat16>::value) return __bfloat162float(__float2bfloat16_rn(x));
    else return x;
}
__device__ __forceinline__ float softplusf_(float x) { return x > 20.f ? x : log1pf(expf(x)); }
__device__ __forceinline__ float warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
// 16 bytes global -> shared without registers (Ampere's cp.async), in groups committed and waited for
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
    uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
// 8 bytes global -> shared (cp.async through L1): a thread's own scattered pairs
__device__ __forceinline__ void cp_async8(void *smem, const void *gmem) {
    uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p) { fprintf(stderr, "error: out of memory allocating %zu bytes\n", n * size); exit(1); }
    return p;
}
static void *xcudamalloc(size_t bytes) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 16);
    if (e != cudaSuccess) { fprintf(stderr, "error: cudaMalloc of %zu bytes failed: %s\n", bytes, cudaGetErrorString(e)); exit(1); }
    return p;
}
// lets a kernel take `bytes` of dynamic shared memory (above the default 48 KB)
template <class K> static void smem_attr(K kernel, size_t bytes) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}
static size_t max_smem_block(void) { // the most dynamic shared memory a block may take (smem_attr) on this device
    static int n = 0;
    if (!n) {
        int dev;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    }
    return (size_t)n;
}
static int num_sms(void) { // streaming multiprocessors of the current device (grids sized to fill it once)
    static int n = 0;
    if (!n) { int dev; CUDA_CHECK(cudaGetDevice(&dev)); CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev)); }
    return n;
}
// the grid of 256-thread blocks a grid-stride kernel over n values takes (at most 16 blocks an SM)
static unsigned rows_grid(size_t n) { return (unsigned)std::min(CEIL_DIV(n, 256), (size_t)num_sms() * 16); }
// the blocks of a grid-stride kernel of 256 threads (no dynamic shared memory) that wants `want`: at most as many as
// its occupancy lets the GPU hold at once
template <class K> static int resident_blocks(K kernel, int want) {
    int per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 256, 0));
    return std::min(want, std::max(per_sm, 1) * num_sms());
}

static int g_bf16 = 0; // bf16 mode (-p bf16): the matmul precision is bf16
// The pointer of a tensor stored in the matmul precision where mp says so (bf16 in bf16 mode), for a kernel templated
// on the element type: f(p) with p a float or a bf16 pointer.
template <class F> static void with_mp(const real *x, int mp, F f) {
    if (mp && g_bf16) f((const __nv_bfloat16 *)x);
    else f(x);
}
template <class F> static void with_mp(real *x, int mp, F f) {
    if (mp && g_bf16) f((__nv_bfloat16 *)x);
    else f(x);
}

// ---- tensor-core primitives (the attention and GDN kernels): bf16 operands, shared-memory addresses,
// ldmatrix/stmatrix, mma.sync (bf16 m16n8k16, TF32 m16n8k8), the XOR swizzle of bf16 tiles
typedef __nv_bfloat16 bf16;
// the shared-memory address of p (a pointer into shared memory), as ldmatrix, stmatrix and the bulk copies take it
__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm4t(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void stsm4(uint32_t addr, const uint32_t (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};\n"
                 ::"r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}
__device__ __forceinline__ void stsm4t(uint32_t addr, const uint32_t (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n"
                 ::"r"(addr), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
// element offset of (row r, 16-byte chunk c) in a smem tile of rows of D bf16: chunks XOR-swizzled by (r & 7), so the
// 8 row addresses of one ldmatrix 8×8 matrix (8 consecutive rows, same logical chunk) hit 8 distinct bank groups
template <int D> __device__ __forceinline__ int swz(int r, int c) { return r * D + ((c ^ (r & 7)) << 3); }
__device__ __forceinline__ uint32_t f2tf32(float x) {
    uint32_t r; asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x)); return r;
}
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ------------------------------------------------------------------------------------------------
// deterministic column sums: part[p][i] = Σ_{rows r of part p} f(r, i), then dw[i] += Σ_p part[p][i]
// (fixed partition and order: bitwise reproducible). Every weight gradient that is a sum over rows (norm
// weights, conv weights, gate parameters) ends in colsum_finish_kernel; the norms and the conv fill part in
// their backward pass, the gate parameters through colsum_partial_kernel.

static float *g_colpart = NULL;
static size_t g_colpart_n = 0;
static int g_scratch_moves = 0; // times a grow-only scratch buffer moved (a captured CUDA graph holds the old address)
static float *colpart(size_t n) {
    if (n > g_colpart_n) {
        g_scratch_moves++;
        if (g_colpart) CUDA_CHECK(cudaFree(g_colpart));
        g_colpart = (float *)xcudamalloc(n * sizeof(float));
        g_colpart_n = n;
    }
    return g_colpart;
}
static int colsum_parts(int R) { int p = R / 512; return p < 1 ? 1 : p > 64 ? 64 : p; }

// Both kernels: a block of 32 columns × COLSUM_ROWS row-threads, each thread summing every COLSUM_ROWS-th row of its
// block's share, then warp row 0 adding the COLSUM_ROWS sums in order. The sums are bound by the rows a thread walks
// one after the other: 32 row-threads keep enough warps per SM in flight where the grid has few blocks (few columns).
#define COLSUM_ROWS 32
// the block's COLSUM_ROWS per-thread sums v of its 32 columns, added in row order: the total, on row-thread 0
__device__ __forceinline__ float colsum_rows(float v, float (*sh)[33]) {
    sh[threadIdx.y][threadIdx.x] = v;
    __syncthreads();
    float t = 0.f;
    if (threadIdx.y == 0)
        for (int k = 0; k < COLSUM_ROWS; k++) t += sh[k][threadIdx.x];
    return t;
}
template <class F>
__global__ void __launch_bounds__(32 * COLSUM_ROWS) colsum_partial_kernel(float *part, int R, int n, F f) {
    __shared__ float sh[COLSUM_ROWS][33];
    int i = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.f;
    if (i < n)
        for (int r = blockIdx.y * COLSUM_ROWS + threadIdx.y; r < R; r += gridDim.y * COLSUM_ROWS) acc += f(r, i);
    const float s = colsum_rows(acc, sh);
    if (threadIdx.y == 0 && i < n) part[(size_t)blockIdx.y * n + i] = s;
}
// dw[i] += Σ_p part[p][off + i] for i < n (part rows have stride ld)
__global__ void __launch_bounds__(32 * COLSUM_ROWS) colsum_finish_kernel(float *dw, const float *part, int np, int n,
                                                                          int ld, int off) {
    __shared__ float sh[COLSUM_ROWS][33];
    int i = blockIdx.x * 32 + threadIdx.x;
    float s = 0.f;
    if (i < n)
        for (int p = threadIdx.y; p < np; p += COLSUM_ROWS) s += part[(size_t)p * ld + off + i];
    const float t = colsum_rows(s, sh);
    if (threadIdx.y == 0 && i < n) dw[i] += t;
}
static void colsum_finish(float *dw, const float *part, int np, int n, int ld, int off) {
    colsum_finish_kernel<<<CEIL_DIV(n, 32), dim3(32, COLSUM_ROWS)>>>(dw, part, np, n, ld, off);
    CUDA_CHECK(cudaGetLastError());
}

// ---- bf16 <-> fp32 row copies and the grow-only device scratch of the two token mixers' operands
__global__ void rows_to_bf16_kernel(bf16 *y, int ldy, const float *x, int ldx, size_t rows, int cols) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * cols; i += (size_t)gridDim.x * blockDim.x)
        y[(i / cols) * ldy + i % cols] = __float2bfloat16_rn(x[(i / cols) * ldx + i % cols]);
}
__global__ void rows_from_bf16_kernel(float *y, int ldy, const bf16 *x, int ldx, size_t rows, int cols) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * cols; i += (size_t)gridDim.x * blockDim.x)
        y[(i / cols) * ldy + i % cols] = __bfloat162float(x[(i / cols) * ldx + i % cols]);
}
// rows × cols of fp32 x (row stride ldx) to bf16 y (row stride ldy)
static void rows_to_bf16(bf16 *y, int ldy, const float *x, int ldx, size_t rows, int cols) {
    rows_to_bf16_kernel<<<rows_grid(rows * cols), 256>>>(y, ldy, x, ldx, rows, cols);
    CUDA_CHECK(cudaGetLastError());
}
// rows × cols of bf16 x (row stride ldx) to fp32 y (row stride ldy)
static void rows_from_bf16(float *y, int ldy, const bf16 *x, int ldx, size_t rows, int cols) {
    rows_from_bf16_kernel<<<rows_grid(rows * cols), 256>>>(y, ldy, x, ldx, rows, cols);
    CUDA_CHECK(cudaGetLastError());
}
// A grow-only device scratch per use (slot), reused by every call.
enum { SCRATCH_ATTN_BF16, SCRATCH_ATTN_WIDE, SCRATCH_GDN_WIDE, SCRATCH_GDN_OUT, SCRATCH_GDN_DOUT, SCRATCH_PREFILL,
       SCRATCH_SLOTS };
static void *device_scratch(int slot, size_t bytes) {
    static void *buf[SCRATCH_SLOTS];
    static size_t cap[SCRATCH_SLOTS];
    if (bytes > cap[slot]) {
        g_scratch_moves++;
        if (buf[slot]) CUDA_CHECK(cudaFree(buf[slot]));
        buf[slot] = xcudamalloc(bytes);
        cap[slot] = bytes;
    }
    return buf[slot];
}
// The fp32 values of bf16 operands for the fp32 kernels (the softmax op's TF32 ones, the GDN op's where its bf16 kernels
// do not take the shape): n tensors of B·T rows (x[i], row stride ld[i], cols[i] values a row) widened into scratch
// `slot`, each with its own row stride, so the gradients keep the operands' strides; x[i] is pointed at its copy.
static void widen_operands(int slot, const real **x, const int *ld, const int *cols, int n, size_t rows) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (rows - 1) * ld[i] + cols[i];
    float *p = (float *)device_scratch(slot, total * sizeof(float));
    for (int i = 0; i < n; i++) {
        rows_from_bf16(p, ld[i], (const bf16 *)x[i], ld[i], rows, cols[i]);
        x[i] = p;
        p += (rows - 1) * ld[i] + cols[i];
    }
}

// ================================================================================================
// Appendix B (first: every op is timed by it). The profiler
// ================================================================================================

// ------------------------------------------------------------------------------------------------
// optional op timing (environment NATSL_PROFILE): CUDA events around every op (PROF_OP() at the top of each
// host function that launches kernels, named after it), summed per name and printed, largest first, at the
// end of training. NATSL_PROFILE=1 waits for each timed op (its time alone; the waits leave the GPU idle while the
// next launches are made, so the step runs slower); =2 does not wait: the step runs as untimed, the events are read
// when it has finished (prof_flush), and the time from each op's end to the next op's start (the GPU idle between
// launches, and any kernel launched outside an op) is summed as "between the ops".

#define PROF_MAX 64
static int g_prof = 0, g_prof_n = 0;
static const char *g_prof_name[PROF_MAX];
static double g_prof_ms[PROF_MAX], g_prof_between_ms;
static int g_prof_depth = 0; // an op inside another op (router_forward's matmul) counts toward the outer one
// the profiling level NATSL_PROFILE asks for: 0 (unset: none), 1 or 2
static int prof_level(void) {
    const char *e = getenv("NATSL_PROFILE");
    return e ? std::min(std::max(atoi(e), 0), 2) : 0;
}
struct ProfTimed { int k; cudaEvent_t e0, e1; };
static std::vector<ProfTimed> g_prof_timed; // the ops recorded and not read yet, in launch order
static std::vector<cudaEvent_t> g_prof_events; // the event pool: the first 2·g_prof_timed.size() are in use
// Reads the recorded ops' events (waiting for the last) into the sums
static void prof_flush(void) {
    if (g_prof_timed.empty()) return;
    CUDA_CHECK(cudaEventSynchronize(g_prof_timed.back().e1));
    for (size_t i = 0; i < g_prof_timed.size(); i++) {
        const ProfTimed &o = g_prof_timed[i];
        float ms = 0.f, gap = 0.f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, o.e0, o.e1));
        if (o.k < PROF_MAX) g_prof_ms[o.k] += ms;
        if (i) CUDA_CHECK(cudaEventElapsedTime(&gap, g_prof_timed[i - 1].e1, o.e0));
        g_prof_between_ms += gap;
    }
    g_prof_timed.clear();
}
static void prof_reset(void) {
    prof_flush();
    memset(g_prof_ms, 0, sizeof(g_prof_ms));
    g_prof_between_ms = 0;
}
struct ProfScope {
    const char *name; bool on;
    explicit ProfScope(const char *n) : name(n), on(g_prof && g_prof_depth++ == 0) {
        if (!on) return;
        const size_t used = 2 * g_prof_timed.size();
        while (g_prof_events.size() < used + 2) {
            cudaEvent_t e;
            CUDA_CHECK(cudaEventCreate(&e));
            g_prof_events.push_back(e);
        }
        CUDA_CHECK(cudaEventRecord(g_prof_events[used]));
    }
    ~ProfScope() {
        if (g_prof) g_prof_depth--;
        if (!on) return;
        const size_t used = 2 * g_prof_timed.size();
        int k = 0;
        while (k < g_prof_n && strcmp(g_prof_name[k], name)) k++;
        if (k == g_prof_n && g_prof_n < PROF_MAX) g_prof_name[g_prof_n++] = name;
        CUDA_CHECK(cudaEventRecord(g_prof_events[used + 1]));
        g_prof_timed.push_back({k, g_prof_events[used], g_prof_events[used + 1]});
        if (g_prof == 1 || g_prof_timed.size() >= 16384) prof_flush();
    }
};
#define PROF_OP() ProfScope prof_op_(__func__)
// The table of the ops timed so far: ms per step over `steps` steps that took step_ms in all, largest first.
static void prof_print(double step_ms, int steps) {
    prof_flush();
    double known = 0;
    int order[PROF_MAX];
    for (int k = 0; k < g_prof_n; k++) order[k] = k;
    std::sort(order, order + g_prof_n, [](int x, int y) { return g_prof_ms[x] > g_prof_ms[y]; });
    printf("profile (NATSL_PROFILE=%d), ms per step over %d steps after the warm-up, step %.1f ms:\n", g_prof, steps,
           step_ms / steps);
    for (int i = 0; i < g_prof_n; i++) {
        int k = order[i];
        printf("  %-32s %9.2f ms  %5.1f%%\n", g_prof_name[k], g_prof_ms[k] / steps, 100 * g_prof_ms[k] / step_ms);
        known += g_prof_ms[k];
    }
    printf("  %-32s %9.2f ms  %5.1f%%\n", "everything else", (step_ms - known) / steps, 100 * (step_ms - known) / step_ms);
    if (g_prof == 2)
        printf("  of which between the ops        %9.2f ms  %5.1f%%  (the GPU idle between launches, and kernels outside the ops)\n",
               g_prof_between_ms / steps, 100 * g_prof_between_ms / step_ms);
}

// ================================================================================================
// 1. Layers. Each _forward is followed by its _backward. Same names, arguments and write-or-accumulate
// contracts as train_natsl.c (its header states them); pointers are device pointers; everything runs on the
// default stream (in order). Where bf16 mode stores a tensor in bf16, the kernels take the storage type MP.
// ================================================================================================

// ---- embedding (§2, (2.1a)): h0[bt] = E[id[bt]] -------------------------------------------------------
// out: the residual stream, stored in the matmul precision
template <class MP> __global__ void encoder_forward_kernel(MP *out, const int *ids, const float *wte, int BT, int D) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)BT * D) return;
    size_t bt = i / D, d = i % D;
    st(out + i, wte[(size_t)ids[bt] * D + d]);
}
static void encoder_forward(real *out, const int *ids, const real *wte, int BT, int D) {
    PROF_OP();
    with_mp(out, 1, [&](auto o) { encoder_forward_kernel<<<(unsigned)CEIL_DIV((size_t)BT * D, 256), 256>>>(o, ids, wte, BT, D); });
    CUDA_CHECK(cudaGetLastError());
}
// dE[id] += dout[bt] (the residual stream's gradient, in the matmul precision) over the positions bt holding id, in
// the order of bt as train_natsl.c adds them: one block per token of the batch sums its positions (sorted by token on
// the host), no atomics, so a run is reproducible bit for bit (a resume included, §9.4).
template <class MP>
__global__ void encoder_backward_kernel(float *dwte, const MP *dout, const int *pos, const int *start, const int *tok, int D) {
    int u = blockIdx.x, s = start[u], e = start[u + 1];
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float *w = dwte + (size_t)tok[u] * D + d, acc = *w;
        for (int i = s; i < e; i++) acc += ld(dout + (size_t)pos[i] * D + d);
        *w = acc;
    }
}
static void encoder_backward(real *dwte, const real *dout, const int *ids, int BT, int D) {
    PROF_OP();
    // ids: the batch on the host (model_backward's inputs). The positions of each token of the batch by a counting
    // sort on the host, while the GPU still runs the layers' backward: pos (BT), the tokens present (tok, n of them)
    // and where each one's positions start (start, n + 1), in one pinned buffer sent by one asynchronous copy (no
    // synchronization with the device, which would leave the GPU idle between two kernels); host and device scratch
    // kept between calls, the buffer reused once its last copy is done
    static int *h = NULL, *d = NULL, *count = NULL, cap = 0, vcap = 0;
    static cudaEvent_t sent = NULL;
    int V = 0;
    if (!sent) CUDA_CHECK(cudaEventCreateWithFlags(&sent, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventSynchronize(sent)); // the previous call's copy has read the buffer
    if (BT > cap) {
        if (h) CUDA_CHECK(cudaFreeHost(h));
        if (d) CUDA_CHECK(cudaFree(d));
        cap = BT;
        CUDA_CHECK(cudaMallocHost(&h, (3 * (size_t)cap + 2) * sizeof(int))); // pos, tok, start
        d = (int *)xcudamalloc((3 * (size_t)cap + 2) * sizeof(int));
    }
    int *hpos = h, *htok = h + cap, *hstart = h + 2 * cap;
    for (int i = 0; i < BT; i++) V = std::max(V, ids[i] + 1);
    if (V > vcap) { free(count); vcap = V; count = (int *)xcalloc(vcap + 1, sizeof(int)); }
    memset(count, 0, (V + 1) * sizeof(int));
    for (int i = 0; i < BT; i++) count[ids[i] + 1]++;
    int n = 0;
    for (int v = 0; v < V; v++) {
        if (count[v + 1]) { htok[n] = v; hstart[n++] = count[v]; }
        count[v + 1] += count[v]; // count[v]: where token v's positions start
    }
    hstart[n] = BT;
    for (int i = 0; i < BT; i++) hpos[count[ids[i]]++] = i;
    CUDA_CHECK(cudaMemcpyAsync(d, h, (2 * (size_t)cap + n + 1) * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaEventRecord(sent));
    with_mp(dout, 1, [&](auto o) { encoder_backward_kernel<<<n, 128>>>(dwte, o, d, d + 2 * cap, d + cap, D); });
    CUDA_CHECK(cudaGetLastError());
}

// ---- linear layer: out[BT][OC] = inp[BT][C] W^T, W[OC][C] (cuBLAS, column-major view) ------------
// Row-major X[r][c] is column-major Xᵀ, so y = x Wᵀ is, column-major, yᵀ (OC×BT) = op_T(W: C×OC) · (xᵀ: C×BT).
// fp32 mode: cublasSgemm under CUBLAS_PEDANTIC_MATH (true fp32). bf16 mode (-p bf16): the products run on the
// tensor cores on bf16 operands (round to nearest even) with fp32 accumulation into the fp32 output. The input
// inp and the gradient dout are stored in the matmul precision: in bf16 mode their producer wrote them in bf16
// (RMSNorm of the block inputs, the gated norm, SwiGLU and their backward passes, the gate backward), or the
// call site copied them with operand(); the weight is copied here.
static cublasHandle_t g_cublas;
// g_cublas on the thread's default stream, with a workspace of its own (a product captured into a CUDA graph allocates
// none)
static void cublas_start(void) {
    const size_t ws = 32u << 20;
    CUBLAS_CHECK(cublasCreate(&g_cublas));
    CUBLAS_CHECK(cublasSetStream(g_cublas, cudaStreamPerThread));
    CUBLAS_CHECK(cublasSetWorkspace(g_cublas, xcudamalloc(ws), ws));
}

__global__ void to_bf16_kernel(__nv_bfloat16 *y, const float *x, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16_rn(x[i]);
}
// y[0..n) = x[0..n) rounded to bf16 (round to nearest even)
static void to_bf16_copy(__nv_bfloat16 *y, const float *x, size_t n) {
    to_bf16_kernel<<<rows_grid(n), 256>>>(y, x, n);
    CUDA_CHECK(cudaGetLastError());
}
// The scratch slots of the bf16 operand copies: one per operand of a product, so the three can coexist.
enum { OPERAND_DOUT, OPERAND_WEIGHT, OPERAND_INPUT, OPERAND_SLOTS };
static struct {
    __nv_bfloat16 *buf;
    size_t cap;
    const float *ready; // the producer of `ready` wrote its copy here (operand_claim): the next to_bf16 of it takes it
    size_t ready_n;
} g_operand[OPERAND_SLOTS];
static __nv_bfloat16 *operand_buf(size_t n, int slot) {
    if (n > g_operand[slot].cap) {
        g_scratch_moves++;
        if (g_operand[slot].buf) CUDA_CHECK(cudaFree(g_operand[slot].buf));
        g_operand[slot].buf = (__nv_bfloat16 *)xcudamalloc(n * sizeof(__nv_bfloat16));
        g_operand[slot].cap = n;
    }
    return g_operand[slot].buf;
}
// The bf16 copy of x[n] in scratch slot `slot` (made here unless x's producer made it: operand_claim).
static const __nv_bfloat16 *to_bf16(const float *x, size_t n, int slot) {
    PROF_OP(); // timed where no op encloses it: the output gradients copied for the layers' matmuls
    __nv_bfloat16 *buf = operand_buf(n, slot);
    const int ready = g_operand[slot].ready == x && g_operand[slot].ready_n == n;
    g_operand[slot].ready = NULL;
    if (ready) return buf;
    to_bf16_copy(buf, x, n);
    return buf;
}
// bf16 mode: where x's producer is to write the bf16 copy of its final values x[n] that the next to_bf16(x, n,
// slot) then takes as it is (x must not change in between; any other copy into the slot drops it); fp32: NULL.
static __nv_bfloat16 *operand_claim(const float *x, size_t n, int slot) {
    if (!g_bf16) return NULL;
    __nv_bfloat16 *buf = operand_buf(n, slot);
    g_operand[slot].ready = x;
    g_operand[slot].ready_n = n;
    return buf;
}

// From appendix E: C = op(A) op(B) + beta C (column-major, cuBLAS's convention), or with add: C = op(A) op(B) + add.
// C_mp: C is stored in the matmul precision.
static void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *A, int lda,
                 const void *B, int ldb, float beta, float *C, int ldc, int C_mp = 0, const float *add = NULL);
// The operand gemm takes: x itself (fp32 mode) or its bf16 copy in scratch slot `slot`, bf16 values behind a real
// pointer. train_natsl.c has no such calls: its gemm rounds every operand as it packs it.
static const real *operand(const real *x, size_t n, int slot) { return g_bf16 ? (const real *)to_bf16(x, n, slot) : x; }
// bf16 mode: the bf16 copies of a model's matmul weights (the matrices but the embedding, which is looked up), each at
// a 256-byte boundary, made once after the parameters change instead of at every product that reads a weight: AdamW
// writes a weight's copy as it updates the weight, and model_forward remakes them all where they are stale (after
// init, a load, ZeRO-1's gather). At the 340m size 348M values, 0.65 GiB, for two conversions of each a step (4.2 GB
// moved, ~250 launches). The same bits: a weight rounds to the same bf16 either way. A G, N or S layer's W_qkv, W_g and
// W_ab copies lie one after another, then zero rows up to gdn_in_ld rows: gdn_inputs_backward's one product reads them
// as one [W_qkv; W_g; W_ab; 0] (matmul_backward_ld).
#define WCOPY_NONE ((size_t)-1)
typedef struct {
    const real *params;                // the model's parameters
    const ParamTensor *tensors;        // its tensors, in offset order
    int ntensors;
    __nv_bfloat16 *buf;                // the copies (device; allocated at their first making)
    size_t n;                          // values buf holds
    size_t at[NATSL_MAX_TENSORS];      // tensor k's copy starts at buf + at[k] (WCOPY_NONE: it has none)
    size_t end[NATSL_MAX_TENSORS];     // and a read from it may run up to buf + end[k] (its copy's end, or its run's)
    int fresh;                         // buf holds the parameters' present values; whoever else writes them clears it
} WeightCopies;
static const WeightCopies *g_wcopy;    // the copies weight_operand takes from: the model running (weights_use)
// Lays out the copies of model c's tensors t[0..nt) (at[k], end[k] as above); returns the values they take. The zero
// rows after a run are never written (buf is zeroed once, at its allocation; the copies and AdamW write only tensors).
static size_t weight_copies_layout(const Config *c, const ParamTensor *t, int nt, size_t *at, size_t *end) {
    size_t n = 0;
    for (int k = 0; k < nt; k++) {
        at[k] = end[k] = WCOPY_NONE;
        if (!t[k].decay || !strcmp(t[k].name, "wte")) continue; // the decayed tensors are the matrices
        at[k] = n;
        n += t[k].numel;
        const int slot = t[k].slot, inputs = t[k].layer >= 0 && c->pattern[t[k].layer] != 'A' &&
                                     c->pattern[t[k].layer] != 'H';
        if (inputs && (slot == P_WQKV || slot == P_WG)) continue; // the run goes on: W_g's, W_ab's copy follows at once
        if (inputs && slot == P_WAB) n += (size_t)(gdn_in_ld(c) - gdn_in_cols(c)) * c->D;
        for (int j = k; j >= 0 && at[j] != WCOPY_NONE && end[j] == WCOPY_NONE; j--) end[j] = n;
        n = CEIL_DIV(n, 128) * 128; // the next copy at a 256-byte boundary
    }
    return n;
}
// The bf16 operand of weight w[n] (values of a model's parameters): its copy where it has a fresh one, else a copy
// made now in the weight's scratch slot (of a run's n values: its zero rows then hold the parameters that follow,
// finite values that meet the zero columns of matmul_backward_ld's dout); fp32 mode: w itself.
static const real *weight_operand(const real *w, size_t n) {
    if (!g_bf16) return w;
    const WeightCopies *c = g_wcopy;
    if (c && c->fresh && c->ntensors && w >= c->params) {
        const size_t o = (size_t)(w - c->params);
        int lo = 0, hi = c->ntensors - 1; // the last tensor that starts at or before o
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (c->tensors[mid].offset <= o) lo = mid;
            else hi = mid - 1;
        }
        const ParamTensor *t = &c->tensors[lo];
        if (c->at[lo] != WCOPY_NONE && c->at[lo] + (o - t->offset) + n <= c->end[lo])
            return (const real *)(c->buf + c->at[lo] + (o - t->offset));
    }
    return operand(w, n, OPERAND_WEIGHT);
}
// out_mp: out is stored in the matmul precision (it feeds only kernels that read that precision: the short conv,
// the gated norm's gate, SwiGLU, the classifier). add (NULL: none; fp32, out_mp 0): out = inp Wᵀ + add, in the
// product's epilogue in bf16 mode.
static void matmul_forward(real *out, const real *inp, const real *weight, int BT, int C, int OC, int out_mp,
                           const real *add) {
    PROF_OP();
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, OC, BT, C, weight_operand(weight, (size_t)OC * C), C, inp, C, 0.f, out, OC,
         out_mp, add);
}
// dinp = dout W, += with DINP_ADD, stored in the matmul precision with DINP_WRITE_MP (skipped when dinp is NULL);
// dweight += dout^T inp (skipped when dweight is NULL)  (dout in the matmul precision). dout's rows are of stride
// ldo ≥ OC (matmul_backward_ld: the layers' input projections, gdn_in_ld): in bf16 mode dinp's product runs over all
// ldo columns (a multiple of 8 keeps it on the tensor cores' fast kernels), the pad columns of dout being zeros, as are
// the weight copies' rows after the OC (weight_copies_layout); the fp32 product reads W's OC rows only.
static void matmul_backward_ld(real *dinp, real *dweight, const real *dout, int ldo, const real *inp,
                               const real *weight, int BT, int C, int OC, int dinp_mode) {
    PROF_OP();
    const int k = g_bf16 ? ldo : OC;
    if (dinp) gemm(CUBLAS_OP_N, CUBLAS_OP_N, C, BT, k, weight_operand(weight, (size_t)k * C), C, dout, ldo,
                   dinp_mode == DINP_ADD ? 1.f : 0.f, dinp, C, dinp_mode == DINP_WRITE_MP);
    if (dweight) gemm(CUBLAS_OP_N, CUBLAS_OP_T, C, OC, BT, inp, C, dout, ldo, 1.f, dweight, C);
}
static void matmul_backward(real *dinp, real *dweight, const real *dout, const real *inp,
                            const real *weight, int BT, int C, int OC, int dinp_mode) {
    PROF_OP(); // the profile's name for these (matmul_backward_ld: the layers' input projections')
    matmul_backward_ld(dinp, dweight, dout, OC, inp, weight, BT, C, OC, dinp_mode);
}

// ---- RMSNorm (§0, (0.3)): y = x / sqrt(mean(x²) + eps) ⊙ w over rows of width n ------------------------
// rows_dispatch: the smallest NJ (values a lane) with 32·NJ ≥ n for kernels that hold a row of n in registers, one
// value a lane at a time, value j of lane `lane` at column lane + 32j (the norms' and the conv's fallback).
template <int NJ, int MAX_NJ, class F> static void rows_launch(F &launch) {
    if constexpr (NJ <= MAX_NJ) launch(std::integral_constant<int, NJ>());
}
// MAX_NJ: the largest NJ the kernel is built for (its register arrays), rows of up to 32·MAX_NJ values
template <int MAX_NJ = 64, class F> static void rows_dispatch(const char *who, int n, F launch) {
    if (n > 32 * MAX_NJ) { fprintf(stderr, "error: %s: rows of %d > %d values\n", who, n, 32 * MAX_NJ); exit(1); }
    if (n <= 32) rows_launch<1, MAX_NJ>(launch);
    else if (n <= 64) rows_launch<2, MAX_NJ>(launch);
    else if (n <= 128) rows_launch<4, MAX_NJ>(launch);
    else if (n <= 256) rows_launch<8, MAX_NJ>(launch);
    else if (n <= 512) rows_launch<16, MAX_NJ>(launch);
    else if (n <= 1024) rows_launch<32, MAX_NJ>(launch);
    else if (n <= 1536) rows_launch<48, MAX_NJ>(launch);
    else rows_launch<64, MAX_NJ>(launch);
    CUDA_CHECK(cudaGetLastError());
}
// Rows in 16-byte runs (the conv, the L2 norm, the gated norm): a lane moves RUN consecutive values of its row at once,
// RUN = 16 / sizeof(MP) (8 bf16, 4 floats; 16-byte aligned), or single values (RUN = 1; the shapes that do not split
// so). Pack holds one run as loaded, its raw bits (half the registers of floats for bf16), converted where used.
template <class MP> __host__ __device__ constexpr int run16() { return 16 / (int)sizeof(MP); }
template <class MP, int RUN> struct Pack {
    static constexpr int BYTES = RUN * (int)sizeof(MP);
    static constexpr bool BF = std::is_same<MP, __nv_bfloat16>::value;
    static_assert(BYTES == 2 || BYTES == 4 || BYTES == 8 || BYTES == 16, "a run is 2, 4, 8 or 16 bytes");
    using R = std::conditional_t<BYTES == 16, uint4, std::conditional_t<BYTES == 8, uint2,
              std::conditional_t<BYTES == 4, unsigned, unsigned short>>>;
    R r;
    __device__ __forceinline__ unsigned word(int k) const { // 32-bit word k (k a constant after unrolling)
        if constexpr (BYTES == 16) return k == 0 ? r.x : k == 1 ? r.y : k == 2 ? r.z : r.w;
        else if constexpr (BYTES == 8) return k == 0 ? r.x : r.y;
        else return (unsigned)r;
    }
    __device__ __forceinline__ void set_word(int k, unsigned u) {
        if constexpr (BYTES == 16) { if (k == 0) r.x = u; else if (k == 1) r.y = u; else if (k == 2) r.z = u; else r.w = u; }
        else if constexpr (BYTES == 8) { if (k == 0) r.x = u; else r.y = u; }
        else r = (R)u;
    }
    __device__ __forceinline__ void load(const MP *p) { r = *reinterpret_cast<const R *>(p); }
    // p in global memory. One 16- or 8-byte store: nvcc may split the plain aggregate store of r into 4-byte ones (it
    // does in the L2 norm's and the gated norm backward's kernels), four partial-sector writes a run
    __device__ __forceinline__ void store(MP *p) const {
        if constexpr (BYTES == 16)
            asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};"
                         ::"l"(p), "r"(r.x), "r"(r.y), "r"(r.z), "r"(r.w) : "memory");
        else if constexpr (BYTES == 8)
            asm volatile("st.global.v2.b32 [%0], {%1, %2};" ::"l"(p), "r"(r.x), "r"(r.y) : "memory");
        else *reinterpret_cast<R *>(p) = r;
    }
    __device__ __forceinline__ void zero() { for (int k = 0; k < (BYTES + 3) / 4; k++) set_word(k, 0u); }
    __device__ __forceinline__ void get(float *v) const { // v[0..RUN)
        if constexpr (BF && RUN == 1) v[0] = __uint_as_float((unsigned)r << 16);
        else if constexpr (BF)
#pragma unroll
            for (int k = 0; k < RUN / 2; k++) {
                const unsigned u = word(k);
                v[2 * k] = __uint_as_float(u << 16);
                v[2 * k + 1] = __uint_as_float(u & 0xffff0000u);
            }
        else
#pragma unroll
            for (int k = 0; k < RUN; k++) v[k] = __uint_as_float(word(k));
    }
    __device__ __forceinline__ void set(const float *v) { // rounded to MP
        if constexpr (BF && RUN == 1) r = __bfloat16_as_ushort(__float2bfloat16_rn(v[0]));
        else if constexpr (BF)
#pragma unroll
            for (int k = 0; k < RUN / 2; k++) {
                const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
                set_word(k, *reinterpret_cast<const unsigned *>(&h));
            }
        else
#pragma unroll
            for (int k = 0; k < RUN; k++) set_word(k, __float_as_uint(v[k]));
    }
};
// A lane's NJ values of a row of n spread over LANES lanes (sub: the lane's place among them) in runs of RUN: value j
// is column (j / RUN)·LANES·RUN + sub·RUN + j % RUN (n a multiple of RUN; past n: zeros, not stored)
template <class MP, int RUN, int LANES, int NJ> struct LaneRow {
    static_assert(NJ % RUN == 0, "whole runs");
    Pack<MP, RUN> p[NJ / RUN];
    static __device__ __forceinline__ int col(int sub, int j) { return (j / RUN) * LANES * RUN + sub * RUN + j % RUN; }
    __device__ __forceinline__ void load(const MP *row, int sub, int n) {
#pragma unroll
        for (int q = 0; q < NJ / RUN; q++) {
            const int i = col(sub, q * RUN);
            if (i < n) p[q].load(row + i);
            else p[q].zero();
        }
    }
    __device__ __forceinline__ void store(MP *row, int sub, int n) const {
#pragma unroll
        for (int q = 0; q < NJ / RUN; q++) {
            const int i = col(sub, q * RUN);
            if (i < n) p[q].store(row + i);
        }
    }
    __device__ __forceinline__ void get(float (&v)[NJ]) const {
#pragma unroll
        for (int q = 0; q < NJ / RUN; q++) p[q].get(v + q * RUN);
    }
    __device__ __forceinline__ void set(const float (&v)[NJ]) {
#pragma unroll
        for (int q = 0; q < NJ / RUN; q++) p[q].set(v + q * RUN);
    }
    // a weight vector (parameters: no alignment to rely on) in the same order
    static __device__ __forceinline__ void load_w(float (&v)[NJ], const float *w, int sub, int n) {
#pragma unroll
        for (int j = 0; j < NJ; j++) { const int i = col(sub, j); v[j] = i < n ? w[i] : 0.f; }
    }
};
// the sum over a group of LANES (a power of two ≤ 32) aligned lanes, in every lane of it
template <int LANES> __device__ __forceinline__ float group_sum(float x) {
#pragma unroll
    for (int o = LANES / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
// The RMSNorm passes hold a row in registers as LaneRow runs of RUN values, the same RUN for each of their tensors: 16
// bytes of the widest (8 values where all are bf16, else 4: a bf16 tensor beside an fp32 one moves 8 bytes a run) where
// n, the strides and the pointers split so, else single values (RUN = 1, 32 lanes, rows_dispatch's NJ). LANES lanes take
// a row: 4, 8 or 16 where it has at most 8, 16 or 32 runs (two runs a lane, a warp takes 8, 4 or 2 rows at once), else
// 32; NJ values a lane.
// Rows are strided by the grid (resident_blocks), and w is staged once a block in shared memory in the lanes' order:
// value j of lane `sub` in slot norm_w_slot(sub, j), float4s lane after lane (V = 4 where the runs hold whole float4s),
// so a warp's read of w is one contiguous, conflict-free LDS.128 per four values.
template <int RUN, int LANES> __device__ __forceinline__ int norm_w_slot(int sub, int j) {
    constexpr int V = RUN % 4 == 0 ? 4 : 1;
    return ((j / V) * LANES + sub) * V + j % V;
}
// the column of slot t (the inverse of norm_w_slot; Row a LaneRow of the same RUN, LANES)
template <class Row, int RUN, int LANES> __device__ __forceinline__ int norm_slot_col(int t) {
    constexpr int V = RUN % 4 == 0 ? 4 : 1;
    const int g = t / V;
    return Row::col(g % LANES, (g / LANES) * V + t % V);
}
// w[0, n) into wsh[LANES·NJ] (zeros past n) by the block's threads, then a barrier
template <class Row, int RUN, int LANES, int NJ> __device__ __forceinline__ void norm_w_stage(float *wsh, const float *w, int n) {
    for (int t = threadIdx.x; t < LANES * NJ; t += blockDim.x) {
        const int i = norm_slot_col<Row, RUN, LANES>(t);
        wsh[t] = i < n ? w[i] : 0.f;
    }
    __syncthreads();
}
// the lane's values q·RUN .. q·RUN + RUN − 1 of w, from wsh
template <int RUN, int LANES> __device__ __forceinline__ void norm_w_run(float (&wv)[RUN], const float *wsh, int sub, int q) {
    if constexpr (RUN % 4 == 0) {
#pragma unroll
        for (int k = 0; k < RUN; k += 4) {
            const float4 t = *reinterpret_cast<const float4 *>(wsh + norm_w_slot<RUN, LANES>(sub, q * RUN + k));
            wv[k] = t.x; wv[k + 1] = t.y; wv[k + 2] = t.z; wv[k + 3] = t.w;
        }
    } else
#pragma unroll
        for (int k = 0; k < RUN; k++) wv[k] = wsh[norm_w_slot<RUN, LANES>(sub, q * RUN + k)];
}
// The RUN, LANES and NJ of rows of n values, as integral constants to launch(run, lanes, nj): RUN as the caller found the
// tensors to split (run: 1 or 16 bytes of the widest), NJ = RUN·k values a lane (k = 2 on 4 to 16 lanes; k = 2, 4, 6, 8,
// 12, 16 on 32; rows of up to 2048 values).
template <int RUN, class F> static void norm_rows(const char *who, int n, F launch) {
    if constexpr (RUN == 1)
        rows_dispatch(who, n, [&](auto nj) { launch(std::integral_constant<int, 1>(), std::integral_constant<int, 32>(), nj); });
    else {
        using RunT = std::integral_constant<int, RUN>;
        auto lanes32 = [&](auto k) {
            constexpr int NJ = RUN * decltype(k)::value;
            if constexpr (NJ <= 64) launch(RunT(), std::integral_constant<int, 32>(), std::integral_constant<int, NJ>());
        };
        const int runs = n / RUN;
        if (n > 2048) { fprintf(stderr, "error: %s: rows of %d > 2048 values\n", who, n); exit(1); }
        using Two = std::integral_constant<int, 2 * RUN>;
        if (runs <= 8) launch(RunT(), std::integral_constant<int, 4>(), Two());
        else if (runs <= 16) launch(RunT(), std::integral_constant<int, 8>(), Two());
        else if (runs <= 32) launch(RunT(), std::integral_constant<int, 16>(), Two());
        else if (runs <= 64) lanes32(std::integral_constant<int, 2>());
        else if (runs <= 128) lanes32(std::integral_constant<int, 4>());
        else if (runs <= 192) lanes32(std::integral_constant<int, 6>());
        else if (runs <= 256) lanes32(std::integral_constant<int, 8>());
        else if (runs <= 384) lanes32(std::integral_constant<int, 12>());
        else lanes32(std::integral_constant<int, 16>());
    }
}
// whether rows of n values at p (stride ld) split into runs of `run` values: n and ld multiples of it, p 16-byte aligned
static bool norm_splits(int run, int n, const void *p, int ld) { return n % run == 0 && ld % run == 0 && (uintptr_t)p % 16 == 0; }
// Blocks an SM the passes are built for: the registers a lane's row takes (packed as loaded, a register a value where
// RUN = 1; the backward's dw sums NJ floats) within 64 (four blocks of 256), 128 (two) or more (one).
template <class T, int RUN> constexpr int norm_bytes() { return RUN == 1 ? 4 : (int)sizeof(T); } // a value in registers
template <class X, int RUN, int NJ> constexpr int rmsnorm_forward_blocks() {
    return 2 * NJ * norm_bytes<X, RUN>() <= 4 * 32 ? 4 : 2 * NJ * norm_bytes<X, RUN>() <= 4 * 80 ? 2 : 1;
}
template <class X, class DY, class DX, int RUN, int NJ> constexpr int rmsnorm_backward_blocks() {
    return NJ * (norm_bytes<X, RUN>() + norm_bytes<DY, RUN>() + norm_bytes<DX, RUN>() + 4) <= 4 * 96 ? 2 : 1;
}
// The run's bits, opaque to the compiler from here on: a second pass over a row converts them again instead of keeping
// the first pass's floats live across the row's sum (a bf16 row takes half the registers so)
template <class MP, int RUN> __device__ __forceinline__ void norm_opaque(Pack<MP, RUN> &p) {
#pragma unroll
    for (int k = 0; k < (Pack<MP, RUN>::BYTES + 3) / 4; k++) {
        unsigned u = p.word(k);
        asm volatile("" : "+r"(u));
        p.set_word(k, u);
    }
}
// y = x ρ ⊙ w, ρ = 1 / sqrt(mean(x²) + eps) kept in rstd (0.3). A warp holds its row (group) and, while it reduces and
// stores it, has the next one's loads in flight: 2 bytes read and 2 written a value in bf16 mode, nothing else to wait
// for, so the loads in flight bound it (rmsnorm_forward_blocks: two rows' registers a lane).
template <class X, class Y, int RUN, int LANES, int NJ>
__global__ void __launch_bounds__(256, (rmsnorm_forward_blocks<X, RUN, NJ>())) rmsnorm_forward_kernel(Y *__restrict__ y,
        float *__restrict__ rstd, const X *__restrict__ x, const float *__restrict__ w, int N, int nh, int n, int ldx, int ldy) {
    using Row = LaneRow<X, RUN, LANES, NJ>;
    constexpr int RPW = 32 / LANES, NR = NJ / RUN; // rows a warp takes at once, runs a lane
    __shared__ __align__(16) float wsh[LANES * NJ];
    const int lane = threadIdx.x % 32, sub = lane % LANES, R = N * nh, stride = gridDim.x * 8 * RPW;
    norm_w_stage<Row, RUN, LANES, NJ>(wsh, w, n);
    auto row = [&](int r0) { return min(r0 + lane / LANES, R - 1); }; // a last warp's lanes past R: row R − 1, not stored
    int r0 = (blockIdx.x * 8 + threadIdx.x / 32) * RPW;
    Row cur;
    if (r0 < R) { const int r = row(r0); cur.load(x + (size_t)(r / nh) * ldx + (size_t)(r % nh) * n, sub, n); }
    for (; r0 < R; r0 += stride) {
        Row nxt;
        if (r0 + stride < R) { const int r = row(r0 + stride); nxt.load(x + (size_t)(r / nh) * ldx + (size_t)(r % nh) * n, sub, n); }
        const int r = row(r0);
        float ss = 0.f;
#pragma unroll
        for (int q = 0; q < NR; q++) {
            float xv[RUN];
            cur.p[q].get(xv);
#pragma unroll
            for (int k = 0; k < RUN; k++) ss += xv[k] * xv[k];
        }
        ss = group_sum<LANES>(ss);
        const float s = 1.f / sqrtf(ss / n + NATSL_EPS);
        if (r0 + lane / LANES < R) {
            Y *yr = y + (size_t)(r / nh) * ldy + (size_t)(r % nh) * n;
#pragma unroll
            for (int q = 0; q < NR; q++) {
                float xv[RUN], wv[RUN];
                cur.p[q].get(xv);
                norm_w_run<RUN, LANES>(wv, wsh, sub, q);
#pragma unroll
                for (int k = 0; k < RUN; k++) xv[k] = xv[k] * s * wv[k];
                Pack<Y, RUN> o;
                o.set(xv);
                const int i = Row::col(sub, q * RUN);
                if (i < n) o.store(yr + i);
            }
            if (sub == 0) rstd[r] = s;
        }
        cur = nxt;
    }
}
// x_mp, y_mp: x, y are stored in the matmul precision (y: where it only feeds matmuls, the router's pool or the softmax
// op; x: the residual stream, the N layer's Q, K)
static void rmsnorm_forward(real *y, real *rstd, const real *x, const real *w,
                            int N, int nh, int n, int ldx, int ldy, int x_mp, int y_mp) {
    PROF_OP();
    if (N * nh == 0) return;
    with_mp(x, x_mp, [&](auto xp) { with_mp(y, y_mp, [&](auto yp) {
        using X = std::remove_const_t<std::remove_pointer_t<decltype(xp)>>;
        using Y = std::remove_pointer_t<decltype(yp)>;
        constexpr int RUN = 16 / (int)std::max(sizeof(X), sizeof(Y));
        auto go = [&](auto run, auto lanes, auto nj) {
            constexpr int R_ = decltype(run)::value, L = decltype(lanes)::value, NJ = decltype(nj)::value;
            auto kernel = rmsnorm_forward_kernel<X, Y, R_, L, NJ>;
            kernel<<<resident_blocks(kernel, CEIL_DIV(N * nh, 8 * (32 / L))), 256>>>(yp, rstd, xp, w, N, nh, n, ldx, ldy);
        };
        if (norm_splits(RUN, n, x, ldx) && norm_splits(RUN, n, y, ldy)) norm_rows<RUN>(__func__, n, go);
        else norm_rows<1>(__func__, n, go);
    }); });
    CUDA_CHECK(cudaGetLastError());
}
// dx += ρ(w⊙dy − x̂·mean(x̂⊙w⊙dy)),  dw += Σ_rows dy⊙x̂   (3.4j)
// Per value it reads x, dy and dx and writes dx (8 bytes in bf16 mode with dy in bf16, 10 with dy in fp32; the N layer's
// q/k norms 14: dy, dx in fp32), and its work is a few products and a row's sum over its lanes: the loads in flight bound
// it. A lane holds one row's runs packed as loaded and its NJ sums of dw (rmsnorm_backward_blocks: two blocks of 256 an
// SM where they fit in 128 registers, 16 warps with a row's loads in flight each). dw is summed in the same pass: per
// lane in registers, over a warp's row groups by shuffles, per block over its warps in a fixed order (shared memory),
// then per block in part[gridDim][n] (added by colsum_finish_kernel: bitwise reproducible for a given grid).
template <class X, class DY, class DX, int RUN, int LANES, int NJ>
__global__ void __launch_bounds__(256, (rmsnorm_backward_blocks<X, DY, DX, RUN, NJ>())) rmsnorm_backward_kernel(
        DX *__restrict__ dx, float *__restrict__ part, const DY *__restrict__ dy, const X *__restrict__ x,
        const float *__restrict__ w, const float *__restrict__ rstd, int N, int nh, int n, int ldx, int ldy) {
    using Row = LaneRow<X, RUN, LANES, NJ>;
    constexpr int RPW = 32 / LANES, NR = NJ / RUN; // rows a warp takes at once, runs a lane
    __shared__ __align__(16) float sh[LANES * NJ]; // w in norm_w_slot's order; at the end the block's sums of dw
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, sub = lane % LANES, R = N * nh;
    norm_w_stage<Row, RUN, LANES, NJ>(sh, w, n);
    float acc[NJ];
#pragma unroll
    for (int j = 0; j < NJ; j++) acc[j] = 0.f;
    for (int r0 = (blockIdx.x * 8 + warp) * RPW; r0 < R; r0 += gridDim.x * 8 * RPW) {
        const bool live = r0 + lane / LANES < R; // a last warp's lanes past R: row R − 1 again, neither stored nor summed
        const int r = min(r0 + lane / LANES, R - 1);
        const size_t ox = (size_t)(r / nh) * ldx + (size_t)(r % nh) * n, oy = (size_t)(r / nh) * ldy + (size_t)(r % nh) * n;
        Row xr;
        LaneRow<DY, RUN, LANES, NJ> yr;
        LaneRow<DX, RUN, LANES, NJ> dr;
        xr.load(x + ox, sub, n);
        yr.load(dy + oy, sub, n);
        dr.load(dx + ox, sub, n);
        const float s = rstd[r], sl = live ? s : 0.f;
        float dot = 0.f;
#pragma unroll
        for (int q = 0; q < NR; q++) {
            float xv[RUN], yv[RUN], wv[RUN];
            xr.p[q].get(xv);
            yr.p[q].get(yv);
            norm_w_run<RUN, LANES>(wv, sh, sub, q);
#pragma unroll
            for (int k = 0; k < RUN; k++) {
                dot += xv[k] * s * wv[k] * yv[k];
                acc[q * RUN + k] += yv[k] * xv[k] * sl;
            }
            norm_opaque(xr.p[q]);
            norm_opaque(yr.p[q]);
        }
        dot = group_sum<LANES>(dot) / n;
#pragma unroll
        for (int q = 0; q < NR; q++) {
            float xv[RUN], yv[RUN], wv[RUN], dv[RUN];
            xr.p[q].get(xv);
            yr.p[q].get(yv);
            dr.p[q].get(dv);
            norm_w_run<RUN, LANES>(wv, sh, sub, q);
#pragma unroll
            for (int k = 0; k < RUN; k++) dv[k] = dv[k] + s * (wv[k] * yv[k] - xv[k] * s * dot);
            dr.p[q].set(dv);
        }
        if (live) dr.store(dx + ox, sub, n);
    }
#pragma unroll
    for (int j = 0; j < NJ; j++) // the warp's row groups, in a fixed order (the same columns)
        for (int m = LANES; m < 32; m <<= 1) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], m);
    for (int k = 0; k < 8; k++) { // the warps add their sums in a fixed order, into w's slots
        __syncthreads();
        if (warp == k && lane < LANES)
#pragma unroll
            for (int j = 0; j < NJ; j++) {
                float &t = sh[norm_w_slot<RUN, LANES>(sub, j)];
                t = k ? t + acc[j] : acc[j];
            }
    }
    __syncthreads();
    for (int t = threadIdx.x; t < LANES * NJ; t += blockDim.x) {
        const int i = norm_slot_col<Row, RUN, LANES>(t);
        if (i < n) part[(size_t)blockIdx.x * n + i] = sh[t];
    }
}
static void rmsnorm_backward(real *dx, real *dw, const real *dy, const real *x, const real *w,
                             const real *rstd, int N, int nh, int n, int ldx, int ldy, int x_mp, int dy_mp, int dx_mp) {
    PROF_OP();
    if (N * nh == 0) return;
    with_mp(x, x_mp, [&](auto xp) { with_mp(dy, dy_mp, [&](auto dyp) { with_mp(dx, dx_mp, [&](auto dxp) {
        using X = std::remove_const_t<std::remove_pointer_t<decltype(xp)>>;
        using DY = std::remove_const_t<std::remove_pointer_t<decltype(dyp)>>;
        using DX = std::remove_pointer_t<decltype(dxp)>;
        constexpr int RUN = 16 / (int)std::max(sizeof(X), std::max(sizeof(DY), sizeof(DX)));
        auto go = [&](auto run, auto lanes, auto nj) {
            constexpr int R_ = decltype(run)::value, L = decltype(lanes)::value, NJ = decltype(nj)::value;
            auto kernel = rmsnorm_backward_kernel<X, DY, DX, R_, L, NJ>;
            const int blocks = resident_blocks(kernel, CEIL_DIV(N * nh, 8 * (32 / L)));
            float *part = colpart((size_t)blocks * n);
            kernel<<<blocks, 256>>>(dxp, part, dyp, xp, w, rstd, N, nh, n, ldx, ldy);
            CUDA_CHECK(cudaGetLastError());
            colsum_finish(dw, part, blocks, n, n, 0);
        };
        if (norm_splits(RUN, n, x, ldx) && norm_splits(RUN, n, dy, ldy) && norm_splits(RUN, n, dx, ldx))
            norm_rows<RUN>(__func__, n, go);
        else norm_rows<1>(__func__, n, go);
    }); }); });
}

// ---- SwiGLU (§2, (2.2a)): h = silu(gu[:, :F]) ⊙ gu[:, F:] ----------------------------------------------
// Both passes: one warp per token row, 16-byte runs of adjacent values a lane (8 bf16, 4 fp32: F a multiple of 8 and
// the rows 16-byte aligned, as the activations' 64-value offsets place them; mlp_width's F, a multiple of 256, gives
// every lane the same number of runs), at most 8 rows a block. silu(a) = a σ(a), σ from one fast sigmoid, formed alike
// in both (the backward's h is the forward's, bit for bit). Each moves 6 (forward) or 12 (backward) bytes a value in
// bf16 mode against a sigmoid and a few products: the loads in flight bound them. MP: the matmul-precision type
// (bf16 mode: __nv_bfloat16) of gu (a matmul output), h (a matmul input), dh and dgu (their gradients).
template <class MP> static void swiglu_check(const char *who, int F, const void *a, const void *b, const void *c) {
    auto a16 = [](const void *p) { return (uintptr_t)p % 16 == 0; };
    if (F % run16<MP>() || !a16(a) || !a16(b) || !a16(c)) {
        fprintf(stderr, "error: %s: rows of %d values at %p, %p, %p: not 16-byte runs\n", who, F, a, b, c);
        exit(1);
    }
}
template <class MP> __global__ void __launch_bounds__(256) swiglu_forward_kernel(MP *__restrict__ h, const MP *__restrict__ gu,
                                                                                int BT, int F) {
    constexpr int RUN = run16<MP>();
    const size_t bt = (size_t)blockIdx.x * 8 + threadIdx.x / 32;
    if (bt >= (size_t)BT) return;
    const MP *row = gu + bt * 2 * F;
    for (int i = RUN * (threadIdx.x % 32); i < F; i += 32 * RUN) {
        Pack<MP, RUN> a, b;
        a.load(row + i);
        b.load(row + F + i);
        float av[RUN], bv[RUN];
        a.get(av);
        b.get(bv);
#pragma unroll
        for (int c = 0; c < RUN; c++) av[c] = av[c] * fsigmoidf_(av[c]) * bv[c];
        a.set(av);
        a.store(h + bt * F + i);
    }
}
static void swiglu_forward(real *h, const real *gu, int BT, int F) {
    PROF_OP();
    if (g_bf16) {
        swiglu_check<__nv_bfloat16>(__func__, F, h, gu, gu);
        swiglu_forward_kernel<<<CEIL_DIV(BT, 8), 256>>>((__nv_bfloat16 *)h, (const __nv_bfloat16 *)gu, BT, F);
    } else {
        swiglu_check<float>(__func__, F, h, gu, gu);
        swiglu_forward_kernel<<<CEIL_DIV(BT, 8), 256>>>(h, gu, BT, F);
    }
    CUDA_CHECK(cudaGetLastError());
}
// dgu = [dh ⊙ up ⊙ silu'(gate), dh ⊙ silu(gate)] (2.2b), silu'(a) = σ(a) + silu(a)(1 − σ(a)), written (SwiGLU is
// its only producer); h = silu(gate) ⊙ up again, as the forward computed it, for W_down's weight gradient (so that
// block_rebuild need not rerun the forward). A lane takes two runs a step (the second 32 runs on, where F has it), their
// six loads (96 bytes) in flight at once.
template <class MP>
__global__ void __launch_bounds__(256) swiglu_backward_kernel(MP *__restrict__ dgu, MP *__restrict__ h, const MP *__restrict__ dh,
                                                              const MP *__restrict__ gu, int BT, int F) {
    constexpr int RUN = run16<MP>();
    const size_t bt = (size_t)blockIdx.x * 8 + threadIdx.x / 32;
    if (bt >= (size_t)BT) return;
    const MP *row = gu + bt * 2 * F, *drow = dh + bt * F;
    MP *dg = dgu + bt * 2 * F, *hr = h + bt * F;
    for (int i = RUN * (threadIdx.x % 32); i < F; i += 64 * RUN) {
        const int at[2] = {i, i + 32 * RUN};
        const bool two = at[1] < F;
        Pack<MP, RUN> a[2], b[2], d[2];
        a[0].load(row + i);
        b[0].load(row + F + i);
        d[0].load(drow + i);
        if (two) {
            a[1].load(row + at[1]);
            b[1].load(row + F + at[1]);
            d[1].load(drow + at[1]);
        }
#pragma unroll
        for (int u = 0; u < 2; u++) {
            if (u && !two) break;
            float av[RUN], bv[RUN], dv[RUN];
            a[u].get(av);
            b[u].get(bv);
            d[u].get(dv);
#pragma unroll
            for (int c = 0; c < RUN; c++) {
                const float s = fsigmoidf_(av[c]), sa = av[c] * s;
                const float g = dv[c] * bv[c] * fmaf(sa, 1.f - s, s);
                bv[c] = sa * bv[c]; // h
                dv[c] = dv[c] * sa; // dup
                av[c] = g;          // dgate
            }
            a[u].set(av);
            a[u].store(dg + at[u]);
            d[u].set(dv);
            d[u].store(dg + F + at[u]);
            b[u].set(bv);
            b[u].store(hr + at[u]);
        }
    }
}
static void swiglu_backward(real *dgu, real *h, const real *dh, const real *gu, int BT, int F) {
    PROF_OP();
    if (g_bf16) {
        swiglu_check<__nv_bfloat16>(__func__, F, dgu, h, dh);
        swiglu_check<__nv_bfloat16>(__func__, F, gu, gu, gu);
        swiglu_backward_kernel<<<CEIL_DIV(BT, 8), 256>>>((__nv_bfloat16 *)dgu, (__nv_bfloat16 *)h,
                                                         (const __nv_bfloat16 *)dh, (const __nv_bfloat16 *)gu, BT, F);
    } else {
        swiglu_check<float>(__func__, F, dgu, h, dh);
        swiglu_check<float>(__func__, F, gu, gu, gu);
        swiglu_backward_kernel<<<CEIL_DIV(BT, 8), 256>>>(dgu, h, dh, gu, BT, F);
    }
    CUDA_CHECK(cudaGetLastError());
}

// ---- causal depthwise short conv (kernel 4) + SiLU (§3.1, (3.1b-c)) --------------------------------------
// pre_t[ch] = Σ_{i<4} w[ch][i] x_{t−3+i}[ch] (x_τ = 0 for τ < 0, per sequence);  y = silu(pre). pre is not
// stored: the backward pass recomputes it from the window of x it reads anyway. Both passes walk a time tile of one
// sequence in time order with the window x_{t−3..t} in registers (each x read once) and form pre_t in the same order.
// The forward runs one thread per (pair of adjacent channels, tile of CONV_TILE steps) (runs of 16 bytes, a quarter
// of the threads, ran it slower: dev/cuda/conv/conv_bench.cu); y (Q, K, V: the token mixers' operands) is stored in
// the matmul precision. The G and N layers' Q and K go through conv_silu_l2norm_forward (the L2 norm's section),
// their V through conv_silu_forward. The backward takes consecutive runs of channels that come from separate tensors
// in one launch: the G and N layers' Q | K | V in one pass over the projection's whole rows. The forward loads eight
// rows before using any (eight loads a thread in flight) and its work a value is small (4 FMAs, the fast SiLU,
// conversions), so that its bytes bound it; the backward's form and limits: at conv_silu_backward_kernel.
#define CONV_TILE 32
static_assert(NATSL_CONV == 4 && NATSL_CHUNK % CONV_TILE == 0 && CONV_TILE % 8 == 0,
              "the conv kernels assume 4 taps and whole tiles of 8-row batches");
struct ConvRuns { // up to 3 runs of consecutive channels: run r's n[r] channels are y[r]'s columns (row stride n[r])
    void *y[3];   // the forward's outputs (matmul precision), or the backward's dy (fp32, or the matmul precision)
    int n[3], nr;
    // channel c (from the first run's first) -> its run's tensor and row stride ny, c -> its column there (by selects:
    // an indexed read of y or n would copy the struct to local memory, 40 bytes a thread)
    __device__ void *find(int &c, int &ny) const {
        if (nr > 1 && c >= n[0]) {
            c -= n[0];
            if (nr > 2 && c >= n[1]) { c -= n[1]; ny = n[2]; return y[2]; }
            ny = n[1];
            return y[1];
        }
        ny = n[0];
        return y[0];
    }
};
template <class MP> // x: the projection, y: the conv's output, both in the matmul precision
__global__ void __launch_bounds__(128, 4) conv_silu_forward_kernel(ConvRuns o, const MP *__restrict__ x, int ldx,
        const float *__restrict__ w, int T, int n, int tiles) {
    constexpr int RUN = 2;
    const int groups = n / RUN, item = blockIdx.x * blockDim.x + threadIdx.x, tile = item / groups;
    if (tile >= tiles) return;
    int ch = (item % groups) * RUN, col = ch, ny;
    MP *__restrict__ y = reinterpret_cast<MP *>(o.find(col, ny)) + col;
    int tiles_per_seq = T / CONV_TILE, t0 = (tile % tiles_per_seq) * CONV_TILE;
    size_t row0 = (size_t)(tile / tiles_per_seq) * T;         // b·T
    const MP *xc = x + ch;
    float wt[RUN][4], x0[RUN], x1[RUN], x2[RUN];
#pragma unroll
    for (int c = 0; c < RUN; c++)
#pragma unroll
        for (int k = 0; k < 4; k++) wt[c][k] = w[(ch + c) * 4 + k];
    auto X = [&](float (&v)[RUN], int t) {
        if (t >= 0) { Pack<MP, RUN> p; p.load(xc + (row0 + t) * ldx); p.get(v); }
        else for (int c = 0; c < RUN; c++) v[c] = 0.f;
    };
    X(x0, t0 - 3); X(x1, t0 - 2); X(x2, t0 - 1);
    for (int tb = t0; tb < t0 + CONV_TILE; tb += 8) {
        Pack<MP, RUN> xs[8]; // eight rows' loads in flight before any is used
#pragma unroll
        for (int k = 0; k < 8; k++) xs[k].load(xc + (row0 + tb + k) * ldx); // (tb ≥ 0: no test of X)
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float x3[RUN], out[RUN];
            xs[k].get(x3);
#pragma unroll
            for (int c = 0; c < RUN; c++) {
                float pre = 0.f;
                pre += wt[c][0] * x0[c]; pre += wt[c][1] * x1[c]; pre += wt[c][2] * x2[c]; pre += wt[c][3] * x3[c];
                out[c] = siluf_(pre);
                x0[c] = x1[c]; x1[c] = x2[c]; x2[c] = x3[c];
            }
            Pack<MP, RUN> po;
            po.set(out);
            po.store(y + (row0 + tb + k) * ny);
        }
    }
}
// the pairs of channels the kernels take: the runs' lengths, ldx and col even (config_check: d_k, d_v even)
static void conv_check(const char *who, int ldx, int col, const ConvRuns &o) {
    int odd = ldx % 2 || col % 2;
    for (int r = 0; r < o.nr; r++) odd |= o.n[r] % 2;
    if (odd) {
        fprintf(stderr, "error: %s: channels of rows of %d from %d not in pairs\n", who, ldx, col);
        exit(1);
    }
}
static int conv_channels(const ConvRuns &o) { int n = 0; for (int r = 0; r < o.nr; r++) n += o.n[r]; return n; }
// the runs' channels from col of x (rows of stride ldx) and of w [.][4], in one launch: a thread a pair of channels
// and a tile of CONV_TILE steps
static void conv_silu_forward_runs(const ConvRuns &o, const real *x, int ldx, int col, const real *w, int B, int T) {
    conv_check(__func__, ldx, col, o);
    int n = conv_channels(o), tiles = B * (T / CONV_TILE);
    with_mp(x, 1, [&](auto xp) {
        using MP = std::remove_const_t<std::remove_pointer_t<decltype(xp)>>;
        conv_silu_forward_kernel<MP><<<(unsigned)CEIL_DIV((size_t)(n / 2) * tiles, 128), 128>>>(o, xp + col, ldx,
                w + col * NATSL_CONV, T, n, tiles);
    });
    CUDA_CHECK(cudaGetLastError());
}
// channels col .. col+n−1 of x into y (row stride n)
static void conv_silu_forward(real *y, const real *x, int ldx, int col, const real *w, int B, int T, int n) {
    PROF_OP();
    conv_silu_forward_runs(ConvRuns{{y}, {n}, 1}, x, ldx, col, w, B, T);
}
// dpre = dy ⊙ silu'(pre);  dx_τ = Σ_i w[i] dpre_{τ+3−i};  dw[ch][i] += Σ_t dpre_t x_{t−3+i}   (3.4k, 3.4n)
// dx is written (the conv is its only producer) in the matmul precision: it feeds only W_qkv's backward.
// A lane takes RUN adjacent channels (4 bf16 ones: a warp-wide load moves 256 bytes of a row; pairs in fp32 mode and
// where the runs, strides or addresses do not split in fours) and a time tile of CONV_BWD_TILE steps of one sequence,
// walked in time order: pre_t is recomputed from the window x_{t−3..t} (registers), dpre_t is added to the four dx_τ
// it feeds (dx_{t−3} is then complete and stored, dx_{t−2..t} stay pending) and to dw's four sums. The rows of x and
// dy pass through a ring of DEPTH rows in registers: row t + DEPTH's loads are issued as row t leaves it, so that each
// warp keeps DEPTH rows in flight while it computes (4 channels: 12 warps an SM, 48 KB of bf16 x and dy in flight, 36
// KB of bf16 x and fp32 dy). A tile also reads the three rows of x before it and steps through the three rows after
// it (their dpre completes its last three dx rows; their dw is the next tile's): 7% more rows read, from L2. What
// bounds it: DRAM (x and dy read, dx written) while the loads stay in flight, then instruction issue (about 25
// instructions a channel and step: 4 FMAs for pre, silu' from fsigmoidf_ (its error: there), 8 FMAs for dx and dw).
// A block's warps take consecutive tiles of the same channels; their dw sums are added per block in shared memory in
// a fixed order, then over the blocks by colsum_finish (bitwise reproducible; RUN changes no bit of dx or dw).
#define CONV_BWD_TILE 64  // time steps a warp takes
#define CONV_BWD_WARPS 4  // warps a block (consecutive time tiles), dw summed over them before it is stored
static_assert(NATSL_CHUNK % CONV_BWD_TILE == 0 && CONV_BWD_TILE % 8 == 0, "the conv backward takes whole tiles of T");
template <int RUN> struct ConvChannels { // a lane's RUN channels' state in conv_silu_backward_kernel
    float w[RUN][4];                   // the taps
    float x0[RUN], x1[RUN], x2[RUN];   // the window x_{t−3..t−1}
    float a0[RUN], a1[RUN], a2[RUN];   // the pending sums of dx_{t−2}, dx_{t−1}, dx_t
    float d[RUN][4];                   // Σ_t dpre_t x_{t−3+i}: dw's sums over the tile
    // step t with x3 = x_t, g = dy_t: dx_{t−3}, complete now, into done; dw counts the step where DW
    template <bool DW> __device__ __forceinline__ void step(const float (&x3)[RUN], const float (&g)[RUN], float (&done)[RUN]) {
#pragma unroll
        for (int c = 0; c < RUN; c++) {
            const float pre = __fmaf_rn(w[c][3], x3[c], __fmaf_rn(w[c][2], x2[c], __fmaf_rn(w[c][1], x1[c], w[c][0] * x0[c])));
            const float s = fsigmoidf_(pre), dp = g[c] * (s * __fmaf_rn(pre, 1.f - s, 1.f)); // silu' = s (1 + pre (1 − s))
            if (DW) {
                d[c][0] = __fmaf_rn(dp, x0[c], d[c][0]); d[c][1] = __fmaf_rn(dp, x1[c], d[c][1]);
                d[c][2] = __fmaf_rn(dp, x2[c], d[c][2]); d[c][3] = __fmaf_rn(dp, x3[c], d[c][3]);
            }
            done[c] = __fmaf_rn(w[c][0], dp, a0[c]);
            a0[c] = __fmaf_rn(w[c][1], dp, a1[c]); a1[c] = __fmaf_rn(w[c][2], dp, a2[c]); a2[c] = w[c][3] * dp;
            x0[c] = x1[c]; x1[c] = x2[c]; x2[c] = x3[c];
        }
    }
};
// the rows the ring holds: 8, or 4 where a row takes more than 16 bytes a lane (4 channels with fp32 dy)
template <class MP, class DY, int RUN> __host__ __device__ constexpr int conv_bwd_depth() {
    return RUN * (int)(sizeof(MP) + sizeof(DY)) <= 16 ? 8 : 4;
}
// blocks an SM: as many as the registers of each form allow without spills (ptxas -v: up to 168 a thread for 4
// channels, 96 for pairs of bf16 channels, 128 in fp32 mode)
template <class MP, int RUN> __host__ __device__ constexpr int conv_bwd_blocks() {
    return RUN == 4 ? 3 : sizeof(MP) == 2 ? 5 : 4;
}
template <class MP, class DY, int RUN> // dx and x in the matmul precision; the runs' dy in DY (fp32, or bf16: a G layer's)
__global__ void __launch_bounds__(32 * CONV_BWD_WARPS, (conv_bwd_blocks<MP, RUN>())) conv_silu_backward_kernel(
        MP *__restrict__ dx, int lddx, float *__restrict__ dw_part, ConvRuns o, const MP *__restrict__ x, int ldx,
        const float *__restrict__ w, int T, int n, int tiles) {
    constexpr int DEPTH = conv_bwd_depth<MP, DY, RUN>();
    static_assert(CONV_BWD_TILE % DEPTH == 0, "whole turns of the ring a tile");
    __shared__ float4 sh[CONV_BWD_WARPS][RUN][32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int ch = RUN * (blockIdx.x * 32 + lane), tile = blockIdx.y * CONV_BWD_WARPS + warp;
    ConvChannels<RUN> C;
#pragma unroll
    for (int c = 0; c < RUN; c++)
#pragma unroll
        for (int i = 0; i < 4; i++) C.d[c][i] = 0.f;
    if (ch < n && tile < tiles) {
        int col = ch, ny;
        const DY *__restrict__ dy = reinterpret_cast<const DY *>(o.find(col, ny)) + col;
        const int tiles_per_seq = T / CONV_BWD_TILE, t0 = (tile % tiles_per_seq) * CONV_BWD_TILE, t1 = t0 + CONV_BWD_TILE;
        const int t_end = t1 < T ? t1 + 3 : T; // the rows read: t0 − 3 .. t_end − 1 of x, t0 .. t_end − 1 of dy
        const size_t row0 = (size_t)(tile / tiles_per_seq) * T; // b·T
#pragma unroll
        for (int c = 0; c < RUN; c++) {
#pragma unroll
            for (int i = 0; i < 4; i++) C.w[c][i] = w[(ch + c) * 4 + i];
            C.a0[c] = C.a1[c] = C.a2[c] = 0.f;
        }
        Pack<MP, RUN> win[3]; // x_{t0−3..t0−1}: zeros at the sequence start (t0 = 0; else t0 ≥ 3)
#pragma unroll
        for (int j = 0; j < 3; j++) {
            if (t0 > 0) win[j].load(x + (row0 + t0 - 3 + j) * ldx + ch);
            else win[j].zero();
        }
        win[0].get(C.x0); win[1].get(C.x1); win[2].get(C.x2);
        const MP *xr = x + (row0 + t0) * ldx + ch; // the next rows the ring loads
        const DY *gr = dy + (row0 + t0) * ny;
        MP *dxr = dx + (row0 + t0) * lddx + ch;    // the next row of dx to store
        Pack<MP, RUN> xs[DEPTH];
        Pack<DY, RUN> gs[DEPTH];
#pragma unroll
        for (int k = 0; k < DEPTH; k++) { xs[k].load(xr); gs[k].load(gr); xr += ldx; gr += ny; }
#pragma unroll 1
        for (int tb = t0; tb < t1; tb += DEPTH) {
#pragma unroll
            for (int k = 0; k < DEPTH; k++) { // step t = tb + k
                float xv[RUN], gv[RUN], done[RUN];
                xs[k].get(xv); gs[k].get(gv);
                xs[k].load(xr); gs[k].load(gr); // row min(t + DEPTH, t_end − 1): no test on the loads
                const bool more = tb + k + DEPTH + 1 < t_end;
                xr += more ? ldx : 0; gr += more ? ny : 0;
                C.template step<true>(xv, gv, done);
                if (tb + k >= t0 + 3) { Pack<MP, RUN> p; p.set(done); p.store(dxr); dxr += lddx; } // dx_{t−3}
            }
        }
        if (t1 < T) { // steps t1 .. t1+2 (the ring's slots 0..2) complete dx_{t1−3..t1−1}
#pragma unroll
            for (int k = 0; k < 3; k++) {
                float xv[RUN], gv[RUN], done[RUN];
                xs[k].get(xv); gs[k].get(gv);
                C.template step<false>(xv, gv, done);
                Pack<MP, RUN> p; p.set(done); p.store(dxr); dxr += lddx;
            }
        } else { // the sequence's last rows: dx_{T−3..T−1} are the pending sums
            Pack<MP, RUN> p;
            p.set(C.a0); p.store(dxr);
            p.set(C.a1); p.store(dxr + lddx);
            p.set(C.a2); p.store(dxr + 2 * (size_t)lddx);
        }
    }
#pragma unroll
    for (int c = 0; c < RUN; c++) sh[warp][c][lane] = make_float4(C.d[c][0], C.d[c][1], C.d[c][2], C.d[c][3]);
    __syncthreads();
    if (warp || ch >= n) return;
    float4 *pp = reinterpret_cast<float4 *>(dw_part + (size_t)blockIdx.y * n * NATSL_CONV + (size_t)ch * NATSL_CONV);
#pragma unroll
    for (int c = 0; c < RUN; c++) {
        float4 s = sh[0][c][lane];
        for (int k = 1; k < CONV_BWD_WARPS; k++) { // the block's time tiles in a fixed order
            const float4 a = sh[k][c][lane];
            s.x += a.x; s.y += a.y; s.z += a.z; s.w += a.w;
        }
        pp[c] = s;
    }
}
// one launch of conv_silu_backward_kernel in runs of RUN channels (conv_silu_backward_runs picks RUN), then the sum of
// its dw partials into dw's channels from col
template <int RUN> static void conv_silu_backward_launch(real *dx, int lddx, real *dw, const ConvRuns &o, const real *x,
                                                         int ldx, int col, const real *w, int B, int T, int dy_mp) {
    const int tiles = B * (T / CONV_BWD_TILE), n = conv_channels(o), parts = CEIL_DIV(tiles, CONV_BWD_WARPS);
    float *part = colpart((size_t)parts * n * NATSL_CONV);
    const dim3 grid(CEIL_DIV(n / RUN, 32), parts);
    with_mp(dx, 1, [&](auto dxp) { // x in dx's precision
        using MP = std::remove_pointer_t<decltype(dxp)>;
        if constexpr (RUN * sizeof(MP) <= 8) { // runs of at most 8 bytes of x: 4 bf16 channels, 2 fp32 ones
            auto go = [&](auto dyt) {
                conv_silu_backward_kernel<MP, decltype(dyt), RUN><<<grid, 32 * CONV_BWD_WARPS>>>(dxp + col, lddx, part,
                        o, (const MP *)x + col, ldx, w + col * NATSL_CONV, T, n, tiles);
            };
            if constexpr (std::is_same<MP, __nv_bfloat16>::value) { // bf16 mode: dy in bf16 where dy_mp
                if (dy_mp) go(__nv_bfloat16());
                else go(float());
            } else go(float());
        } else {
            fprintf(stderr, "error: %s: runs of %d fp32 channels are not built\n", __func__, RUN);
            exit(1);
        }
    });
    CUDA_CHECK(cudaGetLastError());
    colsum_finish(dw + col * NATSL_CONV, part, parts, n * NATSL_CONV, n * NATSL_CONV, 0);
}
// whether the runs, x and dx split into aligned runs of 4 bf16 channels (8-byte loads and stores; 16-byte for fp32 dy)
static bool conv_quads(const real *dx, int lddx, const ConvRuns &o, const real *x, int ldx, int col, int dy_mp) {
    const size_t dys = dy_mp ? 2 : 4;
    bool ok = g_bf16 && ldx % 4 == 0 && lddx % 4 == 0 && col % 4 == 0 && (uintptr_t)x % 8 == 0 && (uintptr_t)dx % 8 == 0;
    for (int r = 0; r < o.nr; r++) ok &= o.n[r] % 4 == 0 && (uintptr_t)o.y[r] % (4 * dys) == 0;
    return ok;
}
// WRITES dx's channels of the runs (from col; rows of stride lddx), adds to dw's, in one launch (and the partial sums'
// one). dy_mp: the runs are stored in the matmul precision (bf16 mode), else fp32. T: a multiple of CONV_BWD_TILE.
static void conv_silu_backward_runs(real *dx, int lddx, real *dw, const ConvRuns &o, const real *x, int ldx, int col,
                                    const real *w, int B, int T, int dy_mp) {
    conv_check(__func__, ldx, col, o);
    conv_check(__func__, lddx, col, o);
    if (conv_quads(dx, lddx, o, x, ldx, col, dy_mp)) conv_silu_backward_launch<4>(dx, lddx, dw, o, x, ldx, col, w, B, T, dy_mp);
    else conv_silu_backward_launch<2>(dx, lddx, dw, o, x, ldx, col, w, B, T, dy_mp);
}
// the backward of conv_silu_qkv_forward: WRITES dx's columns Q | K | V from dq, dk, dv (stored in the matmul precision
// with dqkv_mp: a G layer's, GdnArgs.grads_mp)
static void conv_silu_qkv_backward(real *dx, int lddx, real *dw, const real *dq, const real *dk, const real *dv,
                                   const real *x, int ldx, const real *w, int B, int T, int K, int Vt, int dqkv_mp) {
    PROF_OP();
    conv_silu_backward_runs(dx, lddx, dw, ConvRuns{{(void *)dq, (void *)dk, (void *)dv}, {K, K, Vt}, 3}, x, ldx, 0, w, B, T,
                            dqkv_mp);
}

// ---- L2 norm per head (§0, (0.4)): ŷ = x / sqrt(Σx² + 1e-6); x, y are [N][nh*n] -----------------------
// On the GPU the L2 norm's forward runs inside the pass that makes its input, the conv's Q and K (train_natsl.c:
// conv_silu_forward, then l2norm_forward): a warp takes 32 / LANES heads and a span of consecutive rows (b·T + t),
// LANES lanes a head, each lane one 16-byte run of the head's d_k channels (LANES = d_k / 8 in bf16, d_k / 4 in fp32:
// 8, 16 or 32), so each step's Σy² is a sum over LANES lanes by shuffles (no barrier); d_k = 192 takes pairs on 32
// lanes, other d_k one value a lane on 32 lanes (rows_dispatch's NJ). y is rounded to the matmul precision first, as
// stored. The spans (a multiple of 8 rows) are sized so that the grid is one wave of resident warps: each warp walks
// its span in time order (the window x_{t−3..t−1} zeroed where a sequence starts, x read once but for the three rows
// before the span), its rows passing through a ring of 8 in registers: row t + 8's load is issued as row t leaves it,
// so that 8 rows a warp stay in flight while it computes. The conv's taps are scaled by −log2 e once, so that SiLU
// takes 4 instructions (silu_log2_). Writes q̂, k̂ and their ρ = 1/norm (rsqrtf: 2 ulp; the GDN op's operands), and
// Q, K themselves only where given (the N layer: its softmax op's RMSNorm reads them; a G layer's are read by nothing
// else). Its work a value (an unpacking, the conv's 4 FMAs, SiLU, the rounding and its unpacking, the square, the
// scaling, the packing; a row's sum over LANES lanes) is about 13 instructions against the 4 bytes (6 with Q, K) it
// moves a value; what bounds it: DRAM while 8 rows a warp stay in flight, then instruction issue (its benchmark:
// dev/cuda/conv/conv_bench.cu).
// silu(pre) = pre σ(pre) from p = −log2(e)·pre: p / (−log2 e·(1 + 2^p)), from MUFU.EX2 and MUFU.RCP (ftz: 2^p and the
// reciprocal flush to 0 below 2^−126, where they change nothing): relative error a few ulp where pre > −87; −0 where
// pre < −87, as silu underflows.
#define LOG2E_F 1.4426950408889634f
__device__ __forceinline__ float silu_log2_(float p) {
    float e, r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(p));
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(__fmaf_rn(-LOG2E_F, e, -LOG2E_F)));
    return p * r;
}
struct QkPlanes { void *p[2]; }; // the Q plane's and the K plane's pointer (a field each: no indexed struct read)
// blocks an SM: as many as the ring (8 rows of NJ values a lane) lets fit without spills (ptxas -v: up to 128 registers
// a thread for 16-byte runs on 16 or 32 lanes, 168 on 8 lanes; more where a lane's runs of a row take more than 4
// registers)
template <class MP, int RUN, int LANES, int NJ> __host__ __device__ constexpr int l2norm_fwd_blocks() {
    constexpr int run_bytes = RUN * (int)sizeof(MP) < 4 ? 4 : RUN * (int)sizeof(MP); // a run's registers' bytes
    return (NJ / RUN) * run_bytes > 16 ? 2 : LANES < 16 ? 3 : 4;
}
template <class MP, int RUN, int LANES, int NJ, bool KEEP> // KEEP: Q, K stored too (y)
__global__ void __launch_bounds__(128, (l2norm_fwd_blocks<MP, RUN, LANES, NJ>())) conv_silu_l2norm_forward_kernel(QkPlanes hat,
        float *__restrict__ rho, QkPlanes y, const MP *__restrict__ x, int ldx, const float *__restrict__ w, int T, int BT,
        int H, int dk, int span) {
    using Row = LaneRow<MP, RUN, LANES, NJ>;
    constexpr int HPW = 32 / LANES; // heads a warp
    const int warp = blockIdx.x * 4 + threadIdx.x / 32, lane = threadIdx.x % 32, sub = lane % LANES;
    const int groups = CEIL_DIV(2 * H, HPW), t0 = warp / groups * span, hd0 = (warp % groups) * HPW + lane / LANES;
    if (t0 >= BT) return;
    const int t1 = min(t0 + span, BT); // the span: rows t0 .. t1 − 1 (t1 − t0 a multiple of 8)
    const bool live = hd0 < 2 * H; // a last group's lanes past the heads: the last head again, not stored
    const int hd = min(hd0, 2 * H - 1), plane = hd >= H, h = hd - plane * H, K = H * dk; // hd: Q heads, then K heads
    const MP *xr = x + (size_t)t0 * ldx + hd * dk; // the head's columns of Q | K: the next row the ring loads
    MP *hr = reinterpret_cast<MP *>(plane ? hat.p[1] : hat.p[0]) + (size_t)t0 * K + h * dk; // the rows to store
    MP *yr = KEEP ? reinterpret_cast<MP *>(plane ? y.p[1] : y.p[0]) + (size_t)t0 * K + h * dk : nullptr;
    float *rr = rho + (size_t)plane * BT * H + (size_t)t0 * H + h;
    float wt[NJ][4], x0[NJ], x1[NJ], x2[NJ]; // the taps times −log2 e; the window x_{t−3..t−1}
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        const int i = Row::col(sub, j);
#pragma unroll
        for (int k = 0; k < 4; k++) wt[j][k] = i < dk ? -LOG2E_F * w[(hd * dk + i) * 4 + k] : 0.f;
    }
    Row xs[8]; // the ring
    if (t0 % T) { // the three rows before the span (t0 % T ≥ 8: the same sequence)
#pragma unroll
        for (int k = 0; k < 3; k++) xs[k].load(xr - (3 - k) * (size_t)ldx, sub, dk);
        xs[0].get(x0); xs[1].get(x1); xs[2].get(x2);
    } else
#pragma unroll
        for (int j = 0; j < NJ; j++) x0[j] = x1[j] = x2[j] = 0.f;
#pragma unroll
    for (int k = 0; k < 8; k++) { xs[k].load(xr, sub, dk); xr += ldx; }
    int seq_end = (t0 / T + 1) * T; // the next sequence's first row
#pragma unroll 1
    for (int tb = t0; tb < t1; tb += 8) {
        if (tb == seq_end) { // a sequence starts: x_τ = 0 for τ < 0
#pragma unroll
            for (int j = 0; j < NJ; j++) x0[j] = x1[j] = x2[j] = 0.f;
            seq_end += T;
        }
        const bool more = tb + 8 < t1; // rows tb + 8 .. tb + 15 to load (the span's rows come in eights)
#pragma unroll
        for (int k = 0; k < 8; k++) { // row tb + k
            float v[NJ], ss = 0.f;
            xs[k].get(v);
            if (more) { xs[k].load(xr, sub, dk); xr += ldx; }
#pragma unroll
            for (int j = 0; j < NJ; j++) {
                float p = 0.f; // −log2 e · pre
                p += wt[j][0] * x0[j]; p += wt[j][1] * x1[j]; p += wt[j][2] * x2[j]; p += wt[j][3] * v[j];
                x0[j] = x1[j]; x1[j] = x2[j]; x2[j] = v[j];
                v[j] = silu_log2_(p);
            }
            Row q;
            q.set(v);
            q.get(v); // y as stored (rounded to MP)
#pragma unroll
            for (int j = 0; j < NJ; j++) ss += v[j] * v[j];
            if (KEEP && live) q.store(yr, sub, dk);
            const float s = rsqrtf(group_sum<LANES>(ss) + NATSL_EPS);
#pragma unroll
            for (int j = 0; j < NJ; j++) v[j] *= s;
            q.set(v);
            if (live) {
                q.store(hr, sub, dk);
                if (sub == 0) *rr = s;
            }
            hr += K; rr += H;
            if (KEEP) yr += K;
        }
    }
}
// The launch at spans of `span` rows (a multiple of 8; 0: the one-wave spans of the trainer's call)
static void conv_silu_l2norm_launch(real *q_hat, real *k_hat, real *rho, real *q, real *k, const real *x, int ldx,
                                    const real *w, int B, int T, int H, int dk, int span) {
    const int BT = B * T;
    if (T % 8 || span % 8) {
        fprintf(stderr, "error: %s: T = %d or spans of %d rows not in eights\n", __func__, T, span);
        exit(1);
    }
    with_mp(q_hat, 1, [&](auto hp) { // x, q, k in q̂'s precision
        using MP = std::remove_pointer_t<decltype(hp)>;
        constexpr int RUN = run16<MP>();
        auto go = [&](auto run, auto lanes, auto nj) {
            constexpr int R_ = decltype(run)::value, L = decltype(lanes)::value, NJ = decltype(nj)::value;
            const int groups = CEIL_DIV(2 * H, 32 / L);
            auto launch = [&](auto keep) {
                auto kernel = conv_silu_l2norm_forward_kernel<MP, R_, L, NJ, decltype(keep)::value>;
                int sp = span;
                if (!sp) { // as many spans a group as one wave of warps holds
                    int per_sm = 0;
                    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 128, 0));
                    const int spans = std::max(std::max(per_sm, 1) * num_sms() * 4 / groups, 1);
                    sp = CEIL_DIV(CEIL_DIV(BT, spans), 8) * 8;
                }
                const unsigned blocks = CEIL_DIV(groups * CEIL_DIV(BT, sp), 4);
                kernel<<<blocks, 128>>>(QkPlanes{{q_hat, k_hat}}, rho, QkPlanes{{q, k}}, (const MP *)x, ldx, w, T, BT, H,
                                        dk, sp);
            };
            if (q) launch(std::true_type());
            else launch(std::false_type());
        };
        auto fits = [&](int run) { // runs of `run` values, aligned to their size
            auto al = [&](const void *p) { return (uintptr_t)p % (run * sizeof(MP)) == 0; };
            return dk % run == 0 && ldx % run == 0 && al(x) && al(q_hat) && al(k_hat) && (!q || (al(q) && al(k)));
        };
        using RunT = std::integral_constant<int, RUN>;
        using I1 = std::integral_constant<int, 1>;
        using I2 = std::integral_constant<int, 2>;
        using I32 = std::integral_constant<int, 32>;
        if (fits(RUN) && dk == 8 * RUN) go(RunT(), std::integral_constant<int, 8>(), RunT());
        else if (fits(RUN) && dk == 16 * RUN) go(RunT(), std::integral_constant<int, 16>(), RunT());
        else if (fits(RUN) && dk == 32 * RUN) go(RunT(), I32(), RunT());
        else if (fits(2) && dk == 192) go(I2(), I32(), std::integral_constant<int, 6>()); // pairs (the 760m preset)
        else rows_dispatch<8>(__func__, dk, [&](auto nj) { go(I1(), I32(), nj); });
    });
    CUDA_CHECK(cudaGetLastError());
}
// From the projection's columns Q | K (rows of stride ldx, d_k-channel heads): q̂ | k̂ (hat: planes [2][BT][K]), their
// ρ [2][BT][H], and where q, k are given, the conv's Q and K themselves ([BT][K] each)
static void conv_silu_l2norm_forward(real *q_hat, real *k_hat, real *rho, real *q, real *k, const real *x, int ldx,
                                     const real *w, int B, int T, int H, int dk) {
    PROF_OP();
    conv_silu_l2norm_launch(q_hat, k_hat, rho, q, k, x, ldx, w, B, T, H, dk, 0);
}
// WRITES dx = ρ(dŷ − ŷ(ŷ·dŷ))   (3.4i), in place if dx = dy; rows of stride ld. As train_natsl.c, the GDN op's
// backward calls it (GdnArgs.rho) where its bf16 kernels do not fold it into their last pass: on the fp32 ŷ the op's
// other kernels read (fp32 mode's, or their fp32 copies: gdn_operands).
__global__ void l2norm_backward_kernel(float *dx, const float *dy, const float *y, const float *rho, int R, int nh, int n,
                                       int ldr) {
    int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= R) return;
    size_t at = (size_t)(r / nh) * ldr + (size_t)(r % nh) * n;
    const float *yr = y + at, *dyr = dy + at;
    float dot = 0.f;
    for (int i = lane; i < n; i += 32) dot += yr[i] * dyr[i];
    dot = warp_sum(dot);
    for (int i = lane; i < n; i += 32) dx[at + i] = rho[r] * (dyr[i] - yr[i] * dot);
}
static void l2norm_backward(real *dx, const real *dy, const real *y, const real *rho, int N, int nh, int n, int ldr) {
    PROF_OP();
    l2norm_backward_kernel<<<CEIL_DIV(N * nh, 8), 256>>>(dx, dy, y, rho, N * nh, nh, n, ldr);
    CUDA_CHECK(cudaGetLastError());
}

// ---- GDN gates (§3.1, (3.1f-g)): β = σ(b), g = −exp(A_log)·softplus(a + dt_bias); ab rows are [a(H) | b(H)]
__global__ void gdn_gates_forward_kernel(float *g, float *beta, const float *ab, const float *A_log,
                                         const float *dt_bias, int BT, int H) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)BT * H) return;
    size_t bt = idx / H;
    int h = (int)(idx % H);
    const float *row = ab + bt * 2 * H;
    g[idx] = -expf(A_log[h]) * softplusf_(row[h] + dt_bias[h]);
    beta[idx] = sigmoidf_(row[H + h]);
}
static void gdn_gates_forward(real *g, real *beta, const real *ab, const real *A_log,
                              const real *dt_bias, int BT, int H) {
    PROF_OP();
    gdn_gates_forward_kernel<<<(unsigned)CEIL_DIV((size_t)BT * H, 256), 256>>>(g, beta, ab, A_log, dt_bias, BT, H);
    CUDA_CHECK(cudaGetLastError());
}
// da = dg·(−e^{A_log})·σ(a + dt_bias), d dt_bias = Σ da, dA_log = Σ dg·g, db = dβ·β(1−β)   (3.4l-m)
// WRITES dab's rows (stride ldd): da | db, then zeros up to column ncol (the pad of the layers' gradient rows, gdn_in_ld)
template <class GT>
__global__ void gdn_gates_backward_kernel(GT *dab, int ldd, int ncol, const float *dg, const float *dbeta,
                                          const float *ab, const float *beta, const float *A_log, const float *dt_bias,
                                          int BT, int H) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)BT * H) return;
    size_t bt = idx / H;
    int h = (int)(idx % H);
    GT *d = dab + bt * ldd;
    st(d + h, dg[idx] * -expf(A_log[h]) * sigmoidf_(ab[bt * 2 * H + h] + dt_bias[h]));
    st(d + H + h, dbeta[idx] * beta[idx] * (1.f - beta[idx]));
    for (int j = 2 * H + h; j < ncol; j += H) st(d + j, 0.f);
}
struct GatesDw { // col < H: d dt_bias[col];  col >= H: dA_log[col − H]
    const float *dg, *ab, *g, *A_log, *dt_bias; int H;
    __device__ float operator()(int r, int col) const {
        size_t i = (size_t)r * H + (col % H);
        if (col < H) return dg[i] * -expf(A_log[col]) * sigmoidf_(ab[(size_t)r * 2 * H + col] + dt_bias[col]);
        return dg[i] * g[i];
    }
};
static void gdn_gates_backward(real *dab, int ldd, int ncol, real *dA_log, real *ddt_bias, const real *dg,
                               const real *dbeta, const real *ab, const real *g, const real *beta, const real *A_log,
                               const real *dt_bias, int BT, int H) {
    PROF_OP();
    unsigned gr = (unsigned)CEIL_DIV((size_t)BT * H, 256);
    if (g_bf16) // dab feeds only W_ab's backward: a matmul gradient
        gdn_gates_backward_kernel<<<gr, 256>>>((__nv_bfloat16 *)dab, ldd, ncol, dg, dbeta, ab, beta, A_log, dt_bias, BT, H);
    else gdn_gates_backward_kernel<<<gr, 256>>>(dab, ldd, ncol, dg, dbeta, ab, beta, A_log, dt_bias, BT, H);
    CUDA_CHECK(cudaGetLastError());
    GatesDw f = {dg, ab, g, A_log, dt_bias, H};
    int np = colsum_parts(BT), n = 2 * H;
    float *part = colpart((size_t)np * n);
    colsum_partial_kernel<<<dim3(CEIL_DIV(n, 32), np), dim3(32, COLSUM_ROWS)>>>(part, BT, n, f);
    CUDA_CHECK(cudaGetLastError());
    colsum_finish(ddt_bias, part, np, H, n, 0);
    colsum_finish(dA_log, part, np, H, n, H);
}

// ---- RoPE (§4, (4.2a-b); §5.8): rotate-half, theta 10000, in place on nh heads of width hd ------------------
// Row r is position t = r mod T. The backward is the rotation by the opposite angle (sign = −1). The (cos, sin) of
// the angles t·10000^(−2i/hd) come from a table computed in double on the host (rope_table), as train_natsl.c
// computes them. x_mp: x is stored in the matmul precision (bf16 in bf16 mode: the A layer's q, k).
// One block per row (position t = row mod T); its threads take the nh·hd/4 twin pairs (head h, indices i, i + 1) of the
// row, then copy the row's columns nh·hd..ncol−1 two at a time (y ≠ x: the backward's bf16 copy of the A layer's dq, or
// of its whole dq | dk | dv rows). hd % 4 == 0, ld and ncol even (rope_rotate checks).
template <class X, class Y>
__global__ void rope_rotate_kernel(Y *y, const X *x, const float2 *cs, int T, int nh, int hd, int ldx, int ncol, float sign) {
    const int half = hd / 2, row = blockIdx.x;
    const float2 *c_t = cs + (size_t)(row % T) * half;
    const X *xr = x + (size_t)row * ldx;
    Y *yr = y + (size_t)row * ldx;
    for (int j = threadIdx.x; j < nh * half / 2; j += blockDim.x) {
        const int h = j / (half / 2), i = 2 * (j - h * (half / 2));
        const float4 a = *reinterpret_cast<const float4 *>(c_t + i);   // (cos, sin) of i and i + 1
        const float2 x1 = ld2(xr + h * hd + i), x2 = ld2(xr + h * hd + i + half);
        const float s0 = sign * a.y, s1 = sign * a.w;
        st2(yr + h * hd + i, x1.x * a.x - x2.x * s0, x1.y * a.z - x2.y * s1);
        st2(yr + h * hd + i + half, x2.x * a.x + x1.x * s0, x2.y * a.z + x1.y * s1);
    }
    for (int j = nh * hd + 2 * threadIdx.x; j < ncol; j += 2 * blockDim.x) {
        const float2 v = ld2(xr + j);
        st2(yr + j, v.x, v.y);
    }
}
// The device table [T][hd/2] of (cos, sin) for head width hd, kept per width for the longest T asked so far.
static const float2 *rope_table(int T, int hd) {
    static struct { int hd, T; float2 *p; } tab[8];
    int e = 0;
    while (e < 8 && tab[e].p && tab[e].hd != hd) e++;
    if (e == 8) { fprintf(stderr, "error: rope_table: more than 8 head widths\n"); exit(1); }
    if (tab[e].p && tab[e].T >= T) return tab[e].p;
    size_t n = (size_t)T * (hd / 2);
    float2 *h = (float2 *)xcalloc(n, sizeof(float2));
    for (int t = 0; t < T; t++)
        for (int i = 0; i < hd / 2; i++) {
            double ang = t * pow(10000.0, -2.0 * i / hd);
            h[(size_t)t * (hd / 2) + i] = make_float2((float)cos(ang), (float)sin(ang));
        }
    if (tab[e].p) { CUDA_CHECK(cudaFree(tab[e].p)); g_scratch_moves++; }
    tab[e].p = (float2 *)xcudamalloc(n * sizeof(float2));
    CUDA_CHECK(cudaMemcpy(tab[e].p, h, n * sizeof(float2), cudaMemcpyHostToDevice));
    free(h);
    tab[e].hd = hd; tab[e].T = T;
    return tab[e].p;
}
// copy (bf16 mode, fp32 x): x is left as it is and the rows' first copy_cols columns (≥ nh·hd), rotated, go to copy in
// bf16 instead (row stride ld)
static void rope_rotate(real *x, int N, int T, int nh, int hd, int ld, int sign, int x_mp, __nv_bfloat16 *copy,
                        int copy_cols) {
    PROF_OP();
    if (hd % 4 || ld % 2 || (copy && copy_cols % 2)) {
        fprintf(stderr, "rope_rotate: needs a head width that is a multiple of 4 and even row strides (hd=%d ld=%d)\n", hd, ld);
        exit(1);
    }
    const float2 *cs = rope_table(T, hd);
    const int threads = std::min(512, CEIL_DIV(nh * (hd / 4), 32) * 32);
    const __nv_bfloat16 *xh = (const __nv_bfloat16 *)x;
    if (copy) rope_rotate_kernel<<<N, threads>>>(copy, (const float *)x, cs, T, nh, hd, ld, copy_cols, (float)sign);
    else if (x_mp && g_bf16) rope_rotate_kernel<<<N, threads>>>((__nv_bfloat16 *)x, xh, cs, T, nh, hd, ld, nh * hd, (float)sign);
    else rope_rotate_kernel<<<N, threads>>>(x, (const float *)x, cs, T, nh, hd, ld, nh * hd, (float)sign);
    CUDA_CHECK(cudaGetLastError());
}
static void rope_forward(real *x, int N, int T, int nh, int hd, int ld, int x_mp) {
    rope_rotate(x, N, T, nh, hd, ld, 1, x_mp, NULL, 0);
}
// copy, copy_cols: see rope_rotate (the A layer's dq, or dq, dk with dv, into the bf16 operand of W_qkv's product)
static void rope_backward(real *dx, int N, int T, int nh, int hd, int ld, __nv_bfloat16 *copy, int copy_cols) {
    rope_rotate(dx, N, T, nh, hd, ld, -1, 0, copy, copy_cols);
}

// ---- pairwise softmax: y[2i..2i+1] = softmax(x[2i..2i+1]) (router π (5.2c), output weights ω (5.1e)) --
__global__ void pair_softmax_forward_kernel(float *y, const float *x, size_t npairs) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= npairs) return;
    float p0 = 1.f / (1.f + expf(x[2 * i + 1] - x[2 * i]));
    y[2 * i] = p0;
    y[2 * i + 1] = 1.f - p0;
}
static void pair_softmax_forward(real *y, const real *x, size_t npairs) {
    PROF_OP();
    pair_softmax_forward_kernel<<<(unsigned)CEIL_DIV(npairs, 256), 256>>>(y, x, npairs);
    CUDA_CHECK(cudaGetLastError());
}
// dx0 = y0·y1·(dy0 − dy1) = −dx1   (§6.5).  Router use: pairs of the last chunk (every Nc-th group of H
// pairs when last_H > 0) get dy = 0 (dÃ of the forced last chunk is overwritten with 0).
__global__ void pair_softmax_backward_kernel(float *dx, const float *dy, const float *y, size_t npairs, int last_H, int Nc) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= npairs) return;
    if (last_H > 0 && (int)((i / last_H) % Nc) == Nc - 1) return; // adds 0
    float d = y[2 * i] * y[2 * i + 1] * (dy[2 * i] - dy[2 * i + 1]);
    dx[2 * i] += d;
    dx[2 * i + 1] -= d;
}
static void pair_softmax_backward(real *dx, const real *dy, const real *y, size_t npairs) {
    PROF_OP();
    pair_softmax_backward_kernel<<<(unsigned)CEIL_DIV(npairs, 256), 256>>>(dx, dy, y, npairs, 0, 1);
    CUDA_CHECK(cudaGetLastError());
}

// ---- fused classifier (§2): loss over the V real tokens of the padded logits --------------------------
// One block per row. The backward overwrites the logits with their gradient in place (no second copy). A target
// ANSWER_IGNORE (-1, answer-only training: not an answer) is skipped: loss 0, gradient 0 (§13.1, (13.1a-b)).
__device__ float block_max(float x, float *sh) {
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    __syncthreads();
    if (lane == 0) sh[w] = x;
    __syncthreads();
    float r = sh[0];
    for (int i = 1; i < nw; i++) r = fmaxf(r, sh[i]);
    return r;
}
__device__ float block_sum(float x, float *sh) {
    int lane = threadIdx.x % 32, w = threadIdx.x / 32, nw = blockDim.x / 32;
    x = warp_sum(x);
    __syncthreads();
    if (lane == 0) sh[w] = x;
    __syncthreads();
    float r = 0.f;
    for (int i = 0; i < nw; i++) r += sh[i];
    return r;
}
// f(i, z_i) for the block's share of the row's first n values: runs of four (one 8- or 16-byte load) where the row
// allows (vec: Vp % 4 == 0, so every row starts aligned), then one at a time; four runs a thread in flight at once.
template <class MP, class F> __device__ __forceinline__ void row_visit(const MP *z, int n, bool vec, F f) {
    int n4 = vec ? n / 4 * 4 : 0;
#pragma unroll 4
    for (int i = 4 * threadIdx.x; i < n4; i += 4 * blockDim.x) {
        const float4 v = ld4(z + i);
        f(i, v.x); f(i + 1, v.y); f(i + 2, v.z); f(i + 3, v.w);
    }
    for (int i = n4 + threadIdx.x; i < n; i += blockDim.x) f(i, ld(z + i));
}
// MP: the matmul-precision type of the logits (the head's output) and of their gradient (its backward's dout).
// One pass over the row: each thread keeps a running maximum m and Σ exp(z − m), rescaled when m grows (one read of
// the row, where a max pass and a Σ exp pass read it twice). 256 threads a row (its benchmark: dev/cuda/ce_bench.cu).
template <class MP>
__global__ void crossentropy_forward_kernel(float *losses, float *lse, const MP *logits, const int *targets, int V, int Vp) {
    __shared__ float sh[32];
    size_t bt = blockIdx.x;
    const MP *z = logits + bt * Vp;
    float m = -INFINITY, s = 0.f;
    row_visit(z, V, Vp % 4 == 0, [&](int, float x) {
        if (x > m) { s = s * expf(m - x) + 1.f; m = x; }
        else s += expf(x - m);
    });
    float mx = block_max(m, sh);
    s = block_sum(m == -INFINITY ? 0.f : s * expf(m - mx), sh);
    if (threadIdx.x == 0) {
        float l = mx + logf(s);
        lse[bt] = l;
        losses[bt] = targets[bt] == ANSWER_IGNORE ? 0.f : l - ld(z + targets[bt]);
    }
}
static void crossentropy_forward(real *losses, real *lse, const real *logits, const int *targets,
                                 int BT, int V, int Vp) {
    PROF_OP();
    if (g_bf16) crossentropy_forward_kernel<<<BT, 256>>>(losses, lse, (const __nv_bfloat16 *)logits, targets, V, Vp);
    else crossentropy_forward_kernel<<<BT, 256>>>(losses, lse, logits, targets, V, Vp);
    CUDA_CHECK(cudaGetLastError());
}
// dloss·(softmax − onehot) at column i of a row whose log-sum-exp is l and target tg; 0 on the padding (i ≥ V) and
// on a row whose target is ANSWER_IGNORE (13.1b)
__device__ __forceinline__ float ce_grad(int i, float z, float l, int V, int tg, float dloss) {
    float dl = tg == ANSWER_IGNORE ? 0.f : dloss;
    return (i < V ? dl * expf(z - l) : 0.f) - (i == tg ? dl : 0.f);
}
// logits ← dlogits in place: ce_grad on each value; in the matmul precision (the head's backward is its only reader),
// like the logits themselves. Runs of four where Vp % 4 == 0; 256 threads a row (bound by its bytes).
template <class MP>
__global__ void crossentropy_backward_kernel(MP *logits, const float *lse, const int *targets, float dloss, int V, int Vp) {
    size_t bt = blockIdx.x;
    MP *z = logits + bt * Vp;
    float l = lse[bt];
    int tg = targets[bt];
    auto d = [&](int i, float x) { return ce_grad(i, x, l, V, tg, dloss); };
    int n4 = Vp % 4 == 0 ? Vp : 0;
    for (int i = 4 * threadIdx.x; i < n4; i += 4 * blockDim.x) {
        const float4 v = ld4(z + i);
        st4(z + i, d(i, v.x), d(i + 1, v.y), d(i + 2, v.z), d(i + 3, v.w));
    }
    for (int i = n4 + threadIdx.x; i < Vp; i += blockDim.x) st(z + i, d(i, ld(z + i)));
}
static void crossentropy_backward(real *logits, const real *lse, const int *targets, real dloss,
                                  int BT, int V, int Vp) {
    PROF_OP();
    if (g_bf16) crossentropy_backward_kernel<<<BT, 256>>>((__nv_bfloat16 *)logits, lse, targets, dloss, V, Vp);
    else crossentropy_backward_kernel<<<BT, 256>>>(logits, lse, targets, dloss, V, Vp);
    CUDA_CHECK(cudaGetLastError());
}
// Both passes at once, where dloss is known before the forward (train_step): the loss and lse as crossentropy_forward,
// then the logits replaced by dloss·(softmax − onehot) as crossentropy_backward, from one read of each row from DRAM
// instead of three. A block a row, CE_FUSED_NT threads: the row is copied to shared memory (cp.async, 16 bytes a
// copy, all in flight at once), then read there for the maximum, Σ exp and the gradient; Vp·2 bytes a block, so three
// blocks an SM at V = 32000, each in its own phase (its benchmark: dev/cuda/ce_bench.cu). The maximum is exact (the
// row is at hand), so lse may differ from the one-pass kernel's in its last bit: a gradient value one bf16 step away.
#define CE_FUSED_NT 512
__global__ void __launch_bounds__(CE_FUSED_NT) crossentropy_fused_kernel(float *losses, float *lse,
        __nv_bfloat16 *logits, const int *targets, float dloss, int V, int Vp) {
    extern __shared__ uint4 ce_row_[]; // the row: Vp bf16 (Vp % 8 == 0)
    __nv_bfloat16 *row = reinterpret_cast<__nv_bfloat16 *>(ce_row_);
    __shared__ float sh[32];
    size_t bt = blockIdx.x;
    __nv_bfloat16 *z = logits + bt * Vp;
    for (int i = 8 * threadIdx.x; i < Vp; i += 8 * blockDim.x) cp_async16(row + i, z + i);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    float m = -INFINITY, s = 0.f;
    auto visit = [&](auto f) { // f(i, z_i..z_{i+3}) over the thread's runs of four
        for (int i = 4 * threadIdx.x; i < Vp; i += 4 * blockDim.x) f(i, ld4(row + i));
    };
    visit([&](int i, float4 v) {
        m = fmaxf(m, fmaxf(fmaxf(i < V ? v.x : m, i + 1 < V ? v.y : m), fmaxf(i + 2 < V ? v.z : m, i + 3 < V ? v.w : m)));
    });
    m = block_max(m, sh);
    visit([&](int i, float4 v) {
        s += (i < V ? expf(v.x - m) : 0.f) + (i + 1 < V ? expf(v.y - m) : 0.f) + (i + 2 < V ? expf(v.z - m) : 0.f) +
             (i + 3 < V ? expf(v.w - m) : 0.f);
    });
    float l = m + logf(block_sum(s, sh));
    int tg = targets[bt];
    if (threadIdx.x == 0) {
        lse[bt] = l;
        losses[bt] = tg == ANSWER_IGNORE ? 0.f : l - __bfloat162float(row[tg]);
    }
    auto d = [&](int i, float x) { return ce_grad(i, x, l, V, tg, dloss); };
    visit([&](int i, float4 v) { st4(z + i, d(i, v.x), d(i + 1, v.y), d(i + 2, v.z), d(i + 3, v.w)); });
}
// crossentropy_forward, then crossentropy_backward with dloss, over the same logits: in one pass in bf16 where the
// rows are whole 16-byte runs that fit a block's shared memory (Vp % 8 == 0, 2·Vp bytes), else as the two kernels
static void crossentropy_forward_backward(real *losses, real *lse, real *logits, const int *targets, real dloss,
                                          int BT, int V, int Vp) {
    PROF_OP();
    size_t smem = (size_t)Vp * sizeof(__nv_bfloat16);
    if (!g_bf16 || Vp % 8 || smem > max_smem_block()) {
        crossentropy_forward(losses, lse, logits, targets, BT, V, Vp);
        crossentropy_backward(logits, lse, targets, dloss, BT, V, Vp);
        return;
    }
    smem_attr(crossentropy_fused_kernel, smem);
    crossentropy_fused_kernel<<<BT, CE_FUSED_NT, smem>>>(losses, lse, (__nv_bfloat16 *)logits, targets, dloss, V, Vp);
    CUDA_CHECK(cudaGetLastError());
}
// mean of the per-position losses over the n scored targets (13.1a; 0 when n = 0), in double, in a fixed order (one
// block)
__global__ void mean_loss_kernel(double *out, const float *losses, int BT, int n) {
    __shared__ double sh[1024];
    double s = 0;
    for (int i = threadIdx.x; i < BT; i += blockDim.x) s += losses[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = n ? sh[0] / n : 0;
}

// Accuracy (§13.1, (13.1c)): hit[bt] = 1 where the argmax of the V real logits (the lowest id among equal maxima) is
// the target, else 0 (and 0 where the target is ANSWER_IGNORE). A block a row: each thread keeps the first maximum of
// the values it visits (in increasing id), the block the lowest id among the threads' equal maxima. As
// train_natsl.c's scan from z_0, a NaN never wins, and the argmax is 0 where z_0 is NaN.
__device__ __forceinline__ bool argmax_before(float v, int i, float w, int j, int none) { // (v, i) wins over (w, j)
    return i != none && (j == none || v > w || (v == w && i < j));
}
template <class MP>
__global__ void crossentropy_hits_kernel(unsigned char *hit, const MP *logits, const int *targets, int V, int Vp) {
    __shared__ float shv[32];
    __shared__ int shi[32];
    size_t bt = blockIdx.x;
    const MP *z = logits + bt * Vp;
    float bv = -INFINITY;
    int bi = V; // V: none yet
    row_visit(z, V, Vp % 4 == 0, [&](int i, float x) {
        if (!isnan(x) && (bi == V || x > bv)) { bv = x; bi = i; }
    });
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, bv, o);
        int j = __shfl_xor_sync(0xffffffffu, bi, o);
        if (argmax_before(w, j, bv, bi, V)) { bv = w; bi = j; }
    }
    if (threadIdx.x % 32 == 0) { shv[threadIdx.x / 32] = bv; shi[threadIdx.x / 32] = bi; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)blockDim.x / 32; w++)
            if (argmax_before(shv[w], shi[w], bv, bi, V)) { bv = shv[w]; bi = shi[w]; }
        int best = isnan(ld(z)) ? 0 : bi, tg = targets[bt];
        hit[bt] = tg != ANSWER_IGNORE && best == tg;
    }
}
static void crossentropy_hits(unsigned char *hit, const real *logits, const int *targets, int BT, int V, int Vp) {
    PROF_OP();
    if (g_bf16) crossentropy_hits_kernel<<<BT, 256>>>(hit, (const __nv_bfloat16 *)logits, targets, V, Vp);
    else crossentropy_hits_kernel<<<BT, 256>>>(hit, logits, targets, V, Vp);
    CUDA_CHECK(cudaGetLastError());
}

// out = x + res, the residual stream (out, res) in the matmul precision, x fp32; four values a thread: n = B·T·D is a
// multiple of 4 (T % 64 == 0) and the buffers are 256-byte aligned
template <class MP> __global__ void residual_add_kernel(MP *out, const float4 *x, const MP *res, size_t n4) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n4) return;
    const float4 a = x[i], b = ld4(res + 4 * i);
    st4(out + 4 * i, a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}
static void residual_add(real *out, const real *x, const real *res, size_t n) {
    PROF_OP();
    with_mp(out, 1, [&](auto o) {
        residual_add_kernel<<<(unsigned)CEIL_DIV(n / 4, 256), 256>>>(o, (const float4 *)x, (decltype(o))res, n / 4);
    });
    CUDA_CHECK(cudaGetLastError());
}

// Σ a_i·b_i of two device vectors, in double and in a fixed partition and order (bitwise reproducible): the
// gradient norm (§9), an S gate's ⟨dout, mixer output⟩ (7.3d). One host read. a_mp: a is stored in the matmul
// precision (dout). A thread takes runs of four values where a and b are aligned for them (bound by its bytes), the
// rest one by one.
template <class A> __global__ void dot_partial_kernel(double *part, const A *a, const float *b, size_t n) {
    __shared__ double sh[512];
    double s = 0;
    const size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    const size_t n4 = (uintptr_t)a % (4 * sizeof(A)) == 0 && (uintptr_t)b % 16 == 0 ? n / 4 : 0;
    for (size_t i = first; i < n4; i += stride) {
        const float4 x = ld4(a + 4 * i), y = ld4(b + 4 * i);
        s += ((double)x.x * y.x + (double)x.y * y.y) + ((double)x.z * y.z + (double)x.w * y.w);
    }
    for (size_t i = 4 * n4 + first; i < n; i += stride) s += (double)ld(a + i) * b[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) part[blockIdx.x] = sh[0];
}
__global__ void dot_finish_kernel(double *part, int np) { // part[np] = Σ part[0..np)
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        double s = 0;
        for (int i = 0; i < np; i++) s += part[i];
        part[np] = s;
    }
}
static double device_dot(const real *a, const real *b, size_t n, int a_mp = 0) {
    const int np = 1024;
    static double *part = NULL; // np partial sums and the total
    if (!part) part = (double *)xcudamalloc((np + 1) * sizeof(double));
    with_mp(a, a_mp, [&](auto ap) { dot_partial_kernel<<<np, 512>>>(part, ap, b, n); });
    CUDA_CHECK(cudaGetLastError());
    dot_finish_kernel<<<1, 32>>>(part, np);
    CUDA_CHECK(cudaGetLastError());
    double r;
    CUDA_CHECK(cudaMemcpy(&r, part + np, sizeof(double), cudaMemcpyDeviceToHost));
    return r;
}
// x[0] += v (as the C statement on a float and a double)
__global__ void add_scalar_kernel(float *x, double v) { *x = (float)((double)*x + v); }

// ================================================================================================
// 2. The two token mixers of a NAtS-L layer and the router that drives them with the routing mask
// m[B][Nc][Hm][2] (op 0 = softmax, op 1 = GDN; §5.2). m = NULL means "every chunk active" (A layer; G layer).
//   * softmax op: attention_forward / attention_backward (masked flash attention: bf16 wgmma, or 3xTF32/TF32;
//     appendix C); the backward WRITES dq, dk, dv and dA[...,0].
//   * GDN op: gdn_op_forward / gdn_op_backward (the chunked kernels, the token recurrence where they do not take the
//     shape; appendix D); the backward WRITES dq, dk, dg, dβ, dA[...,1] and dv, or ACCUMULATES into dv with dv_add
//     (an N layer's, after the softmax op wrote dv).
// ================================================================================================

// ---- softmax attention over the allowed pairs (§4, §5.3, §6.2, §6.3): masked flash attention (appendix C) ------
// Operands in AttnArgs (common/layout.h); out [B*T][heads*head_v], lse [B][heads][T].
static void attention_forward(real *out, real *lse, const AttnArgs *args);
// WRITES dq, dk, dv (their heads' columns) and dA[...,0] (when the mask is given).
static void attention_backward(real *dq, real *dk, real *dv, real *dA, const real *dout, const real *out,
                               const real *lse, const AttnArgs *args);
// bf16 mode: whether the op runs on the bf16 kernels, and their backward, which can write dk (rotated back by RoPE)
// and dv in bf16 into the A layer's W_qkv operand (dk16, dv16)
static int attention_in_bf16(const AttnArgs *a);
static void attention_backward_flash(real *dq, real *dk, real *dv, real *dA, const real *dout, const real *out,
                                     const real *lse, const AttnArgs *args, bf16 *dk16, bf16 *dv16);
void attention_set_tf32_passes(int p); // 3: 3xTF32 (fp32 mode), 1: TF32

// ---- the GDN op with chunk commits (§3.2, §5.4: (5.4a-h)) (appendix D) ----------------------------------------
// Operands in GdnArgs (common/layout.h); ws: its workspace of gdn_op_workspace_floats(B, T, H, dk, dv) floats.
static void gdn_op_forward(real *out, real *state, const GdnArgs *args);
// WRITES dq, dk, dg, dβ, dA[...,1] and dv; with args->dv_add ACCUMULATES into dv.
static void gdn_op_backward(real *dq, real *dk, real *dv, real *dg, real *dbeta, real *dA, const real *dout,
                            const real *state, const GdnArgs *args);
static size_t gdn_op_workspace_floats(int B, int T, int H, int dk, int dv);
static void gdn_set_lowp(int on); // 1 (bf16 mode): the bf16 and TF32 kernels, bf16 chunk-start states

// ---- the router (Attention Score Layer, §5.2: (5.2a-f)) ------------------------------------------------------
template <class InT> __global__ void router_pool_kernel(float *pool, const InT *x, int B, int T, int D) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    int Nc = T / CH;
    if (idx >= (size_t)B * Nc * D) return;
    int i = (int)(idx % D);
    size_t bc = idx / D, b = bc / Nc, c = bc % Nc;
    float p = 0.f;
    for (int t = (int)c * CH; t < (int)(c + 1) * CH; t++) p += ld(x + (b * T + t) * D + i);
    pool[idx] = p / CH;
}
__global__ void router_mask_kernel(float *mask, const float *pi, size_t n, int H, int Nc, int relaxed) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int last = (int)((i / H) % Nc) == Nc - 1;
    int soft = pi[2 * i] >= pi[2 * i + 1];
    mask[2 * i] = last ? 1.f : relaxed ? pi[2 * i] : (float)soft;
    mask[2 * i + 1] = last ? 1.f : relaxed ? pi[2 * i + 1] : (float)!soft;
}
// ST-Gumbel routing (§7.2): y = softmax((ℓ + g)/τ) in place of π, as train_natsl.c
__global__ void router_gumbel_kernel(float *y, const float *logits, const float *noise, size_t npairs, float tau) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= npairs) return;
    float y0 = 1.f / (1.f + expf(((logits[2 * i + 1] + noise[2 * i + 1]) - (logits[2 * i] + noise[2 * i])) / tau));
    y[2 * i] = y0;
    y[2 * i + 1] = 1.f - y0;
}
// p_c = mean_{t∈c} x_t,  ℓ_c = p_c W_rᵀ viewed [H][2],  π = softmax over the pair,  mask = one-hot argmax
// (op 0 on ties) with the straight-through estimator; the last chunk is active for both ops.
// noise (NULL = off): ST-Gumbel routing (§7.2), pi holds y = softmax((ℓ + g)/τ), the choice is argmax(ℓ + g).
static void router_forward(real *mask, real *pi, real *logits, real *pool, const real *x, const real *Wr,
                           int B, int T, int D, int H, int relaxed, const real *noise, real tau) {
    PROF_OP();
    int Nc = T / CH;
    unsigned g = (unsigned)CEIL_DIV((size_t)B * Nc * D, 256);
    if (g_bf16) router_pool_kernel<<<g, 256>>>(pool, (const __nv_bfloat16 *)x, B, T, D); // x: RMSNorm'd, a matmul input
    else router_pool_kernel<<<g, 256>>>(pool, x, B, T, D);
    CUDA_CHECK(cudaGetLastError());
    matmul_forward(logits, operand(pool, (size_t)B * Nc * D, OPERAND_INPUT), Wr, B * Nc, D, 2 * H, 0, NULL);
    size_t n = (size_t)B * Nc * H;
    if (!noise) pair_softmax_forward(pi, logits, n);
    else router_gumbel_kernel<<<(unsigned)CEIL_DIV(n, 256), 256>>>(pi, logits, noise, n, tau);
    router_mask_kernel<<<(unsigned)CEIL_DIV(n, 256), 256>>>(mask, pi, n, H, Nc, relaxed);
    CUDA_CHECK(cudaGetLastError());
}
// dx_t += dp_{c(t)} / 64: a block per chunk (b, c) and ROUTER_DX_ROWS of its rows, a thread per column
#define ROUTER_DX_ROWS 16
__global__ void router_dx_kernel(float *dx, const float *dpool, int T, int D) {
    const int Nc = T / CH, b = blockIdx.x / Nc, c = blockIdx.x % Nc;
    float *x = dx + ((size_t)b * T + (size_t)c * CH + (size_t)blockIdx.y * ROUTER_DX_ROWS) * D;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        const float g = dpool[(size_t)blockIdx.x * D + i] / CH;
#pragma unroll
        for (int t = 0; t < ROUTER_DX_ROWS; t++) x[(size_t)t * D + i] += g;
    }
}
// The §7 straight-through: dℓ0 = y0·y1·((dA0 + dpi0) − (dA1 + dpi1))/τ = −dℓ1, the last chunk's pairs skipped
__global__ void router_dlogits_kernel(float *dx, const float *dA, const float *y, size_t npairs, int H, int Nc,
                                      float dpi0, float dpi1, float tau) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= npairs || (int)((i / H) % Nc) == Nc - 1) return;
    float d = y[2 * i] * y[2 * i + 1] * ((dA[2 * i] + dpi0) - (dA[2 * i + 1] + dpi1)) / tau;
    dx[2 * i] += d;
    dx[2 * i + 1] -= d;
}
// dÃ = dA with the last chunk zeroed (6.5a);  straight-through: dℓ = π ⊙ (dÃ − ⟨π, dÃ⟩) (6.5b-c);
// dW_r += dℓᵀ p;  dp = dℓ W_r;  dx_t += dp_{c(t)} / 64   (6.5d-e).  dpool, dlogits are scratch [B*Nc][D], [B*Nc][2H].
// §7 (as train_natsl.c): dpi (host, NULL = none) is added to dÃ of every routed chunk; under ST-Gumbel routing
// pi holds y and dℓ is divided by τ.
static void router_backward(real *dx, real *dWr, real *dpool, real *dlogits, const real *dA, const real *pi,
                            const real *pool, const real *Wr, int B, int T, int D, int H, const real *dpi, real tau) {
    PROF_OP();
    int Nc = T / CH;
    CUDA_CHECK(cudaMemsetAsync(dlogits, 0, (size_t)B * Nc * 2 * H * sizeof(real)));
    size_t npairs = (size_t)B * Nc * H;
    if (!dpi && tau == 1) pair_softmax_backward_kernel<<<(unsigned)CEIL_DIV(npairs, 256), 256>>>(dlogits, dA, pi, npairs, H, Nc);
    else router_dlogits_kernel<<<(unsigned)CEIL_DIV(npairs, 256), 256>>>(dlogits, dA, pi, npairs, H, Nc, dpi ? dpi[0] : 0.f,
                                                                         dpi ? dpi[1] : 0.f, tau);
    CUDA_CHECK(cudaGetLastError());
    matmul_backward(dpool, dWr, operand(dlogits, (size_t)B * Nc * 2 * H, OPERAND_DOUT),
                    operand(pool, (size_t)B * Nc * D, OPERAND_INPUT), Wr, B * Nc, D, 2 * H, DINP_WRITE);
    router_dx_kernel<<<dim3((unsigned)(B * Nc), CH / ROUTER_DX_ROWS), 256>>>(dx, dpool, T, D);
    CUDA_CHECK(cudaGetLastError());
}

// ---- the fused gated output norm (§3.3, §5.6) ------------------------------------------------------
// Rows of width n, contiguous [R][n]. Two inputs (NAtS-L): y = (ω0·RMSNorm_{w1}(o1) + ω1·RMSNorm_{w2}(o2))
// ⊙ φ(gate), omega [R][2]. One input (GDN layer: o2 = omega = NULL): y = RMSNorm_{w1}(o1) ⊙ φ(gate); φ: act.
// rstd [2][R] keeps both inputs' reciprocal RMS. Both passes hold rows in registers as LaneRow runs (16-byte moves
// where n splits so), w1, w2 loaded once a warp, rows strided by the grid. Their work a value is small (a fast sigmoid,
// a few products; a row's sums over 16 or 32 lanes) against 6 (G) or 8 (N) bytes moved a value in the forward, 10 or
// 14 in the backward, so that their bytes bound them (their benchmark: dev/cuda/gated_norm_bench.cu).
// MP: the matmul-precision type of y (W_o's input), gate (W_g's output) and the two ops' outputs o1, o2
#define GN_MAXNJ 16 // widest row the gated norm kernels take: 32·16 = 512 values (d_v of the presets: 96, 256, 384)
template <class MP, int RUN, int LANES, int NJ, bool TWO> // TWO: the N layer's two inputs
__global__ void __launch_bounds__(256) gated_norm_forward_kernel(MP *__restrict__ y, float *__restrict__ rstd,
        const MP *__restrict__ o1, const float *__restrict__ w1, const MP *__restrict__ o2,
        const float *__restrict__ w2, const float *__restrict__ omega, const MP *__restrict__ gate, int R, int n, int act) {
    using Row = LaneRow<MP, RUN, LANES, NJ>;
    constexpr int RPW = 32 / LANES; // rows a warp takes at once
    const int lane = threadIdx.x % 32, sub = lane % LANES;
    const float inv_n = 1.f / n;
    float wa[NJ], wb[NJ];
    Row::load_w(wa, w1, sub, n);
    if (TWO) Row::load_w(wb, w2, sub, n);
    for (int r0 = (blockIdx.x * 8 + threadIdx.x / 32) * RPW; r0 < R; r0 += gridDim.x * 8 * RPW) {
        const bool live = r0 + lane / LANES < R; // a last warp's lanes past R: row R − 1 again, not stored
        const int r = min(r0 + lane / LANES, R - 1);
        const size_t o = (size_t)r * n;
        Row a, g, b;
        a.load(o1 + o, sub, n);
        g.load(gate + o, sub, n);
        if (TWO) b.load(o2 + o, sub, n);
        float x1[NJ], gt[NJ], out[NJ], s1 = 0.f;
        a.get(x1);
#pragma unroll
        for (int j = 0; j < NJ; j++) s1 += x1[j] * x1[j];
        s1 = rsqrtf(group_sum<LANES>(s1) * inv_n + NATSL_EPS);
        if (TWO) {
            float x2[NJ], s2 = 0.f;
            b.get(x2);
#pragma unroll
            for (int j = 0; j < NJ; j++) s2 += x2[j] * x2[j];
            s2 = rsqrtf(group_sum<LANES>(s2) * inv_n + NATSL_EPS);
            const float c1 = omega[2 * r] * s1, c2 = omega[2 * r + 1] * s2;
#pragma unroll
            for (int j = 0; j < NJ; j++) out[j] = c1 * x1[j] * wa[j] + c2 * x2[j] * wb[j];
            if (live && sub == 0) rstd[R + r] = s2;
        } else
#pragma unroll
            for (int j = 0; j < NJ; j++) out[j] = s1 * x1[j] * wa[j];
        g.get(gt);
#pragma unroll
        for (int j = 0; j < NJ; j++) out[j] *= gate_actf_(gt[j], act);
        if (live) {
            a.set(out);
            a.store(y + o, sub, n);
            if (sub == 0) rstd[r] = s1;
        }
    }
}
// Rows strided by the grid (one block an SM's share), w1 and w2 in registers, loaded once a warp. Where n splits so
// (16 lanes, 1 to 3 runs of 16 bytes a lane: n = 128, 256, 384 in bf16), a warp takes two rows at once, in 16-byte
// moves, a row's sums over 16 lanes; else one row, a value a lane at a time (rows_dispatch's NJ).
static void gated_norm_forward(real *y, real *rstd, const GatedNormArgs *a) {
    PROF_OP();
    const int R = a->rows, n = a->n;
    with_mp(y, 1, [&](auto yp) {
        using MP = std::remove_pointer_t<decltype(yp)>;
        constexpr int RUN = run16<MP>();
        auto go = [&](auto run, auto lanes, auto nj) {
            constexpr int R_ = decltype(run)::value, L = decltype(lanes)::value, NJ = decltype(nj)::value;
            auto launch = [&](auto two) {
                auto kernel = gated_norm_forward_kernel<MP, R_, L, NJ, decltype(two)::value>;
                const int blocks = resident_blocks(kernel, CEIL_DIV(R, 8 * (32 / L)));
                kernel<<<blocks, 256>>>(yp, rstd, (const MP *)a->o1, a->w1, (const MP *)a->o2, a->w2, a->omega,
                                        (const MP *)a->gate, R, n, a->gate_act);
            };
            if (a->o2) launch(std::true_type());
            else launch(std::false_type());
        };
        auto a16 = [](const void *p) { return !p || (uintptr_t)p % 16 == 0; };
        const bool fits = n % (16 * RUN) == 0 && a16(y) && a16(a->o1) && a16(a->o2) && a16(a->gate);
        using RunT = std::integral_constant<int, RUN>;
        using L16 = std::integral_constant<int, 16>;
        if (fits && n == 16 * RUN) go(RunT(), L16(), RunT());
        else if (fits && n == 32 * RUN) go(RunT(), L16(), std::integral_constant<int, 2 * RUN>());
        else if (fits && n == 48 * RUN) go(RunT(), L16(), std::integral_constant<int, 3 * RUN>());
        else rows_dispatch<GN_MAXNJ>(__func__, n, [&](auto nj) {
            go(std::integral_constant<int, 1>(), std::integral_constant<int, 32>(), nj);
        });
    });
    CUDA_CHECK(cudaGetLastError());
}
// with dn = dy ⊙ φ(gate) (5.6d-g): dgate = dy ⊙ n ⊙ φ'(gate), dω_k = dn·RMSNorm_k, and each input's
// RMSNorm backward with dy_k = ω_k dn (§5.6), whose mean(x̂ ⊙ w ⊙ dy_k) is ω_k dω_k / n. do1, do2, dω and dgate are
// written (the gated norm is their only producer; dgate's rows as GatedNormArgs.heads, ld_dgate place them); the
// weight gradients accumulate. Rows strided by the grid, held as LaneRow runs as in the forward (16-byte moves where
// n splits so: 32 lanes a row of 256 bf16, 16 lanes of 128; 8-byte moves on 32 lanes for 384; else one value a lane
// on 32 lanes). The weight
// gradients dw1, dw2 are summed in the same pass: per lane in registers, over a warp's row groups by shuffles, per
// block over its warps in a fixed order, then per block in part [gridDim][2n] (added by colsum_finish_kernel: bitwise
// reproducible for a given grid).
template <class MP, int RUN, int LANES, int NJ, bool TWO> // dgate (W_g's output gradient), dy (W_o's input gradient),
        // gate, o1, o2, do1 and do2 (the two ops' dout) in the matmul precision; TWO: the N layer's two inputs
__global__ void __launch_bounds__(256) gated_norm_backward_kernel(MP *__restrict__ do1, MP *__restrict__ do2,
        float *__restrict__ domega, MP *__restrict__ dgate, float *__restrict__ part, const MP *__restrict__ dy,
        const float *__restrict__ rstd, const MP *__restrict__ o1, const float *__restrict__ w1,
        const MP *__restrict__ o2, const float *__restrict__ w2, const float *__restrict__ omega,
        const MP *__restrict__ gate, int R, int n, int heads, int ld_dgate, int act) {
    using Row = LaneRow<MP, RUN, LANES, NJ>;
    constexpr int RPW = 32 / LANES; // rows a warp takes at once
    __shared__ float sh[2][LANES * NJ];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, sub = lane % LANES;
    const float inv_n = 1.f / n;
    float acc1[NJ], acc2[NJ], wa[NJ], wb[NJ];
#pragma unroll
    for (int j = 0; j < NJ; j++) acc1[j] = acc2[j] = wb[j] = 0.f;
    Row::load_w(wa, w1, sub, n);
    if (TWO) Row::load_w(wb, w2, sub, n);
    for (int r0 = (blockIdx.x * 8 + warp) * RPW; r0 < R; r0 += gridDim.x * 8 * RPW) {
        const bool live = r0 + lane / LANES < R; // a last warp's lanes past R: row R − 1 again, not stored, not summed
        const int r = min(r0 + lane / LANES, R - 1);
        const size_t o = (size_t)r * n;
        Row A, G, D, Bv;
        A.load(o1 + o, sub, n);
        G.load(gate + o, sub, n);
        D.load(dy + o, sub, n);
        if (TWO) Bv.load(o2 + o, sub, n);
        const float s1 = rstd[r], s2 = TWO ? rstd[R + r] : 0.f, om1 = TWO ? omega[2 * r] : 1.f, om2 = TWO ? omega[2 * r + 1] : 0.f;
        const float live1 = live ? om1 * s1 : 0.f, live2 = live ? om2 * s2 : 0.f; // dw's factors, 0 for a dead lane
        float x1[NJ], x2[NJ], dn[NJ], t[NJ], dom1 = 0.f, dom2 = 0.f;
        {
            float gt[NJ], dyv[NJ];
            A.get(x1);
            G.get(gt);
            D.get(dyv);
            if (TWO) Bv.get(x2);
#pragma unroll
            for (int j = 0; j < NJ; j++) {
                float phi, dphi;
                gate_act_dphi_(gt[j], act, phi, dphi);
                const float n1 = x1[j] * s1 * wa[j], n2 = TWO ? x2[j] * s2 * wb[j] : 0.f;
                dn[j] = dyv[j] * phi;
                t[j] = dyv[j] * (om1 * n1 + om2 * n2) * dphi;
                dom1 += dn[j] * n1;
                if (TWO) dom2 += dn[j] * n2;
                acc1[j] += dn[j] * live1 * x1[j];
                if (TWO) acc2[j] += dn[j] * live2 * x2[j];
            }
        }
        Row out;
        if (live) { out.set(t); out.store(dgate + (size_t)(r / heads) * ld_dgate + (size_t)(r % heads) * n, sub, n); }
        dom1 = group_sum<LANES>(dom1);
        const float dot1 = om1 * dom1 * inv_n;
#pragma unroll
        for (int j = 0; j < NJ; j++) t[j] = s1 * (wa[j] * om1 * dn[j] - x1[j] * s1 * dot1);
        if (live) { out.set(t); out.store(do1 + o, sub, n); }
        if (TWO) {
            dom2 = group_sum<LANES>(dom2);
            const float dot2 = om2 * dom2 * inv_n;
#pragma unroll
            for (int j = 0; j < NJ; j++) t[j] = s2 * (wb[j] * om2 * dn[j] - x2[j] * s2 * dot2);
            if (live) {
                out.set(t);
                out.store(do2 + o, sub, n);
                if (sub == 0) { domega[2 * r] = dom1; domega[2 * r + 1] = dom2; }
            }
        }
    }
#pragma unroll
    for (int j = 0; j < NJ; j++) // the warp's row groups, in a fixed order (the same columns)
        for (int m = LANES; m < 32; m <<= 1) {
            acc1[j] += __shfl_xor_sync(0xffffffffu, acc1[j], m);
            if (TWO) acc2[j] += __shfl_xor_sync(0xffffffffu, acc2[j], m);
        }
    for (int i = threadIdx.x; i < 2 * LANES * NJ; i += blockDim.x) sh[i / (LANES * NJ)][i % (LANES * NJ)] = 0.f;
    for (int k = 0; k < 8; k++) { // the warps add their sums in a fixed order
        __syncthreads();
        if (warp == k && lane < LANES)
#pragma unroll
            for (int j = 0; j < NJ; j++) {
                const int i = Row::col(sub, j);
                if (i < n) { sh[0][i] += acc1[j]; sh[1][i] += acc2[j]; }
            }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < 2 * n; i += blockDim.x) part[(size_t)blockIdx.x * 2 * n + i] = sh[i / n][i % n];
}
static void gated_norm_backward(real *do1, real *dw1, real *do2, real *dw2, real *domega, real *dgate,
                                const real *dy, const real *rstd, const GatedNormArgs *a) {
    PROF_OP();
    const int R = a->rows, n = a->n;
    with_mp(dgate, 1, [&](auto gp) {
        using MP = std::remove_pointer_t<decltype(gp)>;
        constexpr int RUN = run16<MP>();
        auto go = [&](auto run, auto lanes, auto nj) {
            constexpr int R_ = decltype(run)::value, L = decltype(lanes)::value, NJ = decltype(nj)::value;
            auto launch = [&](auto two) {
                auto kernel = gated_norm_backward_kernel<MP, R_, L, NJ, decltype(two)::value>;
                const int blocks = resident_blocks(kernel, CEIL_DIV(R, 8 * (32 / L)));
                float *part = colpart((size_t)blocks * 2 * n);
                kernel<<<blocks, 256>>>((MP *)do1, (MP *)do2, domega, gp, part, (const MP *)dy, rstd, (const MP *)a->o1, a->w1,
                                        (const MP *)a->o2, a->w2, a->omega, (const MP *)a->gate, R, n, a->heads, a->ld_dgate,
                                        a->gate_act);
                CUDA_CHECK(cudaGetLastError());
                colsum_finish(dw1, part, blocks, n, 2 * n, 0);
                if (a->o2) colsum_finish(dw2, part, blocks, n, 2 * n, n);
            };
            if (a->o2) launch(std::true_type());
            else launch(std::false_type());
        };
        auto a16 = [](const void *p) { return !p || (uintptr_t)p % 16 == 0; };
        const bool fits = n % (16 * RUN) == 0 && a->ld_dgate % RUN == 0 && a16(dgate) && a16(dy) && a16(do1) &&
                          a16(a->o2 ? do2 : NULL) && a16(a->o1) && a16(a->o2) && a16(a->gate);
        using RunT = std::integral_constant<int, RUN>;
        if (fits && n == 16 * RUN) go(RunT(), std::integral_constant<int, 16>(), RunT());
        else if (fits && n == 32 * RUN) go(RunT(), std::integral_constant<int, 32>(), RunT());
        else if (fits && n == 48 * RUN) // 8-byte runs on 32 lanes (16-byte ones on 16 lanes need too many registers)
            go(std::integral_constant<int, RUN / 2>(), std::integral_constant<int, 32>(), std::integral_constant<int, 3 * RUN / 2>());
        else rows_dispatch<GN_MAXNJ>(__func__, n, [&](auto nj) {
            go(std::integral_constant<int, 1>(), std::integral_constant<int, 32>(), nj);
        });
    });
}

// ================================================================================================
// 3. The model: parameters, activations, and the four layer kinds (device buffers, C layouts)
// ================================================================================================

typedef struct { size_t p, m, c; int n, decay; } AdamRun; // a run of AdamW: parameter, moment and bf16 copy offsets
                                                          //   (c: WCOPY_NONE), length, weight decay (adamw_runs)
typedef struct {
    Config cfg;
    ParamTensor tensors[NATSL_MAX_TENSORS];
    int ntensors;
    size_t nparams;
    size_t nalloc;                           // params and grads hold nalloc ≥ nparams values (the buckets' padding)
    size_t nmom;                             // the moments this rank keeps: nparams, or under ZeRO-1 its slices
    int nbucket;                             // the gradient buckets reduced over the ranks (model_buckets, §9.4)
    size_t bucket[NATSL_MAX_LAYERS + 3];     // bucket k is [bucket[k], bucket[k+1])
    real *params, *grads, *adam_m, *adam_v; // flat device buffers
    WeightCopies wc;                         // bf16 mode: the matmul weights' bf16 copies (section 1)
    AdamRun *adam_runs;                      // AdamW's runs of values (adamw_runs), built at the first step
    int adam_nruns;
    ParamPtrs p, g;                          // named device pointers into params and grads
    int B, T;                                // the largest batch the activations hold
    int recompute;                           // -k: 1, 2 rerun layers in the backward pass (model_acts_layout)
    int acts_bf16;                           // the activations are laid out for bf16 mode (half-size bf16 fields)
    real *acts;                              // flat activation buffer (device)
    LayerActs la[NATSL_MAX_LAYERS];
    real *hL, *lnf, *lnf_rstd, *logits, *lse, *losses; // final norm and classifier (device)
    real *dacts, *dres, *dlnf;               // gradient scratch: one layer's activations, the residual
    real *gdn_ws;                            // the GDN op's workspace, one for all G/N layers, in the logits'
                                             //   buffer (logits_ws_reals; NULL if none)
    size_t acts_size, dacts_size;            // floats in acts and dacts
    int *inputs, *targets;                   // device copies of the batch
    unsigned char *hits;                     // device scratch: token_scores' hits [B·T]
    double *d_scalar;                        // device scratch: mean loss
    real mean_loss;                          // over the scored targets of the last forward pass (§13.1)
    int nscored;                             // how many: B·T, or the answers among them under -w 1
    real fused_dloss;                        // train_step's dloss, 0 elsewhere: > 0 has model_forward write the
                                             //   logits' gradient over them (crossentropy_forward_backward) for
                                             //   model_backward to use as they are
    int router_relaxed, router_no_grad;      // test-only switches (§8), 0 in training
    RouterBudget rb;                         // §7: penalty, load balancing, ST-Gumbel (common/budget.h)
    real *gnoise;                            // §7.2: this micro-batch's Gumbel noise [N layers][B][Nc][H][2] (device)
    void (*layer_done)(void *ctx, int l, int B, int T); // NULL, or called by model_forward as each layer's block_forward
    void *layer_done_ctx;                    //   has run (the prefill, common/train_main.inc, fills the decoder from it)
} Model;

// The gradient buckets (doc/model.md §9.4): the ranges of the flat buffer whose gradients the backward pass finishes
// together, in its order: the final norm and the classifier, each layer from the last, the embedding. A rank hands a
// bucket to NCCL as soon as it is final. Every boundary is rounded up to a multiple of 64·ranks values (so each rank's
// ZeRO-1 slice of a bucket, a ranks-th of it, is a whole number of 256-byte lines); a bucket so ends a little into the
// tensor above it, whose gradient is final before its own, never below. The buffer is padded to the last boundary
// (zeros that stay zero). Under ZeRO-1 rank r keeps the moments of the r-th slice of every bucket, in bucket order.
static void model_buckets(Model *M) {
    const Config *c = &M->cfg;
    size_t align = 64 * (size_t)g_world, start[NATSL_MAX_LAYERS + 2];
    int n = 0;
    start[n++] = 0;                                              // the embedding
    for (int i = 0; i < M->ntensors; i++)
        if ((M->tensors[i].layer >= 0 && M->tensors[i].layer == n - 1) || !strcmp(M->tensors[i].name, "ln_f"))
            start[n++] = M->tensors[i].offset;                   // each layer's first tensor; the final norm's
    M->nalloc = CEIL_DIV(M->nparams, align) * align;
    M->nbucket = n;
    for (int k = 0; k < n; k++) M->bucket[k] = std::min(CEIL_DIV(start[k], align) * align, M->nalloc);
    M->bucket[n] = M->nalloc;
    M->nmom = g_zero ? M->nalloc / g_world : M->nparams;
    if (n != c->L + 2) { fprintf(stderr, "error: model_buckets: %d buckets for %d layers\n", n, c->L); exit(1); }
}

static void model_build(Model *M, const Config *c) {
    memset(M, 0, sizeof(*M));
    M->cfg = *c;
    M->rb.kappa = SEL_KAPPA;
    M->ntensors = param_tensors(c, M->tensors, &M->nparams);
    model_buckets(M);
    M->params = (real *)xcudamalloc(M->nalloc * sizeof(real));
    M->grads = (real *)xcudamalloc(M->nalloc * sizeof(real));
    CUDA_CHECK(cudaMemset(M->params, 0, M->nalloc * sizeof(real)));
    CUDA_CHECK(cudaMemset(M->grads, 0, M->nalloc * sizeof(real)));
    param_pointers(&M->p, M->tensors, M->ntensors, M->params);
    param_pointers(&M->g, M->tensors, M->ntensors, M->grads);
    M->d_scalar = (double *)xcudamalloc(4 * sizeof(double));
    M->wc.params = M->params;
    M->wc.tensors = M->tensors;
    M->wc.ntensors = M->ntensors;
    M->wc.n = weight_copies_layout(&M->cfg, M->tensors, M->ntensors, M->wc.at, M->wc.end);
}

// bf16 mode: has the products of M's passes take its weights' bf16 copies, made first where they are stale (fp32 mode:
// nothing). The first pass after init or a load allocates them.
static void weights_use(Model *M) {
    if (!g_bf16) return;
    WeightCopies *c = &M->wc;
    if (!c->fresh) {
        if (!c->buf) { // zeroed: the zero rows after the runs (weight_copies_layout)
            const size_t bytes = std::max(c->n, (size_t)1) * sizeof(__nv_bfloat16);
            c->buf = (__nv_bfloat16 *)xcudamalloc(bytes);
            CUDA_CHECK(cudaMemset(c->buf, 0, bytes));
        }
        for (int k = 0; k < c->ntensors; k++)
            if (c->at[k] != WCOPY_NONE)
                to_bf16_copy(c->buf + c->at[k], c->params + c->tensors[k].offset, c->tensors[k].numel);
        c->fresh = 1;
    }
    g_wcopy = c;
}

// Initialization (§2), from one seeded stream: init_params (common/layout.h) on the host, exactly as
// train_natsl.c, then copied.
static void model_init(Model *M, uint64_t seed) {
    real *hp = (real *)xcalloc(M->nparams, sizeof(real));
    init_params(hp, M->tensors, M->ntensors, seed);
    CUDA_CHECK(cudaMemcpy(M->params, hp, M->nparams * sizeof(real), cudaMemcpyHostToDevice));
    free(hp);
}

// Reals that n values stored in the matmul precision take (half as many in bf16 mode)
static size_t mp_reals(size_t n) { return g_bf16 ? (n + 1) / 2 : n; }

// The logits [BT][Vp] (then their gradient, in place) and the GDN op's workspace share one buffer of this many reals:
// they are never live at once (every layer's forward pass runs before the classifier, every layer's backward pass
// after the classifier's backward has spent the logits' gradient), and the op's kernels write each part of the
// workspace before they read it within one call.
static size_t logits_ws_reals(const Config *c, int B, int T) {
    size_t logits = mp_reals((size_t)B * T * c->Vp);
    size_t ws = pattern_has_gdn(c) ? gdn_op_workspace_floats(B, T, c->H, c->dk, c->dv) : 0;
    return std::max(logits, ws);
}

// Bytes model_alloc_acts takes for B×T at recompute level `recompute`; parts (if given) gets them by use: the
// activations, the gradient scratch, the GDN op's workspace where it outgrows the logits' room, and the final norm
// with the classifier (h^L, its norm, the logits and their gradients, the per-token ids, losses, log-sum-exps and
// hits, the router's noise).
enum { ACTS_BYTES_ACTS, ACTS_BYTES_DACTS, ACTS_BYTES_GDN_WS, ACTS_BYTES_HEAD, ACTS_BYTES_PARTS };
static size_t model_acts_bytes(const Config *c, int B, int T, int recompute, size_t *parts = NULL) {
    LayerActs tmp[NATSL_MAX_LAYERS];
    size_t dmax, n = model_acts_layout(tmp, c, B, T, recompute, g_bf16, NULL, &dmax), BT = (size_t)B * T;
    size_t logits = mp_reals(BT * c->Vp), shared = logits_ws_reals(c, B, T);
    size_t head = BT * (2 * (size_t)c->D + 5) + CEIL_DIV(BT, sizeof(real)) + 2 * mp_reals(BT * c->D) + logits +
                  router_noise_size(c, B, T);
    size_t p[ACTS_BYTES_PARTS] = {n, dmax, shared - logits, head}, total = 0;
    for (int k = 0; k < ACTS_BYTES_PARTS; k++) {
        p[k] *= sizeof(real);
        total += p[k];
        if (parts) parts[k] = p[k];
    }
    return total;
}

// Allocates activations for micro-batches of up to B×T tokens (T a multiple of 64); recompute: see
// model_acts_layout (common/layout.h). Stops with the sizes of the recompute levels if they do not fit.
static void model_alloc_acts(Model *M, int B, int T, int recompute) {
    const Config *c = &M->cfg;
    size_t BT = (size_t)B * T, dmax, fr, tot, need = model_acts_bytes(c, B, T, recompute);
    CUDA_CHECK(cudaMemGetInfo(&fr, &tot));
    if (need > fr) {
        char alt[256] = "";
        for (int k = recompute + 1; k <= 2; k++)
            snprintf(alt + strlen(alt), sizeof(alt) - strlen(alt), "%s-k %d: %.1f GiB", alt[0] ? ", " : "", k,
                     model_acts_bytes(c, B, T, k) / 1073741824.0);
        fprintf(stderr, "error: activations for B=%d T=%d need %.1f GiB but the GPU has %.1f GiB free (%s%s); try a smaller -b%s\n",
                B, T, need / 1073741824.0, fr / 1073741824.0, alt[0] ? "with " : "", alt, recompute < 2 ? " or -k" : "");
        exit(1);
    }
    size_t total = model_acts_layout(M->la, c, B, T, recompute, g_bf16, NULL, &dmax);
    M->B = B; M->T = T; M->recompute = recompute; M->acts_bf16 = g_bf16;
    M->acts = (real *)xcudamalloc(total * sizeof(real));
    CUDA_CHECK(cudaMemset(M->acts, 0, total * sizeof(real)));
    model_acts_layout(M->la, c, B, T, recompute, g_bf16, M->acts, &dmax);
    M->hL = (real *)xcudamalloc(BT * c->D * sizeof(real));
    // the classifier's input and output (then its output's gradient, in place) are stored in the matmul precision
    M->lnf = (real *)xcudamalloc(mp_reals(BT * c->D) * sizeof(real));
    M->lnf_rstd = (real *)xcudamalloc(BT * sizeof(real));
    M->logits = (real *)xcudamalloc(logits_ws_reals(c, B, T) * sizeof(real)); // and the GDN op's workspace
    M->lse = (real *)xcudamalloc(BT * sizeof(real));
    M->losses = (real *)xcudamalloc(BT * sizeof(real));
    M->acts_size = total;
    M->dacts_size = dmax;
    M->dacts = (real *)xcudamalloc(dmax * sizeof(real));
    M->dres = (real *)xcudamalloc(mp_reals(BT * c->D) * sizeof(real)); // in the matmul precision, as the stream
    M->dlnf = (real *)xcudamalloc(BT * c->D * sizeof(real));
    M->inputs = (int *)xcudamalloc(BT * sizeof(int));
    M->targets = (int *)xcudamalloc(BT * sizeof(int));
    M->hits = (unsigned char *)xcudamalloc(BT);
    M->gnoise = (real *)xcudamalloc(router_noise_size(c, B, T) * sizeof(real));
    if (pattern_has_gdn(c)) {
        M->gdn_ws = M->logits;
        for (int l = 0; l < c->L; l++) M->la[l].gdn_ws = M->gdn_ws;
    }
}

// AdamW's moments, zero until the first update
static void model_alloc_moments(Model *M) {
    if (M->adam_m) return;
    M->adam_m = (real *)xcudamalloc(M->nmom * sizeof(real));
    M->adam_v = (real *)xcudamalloc(M->nmom * sizeof(real));
    CUDA_CHECK(cudaMemset(M->adam_m, 0, M->nmom * sizeof(real)));
    CUDA_CHECK(cudaMemset(M->adam_v, 0, M->nmom * sizeof(real)));
}

// Frees what model_alloc_acts allocated (model_free: that and the parameters); M's weight copies stop being the ones
// the products take (weights_use makes them so again)
static void model_free_acts(Model *M) {
    void *ps[] = {M->acts, M->hL, M->lnf, M->lnf_rstd, M->logits, M->lse, M->losses, M->dacts, M->dres, M->dlnf,
                  M->inputs, M->targets, M->hits, M->gnoise}; // gdn_ws lies in logits
    for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) if (ps[i]) CUDA_CHECK(cudaFree(ps[i]));
    if (g_wcopy == &M->wc) g_wcopy = NULL;
}

static void model_free(Model *M) {
    void *ps[] = {M->params, M->grads, M->adam_m, M->adam_v, M->d_scalar, M->adam_runs, M->wc.buf};
    for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) if (ps[i]) CUDA_CHECK(cudaFree(ps[i]));
    model_free_acts(M);
}

// F: a model that runs M's parameters (the prefill's forward passes, common/train_main.inc), without activations until
// model_alloc_acts gives it its own; model_free_acts releases them (F owns nothing else). bf16 mode: M's weight copies
// are made first, so F takes them.
static void model_share(Model *F, Model *M) {
    weights_use(M);
    *F = *M;
    F->acts = F->hL = F->lnf = F->lnf_rstd = F->logits = F->lse = F->losses = F->dacts = F->dres = F->dlnf = F->gnoise = NULL;
    F->gdn_ws = NULL;
    F->inputs = F->targets = NULL;
    F->hits = NULL;
    F->layer_done = NULL;
}

static void model_zero_grad(Model *M) { CUDA_CHECK(cudaMemset(M->grads, 0, M->nalloc * sizeof(real))); }

// ---- G and N layers share their inputs (§3.1, §5.1) ---------------------------------------------------
// proj = x[W_q;W_k;W_v]ᵀ;  Q, K, V = silu(conv(proj));  gate = x W_gᵀ;  q̂, k̂ = L2N per head;  β, g.
// keep_qk: Q and K are stored too (the N layer reads them again; a G layer's only become q̂, k̂).
static void gdn_inputs_forward(const Config *c, LayerActs *a, const LayerParams *p, int B, int T, int keep_qk) {
    int BT = B * T, D = c->D, K = cfg_K(c), Vt = cfg_Vt(c), H = c->H, W = 2 * K + Vt;
    matmul_forward(a->proj, a->xn, p->wqkv, BT, D, W, 1, NULL); // proj's columns: Q | K | V
    conv_silu_l2norm_forward(a->q_hat, a->k_hat, a->qk_rho, keep_qk ? a->q : NULL, keep_qk ? a->k : NULL, a->proj, W,
                             p->conv, B, T, H, c->dk);
    conv_silu_forward(a->v, a->proj, W, 2 * K, p->conv, B, T, Vt);
    matmul_forward(a->gate, a->xn, p->wg, BT, D, Vt, 1, NULL);
    matmul_forward(a->ab, a->xn, p->wab, BT, D, 2 * H, 0, NULL);
    gdn_gates_forward(a->g, a->beta, a->ab, p->a_log, p->dt_bias, BT, H);
}
// Takes the gradients in d (of q, k, v, gate, g, β; the layer's backward has taken q̂, k̂'s to q, k) down to the
// parameters and dx, which it WRITES. d proj | d gate | d ab share rows (gdn_in_ld), as [W_q;W_k;W_v], W_g, [W_a;W_b]
// lie one after another, so one product takes dx = [d proj | d gate | d ab] [W_qkv; W_g; W_ab] and all three
// weights' gradients (one larger product runs faster than three). dqkv_mp: d's q, k, v are stored in the matmul
// precision (GdnArgs.grads_mp: a G layer's).
static void gdn_inputs_backward(const Config *c, real *dx, LayerActs *d, LayerParams *gp, const LayerActs *a,
                                const LayerParams *p, int B, int T, int dqkv_mp) {
    int BT = B * T, D = c->D, K = cfg_K(c), Vt = cfg_Vt(c), H = c->H, W = 2 * K + Vt, ld = gdn_in_ld(c);
    gdn_gates_backward(d->ab, ld, ld - W - Vt, gp->a_log, gp->dt_bias, d->g, d->beta, a->ab, a->g, a->beta, p->a_log,
                       p->dt_bias, BT, H);
    conv_silu_qkv_backward(d->proj, ld, gp->conv, d->q, d->k, d->v, a->proj, W, p->conv, B, T, K, Vt, dqkv_mp);
    matmul_backward_ld(dx, gp->wqkv, d->proj, ld, a->xn, p->wqkv, BT, D, gdn_in_cols(c), DINP_WRITE);
}

// The layers' forward passes take ops_kept (GPU only): recompute level 1 kept the token mixers' outputs and the
// block's mixer output r, so its rerun (model_backward) skips the ops, the output projection and the residual add.

// Every layer's _backward WRITES dx, the gradient of its normalized input x (no other op produces it).

// ---- G: the plain Gated DeltaNet layer (§3) -----------------------------------------------------------
// o = GDN(q̂, k̂, V, g, β) (every chunk committed);  y_h = RMSNorm_{w_o}(o_h) ⊙ φ(gate_h);  out = res + y W_oᵀ
// (res NULL: none, out fp32 (an S layer's mixer outputs); else out is the residual stream, stored in the matmul
// precision as res is: bf16 mode adds res in the product's epilogue)
static void gdn_layer_forward(const Config *c, LayerActs *a, const LayerParams *p, real *out, const real *res, int B,
                              int T, int ops_kept) {
    GdnArgs op = gdn_layer_op_args(c, a, B, T);
    GatedNormArgs norm = gdn_layer_norm_args(c, a, p->o_norm, B, T);
    gdn_inputs_forward(c, a, p, B, T, 0);
    if (!ops_kept) gdn_op_forward(a->gdn_out, a->state, &op);
    gated_norm_forward(a->y, a->norm_rstd, &norm);
    if (!ops_kept) matmul_forward(out, a->y, p->wo, B * T, cfg_Vt(c), c->D, res != NULL, res);
}
static void gdn_layer_backward(const Config *c, real *dx, const real *dout, LayerActs *d, LayerParams *gp,
                               const LayerActs *a, const LayerParams *p, int B, int T) {
    GdnArgs op = gdn_layer_op_args(c, a, B, T);
    GatedNormArgs norm = gdn_layer_norm_args(c, a, p->o_norm, B, T);
    matmul_backward(d->y, gp->wo, dout, a->y, p->wo, B * T, cfg_Vt(c), c->D, DINP_WRITE_MP);
    gated_norm_backward(d->gdn_out, gp->o_norm, NULL, NULL, NULL, d->gate, d->y, a->norm_rstd, &norm);
    gdn_op_backward(d->q, d->k, d->v, d->g, d->beta, NULL, d->gdn_out, a->state, &op); // dQ, dK: L2 norm's folded in
    gdn_inputs_backward(c, dx, d, gp, a, p, B, T, op.grads_mp);
}

// ---- A: causal softmax attention with RoPE (§4) ---------------------------------------------------------
// proj = x W_qkvᵀ (q | k | v column blocks);  q, k rotated in place (one call: the blocks are adjacent);
// o = causal softmax attention;  out = res + o W_oᵀ. proj, o and o's gradient are stored in the matmul precision: in
// bf16 mode the attention kernels and W_o read them as their producers wrote them.
static void attention_layer_forward(const Config *c, LayerActs *a, const LayerParams *p, real *out, const real *res,
                                    int B, int T, int ops_kept) {
    int BT = B * T, D = c->D, heads = cfg_attn_heads(c);
    AttnArgs op = attn_layer_op_args(c, a, B, T);
    matmul_forward(a->proj, a->xn, p->wqkv, BT, D, 3 * D, 1, NULL);
    rope_forward(a->q, BT, T, 2 * heads, NATSL_ATTN_HEAD, 3 * D, 1);
    if (!ops_kept) attention_forward(a->att_out, a->lse, &op);
    if (!ops_kept) matmul_forward(out, a->att_out, p->wo, BT, D, D, res != NULL, res);
}
static void attention_layer_backward(const Config *c, real *dx, const real *dout, LayerActs *d, LayerParams *gp,
                                     const LayerActs *a, const LayerParams *p, int B, int T) {
    int BT = B * T, D = c->D, heads = cfg_attn_heads(c);
    AttnArgs op = attn_layer_op_args(c, a, B, T);
    matmul_backward(d->att_out, gp->wo, dout, a->att_out, p->wo, BT, D, D, DINP_WRITE_MP);
    bf16 *dproj = operand_claim(d->proj, (size_t)BT * 3 * D, OPERAND_DOUT); // W_qkv's bf16 operand (NULL in fp32 mode)
    if (dproj && attention_in_bf16(&op)) { // the bf16 kernel writes dk (rotated back) and dv into it; RoPE's pass, dq
        attention_backward_flash(d->q, NULL, NULL, NULL, d->att_out, a->att_out, a->lse, &op, dproj + D, dproj + 2 * D);
        rope_backward(d->q, BT, T, heads, NATSL_ATTN_HEAD, 3 * D, dproj, D);
    } else {
        attention_backward(d->q, d->k, d->v, NULL, d->att_out, a->att_out, a->lse, &op);
        rope_backward(d->q, BT, T, 2 * heads, NATSL_ATTN_HEAD, 3 * D, dproj, 3 * D);
    }
    matmul_backward(dx, gp->wqkv, operand(d->proj, (size_t)BT * 3 * D, OPERAND_DOUT), a->xn, p->wqkv, BT, D, 3 * D,
                    DINP_WRITE);
}

// ---- H: Native Hybrid Attention (§15) --------------------------------------------------------------------------
// As train_natsl.c: per head and sequence m slots fed by the token leaving the window (15.1a-b), one softmax over the
// slots (t ≥ w) and the window's RoPE'd keys (15.2a-c); q, k, v, their rotations and o in the matmul precision MP,
// the slots, z, lse and every gradient in fp32. Chunk-parallel (doc/model.md §15.6): the slot states at the chunk
// starts come from a scan with one thread per (sequence, head, slot, feature); every other kernel takes one chunk of
// 64 queries (or keys) of one (sequence, head) a block, which stages the chunk's rows in shared memory once and
// replays the chunk's slot states from the chunk start's, every slot in the block (slot tiles one after the other):
// the scores and p, de (sums over features) a thread a slot; o, dq, dk, dv (sums over slots) a thread a feature; dα a
// warp a slot. Every value has one writer: no atomics, every result deterministic.
#define NHA_HD NATSL_ATTN_HEAD
#define NHA_J 8   // slots a tile of the dα kernel (a warp each)
#define NHA_G 8   // steps a group of the dα kernel: its checkpoints
#define NHA_TP 65 // row pitch (floats) of the window kernels' 64 × 64 tiles in shared memory
__device__ __forceinline__ float nha_alpha(float z) { return expf(-softplusf_(-z) / (float)NHA_TAU); } // (15.1a)
// (15.1b) for one slot element s: a token with gate a and feature x enters
__device__ __forceinline__ float nha_enter1(float s, float a, float x) { return fmaf(a, s, (1.f - a) * x); }
__device__ __forceinline__ float nha_half_max(float x) { // over the 16 lanes of a half-warp
    for (int o = 8; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
__device__ __forceinline__ float nha_half_sum(float x) {
    for (int o = 8; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// The op's scratch, one buffer for every call (grown to the largest; fp32): the gates α [B*T][heads·m] (as z); the
// slots' scores, then probabilities P (forward), the slots' p into P and de into E (backward), [B*T][heads·m] each;
// dK̃, dṼ entering every chunk's last step from the later ones [B][heads][Nc][2][m][64] (as slots); o's window part
// O [B*T][heads·64]; Δ_t [B][heads][T] (as lse).
typedef struct { float *al, *P, *E, *dS, *O, *Dt; } NhaWs;
static NhaWs nha_workspace(const NhaArgs *a) {
    static float *buf = NULL;
    static size_t cap = 0;
    const size_t BT = (size_t)a->B * a->T, BTHM = BT * a->heads * a->m, BTH = BT * a->heads;
    const size_t n = 5 * BTHM + BTH * NHA_HD + BTH;
    if (n > cap) {
        if (buf) CUDA_CHECK(cudaFree(buf));
        buf = (float *)xcudamalloc(n * sizeof(float));
        cap = n;
    }
    NhaWs w;
    w.al = buf; w.P = w.al + BTHM; w.E = w.P + BTHM; w.dS = w.E + BTHM; w.O = w.dS + 2 * BTHM; w.Dt = w.O + BTH * NHA_HD;
    return w;
}

// al = α(z) (15.1a), n values
__global__ void nha_alpha_kernel(float *al, const float *z, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) al[i] = nha_alpha(z[i]);
}
// x[r][0 .. n) = 0, rows of stride ld, a block a row
__global__ void nha_zero_kernel(float *x, size_t ld, int n) {
    for (int c = threadIdx.x; c < n; c += blockDim.x) x[blockIdx.x * ld + c] = 0.f;
}
// Δ_t = do_t · o_t (15.3a) [B][heads][T], a warp a (token, head)
template <class MP> __global__ void nha_delta_kernel(float *Dt, const MP *dout, const MP *out, int B, int T, int Hh) {
    const size_t wid = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (wid >= (size_t)B * T * Hh) return; // a whole warp
    const size_t bt = wid / Hh, o = wid * NHA_HD + lane; // row bt, head h = wid % Hh: o = bt·Hh·64 + h·64 + lane
    const float s = warp_sum(ld(dout + o) * ld(out + o) + ld(dout + o + 32) * ld(out + o + 32));
    if (lane == 0) Dt[(bt / T * Hh + wid % Hh) * T + bt % T] = s;
}

// The slot states at every chunk start (15.1b): slots[b][h][c] = the state before step c·64 (K̃ rows, then Ṽ rows).
// One thread per (sequence, head, slot j, feature d) walks the steps with K̃[j][d], Ṽ[j][d] in registers, token
// s = t − w entering at step t ≥ w.
template <class MP> __global__ void nha_slot_scan_kernel(float *slots, NhaArgs a, const float *al) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x, bh = idx / NHA_HD / a.m;
    if (bh >= (size_t)a.B * a.heads) return;
    const int T = a.T, m = a.m, w = a.w, Nc = T / NATSL_CHUNK, d = (int)(idx % NHA_HD), j = (int)(idx / NHA_HD % m);
    const int b = (int)(bh / a.heads), h = (int)(bh % a.heads);
    const size_t HM = (size_t)a.heads * m, SZ = 2 * (size_t)m * NHA_HD;
    const MP *k = (const MP *)a.k + h * NHA_HD + d, *v = (const MP *)a.v + h * NHA_HD + d;
    const float *alj = al + (size_t)h * m + j;
    float sk = 0.f, sv = 0.f;
    for (int c = 0; c < Nc; c++) {
        float *dst = slots + (bh * Nc + c) * SZ + (size_t)j * NHA_HD + d;
        dst[0] = sk;
        dst[(size_t)m * NHA_HD] = sv;
        const int i0 = w - c * NATSL_CHUNK > 0 ? w - c * NATSL_CHUNK : 0; // steps t ≥ w only
        #pragma unroll 16
        for (int i = i0; i < NATSL_CHUNK; i++) {
            const size_t bs = (size_t)b * T + (c * NATSL_CHUNK + i - w);
            const float aa = alj[bs * HM];
            sk = nha_enter1(sk, aa, ld(k + bs * a.ldqkv));
            sv = nha_enter1(sv, aa, ld(v + bs * a.ldqkv));
        }
    }
}

// A slot kernel's block: chunk c of (sequence b, head h) = blockIdx.x = (b·heads + h)·Nc + c; slot j = jt·NHA_J + warp,
// features lane and lane + 32; a warp with j ≥ m (the last tile) holds zeros and writes nothing.
struct NhaTile {
    int b, h, t0, j, lane, wi;
    bool valid;
    size_t bT, HM;
};
__device__ __forceinline__ NhaTile nha_tile(const NhaArgs &a, int jt) {
    const int Nc = a.T / NATSL_CHUNK, bh = blockIdx.x / Nc;
    NhaTile p;
    p.b = bh / a.heads; p.h = bh % a.heads; p.t0 = (blockIdx.x % Nc) * NATSL_CHUNK;
    p.wi = threadIdx.x / 32; p.lane = threadIdx.x % 32; p.j = jt * NHA_J + p.wi; p.valid = p.j < a.m;
    p.bT = (size_t)p.b * a.T; p.HM = (size_t)a.heads * a.m;
    return p;
}
struct NhaSlot { float k0, k1, v0, v1; }; // K̃[j][lane], K̃[j][lane + 32], Ṽ[j][lane], Ṽ[j][lane + 32]
// the tile's elements of the state src [2][m][64] (slots or dS: the block's chunk)
__device__ __forceinline__ NhaSlot nha_slot_load(const float *src, const NhaTile &p, int m) {
    NhaSlot S = {0.f, 0.f, 0.f, 0.f};
    if (p.valid) {
        const float *K = src + (size_t)p.j * NHA_HD + p.lane, *V = K + (size_t)m * NHA_HD;
        S.k0 = K[0]; S.k1 = K[32]; S.v0 = V[0]; S.v1 = V[32];
    }
    return S;
}
// Step t0 + i's inputs to the warp's slot (15.1b): the gate α from as [64][NHA_J] and features lane, lane + 32 of the
// entering token's k, v from ks, vs [64][64] (staged in shared memory: α = 1, k = v = 0 where nothing enters, which
// leave the state as it is)
struct NhaIn { float a, k0, k1, v0, v1; };
__device__ __forceinline__ NhaIn nha_slot_in(const float *as, const float *ks, const float *vs, int i, int wi, int lane) {
    const NhaIn in = {as[i * NHA_J + wi], ks[i * NHA_HD + lane], ks[i * NHA_HD + lane + 32], vs[i * NHA_HD + lane],
                      vs[i * NHA_HD + lane + 32]};
    return in;
}
__device__ __forceinline__ void nha_slot_step(NhaSlot &S, const NhaIn &in) {
    S.k0 = nha_enter1(S.k0, in.a, in.k0); S.k1 = nha_enter1(S.k1, in.a, in.k1);
    S.v0 = nha_enter1(S.v0, in.a, in.v0); S.v1 = nha_enter1(S.v1, in.a, in.v1);
}
// o's and the gradients' row element of head h, feature d, token row bt in a [B*T][heads·64] tensor
#define NHA_AT(bt, h, d) ((bt) * (size_t)a.heads * NHA_HD + (size_t)(h) * NHA_HD + (d))

// The slot dot kernel: one chunk of 64 steps of (sequence b, head h) a block (blockIdx.x = (b·heads + h)·Nc + c), one
// thread a slot (NHA_JS slots a tile, the tiles one after the other) holding its 64 features of K̃ (sel 0, token rows
// x = k) or Ṽ (sel 1, x = v) in registers, walked from the chunk start's state (15.1b). Shared memory: the chunk's
// query rows y_t (q or do) and entering rows x_s (token s = t − w), and the tile's α [64][NHA_JS] (all 48 KiB); the
// rows are read by every thread at once. For each step t ≥ w, r = y_t·S_t[j] after the step goes to R[t][h·m + j]:
//   mode 0 (15.2a): e = r/8, the slots' scores (forward); mode 1: p = exp(r/8 − L_t) (L = lse);
//   mode 2 (15.3d): de = p (r − L_t)/8 (L = Δ, p from Pp: mode 1's output).
#define NHA_JS 64 // slots a tile of the slot dot kernel (a thread each)
static const size_t NHA_DOT_SMEM = (2 * 64 * NHA_HD + 64 * NHA_JS) * sizeof(float);
// rows r0 + i − sh (i ≥ i0, else zeros), 64 columns from src (row stride ld), into dst [64][64] (fp32)
template <class MP>
__device__ __forceinline__ void nha_rows_load(float *dst, const MP *src, size_t r0, int sh, int stride, int i0) {
    for (int x = threadIdx.x; x < 64 * NHA_HD; x += blockDim.x) {
        const int i = x / NHA_HD;
        dst[x] = i >= i0 ? ld(src + (r0 + i - sh) * stride + x % NHA_HD) : 0.f;
    }
}
template <class MP>
__global__ void __launch_bounds__(NHA_JS) nha_slot_dot_kernel(float *R, NhaArgs a, const MP *y, int ldy, const float *al,
                                                              const float *slots, int sel, int mode, const float *L,
                                                              const float *Pp) {
    extern __shared__ float sm[];
    float *ys = sm, *xs = ys + 64 * NHA_HD, *as = xs + 64 * NHA_HD;
    const int Nc = a.T / NATSL_CHUNK, bh = blockIdx.x / Nc, h = bh % a.heads, w = a.w, m = a.m;
    const int t0 = (blockIdx.x % Nc) * NATSL_CHUNK, i0 = w - t0 > 0 ? w - t0 : 0; // steps t0 + i, i ≥ i0 read slots
    if (i0 >= 64) return; // (uniform over the block)
    const size_t bT = (size_t)(bh / a.heads) * a.T, HM = (size_t)a.heads * m;
    nha_rows_load(ys, y + h * NHA_HD, bT + t0, 0, ldy, i0);
    nha_rows_load(xs, (const MP *)(sel ? a.v : a.k) + h * NHA_HD, bT + t0, w, a.ldqkv, i0);
    const float *Lr = L + (size_t)bh * a.T + t0;
    for (int j0 = 0; j0 < m; j0 += NHA_JS) {
        const int j = j0 + threadIdx.x;
        const bool on = j < m;
        __syncthreads(); // the last tile's readers are done
        for (int x = threadIdx.x; x < 64 * NHA_JS; x += blockDim.x) {
            const int i = x / NHA_JS, jx = j0 + x % NHA_JS;
            as[x] = i >= i0 && jx < m ? al[(bT + t0 + i - w) * HM + (size_t)h * m + jx] : 1.f;
        }
        __syncthreads();
        float S[NHA_HD];
        const float *S0 = slots + ((size_t)blockIdx.x * 2 + sel) * m * NHA_HD + (size_t)j * NHA_HD;
        #pragma unroll
        for (int f = 0; f < NHA_HD; f++) S[f] = on ? S0[f] : 0.f;
        for (int i = i0; i < 64 && on; i++) {
            const float aa = as[i * NHA_JS + threadIdx.x];
            const float4 *xr = (const float4 *)(xs + i * NHA_HD), *yr = (const float4 *)(ys + i * NHA_HD);
            float r0 = 0.f, r1 = 0.f, r2 = 0.f, r3 = 0.f;
            #pragma unroll
            for (int f = 0; f < NHA_HD / 4; f++) {
                const float4 xv = xr[f], yv = yr[f];
                S[4 * f] = nha_enter1(S[4 * f], aa, xv.x);
                S[4 * f + 1] = nha_enter1(S[4 * f + 1], aa, xv.y);
                S[4 * f + 2] = nha_enter1(S[4 * f + 2], aa, xv.z);
                S[4 * f + 3] = nha_enter1(S[4 * f + 3], aa, xv.w);
                r0 = fmaf(yv.x, S[4 * f], r0);
                r1 = fmaf(yv.y, S[4 * f + 1], r1);
                r2 = fmaf(yv.z, S[4 * f + 2], r2);
                r3 = fmaf(yv.w, S[4 * f + 3], r3);
            }
            const float r = (r0 + r1) + (r2 + r3);
            const size_t o = (bT + t0 + i) * HM + (size_t)h * m + j;
            R[o] = mode == 0 ? r * 0.125f : mode == 1 ? expf(r * 0.125f - Lr[i]) : Pp[o] * (r - Lr[i]) * 0.125f;
        }
    }
}
// The slot mix kernels: one chunk of 64 steps of (sequence b, head h) a block (blockIdx.x = (b·heads + h)·Nc + c), one
// thread per feature d (64 threads) holding element d of NHA_JT slots' states in registers; the slot tiles one after the
// other add into each thread's own column of the sums in shared memory (a fixed order: deterministic, no reduction over
// threads). Shared memory: the chunk's 64 rows of x or y (each thread its column), the sums [64][64], and the tile's α
// and W [64][NHA_JT] (read by every thread at once): 48 KiB.
#define NHA_JT 32 // slots a tile of the slot mix kernels
static const size_t NHA_MIX_SMEM = (2 * 64 * NHA_HD + 2 * 64 * NHA_JT) * sizeof(float);
// as[i][jj] = α_{s,j} of token s = t − w entering at step t = t0 + i, ws[i][jj] = W[t][h·m + j] (j = j0 + jj; t ≥ w and
// j < m, else α = 1 and W = 0: the state stays, nothing is added)
__device__ __forceinline__ void nha_mix_tile(float *as, float *ws, const NhaArgs &a, const float *al, const float *W,
                                             size_t bT, int h, int t0, int j0) {
    const size_t HM = (size_t)a.heads * a.m;
    for (int x = threadIdx.x; x < 64 * NHA_JT; x += blockDim.x) {
        const int i = x / NHA_JT, j = j0 + x % NHA_JT, t = t0 + i;
        const bool on = j < a.m && t >= a.w;
        as[x] = on ? al[(bT + t - a.w) * HM + (size_t)h * a.m + j] : 1.f;
        ws[x] = on ? W[(bT + t) * HM + (size_t)h * a.m + j] : 0.f;
    }
}
// Forward walk (15.1b), then (15.2c) or the slots' part of dq (15.3c): dst_t[d] = base_t[d] + Σ_j W_{t,j} S_t[j][d] over
// the chunk's steps t (the sum at t ≥ w only), S = the slots' K̃ (sel 0) or Ṽ (sel 1) after step t from the chunk
// start's state, row x_s (k or v) of token s = t − w entering at step t ≥ w. Rows of dst and base: stride ldd, head h at
// column h·64. o = O + Σ_j P Ṽ (into out, MP); dq += Σ_j de K̃ (in place).
template <class MP, class TD>
__global__ void __launch_bounds__(NHA_HD) nha_slot_mix_kernel(TD *dst, const float *base, int ldd, NhaArgs a, const MP *x,
                                                              const float *al, const float *slots, int sel, const float *W) {
    extern __shared__ float sm[];
    float *xs = sm, *ys = xs + 64 * NHA_HD, *as = ys + 64 * NHA_HD, *ws = as + 64 * NHA_JT;
    const int Nc = a.T / NATSL_CHUNK, bh = blockIdx.x / Nc, h = bh % a.heads, d = threadIdx.x, w = a.w;
    const int t0 = (blockIdx.x % Nc) * NATSL_CHUNK, i0 = w - t0 > 0 ? w - t0 : 0; // steps t0 + i, i ≥ i0 take tokens
    const size_t bT = (size_t)(bh / a.heads) * a.T;
    for (int i = 0; i < 64; i++) {
        xs[i * NHA_HD + d] = i >= i0 ? ld(x + (bT + t0 + i - w) * a.ldqkv + h * NHA_HD + d) : 0.f;
        ys[i * NHA_HD + d] = 0.f;
    }
    const float *S0 = slots + ((size_t)blockIdx.x * 2 + sel) * a.m * NHA_HD + d;
    for (int j0 = 0; i0 < 64 && j0 < a.m; j0 += NHA_JT) {
        __syncthreads(); // the last tile's readers are done
        nha_mix_tile(as, ws, a, al, W, bT, h, t0, j0);
        __syncthreads();
        float S[NHA_JT];
        #pragma unroll
        for (int jj = 0; jj < NHA_JT; jj++) S[jj] = j0 + jj < a.m ? S0[(size_t)(j0 + jj) * NHA_HD] : 0.f;
        for (int i = i0; i < 64; i++) {
            const float xv = xs[i * NHA_HD + d], *ai = as + i * NHA_JT, *wi = ws + i * NHA_JT;
            float y0 = 0.f, y1 = 0.f;
            #pragma unroll
            for (int jj = 0; jj < NHA_JT; jj += 2) {
                S[jj] = nha_enter1(S[jj], ai[jj], xv);
                S[jj + 1] = nha_enter1(S[jj + 1], ai[jj + 1], xv);
                y0 = fmaf(wi[jj], S[jj], y0);
                y1 = fmaf(wi[jj + 1], S[jj + 1], y1);
            }
            ys[i * NHA_HD + d] += y0 + y1;
        }
    }
    for (int i = 0; i < 64; i++) {
        const size_t o = (bT + t0 + i) * ldd + (size_t)h * NHA_HD + d;
        st(dst + o, base[o] + ys[i * NHA_HD + d]);
    }
}
// Backward walk in reverse time (15.3e-f): G[j][d] = dK̃ (sel 0) or dṼ (sel 1) of slot j starts at dS (entering the
// chunk's last step from the later ones); step t ≥ w adds query t's W_{t,j} y_t[d] (de q_t or p do_t), then token
// s = t − w's row gets dst_s[d] += Σ_j (1 − α_{s,j}) G[j][d] (dk or dv, stride ldqkv), and G ×= α_{s,j}. y: rows of
// stride ldy, head h at column h·64.
template <class MP>
__global__ void __launch_bounds__(NHA_HD) nha_slot_dmix_kernel(float *dst, NhaArgs a, const MP *y, int ldy, const float *al,
                                                               const float *dS, int sel, const float *W) {
    extern __shared__ float sm[];
    float *ys = sm, *gs = ys + 64 * NHA_HD, *as = gs + 64 * NHA_HD, *ws = as + 64 * NHA_JT;
    const int Nc = a.T / NATSL_CHUNK, bh = blockIdx.x / Nc, h = bh % a.heads, d = threadIdx.x, w = a.w;
    const int t0 = (blockIdx.x % Nc) * NATSL_CHUNK, i0 = w - t0 > 0 ? w - t0 : 0;
    if (i0 >= 64) return; // no step of the chunk takes a token (uniform over the block)
    const size_t bT = (size_t)(bh / a.heads) * a.T;
    for (int i = 0; i < 64; i++) {
        ys[i * NHA_HD + d] = ld(y + (bT + t0 + i) * ldy + h * NHA_HD + d);
        gs[i * NHA_HD + d] = 0.f;
    }
    const float *G0 = dS + ((size_t)blockIdx.x * 2 + sel) * a.m * NHA_HD + d;
    for (int j0 = 0; j0 < a.m; j0 += NHA_JT) {
        __syncthreads();
        nha_mix_tile(as, ws, a, al, W, bT, h, t0, j0);
        __syncthreads();
        float G[NHA_JT];
        #pragma unroll
        for (int jj = 0; jj < NHA_JT; jj++) G[jj] = j0 + jj < a.m ? G0[(size_t)(j0 + jj) * NHA_HD] : 0.f;
        for (int i = 63; i >= i0; i--) {
            const float yv = ys[i * NHA_HD + d], *ai = as + i * NHA_JT, *wi = ws + i * NHA_JT;
            float g0 = 0.f, g1 = 0.f;
            #pragma unroll
            for (int jj = 0; jj < NHA_JT; jj += 2) {
                G[jj] = fmaf(wi[jj], yv, G[jj]);
                G[jj + 1] = fmaf(wi[jj + 1], yv, G[jj + 1]);
                g0 = fmaf(1.f - ai[jj], G[jj], g0);
                g1 = fmaf(1.f - ai[jj + 1], G[jj + 1], g1);
                G[jj] *= ai[jj];
                G[jj + 1] *= ai[jj + 1];
            }
            gs[i * NHA_HD + d] += g0 + g1;
        }
    }
    for (int i = i0; i < 64; i++) dst[(bT + t0 + i - w) * a.ldqkv + (size_t)h * NHA_HD + d] += gs[i * NHA_HD + d];
}

// 64 rows (row0 …) of a [rows][stride] MP tensor, columns 0 … 63 of src, into dst [64][NHA_TP] (fp32)
template <class MP> __device__ __forceinline__ void nha_tile_load(float *dst, const MP *src, size_t row0, int stride) {
    for (int x = threadIdx.x; x < 64 * NHA_HD; x += blockDim.x)
        dst[(x / NHA_HD) * NHA_TP + x % NHA_HD] = ld(src + (row0 + x / NHA_HD) * stride + x % NHA_HD);
}
// The window kernels: 256 threads, thread (ty, tx) = (tid / 16, tid % 16) owning rows ty + 16r and columns tx + 16cc
// (r, cc < 4) of a 64 × 64 tile; query t sees key i in its window when i ≤ t and t − i < w (15.2a).
#define NHA_WIN_THREADS 256
__device__ __forceinline__ bool nha_in_window(int t, int i, int w) { return i <= t && t - i < w; }

// Forward, the window and the one softmax (15.2a-c) of the chunk's 64 queries: a query's m slot scores (E, t ≥ w) start
// its running max and sum, then the window's keys join a 64-key tile at a time (online softmax). Writes lse_t, the
// slots' probabilities P = exp(e − lse_t) over E, and o's window part (normalized) into O, or into out when no query
// reads slots (slots_on = 0: w ≥ T).
template <class MP>
__global__ void __launch_bounds__(NHA_WIN_THREADS) nha_window_forward_kernel(MP *out, float *O, float *lse, float *E,
                                                                             NhaArgs a, int slots_on) {
    extern __shared__ float sm[];
    float *Qs = sm, *Ks = Qs + 64 * NHA_TP, *Vs = Ks + 64 * NHA_TP, *Ps = Vs + 64 * NHA_TP;
    const int T = a.T, m = a.m, w = a.w, Nc = T / NATSL_CHUNK, c = blockIdx.x % Nc, bh = blockIdx.x / Nc;
    const int b = bh / a.heads, h = bh % a.heads, tx = threadIdx.x % 16, ty = threadIdx.x / 16, t0 = c * NATSL_CHUNK;
    const size_t bT = (size_t)b * T, HM = (size_t)a.heads * m;
    const MP *qr = (const MP *)a.qr + h * NHA_HD, *kr = (const MP *)a.kr + h * NHA_HD, *v = (const MP *)a.v + h * NHA_HD;
    nha_tile_load(Qs, qr, bT + t0, a.ldr);
    float mx[4], l[4], o[4][4];
    for (int r = 0; r < 4; r++) { // the slots' scores first (their max and sum; the half-warp of row ty + 16r)
        const int t = t0 + ty + 16 * r;
        const bool sl = slots_on && t >= w;
        const float *e = E + (bT + t) * HM + (size_t)h * m;
        float mm = -1e30f, ss = 0.f;
        if (sl)
            for (int j = tx; j < m; j += 16) mm = fmaxf(mm, e[j]);
        mm = nha_half_max(mm);
        if (sl)
            for (int j = tx; j < m; j += 16) ss += expf(e[j] - mm);
        mx[r] = mm;
        l[r] = nha_half_sum(ss);
        for (int cc = 0; cc < 4; cc++) o[r][cc] = 0.f;
    }
    const int lo = w == 0 ? t0 + NATSL_CHUNK : (t0 - w + 1 > 0 ? t0 - w + 1 : 0); // the chunk's first key (w = 0: none)
    for (int kt = lo / 64; kt <= c; kt++) {
        __syncthreads(); // the last tile's readers are done
        nha_tile_load(Ks, kr, bT + (size_t)kt * 64, a.ldr);
        nha_tile_load(Vs, v, bT + (size_t)kt * 64, a.ldqkv);
        __syncthreads();
        float s[4][4] = {};
        for (int d = 0; d < NHA_HD; d++) {
            float qv[4], kv[4];
            for (int r = 0; r < 4; r++) qv[r] = Qs[(ty + 16 * r) * NHA_TP + d];
            for (int cc = 0; cc < 4; cc++) kv[cc] = Ks[(tx + 16 * cc) * NHA_TP + d];
            for (int r = 0; r < 4; r++)
                for (int cc = 0; cc < 4; cc++) s[r][cc] = fmaf(qv[r], kv[cc], s[r][cc]);
        }
        for (int r = 0; r < 4; r++) {
            const int t = t0 + ty + 16 * r;
            float tm = -INFINITY, ps = 0.f;
            for (int cc = 0; cc < 4; cc++) {
                s[r][cc] = nha_in_window(t, kt * 64 + tx + 16 * cc, w) ? s[r][cc] * 0.125f : -INFINITY;
                tm = fmaxf(tm, s[r][cc]);
            }
            const float mn = fmaxf(mx[r], nha_half_max(tm)), corr = expf(mx[r] - mn);
            for (int cc = 0; cc < 4; cc++) {
                const float pv = expf(s[r][cc] - mn);
                Ps[(ty + 16 * r) * NHA_TP + tx + 16 * cc] = pv;
                ps += pv;
            }
            l[r] = l[r] * corr + nha_half_sum(ps);
            mx[r] = mn;
            for (int cc = 0; cc < 4; cc++) o[r][cc] *= corr;
        }
        __syncthreads();
        for (int i = 0; i < 64; i++) {
            float vv[4];
            for (int cc = 0; cc < 4; cc++) vv[cc] = Vs[i * NHA_TP + tx + 16 * cc];
            for (int r = 0; r < 4; r++) {
                const float pv = Ps[(ty + 16 * r) * NHA_TP + i];
                for (int cc = 0; cc < 4; cc++) o[r][cc] = fmaf(pv, vv[cc], o[r][cc]);
            }
        }
    }
    for (int r = 0; r < 4; r++) {
        const int t = t0 + ty + 16 * r;
        const float L = mx[r] + logf(l[r]);
        if (tx == 0) lse[(size_t)bh * T + t] = L;
        for (int cc = 0; cc < 4; cc++) {
            const size_t ix = NHA_AT(bT + t, h, tx + 16 * cc);
            if (slots_on) O[ix] = o[r][cc] / l[r];
            else st(out + ix, o[r][cc] / l[r]);
        }
        if (slots_on && t >= w) {
            float *e = E + (bT + t) * HM + (size_t)h * m;
            for (int j = tx; j < m; j += 16) e[j] = expf(e[j] - L);
        }
    }
}
// Backward, the window's part of dq̂ (15.3a-b) for the chunk's 64 queries, a 64-key tile at a time:
// p = exp(q̂_t·k̂_i/8 − lse_t), de = p (do_t·v_i − Δ_t)/8, dq̂_t = Σ_i de k̂_i (written).
template <class MP>
__global__ void __launch_bounds__(NHA_WIN_THREADS) nha_window_dq_kernel(float *dqr, NhaArgs a, const MP *dout,
                                                                        const float *lse, const float *Dt) {
    extern __shared__ float sm[];
    float *Qs = sm, *dOs = Qs + 64 * NHA_TP, *Ks = dOs + 64 * NHA_TP, *Vs = Ks + 64 * NHA_TP, *Ps = Vs + 64 * NHA_TP;
    const int T = a.T, w = a.w, Nc = T / NATSL_CHUNK, c = blockIdx.x % Nc, bh = blockIdx.x / Nc;
    const int b = bh / a.heads, h = bh % a.heads, tx = threadIdx.x % 16, ty = threadIdx.x / 16, t0 = c * NATSL_CHUNK;
    const size_t bT = (size_t)b * T;
    const MP *qr = (const MP *)a.qr + h * NHA_HD, *kr = (const MP *)a.kr + h * NHA_HD, *v = (const MP *)a.v + h * NHA_HD;
    nha_tile_load(Qs, qr, bT + t0, a.ldr);
    nha_tile_load(dOs, dout + h * NHA_HD, bT + t0, a.heads * NHA_HD);
    float L[4], Dl[4], acc[4][4] = {};
    for (int r = 0; r < 4; r++) {
        L[r] = lse[(size_t)bh * T + t0 + ty + 16 * r];
        Dl[r] = Dt[(size_t)bh * T + t0 + ty + 16 * r];
    }
    const int lo = w == 0 ? t0 + NATSL_CHUNK : (t0 - w + 1 > 0 ? t0 - w + 1 : 0);
    for (int kt = lo / 64; kt <= c; kt++) {
        __syncthreads();
        nha_tile_load(Ks, kr, bT + (size_t)kt * 64, a.ldr);
        nha_tile_load(Vs, v, bT + (size_t)kt * 64, a.ldqkv);
        __syncthreads();
        float s[4][4] = {}, dp[4][4] = {};
        for (int d = 0; d < NHA_HD; d++) {
            float qv[4], gv[4], kv[4], vv[4];
            for (int r = 0; r < 4; r++) { qv[r] = Qs[(ty + 16 * r) * NHA_TP + d]; gv[r] = dOs[(ty + 16 * r) * NHA_TP + d]; }
            for (int cc = 0; cc < 4; cc++) { kv[cc] = Ks[(tx + 16 * cc) * NHA_TP + d]; vv[cc] = Vs[(tx + 16 * cc) * NHA_TP + d]; }
            for (int r = 0; r < 4; r++)
                for (int cc = 0; cc < 4; cc++) {
                    s[r][cc] = fmaf(qv[r], kv[cc], s[r][cc]);
                    dp[r][cc] = fmaf(gv[r], vv[cc], dp[r][cc]);
                }
        }
        for (int r = 0; r < 4; r++)
            for (int cc = 0; cc < 4; cc++) {
                const bool in = nha_in_window(t0 + ty + 16 * r, kt * 64 + tx + 16 * cc, w);
                const float pv = in ? expf(s[r][cc] * 0.125f - L[r]) : 0.f;
                Ps[(ty + 16 * r) * NHA_TP + tx + 16 * cc] = pv * (dp[r][cc] - Dl[r]) * 0.125f;
            }
        __syncthreads();
        for (int i = 0; i < 64; i++) {
            float kv[4];
            for (int cc = 0; cc < 4; cc++) kv[cc] = Ks[i * NHA_TP + tx + 16 * cc];
            for (int r = 0; r < 4; r++) {
                const float de = Ps[(ty + 16 * r) * NHA_TP + i];
                for (int cc = 0; cc < 4; cc++) acc[r][cc] = fmaf(de, kv[cc], acc[r][cc]);
            }
        }
    }
    for (int r = 0; r < 4; r++)
        for (int cc = 0; cc < 4; cc++) dqr[(bT + t0 + ty + 16 * r) * a.ldr + h * NHA_HD + tx + 16 * cc] = acc[r][cc];
}
// Backward, the window's part of dk̂ and dv (15.3a-b) for the chunk's 64 keys s, over the queries t ∈ [s, s + w − 1] a
// 64-query tile at a time: dk̂_s = Σ_t de_{t,s} q̂_t, dv_s = Σ_t p_{t,s} do_t (both written; the slot kernels add to dv).
template <class MP>
__global__ void __launch_bounds__(NHA_WIN_THREADS) nha_window_dkv_kernel(float *dkr, float *dv, NhaArgs a, const MP *dout,
                                                                         const float *lse, const float *Dt) {
    extern __shared__ float sm[];
    float *Ks = sm, *Vs = Ks + 64 * NHA_TP, *Qs = Vs + 64 * NHA_TP, *dOs = Qs + 64 * NHA_TP, *Ps = dOs + 64 * NHA_TP;
    float *DSs = Ps + 64 * NHA_TP, *Lq = DSs + 64 * NHA_TP, *Dq = Lq + 64;
    const int T = a.T, w = a.w, Nc = T / NATSL_CHUNK, c = blockIdx.x % Nc, bh = blockIdx.x / Nc;
    const int b = bh / a.heads, h = bh % a.heads, tx = threadIdx.x % 16, ty = threadIdx.x / 16, t0 = c * NATSL_CHUNK;
    const size_t bT = (size_t)b * T;
    const MP *qr = (const MP *)a.qr + h * NHA_HD, *kr = (const MP *)a.kr + h * NHA_HD, *v = (const MP *)a.v + h * NHA_HD;
    nha_tile_load(Ks, kr, bT + t0, a.ldr);
    nha_tile_load(Vs, v, bT + t0, a.ldqkv);
    float ak[4][4] = {}, av[4][4] = {};
    const long long last = ((long long)t0 + NATSL_CHUNK - 1 + w - 1) / 64; // the tile of the last query that sees a key
    const int qhi = last < Nc - 1 ? (int)last : Nc - 1;
    for (int qt = w == 0 ? Nc : c; qt <= qhi; qt++) {
        __syncthreads();
        nha_tile_load(Qs, qr, bT + (size_t)qt * 64, a.ldr);
        nha_tile_load(dOs, dout + h * NHA_HD, bT + (size_t)qt * 64, a.heads * NHA_HD);
        if (threadIdx.x < 64) {
            Lq[threadIdx.x] = lse[(size_t)bh * T + qt * 64 + threadIdx.x];
            Dq[threadIdx.x] = Dt[(size_t)bh * T + qt * 64 + threadIdx.x];
        }
        __syncthreads();
        float s[4][4] = {}, dp[4][4] = {}; // key ty + 16r, query tx + 16cc
        for (int d = 0; d < NHA_HD; d++) {
            float kv[4], vv[4], qv[4], gv[4];
            for (int r = 0; r < 4; r++) { kv[r] = Ks[(ty + 16 * r) * NHA_TP + d]; vv[r] = Vs[(ty + 16 * r) * NHA_TP + d]; }
            for (int cc = 0; cc < 4; cc++) { qv[cc] = Qs[(tx + 16 * cc) * NHA_TP + d]; gv[cc] = dOs[(tx + 16 * cc) * NHA_TP + d]; }
            for (int r = 0; r < 4; r++)
                for (int cc = 0; cc < 4; cc++) {
                    s[r][cc] = fmaf(kv[r], qv[cc], s[r][cc]);
                    dp[r][cc] = fmaf(vv[r], gv[cc], dp[r][cc]);
                }
        }
        for (int r = 0; r < 4; r++)
            for (int cc = 0; cc < 4; cc++) {
                const int qi = tx + 16 * cc;
                const bool in = nha_in_window(qt * 64 + qi, t0 + ty + 16 * r, w);
                const float pv = in ? expf(s[r][cc] * 0.125f - Lq[qi]) : 0.f;
                Ps[(ty + 16 * r) * NHA_TP + qi] = pv;
                DSs[(ty + 16 * r) * NHA_TP + qi] = pv * (dp[r][cc] - Dq[qi]) * 0.125f;
            }
        __syncthreads();
        for (int i = 0; i < 64; i++) { // query i of the tile
            float qv[4], gv[4];
            for (int cc = 0; cc < 4; cc++) { qv[cc] = Qs[i * NHA_TP + tx + 16 * cc]; gv[cc] = dOs[i * NHA_TP + tx + 16 * cc]; }
            for (int r = 0; r < 4; r++) {
                const float de = DSs[(ty + 16 * r) * NHA_TP + i], pv = Ps[(ty + 16 * r) * NHA_TP + i];
                for (int cc = 0; cc < 4; cc++) {
                    ak[r][cc] = fmaf(de, qv[cc], ak[r][cc]);
                    av[r][cc] = fmaf(pv, gv[cc], av[r][cc]);
                }
            }
        }
    }
    for (int r = 0; r < 4; r++)
        for (int cc = 0; cc < 4; cc++) {
            const size_t bs = bT + t0 + ty + 16 * r;
            dkr[bs * a.ldr + h * NHA_HD + tx + 16 * cc] = ak[r][cc];
            dv[bs * a.ldqkv + h * NHA_HD + tx + 16 * cc] = av[r][cc];
        }
}

// Backward, the slots' gradient in reverse time (15.3d-f): one thread per (sequence, head, slot j, feature d) carries
// G = (dK̃[j][d], dṼ[j][d]) from the last step down: dS[b][h][c] = G entering chunk c's last step (from the later
// ones); step t ≥ w adds query t's (de_{t,j} q_t[d], p_{t,j} do_t[d]), then G ×= α_{s,j} (token s = t − w's update).
template <class MP>
__global__ void nha_slot_dscan_kernel(float *dS, NhaArgs a, const MP *dout, const float *al, const float *P, const float *E) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x, bh = idx / NHA_HD / a.m;
    if (bh >= (size_t)a.B * a.heads) return;
    const int T = a.T, m = a.m, w = a.w, Nc = T / NATSL_CHUNK, d = (int)(idx % NHA_HD), j = (int)(idx / NHA_HD % m);
    const int b = (int)(bh / a.heads), h = (int)(bh % a.heads);
    const size_t HM = (size_t)a.heads * m, SZ = 2 * (size_t)m * NHA_HD, hj = (size_t)h * m + j;
    const MP *q = (const MP *)a.q + h * NHA_HD + d, *dO = dout + h * NHA_HD + d;
    float gk = 0.f, gv = 0.f;
    for (int c = Nc - 1; c >= 0; c--) {
        float *dst = dS + (bh * Nc + c) * SZ + (size_t)j * NHA_HD + d;
        dst[0] = gk;
        dst[(size_t)m * NHA_HD] = gv;
        const int i0 = w - c * NATSL_CHUNK > 0 ? w - c * NATSL_CHUNK : 0; // steps t ≥ w only
        #pragma unroll 16
        for (int i = NATSL_CHUNK - 1; i >= i0; i--) {
            const size_t bt = (size_t)b * T + c * NATSL_CHUNK + i, bs = bt - w;
            const float aa = al[bs * HM + hj];
            gk = aa * fmaf(E[bt * HM + hj], ld(q + bt * a.ldqkv), gk);
            gv = aa * fmaf(P[bt * HM + hj], ld(dO + bt * a.heads * NHA_HD), gv);
        }
    }
}
// Backward, the tokens entering the slots (15.3e-f), the chunk's steps in reverse from G = dS[b][h][c]: step t ≥ w adds
// query t's (de q_t, p do_t) to G; dα_{s,j} = Σ_d dK̃ (K̃_{t−1} − k_s) + dṼ (Ṽ_{t−1} − v_s) (a warp's sum, into
// shared memory); then G ×= α_s. After the chunk, dz_s = dα α_s (1 − σ(z_s))/τ for the tile (written: token s enters
// at one step only). The block's slot tiles (NHA_J slots, a warp each) one after the other over the chunk's rows
// staged once in shared memory (q, do, the entering k, v: [64][64] each) and the tile's α, de, p, dα ([64][NHA_J]
// each). The states before each step: the chunk replayed once with a checkpoint every NHA_G steps (shared memory,
// each thread its own), then each group's NHA_G states replayed into registers. Shared memory: 104 KiB.
static const size_t NHA_DZ_SMEM =
    (4 * 64 * NHA_HD + (NATSL_CHUNK / NHA_G) * 4 * NHA_J * 32 + 4 * 64 * NHA_J) * sizeof(float);
template <class MP>
__global__ void __launch_bounds__(NHA_J * 32, 2) nha_slot_dz_kernel(float *dz, NhaArgs a, const MP *dout,
                                                                  const float *al, const float *slots, const float *dS,
                                                                  const float *P, const float *E) {
    extern __shared__ float sm[];
    const int nt = NHA_J * 32, tid = threadIdx.x;
    float *qs = sm, *gs = qs + 64 * NHA_HD, *ks = gs + 64 * NHA_HD, *vs = ks + 64 * NHA_HD;
    float *ck = vs + 64 * NHA_HD, *as = ck + (NATSL_CHUNK / NHA_G) * 4 * nt, *es = as + 64 * NHA_J, *ps = es + 64 * NHA_J;
    float *ds = ps + 64 * NHA_J;
    NhaTile p = nha_tile(a, 0);
    const int w = a.w, i0 = w - p.t0 > 0 ? w - p.t0 : 0; // steps t0 + i, i ≥ i0 take tokens
    if (i0 >= 64) return; // (uniform over the block)
    const size_t SZ = 2 * (size_t)a.m * NHA_HD;
    nha_rows_load(qs, (const MP *)a.q + p.h * NHA_HD, p.bT + p.t0, 0, a.ldqkv, i0);
    nha_rows_load(gs, dout + p.h * NHA_HD, p.bT + p.t0, 0, a.heads * NHA_HD, i0);
    nha_rows_load(ks, (const MP *)a.k + p.h * NHA_HD, p.bT + p.t0, w, a.ldqkv, i0);
    nha_rows_load(vs, (const MP *)a.v + p.h * NHA_HD, p.bT + p.t0, w, a.ldqkv, i0);
    for (int jt = 0; jt * NHA_J < a.m; jt++) {
        p = nha_tile(a, jt);
        __syncthreads(); // the last tile's readers are done
        for (int x = tid; x < 64 * NHA_J; x += nt) {
            const int i = x / NHA_J, j = jt * NHA_J + x % NHA_J;
            const bool on = i >= i0 && j < a.m;
            const size_t bt = p.bT + p.t0 + i, hj = (size_t)p.h * a.m + j;
            as[x] = on ? al[(bt - w) * p.HM + hj] : 1.f;
            es[x] = on ? E[bt * p.HM + hj] : 0.f;
            ps[x] = on ? P[bt * p.HM + hj] : 0.f;
        }
        __syncthreads();
        const int l = p.lane, wi = p.wi;
        NhaSlot S = nha_slot_load(slots + (size_t)blockIdx.x * SZ, p, a.m);
        for (int g = 0; g < NATSL_CHUNK / NHA_G; g++) {
            float *c4 = ck + (size_t)g * 4 * nt + tid;
            c4[0] = S.k0; c4[nt] = S.k1; c4[2 * nt] = S.v0; c4[3 * nt] = S.v1;
            #pragma unroll
            for (int i = g * NHA_G; i < (g + 1) * NHA_G; i++) nha_slot_step(S, nha_slot_in(as, ks, vs, i, wi, l));
        }
        NhaSlot G = nha_slot_load(dS + (size_t)blockIdx.x * SZ, p, a.m);
        for (int g = NATSL_CHUNK / NHA_G - 1; g >= 0; g--) {
            const int ig = g * NHA_G;
            NhaIn in[NHA_G];
            NhaSlot Sp[NHA_G]; // Sp[i]: the state before step t0 + ig + i
            #pragma unroll
            for (int i = 0; i < NHA_G; i++) in[i] = nha_slot_in(as, ks, vs, ig + i, wi, l);
            const float *c4 = ck + (size_t)g * 4 * nt + tid;
            Sp[0].k0 = c4[0]; Sp[0].k1 = c4[nt]; Sp[0].v0 = c4[2 * nt]; Sp[0].v1 = c4[3 * nt];
            #pragma unroll
            for (int i = 0; i + 1 < NHA_G; i++) {
                Sp[i + 1] = Sp[i];
                nha_slot_step(Sp[i + 1], in[i]);
            }
            #pragma unroll
            for (int i = NHA_G - 1; i >= 0; i--) {
                const int r = ig + i;
                if (r < i0) continue;
                const NhaIn &x = in[i];
                const float e = es[r * NHA_J + wi], pj = ps[r * NHA_J + wi], *qr = qs + r * NHA_HD, *gr = gs + r * NHA_HD;
                G.k0 = fmaf(e, qr[l], G.k0); G.k1 = fmaf(e, qr[l + 32], G.k1);
                G.v0 = fmaf(pj, gr[l], G.v0); G.v1 = fmaf(pj, gr[l + 32], G.v1);
                const float da = warp_sum(G.k0 * (Sp[i].k0 - x.k0) + G.k1 * (Sp[i].k1 - x.k1) + G.v0 * (Sp[i].v0 - x.v0) +
                                          G.v1 * (Sp[i].v1 - x.v1));
                if (l == 0) ds[r * NHA_J + wi] = da;
                G.k0 *= x.a; G.k1 *= x.a; G.v0 *= x.a; G.v1 *= x.a;
            }
        }
        __syncthreads();
        for (int x = tid; x < 64 * NHA_J; x += nt) {
            const int i = x / NHA_J, j = jt * NHA_J + x % NHA_J;
            if (i < i0 || j >= a.m) continue;
            const size_t iz = (p.bT + p.t0 + i - w) * p.HM + (size_t)p.h * a.m + j;
            dz[iz] = ds[x] * as[x] * (1.f - sigmoidf_(a.z[iz])) / (float)NHA_TAU;
        }
    }
}
#undef NHA_AT

static const size_t NHA_WIN_FWD_SMEM = 4 * 64 * NHA_TP * sizeof(float);
static const size_t NHA_WIN_DQ_SMEM = 5 * 64 * NHA_TP * sizeof(float);
static const size_t NHA_WIN_DKV_SMEM = (6 * 64 * NHA_TP + 2 * 64) * sizeof(float);

// out [B*T][heads·64] (MP), lse [B][heads][T], slots [B][heads][Nc][2][m][64]: the scan, then (when a query reads the
// slots, w < T) the slots' scores, the window kernel (softmax, lse, o's window part), the slots' part of o.
template <class MP> static void nha_forward_mp(MP *out, float *lse, float *slots, const NhaArgs *a) {
    const NhaWs ws = nha_workspace(a);
    const size_t BTHM = (size_t)a->B * a->T * a->heads * a->m, nscan = (size_t)a->B * a->heads * a->m * NHA_HD;
    const int blocks = a->B * a->heads * (a->T / NATSL_CHUNK), slots_on = a->w < a->T;
    if (slots_on) nha_alpha_kernel<<<(unsigned)CEIL_DIV(BTHM, 256), 256>>>(ws.al, a->z, BTHM);
    nha_slot_scan_kernel<MP><<<(unsigned)CEIL_DIV(nscan, 128), 128>>>(slots, *a, ws.al);
    if (slots_on) {
        smem_attr(nha_slot_dot_kernel<MP>, NHA_DOT_SMEM);
        nha_slot_dot_kernel<MP><<<blocks, NHA_JS, NHA_DOT_SMEM>>>(ws.E, *a, (const MP *)a->q, a->ldqkv, ws.al, slots, 0, 0,
                                                                  lse, NULL);
    }
    smem_attr(nha_window_forward_kernel<MP>, NHA_WIN_FWD_SMEM);
    nha_window_forward_kernel<MP><<<blocks, NHA_WIN_THREADS, NHA_WIN_FWD_SMEM>>>(out, ws.O, lse, ws.E, *a, slots_on);
    if (slots_on) {
        smem_attr(nha_slot_mix_kernel<MP, MP>, NHA_MIX_SMEM);
        nha_slot_mix_kernel<MP, MP><<<blocks, NHA_HD, NHA_MIX_SMEM>>>(out, ws.O, a->heads * NHA_HD, *a, (const MP *)a->v,
                                                                      ws.al, slots, 1, ws.E);
    }
    CUDA_CHECK(cudaGetLastError());
}
static void nha_forward(real *out, real *lse, real *slots, const NhaArgs *a) {
    PROF_OP();
    if (g_bf16) nha_forward_mp((__nv_bfloat16 *)out, lse, slots, a);
    else nha_forward_mp(out, lse, slots, a);
}
// WRITES dq, dk, dv (strides as q, k, v), dqr, dkr (as qr, kr) and dz (as z): dq, dk, dz zeroed, Δ; the window's part
// (dq̂; dk̂ and dv); then, when a query reads the slots, per tile the slots' p, de and dq; the reverse scan of dK̃, dṼ;
// per tile dz, dk and dv's rest.
template <class MP>
static void nha_backward_mp(real *dq, real *dk, real *dv, real *dqr, real *dkr, real *dz, const MP *dout, const MP *out,
                            const real *lse, const real *slots, const NhaArgs *a) {
    const NhaWs ws = nha_workspace(a);
    const int BT = a->B * a->T, HM = a->heads * a->m, blocks = a->B * a->heads * (a->T / NATSL_CHUNK);
    const int slots_on = a->w < a->T;
    const size_t BTHM = (size_t)BT * HM, nscan = (size_t)a->B * a->heads * a->m * NHA_HD;
    nha_zero_kernel<<<BT, 256>>>(dq, a->ldqkv, a->heads * NHA_HD);
    nha_zero_kernel<<<BT, 256>>>(dk, a->ldqkv, a->heads * NHA_HD);
    nha_zero_kernel<<<BT, 256>>>(dz, HM, HM);
    nha_delta_kernel<MP><<<(unsigned)CEIL_DIV((size_t)BT * a->heads * 32, 256), 256>>>(ws.Dt, dout, out, a->B, a->T, a->heads);
    smem_attr(nha_window_dq_kernel<MP>, NHA_WIN_DQ_SMEM);
    nha_window_dq_kernel<MP><<<blocks, NHA_WIN_THREADS, NHA_WIN_DQ_SMEM>>>(dqr, *a, dout, lse, ws.Dt);
    smem_attr(nha_window_dkv_kernel<MP>, NHA_WIN_DKV_SMEM);
    nha_window_dkv_kernel<MP><<<blocks, NHA_WIN_THREADS, NHA_WIN_DKV_SMEM>>>(dkr, dv, *a, dout, lse, ws.Dt);
    if (slots_on) {
        nha_alpha_kernel<<<(unsigned)CEIL_DIV(BTHM, 256), 256>>>(ws.al, a->z, BTHM);
        smem_attr(nha_slot_dot_kernel<MP>, NHA_DOT_SMEM);
        nha_slot_dot_kernel<MP><<<blocks, NHA_JS, NHA_DOT_SMEM>>>(ws.P, *a, (const MP *)a->q, a->ldqkv, ws.al, slots, 0, 1,
                                                                  lse, NULL);
        nha_slot_dot_kernel<MP><<<blocks, NHA_JS, NHA_DOT_SMEM>>>(ws.E, *a, dout, a->heads * NHA_HD, ws.al, slots, 1, 2,
                                                                  ws.Dt, ws.P);
        smem_attr(nha_slot_mix_kernel<MP, float>, NHA_MIX_SMEM);
        nha_slot_mix_kernel<MP, float><<<blocks, NHA_HD, NHA_MIX_SMEM>>>(dq, dq, a->ldqkv, *a, (const MP *)a->k, ws.al,
                                                                         slots, 0, ws.E);
        nha_slot_dscan_kernel<MP><<<(unsigned)CEIL_DIV(nscan, 128), 128>>>(ws.dS, *a, dout, ws.al, ws.P, ws.E);
        smem_attr(nha_slot_dz_kernel<MP>, NHA_DZ_SMEM);
        nha_slot_dz_kernel<MP><<<blocks, NHA_J * 32, NHA_DZ_SMEM>>>(dz, *a, dout, ws.al, slots, ws.dS, ws.P, ws.E);
        smem_attr(nha_slot_dmix_kernel<MP>, NHA_MIX_SMEM);
        nha_slot_dmix_kernel<MP><<<blocks, NHA_HD, NHA_MIX_SMEM>>>(dk, *a, (const MP *)a->q, a->ldqkv, ws.al, ws.dS, 0, ws.E);
        nha_slot_dmix_kernel<MP><<<blocks, NHA_HD, NHA_MIX_SMEM>>>(dv, *a, dout, a->heads * NHA_HD, ws.al, ws.dS, 1, ws.P);
    }
    CUDA_CHECK(cudaGetLastError());
}
static void nha_backward(real *dq, real *dk, real *dv, real *dqr, real *dkr, real *dz, const real *dout, const real *out,
                         const real *lse, const real *slots, const NhaArgs *a) {
    PROF_OP();
    if (g_bf16)
        nha_backward_mp(dq, dk, dv, dqr, dkr, dz, (const __nv_bfloat16 *)dout, (const __nv_bfloat16 *)out, lse, slots, a);
    else nha_backward_mp(dq, dk, dv, dqr, dkr, dz, dout, out, lse, slots, a);
}
// dst[i][j] += src[i][j], j < n (fp32): the rotation's gradient into the q, k columns of d proj
__global__ void add_columns_kernel(float *dst, int ldd, const float *src, int lds, int n) {
    const size_t i = blockIdx.x;
    for (int j = threadIdx.x; j < n; j += blockDim.x) dst[i * ldd + j] += src[i * lds + j];
}

// The layer, as train_natsl.c's: proj = x W_qkvᵀ (q | k | v, not rotated), qk_rot = RoPE(q | k), z = x W_αᵀ, o = NHA,
// out = res + o W_oᵀ; proj, qk_rot and o in the matmul precision.
static void nha_layer_forward(const Config *c, LayerActs *a, const LayerParams *p, real *out, const real *res, int B,
                              int T, int l, int ops_kept) {
    int BT = B * T, D = c->D, heads = cfg_attn_heads(c);
    size_t es = g_bf16 ? 2 : 4;
    NhaArgs op = nha_layer_op_args(c, a, l, B, T, g_bf16);
    matmul_forward(a->proj, a->xn, p->wqkv, BT, D, 3 * D, 1, NULL);
    CUDA_CHECK(cudaMemcpy2D(a->qk_rot, 2 * D * es, a->proj, 3 * D * es, 2 * D * es, BT, cudaMemcpyDeviceToDevice));
    rope_forward(a->qk_rot, BT, T, 2 * heads, NATSL_ATTN_HEAD, 2 * D, 1);
    matmul_forward(a->alpha, a->xn, p->walpha, BT, D, heads * c->nha_m, 0, NULL);
    if (!ops_kept) nha_forward(a->att_out, a->lse, a->slots, &op);
    if (!ops_kept) matmul_forward(out, a->att_out, p->wo, BT, D, D, res != NULL, res);
}
static void nha_layer_backward(const Config *c, real *dx, const real *dout, LayerActs *d, LayerParams *gp,
                               const LayerActs *a, const LayerParams *p, int B, int T, int l) {
    int BT = B * T, D = c->D, heads = cfg_attn_heads(c), HM = heads * c->nha_m;
    NhaArgs op = nha_layer_op_args(c, a, l, B, T, g_bf16);
    matmul_backward(d->att_out, gp->wo, dout, a->att_out, p->wo, BT, D, D, DINP_WRITE_MP);
    nha_backward(d->q, d->k, d->v, d->qk_rot, d->qk_rot + D, d->alpha, d->att_out, a->att_out, a->lse, a->slots, &op);
    rope_backward(d->qk_rot, BT, T, 2 * heads, NATSL_ATTN_HEAD, 2 * D, NULL, 0);
    add_columns_kernel<<<BT, 256>>>(d->proj, 3 * D, d->qk_rot, 2 * D, 2 * D);
    CUDA_CHECK(cudaGetLastError());
    matmul_backward(dx, gp->wqkv, operand(d->proj, (size_t)BT * 3 * D, OPERAND_DOUT), a->xn, p->wqkv, BT, D, 3 * D,
                    DINP_WRITE);
    matmul_backward(dx, gp->walpha, operand(d->alpha, (size_t)BT * HM, OPERAND_DOUT), a->xn, p->walpha, BT, D, HM, DINP_ADD);
}

// ---- N: the NAtS-L layer (§5) --------------------------------------------------------------------------
// As train_natsl.c: router mask Ã (§5.2); softmax op on RMSNorm'd (+RoPE) qa, ka and V; GDN op on q̂, k̂, V, both
// driven by Ã (§5.3, §5.4); ω from Q (§5.1); the fused gated norm (§5.6); out = res + y W_oᵀ.
#ifdef TESTING
static const real *g_bench_rmask = NULL; // benchmarks (dev/bench_gpu.cu): a fixed routing mask for every N layer
#endif
// noise, tau: ST-Gumbel routing (§7.2; noise NULL = off)
static void natsl_layer_forward(const Config *c, LayerActs *a, const LayerParams *p, real *out, const real *res, int B,
                                int T, int relaxed, int ops_kept, const real *noise, real tau) {
    int BT = B * T, K = cfg_K(c), Ha = c->Ha, dka = cfg_dka(c);
    AttnArgs att = natsl_attn_args(c, a, B, T);
    GdnArgs gdn = natsl_gdn_args(c, a, B, T);
    GatedNormArgs norm = natsl_norm_args(c, a, p->n1, p->n2, B, T);
    gdn_inputs_forward(c, a, p, B, T, 1);
    router_forward(a->rmask, a->rpi, a->rlogits, a->pool, a->xn, p->wr, B, T, c->D, c->H, relaxed, noise, tau);
#ifdef TESTING
    if (g_bench_rmask) // benchmark-only: replace the router's decisions by a fixed mask [B][Nc][H][2]
        CUDA_CHECK(cudaMemcpyAsync(a->rmask, g_bench_rmask, (size_t)B * (T / CH) * c->H * 2 * sizeof(real), cudaMemcpyDeviceToDevice));
#endif
    rmsnorm_forward(a->qa, a->qa_rstd, a->q, p->qn, BT, Ha, dka, K, K, 1, 1);
    rmsnorm_forward(a->ka, a->ka_rstd, a->k, p->kn, BT, Ha, dka, K, K, 1, 1);
    if (c->rope) { rope_forward(a->qa, BT, T, Ha, dka, K, 1); rope_forward(a->ka, BT, T, Ha, dka, K, 1); }
    matmul_forward(a->omega_raw, a->q, p->wow, BT, K, 2 * Ha, 0, NULL);
    pair_softmax_forward(a->omega, a->omega_raw, (size_t)BT * Ha);
    if (!ops_kept) {
        attention_forward(a->att_out, a->lse, &att);
        gdn_op_forward(a->gdn_out, a->state, &gdn);
    }
    gated_norm_forward(a->y, a->norm_rstd, &norm);
    if (!ops_kept) matmul_forward(out, a->y, p->wo, BT, cfg_Vt(c), c->D, res != NULL, res);
}
// The softmax op's backward writes dV and dA[...,0]; the GDN op's then adds its part to dV and writes dA[...,1]:
// together the router gradient dÃ [B][Nc][H][2] (§6.3, §6.4). dpi, tau: the §7 terms (router_backward).
static void natsl_layer_backward(const Config *c, real *dx, const real *dout, LayerActs *d, LayerParams *gp,
                                 const LayerActs *a, const LayerParams *p, int B, int T, int no_router_grad,
                                 const real *dpi, real tau) {
    int BT = B * T, K = cfg_K(c), Ha = c->Ha, dka = cfg_dka(c);
    AttnArgs att = natsl_attn_args(c, a, B, T);
    GdnArgs gdn = natsl_gdn_args(c, a, B, T);
    GatedNormArgs norm = natsl_norm_args(c, a, p->n1, p->n2, B, T);
    matmul_backward(d->y, gp->wo, dout, a->y, p->wo, BT, cfg_Vt(c), c->D, DINP_WRITE_MP);
    gated_norm_backward(d->gdn_out, gp->n1, d->att_out, gp->n2, d->omega, d->gate, d->y, a->norm_rstd, &norm);
    attention_backward(d->qa, d->ka, d->v, d->rmask, d->att_out, a->att_out, a->lse, &att);
    // dQ, dK: the GDN op's backward writes them (the L2 norm's folded in), ω's and the softmax planes' RMSNorms add
    gdn_op_backward(d->q, d->k, d->v, d->g, d->beta, d->rmask, d->gdn_out, a->state, &gdn);
    pair_softmax_backward(d->omega_raw, d->omega, a->omega, (size_t)BT * Ha);
    matmul_backward(d->q, gp->wow, operand(d->omega_raw, (size_t)BT * 2 * Ha, OPERAND_DOUT), a->q, p->wow, BT, K, 2 * Ha,
                    DINP_ADD);
    if (c->rope) { rope_backward(d->qa, BT, T, Ha, dka, K, NULL, 0); rope_backward(d->ka, BT, T, Ha, dka, K, NULL, 0); }
    rmsnorm_backward(d->q, gp->qn, d->qa, a->q, p->qn, a->qa_rstd, BT, Ha, dka, K, K, 1, 0, 0);
    rmsnorm_backward(d->k, gp->kn, d->ka, a->k, p->kn, a->ka_rstd, BT, Ha, dka, K, K, 1, 0, 0);
    gdn_inputs_backward(c, dx, d, gp, a, p, B, T, gdn.grads_mp); // writes dx, the router adds its part
    if (!no_router_grad)
        router_backward(dx, gp->wr, d->pool, d->rlogits, d->rmask, a->rpi, a->pool, p->wr, B, T, c->D, c->H, dpi, tau);
}

// ---- S: layer-level selection (§7.3) ----------------------------------------------------------------------
// As train_natsl.c: the A mixer (its own W_qkv_a, W_o_a) into sel_out's first plane, the G mixer into its second,
// out = res + the one the gate chose. (The relaxed mode of the CPU tests does not exist here.)
static void select_layer_forward(const Config *c, LayerActs *a, const LayerParams *p, real *out, const real *res,
                                 int B, int T, const SelGate *g, int ops_kept) {
    size_t n = (size_t)B * T * c->D;
    LayerActs aa = select_attn_acts(c, a, B, T, g_bf16);
    LayerParams pa = select_attn_params(p);
    attention_layer_forward(c, &aa, &pa, a->sel_out, NULL, B, T, ops_kept);
    gdn_layer_forward(c, a, p, a->sel_out + n, NULL, B, T, ops_kept);
    if (ops_kept) return;
    if (res) residual_add(out, a->sel_out + (g->a ? 0 : n), res, n);
    else CUDA_CHECK(cudaMemcpyAsync(out, a->sel_out + (g->a ? 0 : n), n * sizeof(real), cudaMemcpyDeviceToDevice));
}
// (7.3d): ∂L/∂y_A = ⟨dout, A(x)⟩ + dpen, ∂L/∂y_G = ⟨dout, G(x)⟩ (two host reads), to s_sel through sel_grad (none
// with gate_grad = 0); the chosen mixer's backward gets dout, the other none.
static void select_layer_backward(const Config *c, real *dx, const real *dout, LayerActs *d, LayerParams *gp,
                                  const LayerActs *a, const LayerParams *p, int B, int T, const SelGate *g,
                                  double dpen, int gate_grad) {
    size_t n = (size_t)B * T * c->D;
    if (gate_grad) {
        double dya = dpen + device_dot(dout, a->sel_out, n, 1), dyg = device_dot(dout, a->sel_out + n, n, 1);
        add_scalar_kernel<<<1, 1>>>(gp->s_sel, sel_grad(g, dya, dyg));
        CUDA_CHECK(cudaGetLastError());
    }
    if (g->a) {
        LayerActs aa = select_attn_acts(c, a, B, T, g_bf16), dd = select_attn_acts(c, d, B, T, 0);
        LayerParams pa = select_attn_params(p), ga = select_attn_params(gp);
        attention_layer_backward(c, dx, dout, &dd, &ga, &aa, &pa, B, T);
    } else gdn_layer_backward(c, dx, dout, d, gp, a, p, B, T);
}

// ---- §7: the router's auxiliary terms need the statistics of the whole forward pass, an S layer's gate its
// s_sel (common/model_routing.inc)
static void router_aux_forward(Model *M, int B, int T);
static SelGate select_gate(const Model *M, int l);
static void grads_ready(Model *M, int k); // several GPUs: bucket k's gradients are final (appendix F)
// This micro-batch's Gumbel noise for layer l (an N layer), or NULL when ST-Gumbel routing is off in this pass
static real *router_noise(Model *M, int l, int B, int T) {
    if (!M->rb.noise) return NULL;
    return M->gnoise + (size_t)natsl_layer_index(&M->cfg, l) * B * (T / CH) * M->cfg.H * 2;
}

// ---- the whole model (§2, (2.1a-f)) --------------------------------------------------------------------------------
// Layer l from its input h^l = la[l].res up to the MLP's gate and up projections gu: everything its backward
// pass reads (model_forward adds SwiGLU and the down projection; swiglu_backward forms the hidden hmid again for
// W_down's weight gradient; model_backward reruns this under recompute, with ops_kept = 1 at level 1, which kept the
// GDN/softmax op outputs and r = h + mixer output: neither the ops nor the output projection and the residual add
// rerun).
static void block_forward(Model *M, int l, int B, int T, int ops_kept) {
    const Config *c = &M->cfg;
    int BT = B * T, D = c->D;
    LayerActs *a = &M->la[l];
    const LayerParams *p = &M->p.layer[l];
    rmsnorm_forward(a->xn, a->rstd1, a->res, p->ln_mix, BT, 1, D, D, D, 1, 1);
    if (c->pattern[l] == 'G') gdn_layer_forward(c, a, p, a->r, a->res, B, T, ops_kept);
    else if (c->pattern[l] == 'A') attention_layer_forward(c, a, p, a->r, a->res, B, T, ops_kept);
    else if (c->pattern[l] == 'H') nha_layer_forward(c, a, p, a->r, a->res, B, T, l, ops_kept);
    else if (c->pattern[l] == 'S') {
        M->rb.sel[l] = select_gate(M, l);
        select_layer_forward(c, a, p, a->r, a->res, B, T, &M->rb.sel[l], ops_kept);
    } else natsl_layer_forward(c, a, p, a->r, a->res, B, T, M->router_relaxed, ops_kept, router_noise(M, l, B, T),
                             M->rb.noise ? M->rb.tau : 1);
    rmsnorm_forward(a->xn2, a->rstd2, a->r, p->ln_mlp, BT, 1, D, D, D, 1, 1);
    matmul_forward(a->gu, a->xn2, p->wgu, BT, D, 2 * c->F, 1, NULL);
}

// Layer l's SHARED activations (common/layout.h), whose one copy all layers share, that its backward reads, as
// block_forward computed them: the first RMSNorm's output and the conv's V. (The MLP's hidden hmid, SHARED too, comes
// out of swiglu_backward again, which reads what it is made of anyway, before W_down's weight gradient needs it.)
static void block_rebuild(Model *M, int l, int B, int T) {
    PROF_OP(); // its ops count here, not under their own names
    const Config *c = &M->cfg;
    int BT = B * T, D = c->D;
    char kind = c->pattern[l];
    LayerActs *a = &M->la[l];
    const LayerParams *p = &M->p.layer[l];
    rmsnorm_forward(a->xn, a->rstd1, a->res, p->ln_mix, BT, 1, D, D, D, 1, 1);
    if (kind != 'A' && kind != 'H') { // G, N, S (an S layer's G mixer)
        int K = cfg_K(c), Vt = cfg_Vt(c);
        conv_silu_forward(a->v, a->proj, 2 * K + Vt, 2 * K, p->conv, B, T, Vt);
    }
}

// inputs/targets are host arrays (copied to the device here). With targets, M->mean_loss is set (one
// device-to-host read of a double).
static void model_forward(Model *M, const int *inputs, const int *targets, int B, int T) {
    const Config *c = &M->cfg;
    int BT = B * T, D = c->D;
    if (B > M->B || (size_t)B * T > (size_t)M->B * M->T || T % CH) {
        fprintf(stderr, "error: model_forward(B=%d, T=%d) exceeds the activations (B=%d, T=%d)\n", B, T, M->B, M->T);
        exit(1);
    }
    if (M->acts_bf16 != g_bf16) {
        fprintf(stderr, "error: model_forward: the activations were laid out for the other precision\n");
        exit(1);
    }
    CUDA_CHECK(cudaMemcpy(M->inputs, inputs, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice));
    if (targets) CUDA_CHECK(cudaMemcpy(M->targets, targets, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice));
    weights_use(M);
    encoder_forward(M->la[0].res, M->inputs, M->p.wte, BT, D);
    for (int l = 0; l < c->L; l++) {
        real *out = l + 1 < c->L ? M->la[l + 1].res : M->hL;
        block_forward(M, l, B, T, 0);
        if (M->layer_done) M->layer_done(M->layer_done_ctx, l, B, T);
        swiglu_forward(M->la[l].hmid, M->la[l].gu, BT, c->F);
        matmul_forward(out, M->la[l].hmid, M->p.layer[l].wdown, BT, c->F, D, 1, M->la[l].r);
    }
    rmsnorm_forward(M->lnf, M->lnf_rstd, M->hL, M->p.ln_f, BT, 1, D, D, D, 1, 1);
    matmul_forward(M->logits, M->lnf, M->p.head, BT, D, c->Vp, 1, NULL);
    if (targets) {
        if (M->fused_dloss > 0)
            crossentropy_forward_backward(M->losses, M->lse, M->logits, M->targets, M->fused_dloss, BT, c->V, c->Vp);
        else crossentropy_forward(M->losses, M->lse, M->logits, M->targets, BT, c->V, c->Vp);
        M->nscored = targets_scored(targets, BT); // (13.1a): the mean over the scored targets
        mean_loss_kernel<<<1, 1024>>>(M->d_scalar, M->losses, BT, M->nscored);
        CUDA_CHECK(cudaGetLastError());
        double s;
        CUDA_CHECK(cudaMemcpy(&s, M->d_scalar, sizeof(double), cudaMemcpyDeviceToHost));
        M->mean_loss = (real)s;
        router_aux_forward(M, B, T);
    }
}

// Lays out the gradient scratch for the MLP's (mlp = ACTS_GRADS_MLP) or the mixer's (0) backward of one layer of
// the given kind, the fields the backward pass accumulates into zeroed (the ones their producer writes whole come
// last and are left as they are: common/layout.h). The two share the scratch: the mixer's takes it over once the
// MLP's gradients are spent.
static void grads_scratch(Model *M, LayerActs *d, char kind, int B, int T, int mlp) {
    ProfScope prof("memset of the gradient scratch");
    int mp = M->acts_bf16 ? ACTS_BF16 : 0;
    size_t acc = layer_acts_layout(d, &M->cfg, kind, B, T, NULL, ACTS_GRADS_ACC | mlp | mp);
    CUDA_CHECK(cudaMemsetAsync(M->dacts, 0, acc * sizeof(real)));
    layer_acts_layout(d, &M->cfg, kind, B, T, M->dacts, ACTS_GRADS | mlp | mp);
}

// Accumulates the gradient of dloss_scale · Σ losses into M->grads (dloss_scale = 1/(n·accum·ranks) in training, n the
// micro-batch's scored targets M->nscored: B·T, or its answers under -w 1, (13.1b)). Uses the batch that the last
// model_forward copied to the device.
static void model_backward(Model *M, const int *inputs, const int *targets, int B, int T, real dloss_scale) {
    (void)inputs; (void)targets;
    const Config *c = &M->cfg;
    int BT = B * T, D = c->D;
    weights_use(M);
    real dpi[2] = {(real)(M->rb.dpi[0] * dloss_scale * M->nscored),
                   (real)(M->rb.dpi[1] * dloss_scale * M->nscored)};         // §7 terms, weighted as the mean loss
    double dpen_sel = M->rb.sel_lambda / c->L * dloss_scale * M->nscored; // (7.3e), likewise
    if (M->fused_dloss <= 0) crossentropy_backward(M->logits, M->lse, M->targets, dloss_scale, BT, c->V, c->Vp);
    else if (M->fused_dloss != dloss_scale) {
        fprintf(stderr, "error: model_backward: dloss %g, but the forward wrote the logits' gradient for %g\n",
                (double)dloss_scale, (double)M->fused_dloss);
        exit(1);
    }
    matmul_backward(M->dlnf, M->g.head, M->logits, M->lnf, M->p.head, BT, D, c->Vp, DINP_WRITE_MP);
    CUDA_CHECK(cudaMemsetAsync(M->dres, 0, mp_reals((size_t)BT * D) * sizeof(real)));
    rmsnorm_backward(M->dres, M->g.ln_f, M->dlnf, M->hL, M->p.ln_f, M->lnf_rstd, BT, 1, D, D, D, 1, 1, 1);
    grads_ready(M, c->L + 1); // several GPUs: the classifier's and the final norm's gradients are final (§9.4)
    for (int l = c->L - 1; l >= 0; l--) { // M->dres holds dL/dh^{l+1}, then dL/dr, then dL/dh^l
        LayerActs *a = &M->la[l], d;
        const LayerParams *p = &M->p.layer[l];
        LayerParams *gp = &M->g.layer[l];
        if (l < c->L - 1) { // as train_natsl.c: L−1's activations are still in the shared scratch
            if (M->recompute) block_forward(M, l, B, T, M->recompute == 1);
            else block_rebuild(M, l, B, T);
        }
        grads_scratch(M, &d, c->pattern[l], B, T, ACTS_GRADS_MLP);
        matmul_backward(d.hmid, NULL, M->dres, NULL, p->wdown, BT, c->F, D, DINP_WRITE_MP);
        swiglu_backward(d.gu, a->hmid, d.hmid, a->gu, BT, c->F); // and hmid, as the forward computed it
        matmul_backward(NULL, gp->wdown, M->dres, a->hmid, NULL, BT, c->F, D, DINP_WRITE_MP);
        matmul_backward(d.xn2, gp->wgu, d.gu, a->xn2, p->wgu, BT, D, 2 * c->F, DINP_WRITE_MP);
        rmsnorm_backward(M->dres, gp->ln_mlp, d.xn2, a->r, p->ln_mlp, a->rstd2, BT, 1, D, D, D, 1, 1, 1);
        grads_scratch(M, &d, c->pattern[l], B, T, 0);
        if (c->pattern[l] == 'G') gdn_layer_backward(c, d.xn, M->dres, &d, gp, a, p, B, T);
        else if (c->pattern[l] == 'A') attention_layer_backward(c, d.xn, M->dres, &d, gp, a, p, B, T);
        else if (c->pattern[l] == 'H') nha_layer_backward(c, d.xn, M->dres, &d, gp, a, p, B, T, l);
        else if (c->pattern[l] == 'S')
            select_layer_backward(c, d.xn, M->dres, &d, gp, a, p, B, T, &M->rb.sel[l], dpen_sel, !M->router_no_grad);
        else natsl_layer_backward(c, d.xn, M->dres, &d, gp, a, p, B, T, M->router_no_grad,
                                  budget_aux_on(&M->rb) ? dpi : NULL, M->rb.noise ? M->rb.tau : 1);
        rmsnorm_backward(M->dres, gp->ln_mix, d.xn, a->res, p->ln_mix, a->rstd1, BT, 1, D, D, D, 1, 0, 1);
        grads_ready(M, l + 1);
    }
    encoder_backward(M->g.wte, M->dres, inputs, BT, D);
    grads_ready(M, 0);
}

// Host float32 copies of a device buffer and back (checkpoints, logs, the -D dump)
static float *to_float32(const real *dev, size_t n) {
    float *f = (float *)xcalloc(n, sizeof(float));
    CUDA_CHECK(cudaMemcpy(f, dev, n * sizeof(float), cudaMemcpyDeviceToHost));
    return f;
}
static double *to_float64(const real *dev, size_t n) {
    float *f = to_float32(dev, n);
    double *d = (double *)xcalloc(n, sizeof(double));
    for (size_t i = 0; i < n; i++) d[i] = f[i];
    free(f);
    return d;
}
static void from_float32(real *dev, const float *f, size_t n) {
    CUDA_CHECK(cudaMemcpy(dev, f, n * sizeof(float), cudaMemcpyHostToDevice));
}
static float *logits_to_float32(const Model *M, size_t row, size_t nrows) { // rows of Vp values
    size_t n = nrows * M->cfg.Vp;
    if (!g_bf16) return to_float32(M->logits + row * M->cfg.Vp, n);
    __nv_bfloat16 *h = (__nv_bfloat16 *)xcalloc(n, sizeof(__nv_bfloat16));
    CUDA_CHECK(cudaMemcpy(h, (const __nv_bfloat16 *)M->logits + row * M->cfg.Vp, n * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
    float *f = (float *)xcalloc(n, sizeof(float));
    for (size_t i = 0; i < n; i++) f[i] = __bfloat162float(h[i]);
    free(h);
    return f;
}
// The last forward pass's per-position losses and hits (crossentropy_hits) of its BT targets, on the host (§13.1)
static void token_scores(const Model *M, const int *targets, int BT, float *loss, unsigned char *hit) {
    CUDA_CHECK(cudaMemcpy(loss, M->losses, (size_t)BT * sizeof(float), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(M->targets, targets, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice));
    crossentropy_hits(M->hits, M->logits, M->targets, BT, M->cfg.V, M->cfg.Vp);
    CUDA_CHECK(cudaMemcpy(hit, M->hits, BT, cudaMemcpyDeviceToHost));
}

// Shared with train_natsl.c, parts of this program written on the functions above (their tops list what they take
// from it): the routing statistics, noise and S gates (softmax_fraction, router_aux_forward, select_gate, ...) and
// the checkpoint files (save_model, load_model, save_state, load_state).
#include "common/model_routing.inc"
#include "common/model_io.inc"

// ================================================================================================
// 3b. Decoding with the cache (doc/model.md §14): train_natsl.c's section 3b on the device. B sequences one token at a
// time, each at its own position with its own routing, equal to the forward pass over the same tokens (within the
// precision's bars, §8). Per layer kind the cache holds (one flat device buffer, laid out by decoder_layout):
//   G: the GDN state S_c [H][d_k][d_v], the current chunk's run Z (both fp32) and its Σg, the short conv's last inputs;
//   A: the keys (RoPE'd) and values of every token so far;
//   N: what G holds, the router's running sum of x over the current chunk, the current chunk's softmax keys and
//      values, and per head group the keys and values of the completed chunks the router sent to softmax;
//   S: what its frozen choice (the noise-free gate, §7.3) holds;
//   H: the slots (fp32) and the last min(w, Tmax) tokens' keys (RoPE'd and not), values and gate logits (§15).
// Keys, values and conv inputs are stored in the matmul precision, as the forward stores them; every value is rounded
// where the forward's producer rounds it (bf16 mode: the products' outputs, q̂, k̂, qa, ka, the chunk-start state).
// A step launches the same kernels at every position: the positions are read from device memory, and a chunk's first
// and last token are tested in the kernels. Per G or N layer: RMSNorm; one product x [W_qkv; W_g; W_ab]ᵀ (their
// weights lie one after another; fp32 out, rounded where read); decoder_inputs_kernel; N: decoder_attention_kernel;
// decoder_gdn_kernel; the gated norm and W_o; then the MLP (an H layer: x W_qkvᵀ, x W_αᵀ, decoder_nha_kernel, W_o).
// At a chunk's last token the router decides for the chunk from its mean (5.2a-d): routed to GDN, the run commits into
// the state and the keys and values are dropped; routed to softmax, they are kept and the state only decays (5.4h).
// ================================================================================================

#define DEC_GRAPHS 96 // the most CUDA graphs a decoder holds (decoder_graph)
typedef struct {
    float *S, *Z, *gsum; // G, N: state S_c and run Z [B][H][d_k][d_v], Σg of the current chunk [B][H]
    real *tail;          // G, N: the conv inputs of the last 3 tokens [B][3][2K+Vt]
    float *psum;         // N: Σ x over the current chunk [B][D] (the router's pool, (5.2a))
    real *ck, *cv;       // N: the current chunk's ka [B][64][K], va [B][64][Vt];  A: keys, values [B][Tmax][D]
    real *kk, *kv;       // N: the kept chunks' keys [B][H][Nc][64][d_k], values [B][H][Nc][64][d_v], per head
                         //   group (its G softmax heads' columns), in chunk order
    float *hs, *hz;      // H: slots [B][heads][2][m][64]; the ring's gate logits [B][ring][heads·m] (nha_ring tokens)
    real *hk;            // H: the ring's keys, not rotated [B][ring][D] (its RoPE'd keys, values: ck, cv)
} DecLayer;              // (tail, ck, cv, kk, kv, hk in the matmul precision)

// An H layer's window ring (§15): the last min(w, Tmax) tokens (token t at t mod ring)
static int nha_ring(const Config *c, int l, int Tmax) { return c->nha_w[l] < Tmax ? c->nha_w[l] : Tmax; }

typedef struct {
    Model *M;
    int B, Tmax, Ncmax;
    char kind[NATSL_MAX_LAYERS + 1];  // the pattern with every S resolved to the A or G its gate chooses
    LayerParams p[NATSL_MAX_LAYERS];  // the parameters each layer runs with (an S layer's: its chosen mixer's)
    DecLayer dl[NATSL_MAX_LAYERS];
    real *cache;                      // the flat cache, cache_size reals (decoder_layout)
    size_t cache_size;
    real *work, *zrows;               // one step's activations (decoder_work_layout), the rows' logits [B][Vp]
    LayerActs w;
    float *logits;                    // [B][Vp]: each sequence's latest logits
    float *part;                      // decoder_attention_kernel's partial sums over key blocks
    int *pos, *rows;                  // host [B]: tokens each sequence has consumed; a step's sequences | tokens [2][B]
    int *d_pos, *d_rows;              // their device copies
    int *nkept;                       // [L][B][H]: softmax chunks an N layer keeps, per sequence and head group
    signed char *route;               // [L][B][Nc][H]: the router's decision per completed chunk: 1 softmax, 0 GDN
    struct { int R, kb; cudaGraphExec_t exec; } graph[DEC_GRAPHS]; // the step captured, per rows R and key blocks kb
    int ngraph, graph_moves;          // graphs held; g_scratch_moves when they were captured
} Decoder;                            // (pointers: device, but pos, rows and graph)

// The cache's fields, carved out of base (NULL: only count); returns its size in reals.
static size_t decoder_layout(Decoder *d, real *base) {
    const Config *c = &d->M->cfg;
    size_t B = d->B, D = c->D, K = cfg_K(c), Vt = cfg_Vt(c), H = c->H, W = 2 * K + Vt, Nc = d->Ncmax, off = 0;
    size_t KV = (size_t)c->dk * c->dv;
#define TAKE(field, n) do { L->field = base ? base + off : NULL; off += ((size_t)(n) + 63) / 64 * 64; } while (0)
    for (int l = 0; l < c->L; l++) {
        DecLayer *L = &d->dl[l];
        memset(L, 0, sizeof(*L));
        if (d->kind[l] != 'A' && d->kind[l] != 'H') {
            TAKE(S, B * H * KV); TAKE(Z, B * H * KV); TAKE(gsum, B * H); TAKE(tail, mp_reals(B * 3 * W));
        }
        if (d->kind[l] == 'N') {
            TAKE(psum, B * D); TAKE(ck, mp_reals(B * CH * K)); TAKE(cv, mp_reals(B * CH * Vt));
            TAKE(kk, mp_reals(B * H * Nc * CH * c->dk)); TAKE(kv, mp_reals(B * H * Nc * CH * c->dv));
        }
        if (d->kind[l] == 'A') { TAKE(ck, mp_reals(B * d->Tmax * D)); TAKE(cv, mp_reals(B * d->Tmax * D)); }
        if (d->kind[l] == 'H') {
            size_t ring = nha_ring(c, l, d->Tmax), HM = (size_t)cfg_attn_heads(c) * c->nha_m;
            TAKE(hs, B * HM * 2 * NATSL_ATTN_HEAD); TAKE(ck, mp_reals(B * ring * D)); TAKE(cv, mp_reals(B * ring * D));
            TAKE(hk, mp_reals(B * ring * D)); TAKE(hz, B * ring * HM);
        }
    }
#undef TAKE
    return off;
}

// One step's activations for R rows (one token of each advancing sequence), in the fields of LayerActs with B·T = R
// (in the forward's precisions: mp_reals where it stores a field in the matmul precision); carved out of base (NULL:
// only count). proj: a G or N layer's x [W_qkv; W_g; W_ab]ᵀ in fp32, an A or H layer's x W_qkvᵀ in the matmul
// precision; alpha: an H layer's gate logits x W_αᵀ (fp32).
static size_t decoder_work_layout(LayerActs *w, const Config *c, int R, real *base) {
    size_t D = c->D, K = cfg_K(c), Vt = cfg_Vt(c), H = c->H, Ha = c->Ha, off = 0;
    size_t P = std::max((size_t)gdn_in_cols(c), 3 * D), A = std::max(Vt, D), NR = std::max(H, Ha);
    memset(w, 0, sizeof(*w));
#define TAKE(field, n) do { w->field = base ? base + off : NULL; off += ((size_t)(n) + 63) / 64 * 64; } while (0)
    TAKE(res, mp_reals(R * D)); TAKE(xn, mp_reals(R * D)); TAKE(rstd1, R); TAKE(proj, R * P);
    TAKE(qk, mp_reals(2 * R * K)); TAKE(v, mp_reals(R * Vt)); TAKE(gate, mp_reals(R * Vt)); TAKE(g, R * H);
    TAKE(beta, R * H); TAKE(qk_hat, mp_reals(2 * R * K)); TAKE(qka, mp_reals(2 * R * K)); TAKE(omega, R * 2 * Ha);
    TAKE(gdn_out, mp_reals(R * Vt)); TAKE(att_out, mp_reals(R * A)); TAKE(norm_rstd, 2 * R * NR);
    TAKE(y, mp_reals(R * Vt)); TAKE(r, mp_reals(R * D)); TAKE(xn2, mp_reals(R * D)); TAKE(rstd2, R);
    TAKE(gu, mp_reals(R * 2 * c->F)); TAKE(hmid, mp_reals(R * c->F));
    TAKE(alpha, R * cfg_attn_heads(c) * c->nha_m); // H: x W_αᵀ (0 without H layers)
#undef TAKE
    if (base) {
        size_t plane = mp_reals(R * K);
        w->q = w->qk; w->k = w->qk + plane; w->q_hat = w->qk_hat; w->k_hat = w->qk_hat + plane;
        w->qa = w->qka; w->ka = w->qka + plane;
    }
    return off;
}

// ---- the step's kernels ---------------------------------------------------------------------------------------------
// A layer's cache and one step's operands as the kernels take them; MP: the matmul precision's type.
template <class MP> struct DecArgs {
    const int *seq, *pos;          // the step's sequences [R]; every sequence's position [B]
    int B, Tmax, Ncmax, D, K, Vt, H, dk, dv, Ha, dka, dva, natsl, st16;
    const float *proj;             // G, N: x [W_qkv; W_g; W_ab]ᵀ [R][gdn_in_cols] (fp32)
    MP *aproj;                     // A: x W_qkvᵀ [R][3D]
    const MP *xn;                  // the normalized input [R][D]
    const float *conv, *a_log, *dt_bias, *qn, *kn, *wow, *wr; // the layer's parameters
    const float2 *rope;            // RoPE's (cos, sin) table [Tmax][head/2] (NULL: none)
    MP *q, *k, *v, *gate, *qh, *kh, *qa, *ka, *gdn_out, *att_out; // the step's activations [R][...]
    float *g, *beta, *omega;
    float *S, *Z, *gsum, *psum;    // the layer's cache (DecLayer)
    MP *tail, *ck, *cv, *kk, *kv;
    int *nkept;                    // the layer's [B][H]
    signed char *route;            // the layer's [B][Nc][H]
    float *part;                   // decoder_attention_kernel's partial sums
    int m, win, ring;              // H: slots per head, window w, the ring's tokens min(w, Tmax)
    const float *z;                // H: the step's gate logits x W_αᵀ [R][heads·m]
    float *hs, *hz;                // H: the layer's slots and the ring's gate logits (DecLayer)
    MP *hk;                        // H: the ring's keys, not rotated
};
template <class MP> static DecArgs<MP> decoder_args(Decoder *d, int l) {
    const Config *c = &d->M->cfg;
    const LayerParams *p = &d->p[l];
    const DecLayer *L = &d->dl[l];
    const LayerActs *w = &d->w;
    DecArgs<MP> a;
    memset(&a, 0, sizeof(a));
    a.seq = d->d_rows; a.pos = d->d_pos;
    a.B = d->B; a.Tmax = d->Tmax; a.Ncmax = d->Ncmax; a.D = c->D; a.K = cfg_K(c); a.Vt = cfg_Vt(c); a.H = c->H;
    a.dk = c->dk; a.dv = c->dv; a.Ha = c->Ha; a.dka = cfg_dka(c); a.dva = cfg_dva(c); a.natsl = d->kind[l] == 'N';
    a.st16 = g_bf16;
    a.proj = w->proj; a.aproj = (MP *)w->proj; a.xn = (const MP *)w->xn;
    a.conv = p->conv; a.a_log = p->a_log; a.dt_bias = p->dt_bias; a.qn = p->qn; a.kn = p->kn; a.wow = p->wow; a.wr = p->wr;
    if (d->kind[l] == 'A' || d->kind[l] == 'H') a.rope = rope_table(d->Tmax, NATSL_ATTN_HEAD);
    else if (a.natsl && c->rope) a.rope = rope_table(d->Tmax, a.dka);
    a.q = (MP *)w->q; a.k = (MP *)w->k; a.v = (MP *)w->v; a.gate = (MP *)w->gate; a.qh = (MP *)w->q_hat;
    a.kh = (MP *)w->k_hat; a.qa = (MP *)w->qa; a.ka = (MP *)w->ka; a.gdn_out = (MP *)w->gdn_out;
    a.att_out = (MP *)w->att_out; a.g = w->g; a.beta = w->beta; a.omega = w->omega;
    a.S = L->S; a.Z = L->Z; a.gsum = L->gsum; a.psum = L->psum;
    a.tail = (MP *)L->tail; a.ck = (MP *)L->ck; a.cv = (MP *)L->cv; a.kk = (MP *)L->kk; a.kv = (MP *)L->kv;
    a.nkept = d->nkept + (size_t)l * d->B * c->H;
    a.route = d->route + (size_t)l * d->B * d->Ncmax * c->H;
    a.part = d->part;
    if (d->kind[l] == 'H') {
        a.m = c->nha_m; a.win = c->nha_w[l]; a.ring = nha_ring(c, l, d->Tmax);
        a.z = w->alpha; a.hs = L->hs; a.hz = L->hz; a.hk = (MP *)L->hk;
    }
    return a;
}
// f(MP()) with MP the matmul precision's type
template <class F> static void with_precision(F f) {
    if (g_bf16) f(bf16());
    else f(float());
}

// G and N layers, a block per (row, head h): the short conv (3.1c) of the head's q, k and v channels over the 3
// cached inputs and this one, SiLU; its gate columns; β, g (3.1f-g) and Σg; q̂, k̂ (3.1e). N also: the head group's
// qa, ka (5.1c-d, RoPE at the position, §5.8), which with va join the current chunk; block h = 0: the router's
// running sum, and at the chunk's last token its mean, ℓ, π and every group's decision (5.2a-d, ties to softmax),
// counted in nkept when softmax. The forward's roundings: proj and the router's pool and W_r as their products take
// them, q, k, v, q̂, k̂, qa, ka as stored. Dynamic shared memory: D floats (N).
template <class MP> __global__ void __launch_bounds__(128) decoder_inputs_kernel(DecArgs<MP> a) {
    extern __shared__ float pool[];
    const int r = blockIdx.x, h = blockIdx.y, b = a.seq[r], t = a.pos[b], tau = t % CH;
    const int K = a.K, Vt = a.Vt, H = a.H, W = 2 * K + Vt, dk = a.dk, dv = a.dv;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
    const float *pr = a.proj + (size_t)r * (W + Vt + 2 * H);
    MP *tl = a.tail + (size_t)b * 3 * W;
    for (int u = threadIdx.x; u < 2 * dk + dv; u += blockDim.x) {
        const int ch = u < dk ? h * dk + u : u < 2 * dk ? K + h * dk + u - dk : 2 * K + h * dv + u - 2 * dk;
        const float *w = a.conv + ch * NATSL_CONV;
        const float x0 = ld(tl + ch), x1 = ld(tl + W + ch), x2 = ld(tl + 2 * W + ch), x3 = mp_round<MP>(pr[ch]);
        float pre = 0.f;
        pre += w[0] * x0; pre += w[1] * x1; pre += w[2] * x2; pre += w[3] * x3;
        MP *y = ch < K ? a.q + (size_t)r * K + ch : ch < 2 * K ? a.k + (size_t)r * K + ch - K : a.v + (size_t)r * Vt + ch - 2 * K;
        st(y, siluf_(pre));
        st(tl + ch, x1); st(tl + W + ch, x2); st(tl + 2 * W + ch, x3);
    }
    for (int i = threadIdx.x; i < dv; i += blockDim.x) st(a.gate + (size_t)r * Vt + h * dv + i, pr[W + h * dv + i]);
    if (threadIdx.x == 0) {
        const size_t rh = (size_t)r * H + h, bh = (size_t)b * H + h;
        const float g = -expf(a.a_log[h]) * softplusf_(pr[W + Vt + h] + a.dt_bias[h]);
        a.g[rh] = g;
        a.beta[rh] = sigmoidf_(pr[W + Vt + H + h]);
        a.gsum[bh] = (tau == 0 ? 0.f : a.gsum[bh]) + g;
    }
    __syncthreads();
    if (warp < 2) { // q̂, k̂ of head h: L2N (0.4)
        const size_t at = (size_t)r * K + h * dk;
        const MP *x = (warp ? a.k : a.q) + at;
        MP *y = (warp ? a.kh : a.qh) + at;
        float ss = 0.f;
        for (int i = lane; i < dk; i += 32) { const float v = ld(x + i); ss += v * v; }
        const float s = 1.f / sqrtf(warp_sum(ss) + NATSL_EPS);
        for (int i = lane; i < dk; i += 32) st(y + i, ld(x + i) * s);
    }
    if (!a.natsl) return;
    const int dka = a.dka, half = dka / 2, G = a.Ha / H;
    for (int hh = warp; hh < 2 * G; hh += nw) { // the group's qa, ka: RMSNorm per head (0.3), RoPE (4.2a-b)
        const int j = h * G + hh % G, isk = hh >= G;
        const size_t at = (size_t)r * K + j * dka;
        const MP *x = (isk ? a.k : a.q) + at;
        MP *y = (isk ? a.ka : a.qa) + at;
        const float *w = isk ? a.kn : a.qn;
        float ss = 0.f;
        for (int i = lane; i < dka; i += 32) { const float v = ld(x + i); ss += v * v; }
        const float s = 1.f / sqrtf(warp_sum(ss) / dka + NATSL_EPS);
        for (int i = lane; i < dka; i += 32) st(y + i, ld(x + i) * s * w[i]);
        __syncwarp();
        if (a.rope) {
            const float2 *cs = a.rope + (size_t)t * half;
            for (int i = lane; i < half; i += 32) {
                const float x1 = ld(y + i), x2 = ld(y + i + half);
                st(y + i, x1 * cs[i].x - x2 * cs[i].y);
                st(y + i + half, x2 * cs[i].x + x1 * cs[i].y);
            }
            __syncwarp();
        }
        if (isk) for (int i = lane; i < dka; i += 32) a.ck[((size_t)b * CH + tau) * K + j * dka + i] = y[i];
    }
    for (int i = threadIdx.x; i < dv; i += blockDim.x)
        a.cv[((size_t)b * CH + tau) * Vt + h * dv + i] = a.v[(size_t)r * Vt + h * dv + i];
    if (h) return;
    for (int i = threadIdx.x; i < a.D; i += blockDim.x) { // the router's sum, in token order as the forward's pool
        const float s = (tau == 0 ? 0.f : a.psum[(size_t)b * a.D + i]) + ld(a.xn + (size_t)r * a.D + i);
        a.psum[(size_t)b * a.D + i] = s;
        pool[i] = mp_round<MP>(s / CH);
    }
    if (tau != CH - 1) return;
    __syncthreads();
    for (int n = warp; n < H; n += nw) {
        const float *w0 = a.wr + (size_t)2 * n * a.D, *w1 = w0 + a.D;
        float l0 = 0.f, l1 = 0.f;
        for (int i = lane; i < a.D; i += 32) { l0 += pool[i] * mp_round<MP>(w0[i]); l1 += pool[i] * mp_round<MP>(w1[i]); }
        l0 = warp_sum(l0); l1 = warp_sum(l1);
        if (lane == 0) {
            const float p0 = 1.f / (1.f + expf(l1 - l0));
            const int soft = p0 >= 1.f - p0;
            a.route[((size_t)b * a.Ncmax + t / CH) * H + n] = (signed char)soft;
            if (soft) a.nkept[(size_t)b * H + n]++;
        }
    }
}

// A layers, a block per row: q and k RoPE'd at the position (4.2a-b), k and v appended to the cache.
template <class MP> __global__ void decoder_attn_inputs_kernel(DecArgs<MP> a) {
    const int r = blockIdx.x, b = a.seq[r], t = a.pos[b], D = a.D, half = NATSL_ATTN_HEAD / 2;
    MP *x = a.aproj + (size_t)r * 3 * D;
    const float2 *cs = a.rope + (size_t)t * half;
    for (int u = threadIdx.x; u < D; u += blockDim.x) { // the pairs (i, i + 32) of the q and k heads
        MP *y = x + (u / half) * NATSL_ATTN_HEAD;
        const int i = u % half;
        const float x1 = ld(y + i), x2 = ld(y + i + half);
        st(y + i, x1 * cs[i].x - x2 * cs[i].y);
        st(y + i + half, x2 * cs[i].x + x1 * cs[i].y);
    }
    __syncthreads();
    MP *kc = a.ck + ((size_t)b * a.Tmax + t) * D, *vc = a.cv + ((size_t)b * a.Tmax + t) * D;
    for (int i = threadIdx.x; i < D; i += blockDim.x) { kc[i] = x[D + i]; vc[i] = x[2 * D + i]; }
}

// One query per (row, head) over its keys (5.3a-d, 4.1c), split over gridDim.y blocks of keys (flash-decoding): N,
// head j of group n: n's kept chunks, then the current chunk up to the token (and the first block: the head's ω
// (5.1e), the pair softmax of Q W_owᵀ, W_ow rounded as the product takes it); A: every cached token. A warp takes
// every DEC_ATT_WARPS-th tile of 32 keys of the block's range, a key a lane (its score against the query in shared
// memory), then the tile's values a row at a time, with a running max and sum; the block merges its warps, and writes
// the output (one block of keys) or its (max, sum, Σ p·v) for decoder_attention_combine_kernel.
#define DEC_ATT_WARPS 4
#define DEC_ATT_MAXV 4    // value heads of up to 32·4 = 128 (query and key heads of up to 64)
#define DEC_ATT_SPLITS 64 // the most key blocks
#define DEC_ATT_PART (2 + 32 * DEC_ATT_MAXV)
template <class MP> __global__ void __launch_bounds__(32 * DEC_ATT_WARPS) decoder_attention_kernel(DecArgs<MP> a) {
    __shared__ float qs[64], sz[2], sm[DEC_ATT_WARPS][2], sacc[DEC_ATT_WARPS][32 * DEC_ATT_MAXV];
    const int heads = a.natsl ? a.Ha : a.D / NATSL_ATTN_HEAD;
    const int r = blockIdx.x / heads, j = blockIdx.x % heads, b = a.seq[r], t = a.pos[b], tau = t % CH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const MP *q, *k0 = NULL, *v0 = NULL, *k1, *v1;
    MP *out;
    int ldk0 = 0, ldv0 = 0, ldk1, ldv1, n0 = 0, n1, hk, hv;
    if (a.natsl) {
        const int G = a.Ha / a.H, n = j / G, jj = j % G;
        const size_t slot = ((size_t)b * a.H + n) * a.Ncmax * CH;
        int kept = a.nkept[(size_t)b * a.H + n];
        if (tau == CH - 1 && a.route[((size_t)b * a.Ncmax + t / CH) * a.H + n] == 1) kept--; // (it is the current one)
        hk = a.dka; hv = a.dva;
        q = a.qa + (size_t)r * a.K + j * hk;
        k0 = a.kk + slot * a.dk + jj * hk; ldk0 = a.dk; v0 = a.kv + slot * a.dv + jj * hv; ldv0 = a.dv; n0 = kept * CH;
        k1 = a.ck + (size_t)b * CH * a.K + j * hk; ldk1 = a.K; v1 = a.cv + (size_t)b * CH * a.Vt + j * hv; ldv1 = a.Vt;
        n1 = tau + 1;
        out = a.att_out + (size_t)r * a.Vt + j * hv;
    } else {
        hk = hv = NATSL_ATTN_HEAD;
        q = a.aproj + (size_t)r * 3 * a.D + j * hk;
        k1 = a.ck + (size_t)b * a.Tmax * a.D + j * hk; v1 = a.cv + (size_t)b * a.Tmax * a.D + j * hv;
        ldk1 = ldv1 = a.D;
        n1 = t + 1;
        out = a.att_out + (size_t)r * a.D + j * hv;
    }
    const int n = n0 + n1, per = CEIL_DIV(n, (int)gridDim.y), lo = blockIdx.y * per, hi = min(n, lo + per);
    const float scale = 1.f / sqrtf((float)hk);
    for (int i = threadIdx.x; i < hk; i += blockDim.x) qs[i] = ld(q + i);
    if (a.natsl && blockIdx.y == 0 && warp < 2) { // ω's logit pair: warp 0 the first, warp 1 the second
        const MP *x = a.q + (size_t)r * a.K;
        const float *w = a.wow + (size_t)(2 * j + warp) * a.K;
        float z = 0.f;
        for (int i = lane; i < a.K; i += 32) z += ld(x + i) * mp_round<MP>(w[i]);
        z = warp_sum(z);
        if (lane == 0) sz[warp] = z;
    }
    __syncthreads();
    if (a.natsl && blockIdx.y == 0 && threadIdx.x == 0) {
        const float p0 = 1.f / (1.f + expf(sz[1] - sz[0]));
        a.omega[(size_t)r * 2 * a.Ha + 2 * j] = p0;
        a.omega[(size_t)r * 2 * a.Ha + 2 * j + 1] = 1.f - p0;
    }
    float m = -INFINITY, l = 0.f, acc[DEC_ATT_MAXV];
    for (int c = 0; c < DEC_ATT_MAXV; c++) acc[c] = 0.f;
    for (int u0 = lo + 32 * warp; u0 < hi; u0 += 32 * DEC_ATT_WARPS) {
        const int u = u0 + lane, nt = min(32, hi - u0);
        float s = -INFINITY;
        if (u < hi) {
            const MP *kt = u < n0 ? k0 + (size_t)u * ldk0 : k1 + (size_t)(u - n0) * ldk1;
            float dot = 0.f;
#pragma unroll 8
            for (int i = 0; i < hk; i++) dot += qs[i] * ld(kt + i);
            s = dot * scale;
        }
        float mt = s;
        for (int o = 16; o > 0; o >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o));
        const float mn = fmaxf(m, mt), corr = expf(m - mn), p = u < hi ? expf(s - mn) : 0.f;
        l = l * corr + warp_sum(p);
        for (int c = 0; c < DEC_ATT_MAXV; c++) acc[c] *= corr;
        for (int kk = 0; kk < nt; kk++) { // the tile's values, row kk weighted by lane kk's p
            const float pk = __shfl_sync(0xffffffffu, p, kk);
            const int uk = u0 + kk;
            const MP *vt = uk < n0 ? v0 + (size_t)uk * ldv0 : v1 + (size_t)(uk - n0) * ldv1;
            for (int c = 0; c < DEC_ATT_MAXV; c++) if (lane + 32 * c < hv) acc[c] += pk * ld(vt + lane + 32 * c);
        }
        m = mn;
    }
    if (lane == 0) { sm[warp][0] = m; sm[warp][1] = l; }
    for (int c = 0; c < DEC_ATT_MAXV; c++) sacc[warp][lane + 32 * c] = acc[c];
    __syncthreads();
    if (warp) return;
    float M = -INFINITY, L = 0.f, o[DEC_ATT_MAXV];
    for (int w = 0; w < DEC_ATT_WARPS; w++) M = fmaxf(M, sm[w][0]);
    for (int c = 0; c < DEC_ATT_MAXV; c++) o[c] = 0.f;
    for (int w = 0; w < DEC_ATT_WARPS; w++) {
        const float e = sm[w][0] == -INFINITY ? 0.f : expf(sm[w][0] - M);
        L += e * sm[w][1];
        for (int c = 0; c < DEC_ATT_MAXV; c++) o[c] += e * sacc[w][lane + 32 * c];
    }
    if (gridDim.y == 1) {
        for (int c = 0; c < DEC_ATT_MAXV; c++) if (lane + 32 * c < hv) st(out + lane + 32 * c, o[c] / L);
        return;
    }
    float *pp = a.part + ((size_t)blockIdx.x * gridDim.y + blockIdx.y) * DEC_ATT_PART;
    if (lane == 0) { pp[0] = M; pp[1] = L; }
    for (int c = 0; c < DEC_ATT_MAXV; c++) pp[2 + lane + 32 * c] = o[c];
}
// The key blocks' partial sums merged: a warp per (row, head)
template <class MP> __global__ void decoder_attention_combine_kernel(DecArgs<MP> a, int splits) {
    const int heads = a.natsl ? a.Ha : a.D / NATSL_ATTN_HEAD, hv = a.natsl ? a.dva : NATSL_ATTN_HEAD;
    const int r = blockIdx.x / heads, j = blockIdx.x % heads, lane = threadIdx.x;
    const float *pp = a.part + (size_t)blockIdx.x * splits * DEC_ATT_PART;
    float M = -INFINITY, L = 0.f, o[DEC_ATT_MAXV];
    for (int s = 0; s < splits; s++) M = fmaxf(M, pp[s * DEC_ATT_PART]);
    for (int c = 0; c < DEC_ATT_MAXV; c++) o[c] = 0.f;
    for (int s = 0; s < splits; s++) {
        const float *p = pp + s * DEC_ATT_PART, e = p[0] == -INFINITY ? 0.f : expf(p[0] - M);
        L += e * p[1];
        for (int c = 0; c < DEC_ATT_MAXV; c++) o[c] += e * p[2 + lane + 32 * c];
    }
    MP *out = a.att_out + (size_t)r * (a.natsl ? a.Vt : a.D) + j * hv;
    for (int c = 0; c < DEC_ATT_MAXV; c++) if (lane + 32 * c < hv) st(out + lane + 32 * c, o[c] / L);
}
// Splits the keys of up to `keys` a query into blocks of at least 256 where the rows' heads fill fewer than eight
// blocks an SM
template <class MP> static void decoder_attention(const DecArgs<MP> &a, int R, int heads, int keys) {
    PROF_OP();
    const int splits = std::max(1, std::min({CEIL_DIV(keys, 256), CEIL_DIV(8 * num_sms(), R * heads), DEC_ATT_SPLITS}));
    decoder_attention_kernel<<<dim3(R * heads, splits), 32 * DEC_ATT_WARPS>>>(a);
    CUDA_CHECK(cudaGetLastError());
    if (splits == 1) return;
    decoder_attention_combine_kernel<<<R * heads, 32>>>(a, splits);
    CUDA_CHECK(cudaGetLastError());
}

// H layers (§15), a block of 64 threads per (row, head h), thread d owning feature d of the head: the token t − w
// leaving the window enters the slots (15.1b; its k, v, z from the ring, at w = 0 this token's), this token's k, v, z
// and RoPE'd k take its place in the ring (t mod ring), then one softmax over the slots (unrotated q; t ≥ w) and the
// window's RoPE'd keys lo … t (15.2a-c), in tiles of 64 scores with a running max and sum. The roundings are the
// forward's: proj as the product stores it, q̂ and k̂ as qk_rot, o as att_out; the slots and z in fp32.
template <class MP> __global__ void __launch_bounds__(NHA_HD) decoder_nha_kernel(DecArgs<MP> a) {
    __shared__ float qs[NHA_HD], qr[NHA_HD], e[NHA_HD];
    const int r = blockIdx.x, h = blockIdx.y, d = threadIdx.x, b = a.seq[r], t = a.pos[b];
    const int D = a.D, m = a.m, w = a.win, Wc = a.ring, HM = (D / NHA_HD) * m, half = NHA_HD / 2;
    const MP *x = a.aproj + (size_t)r * 3 * D + h * NHA_HD; // head h's q; its k at x + D, its v at x + 2D
    const float *z = a.z + (size_t)r * HM + (size_t)h * m;
    float *S = a.hs + ((size_t)b * (D / NHA_HD) + h) * 2 * m * NHA_HD; // K̃ [m][64], then Ṽ [m][64]
    const size_t slot = Wc ? (size_t)b * Wc + t % Wc : 0;          // the ring's place of tokens t − w and t
    const size_t at = slot * D + h * NHA_HD;
    if (t >= w) { // (15.1b)
        const float ks = Wc ? ld(a.hk + at + d) : ld(x + D + d), vs = Wc ? ld(a.cv + at + d) : ld(x + 2 * D + d);
        const float *zs = Wc ? a.hz + slot * HM + (size_t)h * m : z;
        for (int j = 0; j < m; j++) {
            const float al = nha_alpha(zs[j]);
            S[(size_t)j * NHA_HD + d] = al * S[(size_t)j * NHA_HD + d] + (1.f - al) * ks;
            S[(size_t)(m + j) * NHA_HD + d] = al * S[(size_t)(m + j) * NHA_HD + d] + (1.f - al) * vs;
        }
    }
    { // q̂, k̂: RoPE at t (4.2a-b), pairs (i, i + 32)
        const int i = d % half;
        const float2 cs = a.rope[(size_t)t * half + i];
        const float q1 = ld(x + i), q2 = ld(x + i + half), k1 = ld(x + D + i), k2 = ld(x + D + i + half);
        const float qrot = d < half ? q1 * cs.x - q2 * cs.y : q2 * cs.x + q1 * cs.y;
        const float krot = d < half ? k1 * cs.x - k2 * cs.y : k2 * cs.x + k1 * cs.y;
        qs[d] = ld(x + d);
        qr[d] = mp_round<MP>(qrot);
        __syncthreads(); // every thread has read the leaving token's gate logits
        if (Wc) {
            a.hk[at + d] = x[D + d];
            a.cv[at + d] = x[2 * D + d];
            st(a.ck + at + d, krot);
            for (int j = d; j < m; j += NHA_HD) a.hz[slot * HM + (size_t)h * m + j] = z[j];
        }
    }
    __syncthreads(); // the slots and the ring are written
    const int nslot = t >= w ? m : 0, lo = max(0, t - w + 1), n = nslot + t + 1 - lo;
    float mx = -INFINITY, l = 0.f, acc = 0.f;
    for (int i0 = 0; i0 < n; i0 += NHA_HD) { // (15.2a-c): score i0 + d, then the tile's values at feature d
        const int i = i0 + d, nt = min(NHA_HD, n - i0);
        if (i < n) {
            float s = 0.f;
            if (i < nslot) {
                const float *kj = S + (size_t)i * NHA_HD;
                for (int c = 0; c < NHA_HD; c++) s += qs[c] * kj[c];
            } else {
                const MP *kr = a.ck + ((size_t)b * Wc + (lo + i - nslot) % Wc) * D + h * NHA_HD;
                for (int c = 0; c < NHA_HD; c++) s += qr[c] * ld(kr + c);
            }
            e[d] = s * 0.125f;
        }
        __syncthreads();
        float mt = mx;
        for (int k = 0; k < nt; k++) mt = fmaxf(mt, e[k]);
        const float corr = expf(mx - mt);
        l *= corr;
        acc *= corr;
        for (int k = 0; k < nt; k++) {
            const int u = i0 + k;
            const float p = expf(e[k] - mt);
            const float v = u < nslot ? S[(size_t)(m + u) * NHA_HD + d]
                                      : ld(a.cv + ((size_t)b * Wc + (lo + u - nslot) % Wc) * D + h * NHA_HD + d);
            l += p;
            acc += p * v;
        }
        mx = mt;
        __syncthreads(); // before the next tile's scores overwrite e
    }
    st(a.att_out + (size_t)r * D + h * NHA_HD + d, acc / l);
}

// One GDN token step (14.1b-c) per (row, head): a block per (row, head, DEC_GDN_COLS value columns), a thread per
// column and per DEC_GDN_ROWS rows of the key dimension (the column's rows in registers; a warp reads 32 adjacent
// values of a state row), the sums over the key dimension finished across the parts in shared memory. At the chunk's
// first token the run starts from the state as stored (bf16 mode: rounded, (5.4h)); at its last the commit (14.2b):
// S ← (1 − m) Dec S + m (Z + Dec (S − s0)), m = 0 for a chunk routed to softmax, whose keys and values of head group h
// then go to the kept slot nkept − 1 (the blocks of (row, h) share the 64 tokens).
#define DEC_GDN_COLS 64
#define DEC_GDN_ROWS 64
#define DEC_GDN_MAXK 256 // key heads of up to 256: four parts
template <class MP>
__global__ void __launch_bounds__(DEC_GDN_COLS * DEC_GDN_MAXK / DEC_GDN_ROWS) decoder_gdn_kernel(DecArgs<MP> a) {
    __shared__ float ks[DEC_GDN_MAXK], qs[DEC_GDN_MAXK], red[DEC_GDN_MAXK / DEC_GDN_ROWS][DEC_GDN_COLS];
    const int r = blockIdx.x / a.H, h = blockIdx.x % a.H, b = a.seq[r], t = a.pos[b], tau = t % CH;
    const int col = threadIdx.x % DEC_GDN_COLS, part = threadIdx.x / DEC_GDN_COLS, parts = blockDim.x / DEC_GDN_COLS;
    const int j = blockIdx.y * DEC_GDN_COLS + col, dk = a.dk, dv = a.dv;
    const bool jok = j < dv;
    const size_t bh = (size_t)b * a.H + h, rh = (size_t)r * a.H + h, KV = (size_t)dk * dv;
    float *S = a.S + bh * KV, *Z = a.Z + bh * KV;
    const MP *qt = a.qh + (size_t)r * a.K + h * dk, *kt = a.kh + (size_t)r * a.K + h * dk;
    for (int i = threadIdx.x; i < dk; i += blockDim.x) { ks[i] = ld(kt + i); qs[i] = ld(qt + i); }
    __syncthreads();
    const float al = expf(a.g[rh]), bt = a.beta[rh], scale = 1.f / sqrtf((float)dk);
    float z[DEC_GDN_ROWS], kz = 0.f, o = 0.f;
#pragma unroll
    for (int rr = 0; rr < DEC_GDN_ROWS; rr++) {
        const int i = part * DEC_GDN_ROWS + rr;
        const bool ok = i < dk && jok;
        const float s0 = ok && tau == 0 ? S[(size_t)i * dv + j] : 0.f;
        z[rr] = !ok ? 0.f : tau == 0 ? (a.st16 ? mp_round<bf16>(s0) : s0) : Z[(size_t)i * dv + j];
        z[rr] *= al;
        if (ok) kz += ks[i] * z[rr];
    }
    red[part][col] = kz;
    __syncthreads();
    kz = 0.f;
    for (int p = 0; p < parts; p++) kz += red[p][col];
    const float vj = jok ? ld(a.v + (size_t)r * a.Vt + h * dv + j) : 0.f, u = bt * (vj - kz);
#pragma unroll
    for (int rr = 0; rr < DEC_GDN_ROWS; rr++) {
        const int i = part * DEC_GDN_ROWS + rr;
        if (i >= dk) continue;
        z[rr] += ks[i] * u;
        o += qs[i] * z[rr];
    }
    __syncthreads(); // (every thread has read red)
    red[part][col] = o;
    __syncthreads();
    if (part == 0 && jok) {
        o = 0.f;
        for (int p = 0; p < parts; p++) o += red[p][col];
        st(a.gdn_out + (size_t)r * a.Vt + h * dv + j, o * scale);
    }
    if (tau < CH - 1) {
#pragma unroll
        for (int rr = 0; rr < DEC_GDN_ROWS; rr++)
            if (part * DEC_GDN_ROWS + rr < dk && jok) Z[(size_t)(part * DEC_GDN_ROWS + rr) * dv + j] = z[rr];
        return;
    }
    const int soft = a.natsl && a.route[((size_t)b * a.Ncmax + t / CH) * a.H + h] == 1;
    const float mc = soft ? 0.f : 1.f, dec = expf(a.gsum[bh]);
#pragma unroll
    for (int rr = 0; rr < DEC_GDN_ROWS; rr++) {
        const int i = part * DEC_GDN_ROWS + rr;
        if (i >= dk || !jok) continue;
        const float s = S[(size_t)i * dv + j], s0 = a.st16 ? mp_round<bf16>(s) : s;
        S[(size_t)i * dv + j] = (1.f - mc) * dec * s + mc * (z[rr] + dec * (s - s0));
    }
    if (!soft) return;
    const size_t slot = (bh * a.Ncmax + a.nkept[bh] - 1) * CH;
    for (int tt = blockIdx.y; tt < CH; tt += gridDim.y) {
        const size_t src = (size_t)b * CH + tt;
        for (int i = threadIdx.x; i < dk; i += blockDim.x) a.kk[(slot + tt) * dk + i] = a.ck[src * a.K + h * dk + i];
        for (int i = threadIdx.x; i < dv; i += blockDim.x) a.kv[(slot + tt) * dv + i] = a.cv[src * a.Vt + h * dv + i];
    }
}

// out[R][OC] = x[R][C] Wᵀ (+ add), the step's products at up to DEC_GEMV_ROWS rows in bf16 mode (else matmul_forward):
// a warp per output column reads W's row once, 8 values a lane a load, for every row of x; fp32 sums. A step's cost is
// reading the weights, and this spreads the reads over every SM. out and add: bf16 where out_mp, else fp32 (as gemm's
// C); the same products as matmul_forward's up to the order of the fp32 sums.
#define DEC_GEMV_ROWS 8
template <int RMAX, class OUT>
__global__ void __launch_bounds__(256) decoder_gemv_kernel(OUT *out, const bf16 *x, const bf16 *W, const OUT *add,
                                                           int R, int C, int OC) {
    const int o = blockIdx.x * 8 + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (o >= OC) return;
    float acc[RMAX];
#pragma unroll
    for (int r = 0; r < RMAX; r++) acc[r] = 0.f;
    for (int i = lane * 8; i < C; i += 256) {
        const uint4 wv = *reinterpret_cast<const uint4 *>(W + (size_t)o * C + i);
        const bf16 *wb = reinterpret_cast<const bf16 *>(&wv);
#pragma unroll
        for (int r = 0; r < RMAX; r++) {
            if (r >= R) break;
            const uint4 xv = *reinterpret_cast<const uint4 *>(x + (size_t)r * C + i);
            const bf16 *xb = reinterpret_cast<const bf16 *>(&xv);
#pragma unroll
            for (int e = 0; e < 8; e++) acc[r] += __bfloat162float(xb[e]) * __bfloat162float(wb[e]);
        }
    }
#pragma unroll
    for (int r = 0; r < RMAX; r++) {
        if (r >= R) break;
        const float v = warp_sum(acc[r]);
        if (lane == 0) st(out + (size_t)r * OC + o, add ? v + ld(add + (size_t)r * OC + o) : v);
    }
}
static void decoder_matmul(real *out, const real *inp, const real *weight, int R, int C, int OC, int out_mp,
                           const real *add) {
    if (g_bf16 && R <= DEC_GEMV_ROWS && C % 8 == 0 && (uintptr_t)inp % 16 == 0) {
        const real *w = weight_operand(weight, (size_t)OC * C); // (the weights' copies start at 256-byte boundaries)
        if ((uintptr_t)w % 16 == 0) {
            PROF_OP();
            auto go = [&](auto rmax) {
                constexpr int RM = decltype(rmax)::value;
                const bf16 *x = (const bf16 *)inp, *wb = (const bf16 *)w;
                if (out_mp) decoder_gemv_kernel<RM><<<CEIL_DIV(OC, 8), 256>>>((bf16 *)out, x, wb, (const bf16 *)add, R, C, OC);
                else decoder_gemv_kernel<RM><<<CEIL_DIV(OC, 8), 256>>>(out, x, wb, add, R, C, OC);
            };
            if (R == 1) go(std::integral_constant<int, 1>());
            else if (R <= 4) go(std::integral_constant<int, 4>());
            else go(std::integral_constant<int, DEC_GEMV_ROWS>());
            CUDA_CHECK(cudaGetLastError());
            return;
        }
    }
    matmul_forward(out, inp, weight, R, C, OC, out_mp, add);
}

template <class MP> static void decoder_inputs(const DecArgs<MP> &a, int R) {
    PROF_OP();
    decoder_inputs_kernel<<<dim3(R, a.H), 128, a.natsl ? a.D * sizeof(float) : 0>>>(a);
    CUDA_CHECK(cudaGetLastError());
}
template <class MP> static void decoder_gdn(const DecArgs<MP> &a, int R) {
    PROF_OP();
    decoder_gdn_kernel<<<dim3(R * a.H, CEIL_DIV(a.dv, DEC_GDN_COLS)), DEC_GDN_COLS * CEIL_DIV(a.dk, DEC_GDN_ROWS)>>>(a);
    CUDA_CHECK(cudaGetLastError());
}
template <class MP> static void decoder_nha(const DecArgs<MP> &a, int R) {
    PROF_OP();
    decoder_nha_kernel<<<dim3(R, a.D / NHA_HD), NHA_HD>>>(a);
    CUDA_CHECK(cudaGetLastError());
}

// The rows' logits to their sequences' rows of d->logits (fp32); each sequence's position advances.
template <class MP> __global__ void decoder_logits_kernel(float *logits, int *pos, const MP *z, const int *seq, int Vp) {
    const int r = blockIdx.x, b = seq[r];
    for (int i = threadIdx.x; i < Vp; i += blockDim.x) logits[(size_t)b * Vp + i] = ld(z + (size_t)r * Vp + i);
    if (threadIdx.x == 0) pos[b]++;
}

// ---- the decoder ----------------------------------------------------------------------------------------------------
// Empties the cache: every sequence at position 0.
static void decoder_reset(Decoder *d) {
    const Config *c = &d->M->cfg;
    CUDA_CHECK(cudaMemset(d->cache, 0, d->cache_size * sizeof(real)));
    CUDA_CHECK(cudaMemset(d->d_pos, 0, d->B * sizeof(int)));
    CUDA_CHECK(cudaMemset(d->nkept, 0, (size_t)c->L * d->B * c->H * sizeof(int)));
    CUDA_CHECK(cudaMemset(d->route, -1, (size_t)c->L * d->B * d->Ncmax * c->H));
    CUDA_CHECK(cudaMemset(d->logits, 0, (size_t)d->B * c->Vp * sizeof(float)));
    memset(d->pos, 0, d->B * sizeof(int));
}

// A decoder for B sequences of up to Tmax tokens each. The S layers are frozen to their noise-free choice (§7.3).
static void decoder_init(Decoder *d, Model *M, int B, int Tmax) {
    const Config *c = &M->cfg;
    memset(d, 0, sizeof(*d));
    d->M = M; d->B = B; d->Tmax = Tmax; d->Ncmax = CEIL_DIV(Tmax, CH);
    for (int l = 0; l < c->L; l++) {
        d->kind[l] = c->pattern[l];
        d->p[l] = M->p.layer[l];
        if (c->pattern[l] != 'S') continue;
        double *s = to_float64(M->p.layer[l].s_sel, 1);
        d->kind[l] = sel_gate(*s, M->rb.kappa, NULL, 1).a ? 'A' : 'G';
        free(s);
        if (d->kind[l] == 'A') d->p[l] = select_attn_params(&M->p.layer[l]);
    }
    if (strchr(d->kind, 'N') && (cfg_dka(c) > 64 || cfg_dva(c) > 32 * DEC_ATT_MAXV))
        die("decoder_init: the decoder's attention takes query heads of up to 64 and value heads of up to 128");
    if (strpbrk(d->kind, "GN") && c->dk > DEC_GDN_MAXK) die("decoder_init: the decoder's GDN step takes key heads of up to 256");
    d->cache_size = decoder_layout(d, NULL);
    d->cache = (real *)xcudamalloc(d->cache_size * sizeof(real));
    decoder_layout(d, d->cache);
    d->work = (real *)xcudamalloc(decoder_work_layout(&d->w, c, B, NULL) * sizeof(real));
    d->zrows = (real *)xcudamalloc(mp_reals((size_t)B * c->Vp) * sizeof(real));
    d->logits = (float *)xcudamalloc((size_t)B * c->Vp * sizeof(float));
    size_t heads = std::max(c->Ha, cfg_attn_heads(c));
    d->part = (float *)xcudamalloc((size_t)B * heads * DEC_ATT_SPLITS * DEC_ATT_PART * sizeof(float));
    d->pos = (int *)xcalloc(B, sizeof(int));
    d->rows = (int *)xcalloc(2 * (size_t)B, sizeof(int));
    d->d_pos = (int *)xcudamalloc(B * sizeof(int));
    d->d_rows = (int *)xcudamalloc(2 * (size_t)B * sizeof(int));
    d->nkept = (int *)xcudamalloc((size_t)c->L * B * c->H * sizeof(int));
    d->route = (signed char *)xcudamalloc((size_t)c->L * B * d->Ncmax * c->H);
    decoder_reset(d);
}

// Drops the decoder's CUDA graphs
static void decoder_graphs_free(Decoder *d) {
    for (int i = 0; i < d->ngraph; i++) if (d->graph[i].exec) CUDA_CHECK(cudaGraphExecDestroy(d->graph[i].exec));
    d->ngraph = 0;
}

static void decoder_free(Decoder *d) {
    decoder_graphs_free(d);
    void *ps[] = {d->cache, d->work, d->zrows, d->logits, d->part, d->d_pos, d->d_rows, d->nkept, d->route};
    for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) CUDA_CHECK(cudaFree(ps[i]));
    free(d->pos); free(d->rows);
}

// G and N layers (§3, §5) on R rows (see the section's header); keys: the most any row's query attends.
static void decoder_gdn_layer(Decoder *d, int l, int R, int keys) {
    const Config *c = &d->M->cfg;
    const LayerParams *p = &d->p[l];
    LayerActs *w = &d->w;
    const int nats = d->kind[l] == 'N';
    decoder_matmul(w->proj, w->xn, p->wqkv, R, c->D, gdn_in_cols(c), 0, NULL);
    with_precision([&](auto z) {
        using MP = decltype(z);
        const DecArgs<MP> a = decoder_args<MP>(d, l);
        decoder_inputs(a, R);
        if (nats) decoder_attention(a, R, c->Ha, keys);
        decoder_gdn(a, R);
    });
    GatedNormArgs norm = nats ? natsl_norm_args(c, w, p->n1, p->n2, R, 1) : gdn_layer_norm_args(c, w, p->o_norm, R, 1);
    gated_norm_forward(w->y, w->norm_rstd, &norm);
    decoder_matmul(w->r, w->y, p->wo, R, cfg_Vt(c), c->D, 1, w->res);
}

// A layer (§4) on R rows: q, k RoPE'd at each sequence's position, k and v appended to the cache, causal attention
// over every cached token (4.1c).
static void decoder_attention_layer(Decoder *d, int l, int R, int keys) {
    const Config *c = &d->M->cfg;
    const LayerParams *p = &d->p[l];
    LayerActs *w = &d->w;
    int D = c->D;
    decoder_matmul(w->proj, w->xn, p->wqkv, R, D, 3 * D, 1, NULL);
    with_precision([&](auto z) {
        using MP = decltype(z);
        const DecArgs<MP> a = decoder_args<MP>(d, l);
        decoder_attn_inputs_kernel<<<R, 256>>>(a);
        CUDA_CHECK(cudaGetLastError());
        decoder_attention(a, R, cfg_attn_heads(c), keys);
    });
    decoder_matmul(w->r, w->att_out, p->wo, R, D, D, 1, w->res);
}

// H layer (§15) on R rows: x W_qkvᵀ (q | k | v, not rotated) and the gate logits x W_αᵀ, decoder_nha_kernel (the slots,
// the ring, the softmax over both), W_o.
static void decoder_nha_layer(Decoder *d, int l, int R) {
    const Config *c = &d->M->cfg;
    const LayerParams *p = &d->p[l];
    LayerActs *w = &d->w;
    int D = c->D;
    decoder_matmul(w->proj, w->xn, p->wqkv, R, D, 3 * D, 1, NULL);
    decoder_matmul(w->alpha, w->xn, p->walpha, R, D, cfg_attn_heads(c) * c->nha_m, 0, NULL);
    with_precision([&](auto z) {
        using MP = decltype(z);
        decoder_nha(decoder_args<MP>(d, l), R);
    });
    decoder_matmul(w->r, w->att_out, p->wo, R, D, D, 1, w->res);
}

// The step's kernels on R rows (d->d_rows: their sequences and tokens) whose queries attend at most `keys` keys: the
// whole model (2.1a-f); each row's logits land in d->logits and its sequence's position advances (on the device).
static void decoder_launch(Decoder *d, int R, int keys) {
    const Config *c = &d->M->cfg;
    const ParamPtrs *P = &d->M->p;
    int D = c->D, F = c->F;
    LayerActs *w = &d->w;
    encoder_forward(w->res, d->d_rows + d->B, P->wte, R, D);
    for (int l = 0; l < c->L; l++) {
        const LayerParams *p = &d->p[l];
        rmsnorm_forward(w->xn, w->rstd1, w->res, p->ln_mix, R, 1, D, D, D, 1, 1);
        if (d->kind[l] == 'A') decoder_attention_layer(d, l, R, keys);
        else if (d->kind[l] == 'H') decoder_nha_layer(d, l, R);
        else decoder_gdn_layer(d, l, R, keys);
        rmsnorm_forward(w->xn2, w->rstd2, w->r, p->ln_mlp, R, 1, D, D, D, 1, 1);
        decoder_matmul(w->gu, w->xn2, p->wgu, R, D, 2 * F, 1, NULL);
        swiglu_forward(w->hmid, w->gu, R, F);
        decoder_matmul(w->res, w->hmid, p->wdown, R, F, D, 1, w->r);
    }
    rmsnorm_forward(w->xn, w->rstd1, w->res, P->ln_f, R, 1, D, D, D, 1, 1);
    decoder_matmul(d->zrows, w->xn, P->head, R, D, c->Vp, 1, NULL);
    with_precision([&](auto z) {
        using MP = decltype(z);
        decoder_logits_kernel<<<R, 256>>>(d->logits, d->d_pos, (const MP *)d->zrows, d->d_rows, c->Vp);
    });
    CUDA_CHECK(cudaGetLastError());
}

// The step for R rows and `keys` keys as a CUDA graph: a step launches ~11 kernels a layer, whose launches cost more
// than the work at B = 1. The kernels read the positions and rows from device memory, so one graph serves every step
// with the same R and the same key blocks kb (decoder_attention's splits); the first step of an R runs uncaptured (it
// makes the products' plans, gemm_plan, which time and synchronize). NULL: run it uncaptured now.
static cudaGraphExec_t decoder_graph(Decoder *d, int R, int keys) {
    const int kb = std::min(CEIL_DIV(keys, 256), DEC_ATT_SPLITS);
    if (d->graph_moves != g_scratch_moves) { decoder_graphs_free(d); d->graph_moves = g_scratch_moves; }
    int seen = 0;
    for (int i = 0; i < d->ngraph; i++) {
        if (d->graph[i].R != R) continue;
        if (d->graph[i].kb == kb) return d->graph[i].exec;
        seen = 1;
    }
    if (d->ngraph == DEC_GRAPHS) decoder_graphs_free(d);
    cudaGraphExec_t exec = NULL;
    if (seen) {
        cudaGraph_t g;
        CUDA_CHECK(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeThreadLocal));
        decoder_launch(d, R, keys);
        CUDA_CHECK(cudaStreamEndCapture(cudaStreamPerThread, &g));
        CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
        CUDA_CHECK(cudaGraphDestroy(g));
    }
    d->graph[d->ngraph].R = R; d->graph[d->ngraph].kb = seen ? kb : -1; d->graph[d->ngraph].exec = exec;
    d->ngraph++;
    return exec;
}

// One token for every sequence b with tokens[b] >= 0 (the others wait): the whole model (2.1a-f) on those rows; each
// one's logits land in d->logits[b] and its position advances.
static void decoder_step(Decoder *d, const int *tokens) {
    const Config *c = &d->M->cfg;
    int R = 0, keys = 0;
    for (int b = 0; b < d->B; b++) {
        if (tokens[b] < 0) continue;
        if (d->pos[b] >= d->Tmax) die("decoder_step: a sequence is full (decoder_init's Tmax tokens)");
        d->rows[R] = b; d->rows[d->B + R] = tokens[b]; R++;
        keys = std::max(keys, d->pos[b] + 1);
    }
    if (R == 0) return;
    CUDA_CHECK(cudaMemcpyAsync(d->d_rows, d->rows, 2 * (size_t)d->B * sizeof(int), cudaMemcpyHostToDevice));
    weights_use(d->M);
    decoder_work_layout(&d->w, c, R, d->work);
    cudaGraphExec_t g = g_prof ? NULL : decoder_graph(d, R, keys); // (the profile times each op: no graph)
    if (g) CUDA_CHECK(cudaGraphLaunch(g, cudaStreamPerThread));
    else decoder_launch(d, R, keys);
    for (int r = 0; r < R; r++) d->pos[d->rows[r]]++;
}

// Sequence b's latest logits (Vp values) as a new float32 array.
static float *decoder_logits(const Decoder *d, int b) { return to_float32(d->logits + (size_t)b * d->M->cfg.Vp, d->M->cfg.Vp); }

// ---- the prefill from a forward pass (doc/model.md §14.5; train_natsl.c's decoder_fill_layer) -------------------------
// What the fill kernels read of the pass's row i (the decoder's sequence b) and write into a layer's cache; MP: the
// matmul precision's type.
#define DEC_FILL_CHUNKS 2 // chunks a block of decoder_fill_gdn_kernel reruns in turn (more blocks, shorter runs)
#define DEC_FILL_R 32     // key rows a lane holds (appendix D's GDN_R)
static int gdn_lanes_per_column(int dk); // (appendix D: the lanes that share a value column, P)
template <class MP> struct DecFill {
    const MP *kh, *v, *ka;      // the pass's k̂ [BT][K], V [BT][Vt], ka [BT][K]
    const float *g, *beta;      // [BT][H]
    const float *state;         // the chunk-start states [B][H][Nc][d_k][d_v], bf16 with st16 (5.4h)
    const signed char *route;   // sequence b's decisions in the layer [Ncmax][H] (device; NULL: a G layer)
    MP *kk, *kv;                // the layer's kept chunks (DecLayer)
    float *part, *gpart;        // decoder_fill_gdn_kernel's sums [groups][H][d_k][d_v] and Σg [groups][H]
    int i, b, T, H, K, Vt, dk, dv, Ncmax, st16;
};
// A G or N layer's committed state after the pass's last chunk, as decoder_step carries it (5.4h), in two steps. Here a
// block (one warp) per (group of DEC_FILL_CHUNKS chunks, head, value columns), in gdn_op_forward_kernel's arrangement
// (P lanes a value column, its rows in registers): each chunk of the group rerun (5.4b) from its stored start state
// s0_c, its own part ΔS_c = Z_last − Dec_c s0_c (5.4f) folded in, acc ← Dec_c acc + m_c ΔS_c (5.4g; m_c = 0 for a
// chunk routed to softmax); acc and the group's Σg to part and gpart.
template <int P, class MP> __global__ void __launch_bounds__(32) decoder_fill_gdn_kernel(DecFill<MP> f) {
    constexpr int VB = 32 / P;
    const int grp = blockIdx.x, h = blockIdx.y, lane = threadIdx.x, rg = lane % P, j = blockIdx.z * VB + lane / P;
    const int dk = f.dk, dv = f.dv, H = f.H, Nc = f.T / CH, c0 = grp * DEC_FILL_CHUNKS, c1 = min(Nc, c0 + DEC_FILL_CHUNKS);
    const bool jok = j < dv;
    const size_t KV = (size_t)dk * dv;
    float acc[DEC_FILL_R], z[DEC_FILL_R], s0[DEC_FILL_R], gs = 0.f;
#pragma unroll
    for (int rr = 0; rr < DEC_FILL_R; rr++) acc[rr] = 0.f;
    for (int c = c0; c < c1; c++) {
        const size_t st0 = (((size_t)f.i * H + h) * Nc + c) * KV;
#pragma unroll
        for (int rr = 0; rr < DEC_FILL_R; rr++) {
            const int i = rr * P + rg;
            const size_t at = st0 + (size_t)i * dv + j;
            s0[rr] = !(i < dk && jok) ? 0.f : f.st16 ? __bfloat162float(reinterpret_cast<const bf16 *>(f.state)[at]) : f.state[at];
            z[rr] = s0[rr];
        }
        float gsum = 0.f;
        for (int tt = 0; tt < CH; tt++) {
            const size_t row = (size_t)f.i * f.T + (size_t)c * CH + tt;
            const MP *kt = f.kh + row * f.K + h * dk;
            const float gt = f.g[row * H + h], al = expf(gt), bt = f.beta[row * H + h];
            gsum += gt;
            float kz = 0.f;
#pragma unroll
            for (int rr = 0; rr < DEC_FILL_R; rr++) {
                const int i = rr * P + rg;
                const float kv = i < dk ? ld(kt + i) : 0.f;
                z[rr] *= al;
                kz += kv * z[rr];
            }
#pragma unroll
            for (int s = 1; s < P; s <<= 1) kz += __shfl_xor_sync(0xffffffffu, kz, s);
            const float vj = jok ? ld(f.v + row * f.Vt + h * dv + j) : 0.f, u = bt * (vj - kz);
#pragma unroll
            for (int rr = 0; rr < DEC_FILL_R; rr++) {
                const int i = rr * P + rg;
                z[rr] += (i < dk ? ld(kt + i) : 0.f) * u;
            }
        }
        const float dec = expf(gsum), m = f.route && f.route[(size_t)c * H + h] == 1 ? 0.f : 1.f;
#pragma unroll
        for (int rr = 0; rr < DEC_FILL_R; rr++) acc[rr] = dec * acc[rr] + m * (z[rr] - dec * s0[rr]);
        gs += gsum;
    }
    const size_t at = ((size_t)grp * H + h) * KV;
#pragma unroll
    for (int rr = 0; rr < DEC_FILL_R; rr++) {
        const int i = rr * P + rg;
        if (i < dk && jok) f.part[at + (size_t)i * dv + j] = acc[rr];
    }
    if (blockIdx.z == 0 && lane == 0) f.gpart[grp * H + h] = gs;
}
// Then the groups in order, a thread per value of the H states of sequence b: S ← exp(Σg of the group) S + its part
template <class MP> __global__ void decoder_fill_state_kernel(float *S, DecFill<MP> f, int ngroups) {
    const size_t KV = (size_t)f.dk * f.dv, e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= f.H * KV) return;
    const int h = (int)(e / KV);
    float s = 0.f;
    for (int g = 0; g < ngroups; g++) s = expf(f.gpart[g * f.H + h]) * s + f.part[(size_t)g * f.H * KV + e];
    S[(size_t)f.b * f.H * KV + e] = s;
}
// An N layer's softmax chunks: a block per (chunk, head group h) copies a softmax chunk's keys (ka's columns h·d_k …)
// and values (V's h·d_v …) to sequence b's kept slot of h, the count of its softmax chunks before it (chunk order)
template <class MP> __global__ void decoder_fill_kept_kernel(DecFill<MP> f) {
    const int c = blockIdx.x, h = blockIdx.y, H = f.H, dk = f.dk, dv = f.dv;
    if (f.route[(size_t)c * H + h] != 1) return;
    int slot = 0;
    for (int cc = 0; cc < c; cc++) slot += f.route[(size_t)cc * H + h] == 1;
    const size_t to = (((size_t)f.b * H + h) * f.Ncmax + slot) * CH, from = (size_t)f.i * f.T + (size_t)c * CH;
    for (int u = threadIdx.x; u < CH * dk; u += blockDim.x)
        f.kk[(to + u / dk) * dk + u % dk] = f.ka[(from + u / dk) * f.K + h * dk + u % dk];
    for (int u = threadIdx.x; u < CH * dv; u += blockDim.x)
        f.kv[(to + u / dv) * dv + u % dv] = f.v[(from + u / dv) * f.Vt + h * dv + u % dv];
}

// An H layer's cache from the pass's row i (the decoder's sequence b), as train_natsl.c's: MP the matmul precision's type
template <class MP> struct DecNhaFill {
    const MP *proj, *qk_rot;    // the pass's q | k | v [BT][3D], RoPE'd q | k [BT][2D]
    const float *z, *slots;     // gate logits x W_αᵀ [BT][heads·m]; the slots at every chunk start [n][heads][Nc][2][m][64]
    float *hs, *hz;             // the layer's cache (DecLayer)
    MP *hk, *ck, *cv;
    int i, b, T, D, m, win, ring;
};
// The slots after the pass, a block of 64 threads per head, thread d the slots' feature d: those stored at the last
// chunk's start, then that chunk's steps t ≥ w again, each taking in token t − w (15.1b)
template <class MP> __global__ void __launch_bounds__(NHA_HD) decoder_fill_nha_slots_kernel(DecNhaFill<MP> f) {
    const int h = blockIdx.x, d = threadIdx.x, heads = f.D / NHA_HD, Nc = f.T / CH, m = f.m, HM = heads * m, D = f.D;
    const size_t SZ = 2 * (size_t)m * NHA_HD;
    const float *s0 = f.slots + (((size_t)f.i * heads + h) * Nc + Nc - 1) * SZ;
    float *S = f.hs + ((size_t)f.b * heads + h) * SZ;
    for (size_t e = d; e < SZ; e += NHA_HD) S[e] = s0[e];
    for (int t = max((Nc - 1) * CH, f.win); t < f.T; t++) {
        const size_t row = (size_t)f.i * f.T + t - f.win;
        const float ks = ld(f.proj + row * 3 * D + D + h * NHA_HD + d), vs = ld(f.proj + row * 3 * D + 2 * D + h * NHA_HD + d);
        const float *z = f.z + row * HM + (size_t)h * m;
        for (int j = 0; j < m; j++) {
            const float al = nha_alpha(z[j]);
            S[(size_t)j * NHA_HD + d] = al * S[(size_t)j * NHA_HD + d] + (1.f - al) * ks;
            S[(size_t)(m + j) * NHA_HD + d] = al * S[(size_t)(m + j) * NHA_HD + d] + (1.f - al) * vs;
        }
    }
}
// The ring, a block per token t of the last min(ring, T): its k, v (proj), RoPE'd k (qk_rot) and z at t mod ring
template <class MP> __global__ void decoder_fill_nha_ring_kernel(DecNhaFill<MP> f) {
    const int t = f.T - min(f.ring, f.T) + blockIdx.x, D = f.D, HM = (D / NHA_HD) * f.m;
    const size_t row = (size_t)f.i * f.T + t, at = (size_t)f.b * f.ring + t % f.ring;
    for (int c = threadIdx.x; c < D; c += blockDim.x) {
        f.hk[at * D + c] = f.proj[row * 3 * D + D + c];
        f.cv[at * D + c] = f.proj[row * 3 * D + 2 * D + c];
        f.ck[at * D + c] = f.qk_rot[row * 2 * D + D + c];
    }
    for (int c = threadIdx.x; c < HM; c += blockDim.x) f.hz[at * HM + c] = f.z[row * HM + c];
}

// Layer l's cache of the sequences r->seq from the prefill's forward pass F over their first r->T tokens (whole chunks),
// read just after F's layer l ran (train_natsl.c's, doc/model.md §14.5): G, N: the conv inputs of the last 3 tokens
// (proj's rows, in the matmul precision as the cache's), the committed state (the two kernels above); N: the
// decisions, kept counts and kept chunks; A: the keys (RoPE'd in proj) and values of every token; H: the slots and the
// ring (the two kernels above).
static void decoder_fill_layer(Decoder *d, const Model *F, int l, const PrefillRows *r) {
    const Config *c = &d->M->cfg;
    const LayerActs *a = &F->la[l];
    const DecLayer *L = &d->dl[l];
    const int T = r->T, Nc = T / CH, D = c->D, K = cfg_K(c), Vt = cfg_Vt(c), H = c->H, W = 2 * K + Vt;
    const size_t es = g_bf16 ? sizeof(bf16) : sizeof(float), KV = (size_t)c->dk * c->dv; // es: a matmul-precision value's bytes
    if (d->kind[l] == 'A') {
        const char *proj = (const char *)(c->pattern[l] == 'S' ? a->aproj : a->proj); // S frozen to A: its A mixer's
        for (int i = 0; i < r->n; i++) {
            const size_t to = (size_t)r->seq[i] * d->Tmax * D * es, from = (size_t)i * T * 3 * D * es;
            CUDA_CHECK(cudaMemcpy2DAsync((char *)L->ck + to, D * es, proj + from + D * es, 3 * D * es, D * es, T,
                                         cudaMemcpyDeviceToDevice));
            CUDA_CHECK(cudaMemcpy2DAsync((char *)L->cv + to, D * es, proj + from + 2 * D * es, 3 * D * es, D * es, T,
                                         cudaMemcpyDeviceToDevice));
        }
        return;
    }
    if (d->kind[l] == 'H') {
        const int ring = nha_ring(c, l, d->Tmax);
        for (int i = 0; i < r->n; i++)
            with_precision([&](auto z) {
                using MP = decltype(z);
                DecNhaFill<MP> f;
                f.proj = (const MP *)a->proj; f.qk_rot = (const MP *)a->qk_rot; f.z = a->alpha; f.slots = a->slots;
                f.hs = L->hs; f.hz = L->hz; f.hk = (MP *)L->hk; f.ck = (MP *)L->ck; f.cv = (MP *)L->cv;
                f.i = i; f.b = r->seq[i]; f.T = T; f.D = D; f.m = c->nha_m; f.win = c->nha_w[l]; f.ring = ring;
                decoder_fill_nha_slots_kernel<<<cfg_attn_heads(c), NHA_HD>>>(f);
                if (ring) decoder_fill_nha_ring_kernel<<<std::min(ring, T), 256>>>(f);
                CUDA_CHECK(cudaGetLastError());
            });
        return;
    }
    const int nats = d->kind[l] == 'N', P = gdn_lanes_per_column(c->dk), ngroups = CEIL_DIV(Nc, DEC_FILL_CHUNKS);
    float *part = (float *)device_scratch(SCRATCH_PREFILL, ((size_t)ngroups * H * KV + (size_t)ngroups * H) * sizeof(float));
    for (int i = 0; i < r->n; i++) {
        const int b = r->seq[i];
        CUDA_CHECK(cudaMemcpyAsync((char *)L->tail + (size_t)b * 3 * W * es, (const char *)a->proj + ((size_t)i * T + T - 3) * W * es,
                                   3 * W * es, cudaMemcpyDeviceToDevice));
        signed char *route = nats ? d->route + ((size_t)l * d->B + b) * d->Ncmax * H : NULL;
        if (nats) {
            CUDA_CHECK(cudaMemcpy(route, r->route + (size_t)i * Nc * H, (size_t)Nc * H, cudaMemcpyHostToDevice));
            CUDA_CHECK(cudaMemcpy(d->nkept + ((size_t)l * d->B + b) * H, r->nkept + (size_t)i * H, H * sizeof(int),
                                  cudaMemcpyHostToDevice));
        }
        with_precision([&](auto z) {
            using MP = decltype(z);
            DecFill<MP> f;
            memset(&f, 0, sizeof(f));
            f.kh = (const MP *)a->k_hat; f.v = (const MP *)a->v; f.ka = (const MP *)a->ka; f.g = a->g; f.beta = a->beta;
            f.state = a->state; f.route = route; f.kk = (MP *)L->kk; f.kv = (MP *)L->kv;
            f.part = part; f.gpart = part + (size_t)ngroups * H * KV;
            f.i = i; f.b = b; f.T = T; f.H = H; f.K = K; f.Vt = Vt; f.dk = c->dk; f.dv = c->dv; f.Ncmax = d->Ncmax;
            f.st16 = g_bf16;
            if (nats) decoder_fill_kept_kernel<<<dim3(Nc, H), 256>>>(f);
            dim3 grid(ngroups, H, CEIL_DIV(c->dv, 32 / P));
            if (P == 1) decoder_fill_gdn_kernel<1><<<grid, 32>>>(f);
            else if (P == 2) decoder_fill_gdn_kernel<2><<<grid, 32>>>(f);
            else if (P == 4) decoder_fill_gdn_kernel<4><<<grid, 32>>>(f);
            else decoder_fill_gdn_kernel<8><<<grid, 32>>>(f);
            decoder_fill_state_kernel<<<(unsigned)CEIL_DIV(H * KV, 256), 256>>>(L->S, f, ngroups);
            CUDA_CHECK(cudaGetLastError());
        });
    }
}

// After the prefill's forward pass F: the sequences r->seq at position r->T, and the logits of those whose prompt ends
// there, the pass's last row's (as decoder_logits_kernel takes them)
static void decoder_fill_done(Decoder *d, const Model *F, const PrefillRows *r) {
    const int Vp = d->M->cfg.Vp;
    for (int i = 0; i < r->n; i++) {
        d->pos[r->seq[i]] = r->T;
        if (!r->ends[i]) continue;
        float *z = logits_to_float32(F, (size_t)i * r->T + r->T - 1, 1);
        CUDA_CHECK(cudaMemcpy(d->logits + (size_t)r->seq[i] * Vp, z, Vp * sizeof(float), cudaMemcpyHostToDevice));
        free(z);
    }
    CUDA_CHECK(cudaMemcpy(d->d_pos, d->pos, d->B * sizeof(int), cudaMemcpyHostToDevice));
}

// What the cache holds now, in bytes (as train_natsl.c's; keys, values and conv inputs in the matmul precision, the
// states, an H layer's slots and gate logits in fp32); sfr[l]: the fraction of an N layer's completed chunk-heads
// routed to softmax (-1: none).
static DecoderStats decoder_stats(const Decoder *d) {
    const Config *c = &d->M->cfg;
    DecoderStats s;
    memset(&s, 0, sizeof(s));
    size_t B = d->B, D = c->D, K = cfg_K(c), Vt = cfg_Vt(c), H = c->H, W = 2 * K + Vt, tokens = 0, el = g_bf16 ? 2 : 4;
    size_t nk = (size_t)c->L * B * H, nr = (size_t)c->L * B * d->Ncmax * H;
    int *nkept = (int *)xcalloc(nk, sizeof(int));
    signed char *route = (signed char *)xcalloc(nr, 1);
    CUDA_CHECK(cudaMemcpy(nkept, d->nkept, nk * sizeof(int), cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(route, d->route, nr, cudaMemcpyDeviceToHost));
    for (int b = 0; b < d->B; b++) tokens += d->pos[b];
    s.transformer = (double)tokens * c->L * 2 * D * el;
    for (int l = 0; l < c->L; l++) {
        s.sfr[l] = -1;
        if (d->kind[l] == 'A') s.kv[l] = (double)tokens * 2 * D * el;
        if (d->kind[l] == 'H') { // §15: the slots, and the window's tokens held now (k, RoPE'd k, v; gate logits in fp32)
            size_t HM = (size_t)cfg_attn_heads(c) * c->nha_m;
            for (int b = 0; b < d->B; b++) s.kv[l] += (double)nha_ring(c, l, d->pos[b]) * (3 * D * el + HM * 4);
            s.held += (double)B * HM * 2 * NATSL_ATTN_HEAD * 4 + s.kv[l];
            continue;
        }
        if (d->kind[l] != 'A') s.held += (double)B * ((2 * H * c->dk * c->dv + H) * 4 + 3 * W * el);
        if (d->kind[l] != 'N') { s.held += s.kv[l]; continue; }
        s.held += (double)B * (D * 4 + CH * (K + Vt) * el);
        int n = 0, soft = 0;
        for (size_t i = 0; i < B * H; i++) s.kv[l] += (double)nkept[(size_t)l * B * H + i] * CH * (c->dk + c->dv) * el;
        for (size_t i = 0; i < B * d->Ncmax * H; i++) {
            signed char x = route[(size_t)l * B * d->Ncmax * H + i];
            n += x >= 0; soft += x == 1;
        }
        if (n) s.sfr[l] = (double)soft / n;
        s.held += s.kv[l];
    }
    free(nkept); free(route);
    return s;
}

// ================================================================================================
// 4. The training step (§9): gradients over micro-batches, global norm, clipping, AdamW (on the GPU)
// ================================================================================================

// ---- several GPUs (doc/model.md §9.4; appendix F): the communicator and the reduction's timeline, which the step
// drives
typedef struct {
    ncclComm_t comm;
    cudaStream_t stream; // the reductions, beside the default stream's backward pass
    cudaEvent_t ready;   // recorded on the default stream when a bucket is final
    double *dsum, *hsum; // backend_allreduce's device and pinned host scratch
    double timeout;
    int reduce;          // this micro-step's backward hands its buckets over (the step's last)
} Nccl;
static Nccl g_nccl;

// NATSL_PROFILE=1 with several ranks: the timeline of the gradient reduction in a step's last backward pass: when
// each bucket became final on the default stream and when its reduction ended, against the backward pass's end. The
// summary of the last profiled step is printed at the end of training (how much of the reduction was hidden).
#define NB_MAX (NATSL_MAX_LAYERS + 2)
static struct {
    cudaEvent_t begin, end, final_[NB_MAX], reduced[NB_MAX];
    int on, used[NB_MAX];
    char summary[400];
} g_rtl;

// From appendix F:
static void nccl_done(ncclResult_t r, const char *what); // waits until a call on the communicator is through
static void dist_wait(const char *what);                 // waits for the reduction stream (with the timeout)
static void backend_allreduce(double *x, int n);         // the sums of n doubles over the ranks, in place
static void comm_after_compute(void);                    // the reduction stream waits for the default stream
static size_t zero_slice(const Model *M, int k, size_t *lo, size_t *mom); // this rank's ZeRO-1 slice of bucket k
static void reduce_timeline_summary(const Model *M);

// The global gradient norm: of the whole (reduced) gradient, or under ZeRO-1 the sum of the ranks' slices'.
static double grad_norm(const Model *M) {
    PROF_OP();
    if (!g_zero) return sqrt(device_dot(M->grads, M->grads, M->nparams));
    double s = 0;
    for (int k = 0; k < M->nbucket; k++) {
        size_t lo, mom, n = zero_slice(M, k, &lo, &mom);
        if (n) s += device_dot(M->grads + lo, M->grads + lo, n);
    }
    backend_allreduce(&s, 1);
    return sqrt(s);
}

// One launch updates every tensor: the parameters are cut into runs of at most ADAMW_RUN values that lie in one
// tensor (and, under ZeRO-1, in one of this rank's slices), one block per run, listed once (adamw_runs). A run whose
// parameter and moment offsets are multiples of 4 moves float4s (the kernel is bound by its 28 bytes a parameter).
#define ADAMW_RUN 2048
struct AdamStep { double lr, decay, grad_scale, c1, c2; };
__device__ __forceinline__ void adamw_one(float &w, float g32, float &m, float &v, const AdamStep &s) {
    const double b1 = ADAMW_BETA1, b2 = ADAMW_BETA2, g = g32 * s.grad_scale;
    m = b1 * m + (1 - b1) * g; // stored, then used, in fp32
    v = b2 * v + (1 - b2) * g * g;
    const double mh = m / s.c1, vh = v / s.c2;
    w -= s.lr * (mh / (sqrt(vh) + ADAMW_EPS) + s.decay * w);
}
// copies (NULL: none): the bf16 weight copies, written where a run has one (r.c)
__global__ void __launch_bounds__(256) adamw_kernel(float *params, const float *grads, float *m, float *v,
        __nv_bfloat16 *copies, const AdamRun *runs, double lr, double wd, double grad_scale, double c1, double c2) {
    const AdamRun r = runs[blockIdx.x];
    const AdamStep s = {lr, r.decay ? wd : 0, grad_scale, c1, c2};
    float *w = params + r.p, *mm = m + r.m, *vv = v + r.m;
    const float *g = grads + r.p;
    __nv_bfloat16 *wc = copies && r.c != WCOPY_NONE ? copies + r.c : NULL;
    const int n4 = r.p % 4 == 0 && r.m % 4 == 0 && (!wc || r.c % 4 == 0) ? r.n / 4 : 0;
    for (int j = threadIdx.x; j < n4; j += blockDim.x) {
        float4 w4 = ((float4 *)w)[j], m4 = ((float4 *)mm)[j], v4 = ((float4 *)vv)[j];
        const float4 g4 = ((const float4 *)g)[j];
        adamw_one(w4.x, g4.x, m4.x, v4.x, s); adamw_one(w4.y, g4.y, m4.y, v4.y, s);
        adamw_one(w4.z, g4.z, m4.z, v4.z, s); adamw_one(w4.w, g4.w, m4.w, v4.w, s);
        ((float4 *)w)[j] = w4; ((float4 *)mm)[j] = m4; ((float4 *)vv)[j] = v4;
        if (wc) st4(wc + 4 * j, w4.x, w4.y, w4.z, w4.w);
    }
    for (int j = 4 * n4 + threadIdx.x; j < r.n; j += blockDim.x) {
        adamw_one(w[j], g[j], mm[j], vv[j], s);
        if (wc) wc[j] = __float2bfloat16_rn(w[j]);
    }
}
// The runs adamw_kernel takes (device), built once: of every tensor, or under ZeRO-1 of the parts of the tensors
// in this rank's slices.
static const AdamRun *adamw_runs(Model *M) {
    if (M->adam_runs) return M->adam_runs;
    std::vector<AdamRun> runs;
    for (int k = 0; k < M->ntensors; k++) {
        const ParamTensor *pt = &M->tensors[k];
        size_t o = pt->offset, e = o + pt->numel;
        for (int b = 0; b < (g_zero ? M->nbucket : 1); b++) { // the tensor, or its parts in this rank's slices
            size_t lo = o, hi = e, mom = 0, m = o;
            if (g_zero) {
                size_t slo, n = zero_slice(M, b, &slo, &mom);
                lo = std::max(o, slo); hi = std::min(e, slo + n); m = mom + (lo - slo);
            }
            const size_t c = M->wc.at[k];
            for (size_t j = lo; j < hi; j += ADAMW_RUN)
                runs.push_back({j, m + (j - lo), c == WCOPY_NONE ? WCOPY_NONE : c + (j - o),
                                (int)std::min((size_t)ADAMW_RUN, hi - j), pt->decay});
        }
    }
    M->adam_nruns = (int)runs.size();
    M->adam_runs = (AdamRun *)xcudamalloc(std::max(runs.size(), (size_t)1) * sizeof(AdamRun));
    CUDA_CHECK(cudaMemcpy(M->adam_runs, runs.data(), runs.size() * sizeof(AdamRun), cudaMemcpyHostToDevice));
    return M->adam_runs;
}
// One AdamW step at step t (1-based) on the gradients scaled by grad_scale (the clipping), as train_natsl.c: of
// every tensor, or under ZeRO-1 of the parts of the tensors in this rank's slices, whose parameters are then
// all-gathered from their ranks. The weights' bf16 copies where they are fresh stay so (written with the weights),
// but under ZeRO-1: there the next pass remakes them from the gathered parameters.
static void adamw_update(Model *M, double lr, double wd, double grad_scale, int t) {
    PROF_OP();
    model_alloc_moments(M);
    double c1 = 1 - pow(ADAMW_BETA1, t), c2 = 1 - pow(ADAMW_BETA2, t);
    const AdamRun *runs = adamw_runs(M);
    if (g_zero) M->wc.fresh = 0;
    if (M->adam_nruns) {
        adamw_kernel<<<M->adam_nruns, 256>>>(M->params, M->grads, M->adam_m, M->adam_v, M->wc.fresh ? M->wc.buf : NULL,
                                             runs, lr, wd, grad_scale, c1, c2);
        CUDA_CHECK(cudaGetLastError());
    }
    if (!g_zero) return;
    comm_after_compute();
    nccl_done(ncclGroupStart(), "ncclGroupStart");
    for (int b = 0; b < M->nbucket; b++) {
        size_t slo, mom, n = zero_slice(M, b, &slo, &mom);
        if (n) nccl_done(ncclAllGather(M->params + slo, M->params + M->bucket[b], n, ncclFloat, g_nccl.comm, g_nccl.stream),
                         "ncclAllGather of the parameters");
    }
    nccl_done(ncclGroupEnd(), "ncclGroupEnd");
    dist_wait("gathering the parameters");
}

// One optimizer step, as train_natsl.c's train_step; it returns when the GPU has finished the step. With several
// ranks, accum is this rank's share of the step's micro-batches, and the statistics are this rank's
// (common/train_main.inc averages them over the ranks).
typedef struct { double loss, norm; int skipped; double pen, lb, frac, tau; } StepStats; // pen..tau: §7
static StepStats train_step(Model *M, DataLoader *train, int accum, int B, int T, double lr, double wd, int t,
                            double *sfr) {
    const Config *c = &M->cfg;
    StepStats s = {0, 0, 0, 0, 0, 0, 0};
    model_zero_grad(M);
    for (int l = 0; sfr && l < c->L; l++) sfr[l] = 0;
    M->rb.noise = M->rb.tau0 > 0; // §7.2: Gumbel noise in this step's forward passes only, at τ_t
    M->rb.tau = s.tau = M->rb.noise ? budget_tau(&M->rb, t) : 1;
    select_draw(M, t);            // §7.3: the S gates' noise of this step
    for (int k = 0; k < accum; k++) { // this rank's micro-batches; the loss is the mean over every rank's
        next_micro_batch(M, train, B, T);
        int n = targets_scored(train->targets, B * T); // its scored targets (13.1b): each micro-batch weighs alike
        const real dloss = n ? (real)1 / ((real)n * accum * g_world) : 0;
        M->fused_dloss = dloss; // the backward follows the forward: the cross-entropy's two passes in one
        model_forward(M, train->inputs, train->targets, B, T);
        g_nccl.reduce = k == accum - 1;
        g_rtl.on = g_prof && g_world > 1 && g_nccl.reduce;
        if (g_rtl.on) CUDA_CHECK(cudaEventRecord(g_rtl.begin, 0));
        model_backward(M, train->inputs, train->targets, B, T, dloss);
        if (g_rtl.on) CUDA_CHECK(cudaEventRecord(g_rtl.end, 0));
        s.loss += M->mean_loss / accum;
        s.pen += M->rb.pen / accum; s.lb += M->rb.lb / accum; s.frac += M->rb.frac / accum;
        for (int l = 0; sfr && l < c->L; l++)
            if (c->pattern[l] == 'N') sfr[l] += softmax_fraction(M, l, -1, B, T) / accum;
    }
    M->rb.noise = M->rb.sel_noise = 0;
    M->fused_dloss = 0;
    if (g_world > 1) dist_wait("summing the gradients over the ranks");
    if (g_rtl.on) reduce_timeline_summary(M);
    g_rtl.on = 0;
    s.norm = grad_norm(M);
    s.skipped = !is_finite(s.norm);
    if (!s.skipped) adamw_update(M, lr, wd, s.norm > GRAD_CLIP ? GRAD_CLIP / s.norm : 1, t);
    CUDA_CHECK(cudaDeviceSynchronize());
    return s;
}

// ================================================================================================
// 5. The program: the GPU backend of the training driver common/train_main.inc. main is left out when another
// program includes this file with TESTING defined (the dev benchmarks and kernel harnesses).
// ================================================================================================

// fp32: cuBLAS in true fp32 (no TF32), the attention kernels in their fp32-accurate 3xTF32 mode.
// bf16 (the default): bf16 matmuls and bf16 storage of the tensors around them, attention in bf16 or 1xTF32 (header).
static double g_prof_step_ms; // NATSL_PROFILE=1: step time summed over the profiled steps
static int g_prof_steps;

// From appendices E and F:
static void gemm_cache_open(const char *dir, int rank, int world); // the products' algorithms chosen by an earlier run
static void gemm_cache_save(void);
static void dist_start(const TrainArgs *a); // one process per GPU: the GPU and the communicator
static void dist_finish(void);

static const char *backend_default_precision = "bf16";
static void backend_start(const TrainArgs *a) {
    g_bf16 = !strcmp(a->precision, "bf16");
#ifdef USE_MPI
    if (g_world > 1 && (a->pi ? !strcmp(a->pi, "mpi") : g_job.mpi)) MPI_Init(NULL, NULL);
#endif
    g_prof = prof_level();
    dist_start(a);
    int dev;
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    cublas_start();
    CUBLAS_CHECK(cublasSetMathMode(g_cublas, g_bf16 ? CUBLAS_DEFAULT_MATH : CUBLAS_PEDANTIC_MATH));
    attention_set_tf32_passes(g_bf16 ? 1 : 3);
    gdn_set_lowp(g_bf16);
    if (g_bf16) gemm_cache_open(a->outdir, g_rank, g_world);
    printf("device: %s, precision: %s\n", prop.name, a->precision);
}
static void backend_step_timed(int first, double dt) {
    gemm_cache_save();
    if (g_prof && first) prof_reset(); // skip the first (warm-up) step
    else if (g_prof) { prof_flush(); g_prof_step_ms += dt * 1e3; g_prof_steps++; }
}
// MFU: the model FLOPs of the step (dev/model_flops.h, the routing of its last micro-batch) over the time, against
// the H100's dense bf16 peak (989 TFLOP/s; fp32 runs are measured against the same number, as in bench_gpu)
#include "dev/model_flops.h"
static void backend_step_note(const Model *M, int B, int T, int accum, double dt) {
    double linear, attention, gdn;
    step_flops(M, B, T, &linear, &attention, &gdn);
    printf(" | MFU %.1f%%", 100 * accum * (linear + attention + gdn) / dt / 989e12);
}
static void backend_finish(void) {
    gemm_cache_save();
    if (g_prof && g_prof_steps > 0) prof_print(g_prof_step_ms, g_prof_steps);
    if (g_rtl.summary[0]) printf("%s\n", g_rtl.summary);
    cublasDestroy(g_cublas);
    dist_finish();
#ifdef USE_MPI
    int mpi_on = 0;
    MPI_Initialized(&mpi_on);
    if (mpi_on) MPI_Finalize();
#endif
}

#include "common/train_main.inc"

#ifndef TESTING
int main(int argc, char **argv) { return train_main(argc, argv); }
#endif

// ================================================================================================
// Appendix C. The attention kernels: masked flash attention, TF32 and bf16 (wgmma, TMA)
// ================================================================================================

// ---- softmax attention over the allowed pairs (§4, §5.3, §6.2, §6.3): masked flash attention ------------------
// (its standalone test and benchmark: dev/cuda/attention/masked_attention.cu, which includes this file)
#define ATT_LOG2E 1.4426950408889634f // log2(e), ln(2): the kernels' softmax runs in the exp2 domain
#define ATT_LN2   0.6931471805599453f

static int g_attn_passes = 3;   // 3 = 3xTF32 (fp32-accurate), 1 = plain TF32
void attention_set_tf32_passes(int p) { g_attn_passes = (p == 1) ? 1 : 3; }

// ------------------------------------------------------------------------------------------------------------------
// device helpers
// ------------------------------------------------------------------------------------------------------------------
// split x into hi (tf32) and lo (tf32 of the remainder); lo unused (0) when !SPLIT
// SPLIT (3xTF32): hi = x with the low 13 mantissa bits cleared (a valid tf32), lo = x - hi exactly (fp32); lo is passed
// as raw fp32 bits and the tensor core uses only its top 19 bits, an error of < 2^-10·|lo| < 2^-20·|x|.
template <bool SPLIT> __device__ __forceinline__ void splitf(float x, uint32_t &h, uint32_t &l) {
    if (SPLIT) {
        h = __float_as_uint(x) & 0xffffe000u; l = __float_as_uint(x - __uint_as_float(h));
    } else { h = f2tf32(x); l = 0u; }
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
                const float *__restrict__ m, int T, int NH, int NHm, float scale, float sl2, int own_sg) {
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

        // S^T = K Q^T and dP^T = V dO^T, each 16 keys × 32 queries: one k-step (8 features) of the product of
        // a key-row tile X (row stride ld) with the query-row tile Y (same stride)
        float s[4][4], dp[4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i) { s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f; dp[i][0] = dp[i][1] = dp[i][2] = dp[i][3] = 0.f; }
        auto xyt_step = [&](float (&acc)[4][4], const float *X, const float *Y, int ld, int kst) {
            FragA a;
            const float *xp = X + kr0 * ld + kst * 8 + t;
            make_a<SPLIT>(a, xp[0], xp[8 * ld], xp[4], xp[8 * ld + 4]);
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
                const float *yp = Y + (32 * qh + 8 * nt + g) * ld + kst * 8 + t;
                mma_ab<SPLIT>(acc[nt], a, yp[0], yp[4]);
            }
        };
#pragma unroll
        for (int kst = 0; kst < KS; ++kst) xyt_step(s, sK, cQ, LDK, kst);
#pragma unroll 4
        for (int kst = 0; kst < NV; ++kst) xyt_step(dp, sV, cO, LDV, kst);
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
                const float P = (diag && own_sg) ? 0.f : w * p; // §6.2 (6.2e): no gradient through the own chunk's pairs
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
                    // dQ in float4 atomics (sm_90): pair lanes t, t^1: the even lane takes row g cols 2t..2t+3,
                    // the odd lane row g+8 cols 2t-2..2t+1
                    const bool odd = (t & 1);
                    const float x0 = acc[i][0] * scale, x1 = acc[i][1] * scale, x2 = acc[i][2] * scale, x3 = acc[i][3] * scale;
                    const float r0 = __shfl_xor_sync(0xffffffffu, odd ? x0 : x2, 1);
                    const float r1 = __shfl_xor_sync(0xffffffffu, odd ? x1 : x3, 1);
                    const float4 val = odd ? make_float4(r0, r1, x2, x3) : make_float4(x0, x1, r0, r1);
                    float *p = dq + (qrow0 + (odd ? 8 : 0)) * ldqk + h * DQ + nd * 8 + 2 * (t & ~1);
                    atomicAdd(reinterpret_cast<float4 *>(p), val);
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
// heads sharing one mask head: heads / attn_mask_heads(a) (no mask: every head its own)
static int attn_mask_heads(const AttnArgs *a) { return a->mask ? a->mask_heads : a->heads; }
static void attn_check_args(const char *who, const AttnArgs *a) {
    const void *q = a->q, *k = a->k, *v = a->v;
    const int ldqk = a->ldqk, ldv = a->ldv, T = a->T, NH = a->heads, NHm = attn_mask_heads(a), dq = a->head_k,
              dvh = a->head_v;
    bool ok = (T % 64 == 0) && (ldqk % 4 == 0) && (ldv % 4 == 0) && NHm > 0 && (NH % NHm == 0) &&
              ((uintptr_t)q % 16 == 0) && ((uintptr_t)k % 16 == 0) && ((uintptr_t)v % 16 == 0);
    if (!ok) {
        fprintf(stderr, "%s: unsupported arguments (need T%%64==0, ldqk%%4==0, ldv%%4==0, 16B-aligned q/k/v, NH%%NHm==0): "
                "T=%d ldqk=%d ldv=%d NH=%d NHm=%d dq=%d dvh=%d\n", who, T, ldqk, ldv, NH, NHm, dq, dvh);
        exit(1);
    }
}

// The TF32 kernels on the fp32 operands of *a (fp32 mode's, or their fp32 copies: attention_widen)
template <int DQ, int DV, bool SPLIT>
static void launch_fwd(float *out, float *lse, const AttnArgs *a, cudaStream_t st) {
    const int T = a->T, NH = a->heads, Nc = T / 64;
    const size_t smem = (size_t)2 * 64 * ((DQ + 4) + (DV + 4)) * sizeof(float) + (size_t)Nc * 8;
    static size_t set = 0;
    if (smem > set) {
        smem_attr(attn_fwd_kernel<DQ, DV, SPLIT>, smem);
        set = smem;
    }
    const float sl2 = (1.0f / sqrtf((float)DQ)) * ATT_LOG2E;
    attn_fwd_kernel<DQ, DV, SPLIT><<<dim3(a->B * NH, Nc), 128, smem, st>>>(out, lse, a->q, a->k, a->ldqk, a->v, a->ldv,
                                                                          a->mask, T, NH, attn_mask_heads(a), sl2);
    CUDA_CHECK(cudaGetLastError());
}

template <int DQ, int DV, bool SPLIT>
static void launch_bwd(float *dq, float *dk, float *dv, float *dA, const float *dout, const float *lse2,
                       const float *delta, const AttnArgs *a, cudaStream_t st) {
    const int T = a->T, NH = a->heads, Nc = T / 64;
    const size_t smem = (size_t)(3 * 64 * (DQ + 4) + 3 * 64 * (DV + 4) + 4 * 64 + 64 * 68) * sizeof(float);
    static bool set = false;
    if (!set) {
        smem_attr(attn_bwd_kernel<DQ, DV, SPLIT>, smem);
        set = true;
    }
    const float scale = 1.0f / sqrtf((float)DQ);
    attn_bwd_kernel<DQ, DV, SPLIT><<<dim3(a->B * NH, Nc), 256, smem, st>>>(dq, dk, dv, dA, dout, lse2, delta, a->q, a->k,
                                                                          a->ldqk, a->v, a->ldv, a->mask, T, NH,
                                                                          attn_mask_heads(a), scale, scale * ATT_LOG2E, a->own_sg);
    CUDA_CHECK(cudaGetLastError());
}

#define ATT_SHAPES(X) X(24, 48) X(64, 128) X(64, 64)

// ---- the bf16 tensor-core kernels (-p bf16, head dims (64,64) and (64,128)) ---------------------------------------
// The same op on bf16 q, k, v, out, dout (fp32 lse, dq, dA; dk, dv fp32 or bf16) on Hopper's warpgroup MMA (wgmma,
// bf16 in, fp32 accumulation) reading XOR-swizzled shared tiles that the TMA unit fills (tensor maps of q, k, v, dO;
// mbarriers), online softmax in the exp2 domain. Tiles are NAtS chunks (64 tokens), so routing is a per-tile
// decision. Forward: block = 128 queries (2 chunks) x 2 warpgroups; backward: block = 64 keys (one chunk) x 1
// warpgroup, looping over the query chunks that see it; dQ through shared dS, then fp32 adds into dq (2-D reduce-adds
// of the TMA unit through a tensor map of dq).
// Their test harness, notes and measurements:
// dev/cuda/attention/flash_bf16.cu, FLASH_BF16.md.

// ------------------------------------------------------------------------------------------------------------------
// device helpers
// ------------------------------------------------------------------------------------------------------------------
// the first 1024-byte boundary at or after the dynamic shared memory's start (the swizzle pattern's period), as a
// pointer that the compiler still knows to be shared: through an integer (uintptr_t) it loses that, and every access
// through it becomes a generic LD/ST (the backward's dS and dQ stores, the lse2/δ and key-list loads) instead of
// LDS/STS
__device__ __forceinline__ bf16 *fa_align1024(uint4 *smem) {
    return reinterpret_cast<bf16 *>(reinterpret_cast<char *>(smem) + ((1024u - (smem_u32(smem) & 1023u)) & 1023u));
}

__device__ __forceinline__ float fa_ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}


// ------------------------------------------------------------------------------------------------------------------
// forward on Hopper's warpgroup MMA (wgmma, sm_90a): block = (b·NH + h, query block qb of 128 queries = chunks
// A = 2qb, B = 2qb+1) as 2 warpgroups of 4 warps: warpgroup w owns the 64 rows of chunk A + w (warp w·4 + i rows
// 16i..16i+15 of it). Key tiles = the chunks the block needs (a compacted list with each chunk's weight for A and B).
// Per key tile: S = Q Kᵀ by wgmma m64n64k16 with Q and K read by the tensor cores from the shared tiles, the online
// softmax (exp2 domain) on S's accumulators (per warp: 16 rows in the m16n8 accumulator layout of mma.sync),
// O += P V by wgmma m64n(DV)k16 with P in registers and V read transposed from shared memory. The tiles are
// XOR-swizzled rows of 64 bf16 (128 bytes: chunk c of row r at c ^ (r & 7)), which the wgmma descriptors call 128-byte
// swizzling; V's DV columns are stored as DV/64 tiles of [64 keys][64 columns]. Thread 0 has the TMA unit load
// each tile (64 × 64 boxes of 2-D tensor maps, swizzled as the tensor cores read them) into a four-stage ring of
// mbarriers: no thread computes a load address and no block barrier falls between tiles (the kernel is bound by its
// instructions a warp and tile). The running max moves only when it grows past 2^8, so most tiles skip the rescale
// of O; the wgmma descriptors are built once and stepped by adds on their low words.
// ------------------------------------------------------------------------------------------------------------------
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "train_natsl.cu is built for sm_90a (nvcc -arch=sm_90a): the attention forward runs on Hopper's wgmma"
#endif
// the accumulator operands of a wgmma statement, %0 .. %(N−1) (these serve the GDN op's wgmma products too)
#define WG_REGS16 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
#define WG_REGS32 WG_REGS16 "," \
    "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
#define WG_REGS64 WG_REGS32 "," \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47" "," \
    "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
#define WG_REGS96 WG_REGS64 "," \
    "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79" "," \
    "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95"
#define WG_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
    "+f"(d[i + 6]), "+f"(d[i + 7])
#define WG_D32 WG_D8(0), WG_D8(8), WG_D8(16), WG_D8(24)
#define WG_D64 WG_D32, WG_D8(32), WG_D8(40), WG_D8(48), WG_D8(56)
// the GDN op's: the constraints of accumulator tiles j .. j+3 (16 registers) of d[][4]
#define WG_T(j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define WG_T4(j) WG_T(j), WG_T((j) + 1), WG_T((j) + 2), WG_T((j) + 3)
// d(64×64) = d·[acc != 0] + A(64×16) B(16×64): A and B in 128B-swizzled shared memory, K-major (rows of 64 bf16
// along k) or, with TA / TB = 1, MN-major (stored [k][m] / [k][n])
template <int TA, int TB>
__device__ __forceinline__ void wgmma_ss_n64(float (&d)[32], uint64_t da, uint64_t db, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" WG_REGS32 "}, %32, %33, p, 1, 1, %35, %36;\n}\n"
                 : WG_D32 : "l"(da), "l"(db), "r"(acc), "n"(TA), "n"(TB));
}
// d(64×N) += A(64×16) B(16×N): A in registers (per warp the m16n8k16 A fragments of its 16 rows), B MN-major (stored
// [k][n]) in 128B-swizzled shared memory
__device__ __forceinline__ void wgmma_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" WG_REGS32 "}, {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n"
                 : WG_D32 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
__device__ __forceinline__ void wgmma_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" WG_REGS64 "}, {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n"
                 : WG_D64 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
#undef WG_D64
#undef WG_D32
#undef WG_D8
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// the accumulators are registers the asm statements above name: the compiler must not move their reads and writes
// across the wait
template <int N> __device__ __forceinline__ void wgmma_keep(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// descriptor of a 128B-swizzled operand at shared address `addr` (1024-aligned tile + an offset along K inside its
// 128-byte rows): 8-row groups 1024 bytes apart (SBO); LBO = the distance between 64-column tiles (MN-major only).
// In two halves: the low word (start address >> 4, LBO >> 4) and the descriptor made from it. The address field
// (bits 0-13) holds any shared address >> 4 without a carry, so the operand `bytes` on (a multiple of 16) has the low
// word lo + bytes/16: one add where the whole descriptor would be rebuilt.
__device__ __forceinline__ uint32_t wgmma_desc_lo(uint32_t addr, uint32_t lbo) { return ((addr & 0x3FFFF) >> 4) | (lbo >> 4) << 16; }
__device__ __forceinline__ uint64_t wgmma_desc_of(uint32_t lo) { return (uint64_t)lo | (uint64_t)(1024 >> 4) << 32 | 1ull << 62; }
constexpr uint32_t FA_TILE_BYTES = 64 * 64 * 2; // one [64][64] bf16 tile (the LBO of an MN-major operand)
constexpr uint32_t FA_KSTEP_BYTES = 16 * 128;   // 16 rows: one k-step of an MN-major operand
// the [16 rows][32 columns] box at (column x, row y) of a 2-D fp32 tensor map += the 128B-swizzled box at src (2 KiB,
// 1024-aligned; the layout fa_dq_swz writes), in fp32 by the TMA unit (a reduce-add from shared memory). The issuing
// thread's bulk group: commit, then wait until the source has been read.
__device__ __forceinline__ void tma_add_box(const CUtensorMap *map, int x, int y, const float *src) {
    asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3}], [%1];\n"
                 ::"l"(map), "r"(smem_u32(src)), "r"(x), "r"(y) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
constexpr float FA_RESCALE_LOG2 = 8.f;   // the forward's running max moves when a row's grew by more than this (exp2 domain)
// a warp's dQ staging: its 16 rows × 64 columns as two [16][32] fp32 boxes of tma_add_box (128-byte swizzle: the 16-byte
// chunk c of row r at chunk c ^ (r & 7)), the float offset of (row r, column c). A thread's float2 stores at rows g,
// columns 8nd + 2t fill 2 chunks of each of 8 rows on distinct banks: no conflicts.
__device__ __forceinline__ int fa_dq_swz(int r, int c) { return (c >> 5) * 512 + r * 32 + ((((c & 31) >> 2) ^ (r & 7)) << 2) + (c & 3); }
// the A fragment of k-step kk (columns 16kk..16kk+15: n-tiles 2kk, 2kk+1) from a 64×64 fp32 accumulator, in bf16
__device__ __forceinline__ void wgmma_afrag(uint32_t (&a)[4], const float (&d)[32], int kk) {
#pragma unroll
    for (int x = 0; x < 4; ++x) a[x] = pack_bf16(d[8 * kk + 2 * x], d[8 * kk + 2 * x + 1]);
}

// mbarriers (shared memory, CTA scope) and the TMA unit's loads: the attention kernels' tile buffers
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// the issuing thread's arrival, announcing `bytes` that the copies it issues next will complete on `bar`
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    asm volatile("{\n.reg .pred p;\nMBAR_WAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra MBAR_WAIT_%=;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}
// the [64 rows][64 columns] box at (column x, row y) of a 2-D bf16 tensor map -> a 128B-swizzled tile at dst (the
// layout swz<64> writes), completing on mbarrier bar
__device__ __forceinline__ void tma_load_tile(bf16 *dst, const CUtensorMap *map, int x, int y, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(smem_u32(dst)), "l"(map), "r"(x), "r"(y), "r"(bar) : "memory");
}

// bytes (a multiple of 16) from global src to shared dst (both 16-byte aligned) by the TMA unit, completing on bar
__device__ __forceinline__ void bulk_load(void *dst, const void *src, uint32_t bytes, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

constexpr int FA_FWD_STAGES = 4;   // the forward's K/V ring: tile it + 2 loads while tiles it − 1 .. it + 1 are in use
template <int DV> constexpr size_t fa_fwd_smem_bytes(int Nc) {
    // 1024 to align the tiles, Q [128][64], K [NS][64][64], V [NS][64][DV], the key list (3 words a chunk) and its
    // length, 8 to align the mbarriers, the mbarriers (Q's; full and empty a stage)
    return 1024 + (size_t)(128 * 64 + FA_FWD_STAGES * 64 * (64 + DV)) * 2 + (size_t)Nc * 12 + 4 + 8 +
           (size_t)(1 + 2 * FA_FWD_STAGES) * 8;
}

template <int DV>
__global__ void __launch_bounds__(256, DV == 64 ? 2 : 1)
fa_fwd_wgmma_kernel(bf16 *__restrict__ out, float *__restrict__ lse, const __grid_constant__ CUtensorMap tq,
                    const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv,
                    const float *__restrict__ m, int T, int NH, int NHm, float sl2) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) // (the host pass compiles no body)
    constexpr int DQ = 64, NS = FA_FWD_STAGES;
    extern __shared__ uint4 fa_smem[];
    // tiles at 1024-byte boundaries (the swizzle pattern repeats every 8 rows of 128 bytes)
    bf16 *sQ = fa_align1024(fa_smem);                                                       // [2][64 × 64]
    bf16 *sK = sQ + 128 * DQ;                                                               // [NS][64 × 64]
    bf16 *sV = sK + NS * 64 * DQ;                                                           // [NS][DV/64][64 × 64]
    const int Nc = T / 64, nQB = (Nc + 1) / 2;
    int *sList = reinterpret_cast<int *>(sV + NS * 64 * DV);  // [Nc]
    float *sWA = reinterpret_cast<float *>(sList + Nc);       // [Nc]
    float *sWB = sWA + Nc;                                    // [Nc]
    int *sN = reinterpret_cast<int *>(sWB + Nc);
    const uint32_t qbar = (smem_u32(sN + 1) + 7) & ~7u, full0 = qbar + 8, empty0 = full0 + 8 * NS;

    // block L -> (bh, query block qb), heavy (late) query blocks first: causal (m == NULL) head by head, so that the
    // blocks in flight share their heads' K, V in L2; routed, heads fastest (there head by head is slower)
    const int L = blockIdx.x, nBH = gridDim.x / nQB;
    const int bh = m ? L % nBH : L / nQB, b = bh / NH, h = bh - b * NH;
    const int qb = nQB - 1 - (m ? L / nBH : L % nQB);
    const int qcA = 2 * qb, qcB = 2 * qb + 1;
    const bool hasB = qcB < Nc;
    const int last = hasB ? qcB : qcA;
    const int n = h / (NH / NHm);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int wg = warp >> 2, rloc = (warp & 3) * 16;   // warpgroup (chunk A + wg), the warp's first row in it

    // ---- compacted list of the key chunks this block needs, with each chunk's weight for A and B (0 = skip)
    if (warp == 0) {
        int cnt = 0;
        for (int base = 0; base <= last; base += 32) {
            const int c = base + lane;
            float wa = 0.f, wb = 0.f;
            if (c < qcA) {
                wa = m ? __ldg(m + ((size_t)(b * Nc + c) * NHm + n) * 2) : 1.f;
                wb = hasB ? wa : 0.f;
            } else if (c == qcA) {
                wa = 1.f;
                wb = hasB ? (m ? __ldg(m + ((size_t)(b * Nc + c) * NHm + n) * 2) : 1.f) : 0.f;
            } else if (c == qcB && hasB) {
                wb = 1.f;
            }
            const bool act = (wa != 0.f) || (wb != 0.f);
            const unsigned bal = __ballot_sync(0xffffffffu, act);
            if (act) {
                const int pos = cnt + __popc(bal & ((1u << lane) - 1u));
                sList[pos] = c; sWA[pos] = wa; sWB[pos] = wb;
            }
            cnt += __popc(bal);
        }
        if (lane == 0) *sN = cnt;
    } else if (tid == 32) {
        mbar_init(qbar, 1);
        for (int s = 0; s < NS; ++s) {
            mbar_init(full0 + 8 * s, 1);    // the issuing thread's arrival, then the copies' bytes
            mbar_init(empty0 + 8 * s, 8);   // every warp done with the stage
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    const int nact = *sN;   // ≥ 1: chunk A's own tile

    // the ring: thread 0 issues tile it's K and V by the TMA unit into stage it % NS, completing on its `full`
    // mbarrier; tile it + 2 goes into the stage of tile it − 2 once every warp has arrived on that one's `empty`
    const int row0 = b * T;
    auto issue = [&](int it) {
        const int kc = sList[it], st = it % NS;
        const uint32_t bar = full0 + 8 * st;
        mbar_expect_tx(bar, 64 * (DQ + DV) * 2);
        tma_load_tile(sK + st * 64 * DQ, &tk, h * DQ, row0 + kc * 64, bar);
#pragma unroll
        for (int j = 0; j < DV / 64; ++j) tma_load_tile(sV + st * 64 * DV + j * 64 * 64, &tv, h * DV + 64 * j, row0 + kc * 64, bar);
    };
    if (tid == 0) {
        mbar_expect_tx(qbar, (hasB ? 128 : 64) * DQ * 2);
        tma_load_tile(sQ, &tq, h * DQ, row0 + qcA * 64, qbar);
        if (hasB) tma_load_tile(sQ + 64 * DQ, &tq, h * DQ, row0 + qcB * 64, qbar);
        issue(0);
        if (nact > 1) issue(1);
    }

    float o[DV / 2], s[32];
#pragma unroll
    for (int i = 0; i < DV / 2; ++i) o[i] = 0.f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
    // descriptors' low words: this warpgroup's Q rows, K and V of stage 0 (stage st: st tiles on)
    const uint32_t qlo = wgmma_desc_lo(smem_u32(sQ + wg * 64 * DQ), 16), klo0 = wgmma_desc_lo(smem_u32(sK), 16),
                   vlo0 = wgmma_desc_lo(smem_u32(sV), FA_TILE_BYTES);
    const int myc = qcA + wg;
    // the last tile's P (bf16 A fragments) and V, whose product the next tile issues with its S; before the first tile
    // and after a tile of weight 0, P = 0 (with V of a loaded stage): issuing every product unconditionally keeps ptxas
    // from serializing the wgmmas (its warning C7520), for one idle product a warpgroup
    uint32_t pa[4][4], pvlo = vlo0;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) pa[kk][0] = pa[kk][1] = pa[kk][2] = pa[kk][3] = 0u;
    mbar_wait(qbar, 0);

    // per tile: O += P V of the last tile, S = Q Kᵀ of this one; wait; the softmax; P packed for the next tile. A tile of
    // weight 0 for a warpgroup (chunk B's own tile for A, chunk A's for B when the router sent it away) gets no softmax.
    for (int it = 0; it < nact; ++it) {
        const int st = it % NS;
        if (tid == 0 && it + 2 < nact) {
            if (it >= 2) mbar_wait(empty0 + 8 * ((it - 2) % NS), ((it - 2) / NS) & 1);
            issue(it + 2);
        }
        const int kc = sList[it];
        const float w = wg ? sWB[it] : sWA[it];
        mbar_wait(full0 + 8 * st, (it / NS) & 1);
        wgmma_fence();
        // O += P V: k-step kk = keys 16kk..16kk+15 (P's n-tiles 2kk, 2kk+1 as an A fragment; V rows 16kk.. at 16 · 128 bytes)
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) wgmma_rs(o, pa[kk], wgmma_desc_of(pvlo + kk * (FA_KSTEP_BYTES / 16)));
        // S = Q Kᵀ (the warpgroup's 64 rows × 64 keys): 4 k-steps of 16 dims (32 bytes along the rows)
        const uint32_t klo = klo0 + st * (64 * DQ * 2 / 16);
#pragma unroll
        for (int ks = 0; ks < DQ / 16; ++ks) wgmma_ss_n64<0, 0>(s, wgmma_desc_of(qlo + 2 * ks), wgmma_desc_of(klo + 2 * ks), ks);
        wgmma_commit();
        wgmma_wait<0>();   // this S, and the last tile's P V
        wgmma_keep(s);
        wgmma_keep(o);
        if (it >= 1 && lane == 0) mbar_arrive(empty0 + 8 * ((it - 1) % NS));   // this warp is done with tile it − 1
        if (w != 0.f) {
            // ---- online softmax (raw-score max, exponent s·sl2 − max·sl2 + log2 w; p = exp2(…)); s[4nt + e]: row rloc +
            // g + 8(e >> 1), key 8nt + 2t + (e & 1)
            if (kc == myc) {
#pragma unroll
                for (int i = 0; i < 32; ++i)
                    if (((i >> 2) << 3) + 2 * t + (i & 1) > rloc + g + ((i >> 1) & 1) * 8) s[i] = -INFINITY;
            }
            float mx[2] = {mrow[0], mrow[1]};
#pragma unroll
            for (int i = 0; i < 32; ++i) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            }
            // the running max moves only when a row of the warp's grew by more than FA_RESCALE_LOG2 (in the exp2
            // domain; then every row of the warp takes its new max and O, l are rescaled): p ≤ 2^FA_RESCALE_LOG2 in
            // between, and lse = max·sl2 + log2 l holds for whichever max l was summed against. Causal rows reach their
            // max early, so most tiles skip the rescale's multiplies (its first tile always rescales: max = −∞).
            if (__any_sync(0xffffffffu, (mx[0] - mrow[0]) * sl2 > FA_RESCALE_LOG2 || (mx[1] - mrow[1]) * sl2 > FA_RESCALE_LOG2)) {
                float alpha[2];
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    alpha[r] = fa_ex2((mrow[r] - mx[r]) * sl2);
                    mrow[r] = mx[r];
                    lrow[r] *= alpha[r];
                }
#pragma unroll
                for (int i = 0; i < DV / 2; ++i) o[i] *= alpha[(i >> 1) & 1];
            }
            // the weight goes into the exponent: w·2^x = 2^(x + log2 w) (w = 1 in every A layer and for 0/1 routing:
            // log2 w = 0), a multiply an element fewer
            const float lw = __log2f(w), ms[2] = {lw - mrow[0] * sl2, lw - mrow[1] * sl2};
            float ps[2] = {0.f, 0.f};
#pragma unroll
            for (int i = 0; i < 32; ++i) {
                s[i] = fa_ex2(fmaf(s[i], sl2, ms[(i >> 1) & 1]));
                ps[(i >> 1) & 1] += s[i];
            }
            lrow[0] += ps[0];
            lrow[1] += ps[1];
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) wgmma_afrag(pa[kk], s, kk);
        } else {
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) pa[kk][0] = pa[kk][1] = pa[kk][2] = pa[kk][3] = 0u;
        }
        pvlo = vlo0 + st * (64 * DV * 2 / 16);
    }
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_rs(o, pa[kk], wgmma_desc_of(pvlo + kk * (FA_KSTEP_BYTES / 16)));
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_keep(o);
    // ---- finalize: out = O / l (bf16), lse = (max·sl2 + log2 l)·ln2
    if (myc < Nc) {
        const size_t ldo = (size_t)NH * DV;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float l = lrow[r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = 1.f / l;
            const int row = myc * 64 + rloc + g + 8 * r;
            bf16 *op = out + ((size_t)b * T + row) * ldo + h * DV + 2 * t;
#pragma unroll
            for (int nv = 0; nv < DV / 8; ++nv)
                *reinterpret_cast<uint32_t *>(op + nv * 8) = pack_bf16(o[4 * nv + 2 * r] * inv, o[4 * nv + 2 * r + 1] * inv);
            if (t == 0) lse[((size_t)b * NH + h) * T + row] = (mrow[r] * sl2 + log2f(l)) * ATT_LN2;
        }
    }
#endif
}

// ------------------------------------------------------------------------------------------------------------------
// backward pre-pass: lse2 = lse·log2e and δ = dO·O (bf16 in, fp32) into ld2 [B][NH][T/64][lse2 64, δ 64] (a query
// tile's both in one 512-byte run: one bulk load, where two would take one TMA command a tile more), zero dq head
// columns (unless accumulating), zero dA[..,0]
// ------------------------------------------------------------------------------------------------------------------
__global__ void fa_bwd_pre_kernel(float *__restrict__ ld2, float *__restrict__ dq, int lddq,
                                  float *__restrict__ dA, const bf16 *__restrict__ dout, const bf16 *__restrict__ out,
                                  const float *__restrict__ lse, int B, int T, int NH, int NHm, int DQ, int DV) {
    const long gw = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;   // one warp per (b, i, h)
    const int lane = threadIdx.x & 31;
    const long total = (long)B * T * NH;
    if (gw >= total) return;
    const int h = (int)(gw % NH);
    const long bt = gw / NH;
    const int b = (int)(bt / T), i = (int)(bt - (long)b * T);
    const bf16 *po = out + bt * ((long)NH * DV) + (long)h * DV;
    const bf16 *pd = dout + bt * ((long)NH * DV) + (long)h * DV;
    float acc = 0.f;
    for (int d = 2 * lane; d < DV; d += 64) {
        const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(po + d));
        const float2 c = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(pd + d));
        acc = fmaf(a.x, c.x, fmaf(a.y, c.y, acc));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) {
        const size_t idx = ((size_t)b * NH + h) * T + i, idx2 = (idx - (i & 63)) * 2 + (i & 63);
        ld2[idx2] = lse[idx] * ATT_LOG2E;
        ld2[idx2 + 64] = acc;
    }
    if (dq) {
        float *pq = dq + bt * (long)lddq + (long)h * DQ;
        for (int d = lane; d < DQ; d += 32) pq[d] = 0.f;
    }
    if (dA && lane == 0 && gw < (long)B * (T / 64) * NHm) dA[gw * 2] = 0.f;
}

// dK, dV pairs out: written, or added (acc)
template <typename GT> __device__ __forceinline__ void store_pair(GT *p, float a, float b, bool acc);
template <> __device__ __forceinline__ void store_pair<float>(float *p, float a, float b, bool acc) {
    float2 v = make_float2(a, b);
    if (acc) { const float2 o = *reinterpret_cast<const float2 *>(p); v.x += o.x; v.y += o.y; }
    *reinterpret_cast<float2 *>(p) = v;
}
template <> __device__ __forceinline__ void store_pair<bf16>(bf16 *p, float a, float b, bool acc) {
    if (acc) { const float2 o = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(p)); a += o.x; b += o.y; }
    *reinterpret_cast<uint32_t *>(p) = pack_bf16(a, b);
}

// ------------------------------------------------------------------------------------------------------------------
// backward on wgmma: block = (b·NH + h, key chunk kc) as one warpgroup (warp w: keys 16w..16w+15 of the
// accumulators' rows; dK, dV in registers). Query chunks qc = kc .. Nc−1 if m[kc] != 0 (or m == NULL), else only
// qc = kc. Per query tile:
//   S^T = K Q^T and dP^T = V dO^T (wgmma m64n64k16, all four operands K-major from the shared tiles),
//   P^T = w·exp2(S·sl2 − lse2), dS^T = P^T(dP^T − δ) and the router partial on the accumulators,
//   dV += P^T dO and dK += dS^T Q (P^T, dS^T from registers; dO, Q read MN-major: stored [query][column]),
//   dS^T -> shared memory (bf16), dQ = dS K (wgmma with both operands MN-major: dS^T is stored [key][query], K
//   [key][dim]) -> added to dq: each warp's 16 rows go to a shared staging tile (fp32, two 128B-swizzled [16][32]
//   boxes) and from there into dq by two 2-D reduce-adds of the TMA unit (tensor map tdq). The commands are few
//   because the TMA unit also serves the loads: one bulk reduce-add a row (16 a warp and tile) would hold the next
//   tile's loads back.
// V and dO are stored as DV/64 tiles of [64 rows][64 columns] (the MN-major layout of dO for dV's product). Thread 0
// has the TMA unit load them (tensor maps, as the forward) into two buffers of mbarriers, no block barrier at a tile's
// top.
// ------------------------------------------------------------------------------------------------------------------
constexpr int FA_BWD_GROUP = 16;
template <int DV, typename GT>
__global__ void __launch_bounds__(128, 2)
fa_bwd_wgmma_kernel(GT *__restrict__ dk, int lddk, GT *__restrict__ dv, int lddv, float *__restrict__ dA,
                    const __grid_constant__ CUtensorMap tdo, const float *__restrict__ ld2, const __grid_constant__ CUtensorMap tq,
                    const __grid_constant__ CUtensorMap tk, const __grid_constant__ CUtensorMap tv,
                    const float *__restrict__ m, int T, int NH, int NHm, float scale, float sl2, int accum,
                    const float2 *__restrict__ rope, const __grid_constant__ CUtensorMap tdq, int own_sg) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) // (the host pass compiles no body)
    constexpr int DQ = 64;
    extern __shared__ uint4 fa_smem[];
    bf16 *sK = fa_align1024(fa_smem);                // 64 × 64
    bf16 *sS = sK + 64 * DQ;                         // 64 × 64, dS^T [key][query]
    bf16 *sV = sS + 64 * 64;                         // [DV/64][64 × 64]
    bf16 *sQ = sV + 64 * DV;                         // [2][64 × 64]
    bf16 *sO = sQ + 2 * 64 * DQ;                     // [2][DV/64][64 × 64]   (dO)
    float *sDQ = reinterpret_cast<float *>(sO + 2 * 64 * DV);  // [4][2][16 × 32] dQ staging (fp32; 1024-aligned)
    float *sL = sDQ + 64 * 64;                                 // [2][lse2 64, δ 64]
    float *sRed = sL + 2 * 128;                                // [4]
    const uint32_t full0 = (smem_u32(sRed + 4) + 7) & ~7u;  // [2] mbarriers

    const int Nc = T / 64;
    // block L -> (bh, kc) in groups of G key chunks: every head's blocks of chunks [Gg, Gg + G) (head by head, chunk
    // fastest) before the next group's. The blocks in flight cover a few heads or a few chunks of every head, so their
    // Q, dO tiles and dq accumulators stay in L2 (heads fastest would spread them over every head). Causal
    // (m == NULL): G = Nc, whole heads in turn (head-major). Routed: G = 16, so every head's routed early chunks, whose
    // blocks loop over the most query chunks, start first (head-major, a routed early chunk of the last head would
    // start late and run on alone).
    const int G = m ? min(FA_BWD_GROUP, Nc) : Nc;
    const int BH = gridDim.x / Nc, L = blockIdx.x, grp = L / (BH * G), r = L - grp * BH * G;
    const int gs = min(G, Nc - grp * G), bh = r / gs, kc = grp * G + r % gs;
    const int b = bh / NH, h = bh - b * NH;
    const int n = h / (NH / NHm);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const float wkc = m ? __ldg(m + ((size_t)(b * Nc + kc) * NHm + n) * 2) : 1.f;
    const bool act = (wkc != 0.f);
    const int nq = act ? (Nc - kc) : 1;

    // thread 0 issues every load by the TMA unit: query tile it (Q, dO, lse2, δ; with tile 0 the block's K and V) into
    // buffer it & 1, completing on that buffer's mbarrier. Tile it + 1 goes in at the top of iteration it: every warp
    // has then passed tile it − 1's last reads of the buffer (the barrier before dQ, the wait for dV's and dK's products)
    if (tid == 0) {
        mbar_init(full0, 1);
        mbar_init(full0 + 8, 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    const int row0 = b * T;
    const float *lb = ld2 + ((size_t)b * NH + h) * T * 2;
    auto issue = [&](int it) {
        const int qc = kc + it, st = it & 1;
        const uint32_t bar = full0 + 8 * st;
        mbar_expect_tx(bar, 64 * (DQ + DV) * 2 * (it == 0 ? 2 : 1) + 2 * 64 * 4);   // Q, dO (K, V), lse2, δ
        if (it == 0) {
            tma_load_tile(sK, &tk, h * DQ, row0 + kc * 64, bar);
#pragma unroll
            for (int j = 0; j < DV / 64; ++j) tma_load_tile(sV + j * 64 * 64, &tv, h * DV + 64 * j, row0 + kc * 64, bar);
        }
        tma_load_tile(sQ + st * 64 * DQ, &tq, h * DQ, row0 + qc * 64, bar);
#pragma unroll
        for (int j = 0; j < DV / 64; ++j) tma_load_tile(sO + st * 64 * DV + j * 64 * 64, &tdo, h * DV + 64 * j, row0 + qc * 64, bar);
        bulk_load(sL + st * 128, lb + qc * 128, 128 * 4, bar);
    };
    if (tid == 0) issue(0);

    float dKa[32], dVa[DV / 2];
#pragma unroll
    for (int i = 0; i < 32; ++i) dKa[i] = 0.f;
#pragma unroll
    for (int i = 0; i < DV / 2; ++i) dVa[i] = 0.f;
    float dAacc = 0.f;
    // descriptors' low words (K-major operands: LBO 16; MN-major: LBO = FA_TILE_BYTES), the query tiles' of buffer 0
    constexpr uint32_t MN = ((FA_TILE_BYTES - 16) >> 4) << 16;   // LBO 16 -> FA_TILE_BYTES
    const uint32_t klo = wgmma_desc_lo(smem_u32(sK), 16), vlo = wgmma_desc_lo(smem_u32(sV), 16),
                   slo = wgmma_desc_lo(smem_u32(sS), FA_TILE_BYTES), qlo0 = wgmma_desc_lo(smem_u32(sQ), 16),
                   olo0 = wgmma_desc_lo(smem_u32(sO), 16);

    for (int it = 0; it < nq; ++it) {
        if (tid == 0 && it + 1 < nq) issue(it + 1);
        mbar_wait(full0 + 8 * (it & 1), (it >> 1) & 1);
        const int qc = kc + it;
        const bool diag = (it == 0);
        const float w = diag ? 1.f : wkc;
        const float *cL = sL + (it & 1) * 128, *cD = cL + 64;
        const uint32_t qlo = qlo0 + (it & 1) * (64 * DQ * 2 / 16), olo = olo0 + (it & 1) * (64 * DV * 2 / 16);

        // ---- S^T = K Q^T, dP^T = V dO^T (k-steps of 16 columns: 32 bytes along a 128-byte row, then the next tile)
        float s[32], dp[32];
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < DQ / 16; ++ks)
            wgmma_ss_n64<0, 0>(s, wgmma_desc_of(klo + 2 * ks), wgmma_desc_of(qlo + 2 * ks), ks);
#pragma unroll
        for (int ks = 0; ks < DV / 16; ++ks) {
            const uint32_t off = (ks >> 2) * FA_TILE_BYTES + 32 * (ks & 3);
            wgmma_ss_n64<0, 0>(dp, wgmma_desc_of(vlo + off / 16), wgmma_desc_of(olo + off / 16), ks);
        }
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_keep(s);
        wgmma_keep(dp);
        // ---- P^T, dS^T, router gradient (s[4nt + e]: key 16w + g + 8(e >> 1), query 8nt + 2t + (e & 1))
        const int ki0 = warp * 16 + g;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
            const float2 L2 = *reinterpret_cast<const float2 *>(cL + nt * 8 + 2 * t);
            const float2 D2 = *reinterpret_cast<const float2 *>(cD + nt * 8 + 2 * t);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = 4 * nt + e;
                const float lq = (e & 1) ? L2.y : L2.x, dq_ = (e & 1) ? D2.y : D2.x;
                float pe = fa_ex2(fmaf(s[i], sl2, -lq));
                if (diag && (ki0 + ((e >> 1) << 3) > nt * 8 + 2 * t + (e & 1))) pe = 0.f;
                const float dd = dp[i] - dq_;
                dAacc = fmaf(pe, dd, dAacc);
                const float P = (diag && own_sg) ? 0.f : w * pe; // §6.2 (6.2e): no gradient through the own chunk's pairs
                s[i] = P;
                dp[i] = P * dd;
            }
        }
        if (diag) dAacc = 0.f;   // the own chunk's pairs carry no router gradient (only chunks c < chunk(i))
        // ---- dV += P^T dO, dK += dS^T Q (k-step kk = queries 16kk..16kk+15: rows 16kk.. of the tiles, 2048 bytes on)
        uint32_t pa[4][4], sa[4][4];
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            wgmma_afrag(pa[kk], s, kk);
            wgmma_afrag(sa[kk], dp, kk);
            // dS^T (bf16) to shared memory: rows = keys ki0, ki0+8; columns = queries of n-tiles 2kk, 2kk+1
            *reinterpret_cast<uint32_t *>(sS + swz<64>(ki0, 2 * kk) + 2 * t) = sa[kk][0];
            *reinterpret_cast<uint32_t *>(sS + swz<64>(ki0 + 8, 2 * kk) + 2 * t) = sa[kk][1];
            *reinterpret_cast<uint32_t *>(sS + swz<64>(ki0, 2 * kk + 1) + 2 * t) = sa[kk][2];
            *reinterpret_cast<uint32_t *>(sS + swz<64>(ki0 + 8, 2 * kk + 1) + 2 * t) = sa[kk][3];
        }
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            wgmma_rs(dVa, pa[kk], wgmma_desc_of(olo + MN + kk * (FA_KSTEP_BYTES / 16)));
            wgmma_rs(dKa, sa[kk], wgmma_desc_of(qlo + MN + kk * (FA_KSTEP_BYTES / 16)));
        }
        wgmma_commit();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();   // dS^T is in shared memory
        // ---- dQ (the tile's 64 queries × 64 dims) = dS K: A = dS^T [key][query] read MN-major, B = K [key][dim] likewise
        float acc[32];
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
            wgmma_ss_n64<1, 1>(acc, wgmma_desc_of(slo + kk * (FA_KSTEP_BYTES / 16)),
                               wgmma_desc_of(klo + MN + kk * (FA_KSTEP_BYTES / 16)), kk);
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_keep(dVa);
        wgmma_keep(dKa);
        wgmma_keep(acc);
        // this warp's 16 rows (16w + g, 16w + g + 8) to its staging boxes, then lane 0 adds both boxes to dq
        float *wq = sDQ + warp * 16 * 64;
        if (lane == 0) bulk_wait_read();   // the previous tile's reduce-add has read the boxes
        __syncwarp();
#pragma unroll
        for (int nd = 0; nd < DQ / 8; ++nd) {
            *reinterpret_cast<float2 *>(wq + fa_dq_swz(g, nd * 8 + 2 * t)) =
                make_float2(acc[4 * nd] * scale, acc[4 * nd + 1] * scale);
            *reinterpret_cast<float2 *>(wq + fa_dq_swz(g + 8, nd * 8 + 2 * t)) =
                make_float2(acc[4 * nd + 2] * scale, acc[4 * nd + 3] * scale);
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");   // the boxes, visible to the TMA unit
        __syncwarp();
        if (lane == 0) {
            const int y = b * T + qc * 64 + warp * 16;
            tma_add_box(&tdq, h * DQ, y, wq);
            tma_add_box(&tdq, h * DQ + 32, y, wq + 512);
            bulk_commit();
        }
    }
    if (lane == 0) bulk_wait_read();   // shared memory outlives the last reads
    // ---- write dK (scaled; with rope, rotated back by RoPE (4.2): columns i and i + 32 of a row, n-tiles nd and nd + 4
    // of the same thread), dV; dA block reduction
    if (rope) {
#pragma unroll
        for (int nd = 0; nd < DQ / 16; ++nd)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const float4 cs = *reinterpret_cast<const float4 *>(rope + (size_t)(kc * 64 + warp * 16 + g + 8 * r) * (DQ / 2) +
                                                                    nd * 8 + 2 * t);
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float c = e ? cs.z : cs.x, sn = e ? cs.w : cs.y;
                    float &x1 = dKa[4 * nd + 2 * r + e], &x2 = dKa[4 * (nd + DQ / 16) + 2 * r + e];
                    const float y1 = x1 * c + x2 * sn, y2 = x2 * c - x1 * sn;
                    x1 = y1;
                    x2 = y2;
                }
            }
    }
    {
        const size_t row0 = (size_t)b * T + (size_t)kc * 64 + warp * 16 + g;
        GT *dkp = dk + row0 * lddk + h * DQ + 2 * t;
        GT *dvp = dv + row0 * lddv + h * DV + 2 * t;
#pragma unroll
        for (int nd = 0; nd < DQ / 8; ++nd) {
            store_pair<GT>(dkp + nd * 8, dKa[4 * nd] * scale, dKa[4 * nd + 1] * scale, accum);
            store_pair<GT>(dkp + (size_t)8 * lddk + nd * 8, dKa[4 * nd + 2] * scale, dKa[4 * nd + 3] * scale, accum);
        }
#pragma unroll
        for (int nv = 0; nv < DV / 8; ++nv) {
            store_pair<GT>(dvp + nv * 8, dVa[4 * nv], dVa[4 * nv + 1], accum);
            store_pair<GT>(dvp + (size_t)8 * lddv + nv * 8, dVa[4 * nv + 2], dVa[4 * nv + 3], accum);
        }
    }
    if (m && dA && act && kc < Nc - 1) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) dAacc += __shfl_xor_sync(0xffffffffu, dAacc, o);
        if (lane == 0) sRed[warp] = dAacc;
        __syncthreads();
        if (tid == 0) atomicAdd(dA + ((size_t)(b * Nc + kc) * NHm + n) * 2, sRed[0] + sRed[1] + sRed[2] + sRed[3]);
    }
#endif
}

// ------------------------------------------------------------------------------------------------------------------
// host entry points
// ------------------------------------------------------------------------------------------------------------------
static bool flash_bf16_supported(int dq, int dv) { return dq == 64 && (dv == 64 || dv == 128); }

static void fa_check_args(const char *who, const AttnArgs *a) {
    const void *q = a->q, *k = a->k, *v = a->v;
    const int ldqk = a->ldqk, ldv = a->ldv, T = a->T, NH = a->heads, NHm = attn_mask_heads(a), dq = a->head_k,
              dv = a->head_v;
    const bool ok = flash_bf16_supported(dq, dv) && T % 64 == 0 && T > 0 && ldqk % 8 == 0 && ldv % 8 == 0 &&
                    NHm > 0 && NH % NHm == 0 && (uintptr_t)q % 16 == 0 && (uintptr_t)k % 16 == 0 &&
                    (uintptr_t)v % 16 == 0;
    if (!ok) {
        fprintf(stderr, "%s: unsupported arguments (need (dq,dv) in {(64,64),(64,128)}, T%%64==0, ldqk%%8==0, ldv%%8==0, "
                "16B-aligned q/k/v, NH%%NHm==0): T=%d ldqk=%d ldv=%d NH=%d NHm=%d dq=%d dv=%d\n", who, T, ldqk, ldv,
                NH, NHm, dq, dv);
        exit(1);
    }
}

// the 2-D tensor map of a rows × cols matrix at p (row stride ld elements of esize bytes) in boxes of bc columns × br
// rows, 128-byte swizzled: what the attention kernels' TMA copies read and write. cuTensorMapEncodeTiled is the
// driver's, found through the runtime (no -lcuda).
static CUtensorMap fa_tensor_map_of(const void *p, CUtensorMapDataType type, size_t esize, size_t rows, int cols, int ld,
                                    int bc, int br) {
    static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
    if (!encode) {
        cudaDriverEntryPointQueryResult qr;
        CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&encode, 12000, cudaEnableDefault, &qr));
        if (qr != cudaDriverEntryPointSuccess || !encode) {
            fprintf(stderr, "error: flash attention: the CUDA driver has no cuTensorMapEncodeTiled\n");
            exit(1);
        }
    }
    CUtensorMap map;
    const cuuint64_t dim[2] = {(cuuint64_t)cols, (cuuint64_t)rows}, stride[1] = {(cuuint64_t)ld * esize};
    const cuuint32_t box[2] = {(cuuint32_t)bc, (cuuint32_t)br}, step[2] = {1, 1};
    const CUresult r = encode(&map, type, 2, (void *)p, dim, stride, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE,
                              CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "error: flash attention: cuTensorMapEncodeTiled failed (%d) for %zu x %d, %zu-byte elements, row stride %d\n",
                (int)r, rows, cols, esize, ld);
        exit(1);
    }
    return map;
}
// bf16 q, k, v, dO in the [64][64] tiles both kernels load
static CUtensorMap fa_tensor_map(const bf16 *p, size_t rows, int cols, int ld) {
    return fa_tensor_map_of(p, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, sizeof(bf16), rows, cols, ld, 64, 64);
}

template <int DV> static void fa_launch_fwd_wgmma(bf16 *out, float *lse, const AttnArgs *a, cudaStream_t st) {
    const bf16 *q = (const bf16 *)a->q, *k = (const bf16 *)a->k, *v = (const bf16 *)a->v;
    const int B = a->B, T = a->T, NH = a->heads, ldqk = a->ldqk, ldv = a->ldv, Nc = T / 64, nQB = (Nc + 1) / 2;
    const size_t smem = fa_fwd_smem_bytes<DV>(Nc);
    static size_t set = 0;
    if (smem > set) {
        smem_attr(fa_fwd_wgmma_kernel<DV>, smem);
        set = smem;
    }
    const float sl2 = 0.125f * ATT_LOG2E; // 1/sqrt(64)
    const size_t rows = (size_t)B * T;
    fa_fwd_wgmma_kernel<DV><<<B * NH * nQB, 256, smem, st>>>(out, lse, fa_tensor_map(q, rows, NH * 64, ldqk),
                                                             fa_tensor_map(k, rows, NH * 64, ldqk),
                                                             fa_tensor_map(v, rows, NH * DV, ldv), a->mask, T, NH,
                                                             attn_mask_heads(a), sl2);
    CUDA_CHECK(cudaGetLastError());
}

// Forward, on the bf16 q, k, v of *a (bf16 values behind its real pointers). out [B*T][heads*head_v] bf16 (written),
// lse [B][heads][T] fp32 (written, natural log).
static void flash_bf16_forward(bf16 *out, float *lse, const AttnArgs *a, cudaStream_t st) {
    fa_check_args("flash_bf16_forward", a);
    if (a->head_v == 64) fa_launch_fwd_wgmma<64>(out, lse, a, st);
    else fa_launch_fwd_wgmma<128>(out, lse, a, st);
}

// The gradients of flash_bf16_backward. dq: fp32, row stride lddq, head j at j*head_k; dk (stride lddk), dv (stride
// lddv): fp32 (grads_bf16 == 0) or bf16 (grads_bf16 == 1). accumulate == 0: dq, dk, dv are WRITTEN (dq zeroed by the
// pre-pass, then atomically accumulated over key chunks); accumulate == 1: all three are ADDED to (dq += , dk += ,
// dv += ). dA[...,0] (when the mask and dA are non-NULL) is written: zeroed, then the G heads of a group add into it;
// dA[...,1] is never touched. rope_dk (NULL: none; the A layer): dk is rotated back by RoPE (4.2) as it is written,
// rope_dk the (cos, sin) table [T][head_k/2] of rope_table.
typedef struct {
    float *dq;
    void *dk, *dv;
    int lddq, lddk, lddv;
    int grads_bf16, accumulate;
    float *dA;
    const float2 *rope_dk;
} FlashGrads;

// dA: g->dA where the mask is given, else NULL
template <int DV, typename GT>
static void fa_launch_bwd_wgmma(const FlashGrads *g, float *dA, const bf16 *dout, const float *ld2, const AttnArgs *a,
                                cudaStream_t st) {
    const bf16 *q = (const bf16 *)a->q, *k = (const bf16 *)a->k, *v = (const bf16 *)a->v;
    const int B = a->B, T = a->T, NH = a->heads, ldqk = a->ldqk, ldv = a->ldv, Nc = T / 64;
    // 1024 bytes to align the tiles, K, dS^T [64][64], V [64][DV], Q [2][64][64], dO [2][64][DV], the dQ staging tile,
    // lse2 and δ [2][2][64], sRed, 8 to align the two mbarriers
    const size_t smem = 1024 + (size_t)(4 * 64 * 64 + 3 * 64 * DV) * sizeof(bf16) +
                        (64 * 64 + 4 * 64 + 4) * sizeof(float) + 8 + 2 * 8;
    static bool set = false;
    if (!set) {
        smem_attr(fa_bwd_wgmma_kernel<DV, GT>, smem);
        set = true;
    }
    const float scale = 0.125f; // 1/sqrt(64)
    const size_t rows = (size_t)B * T;
    fa_bwd_wgmma_kernel<DV, GT><<<B * NH * Nc, 128, smem, st>>>(
        (GT *)g->dk, g->lddk, (GT *)g->dv, g->lddv, dA, fa_tensor_map(dout, rows, NH * DV, NH * DV), ld2,
        fa_tensor_map(q, rows, NH * 64, ldqk), fa_tensor_map(k, rows, NH * 64, ldqk), fa_tensor_map(v, rows, NH * DV, ldv),
        a->mask, T, NH, attn_mask_heads(a), scale, scale * ATT_LOG2E, g->accumulate, g->rope_dk,
        fa_tensor_map_of(g->dq, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, sizeof(float), rows, NH * 64, g->lddq, 32, 16), a->own_sg);
    CUDA_CHECK(cudaGetLastError());
}

static float *g_fa_scratch = nullptr;
static size_t g_fa_scratch_n = 0;

// Backward into the gradients *g (FlashGrads), from the bf16 dout, out and q, k, v of *a. Uses a static scratch of
// 2·B·heads·T floats (lse·log2e, δ): not thread-safe, one stream at a time.
static void flash_bf16_backward(const FlashGrads *g, const bf16 *dout, const bf16 *out, const float *lse,
                                const AttnArgs *a, cudaStream_t st) {
    const float *m = a->mask;
    float *dq = g->dq, *dA = g->dA;
    const void *dk = g->dk, *dv = g->dv;
    const int lddq = g->lddq, lddk = g->lddk, lddv = g->lddv, grads_bf16 = g->grads_bf16, accumulate = g->accumulate;
    const int B = a->B, T = a->T, NH = a->heads, NHm = attn_mask_heads(a), dq_ = a->head_k, dvh = a->head_v;
    fa_check_args("flash_bf16_backward", a);
    const int al = grads_bf16 ? 8 : 4;
    if (((uintptr_t)dq % 16) || (lddq % 4) || (lddk % al) || (lddv % al) || ((uintptr_t)dk % 16) || ((uintptr_t)dv % 16)) {
        fprintf(stderr, "flash_bf16_backward: dq/dk/dv must be 16-byte aligned with 16-byte row strides\n");
        exit(1);
    }
    const size_t need = (size_t)2 * B * NH * T;
    if (need > g_fa_scratch_n) {
        if (g_fa_scratch) CUDA_CHECK(cudaFree(g_fa_scratch));
        CUDA_CHECK(cudaMalloc(&g_fa_scratch, need * sizeof(float)));
        g_fa_scratch_n = need;
    }
    float *ld2 = g_fa_scratch;
    {
        const long warps = (long)B * T * NH;
        const int threads = 256;
        const long blocks = (warps * 32 + threads - 1) / threads;
        fa_bwd_pre_kernel<<<(unsigned)blocks, threads, 0, st>>>(ld2, accumulate ? nullptr : dq, lddq,
                                                                (m && dA) ? dA : nullptr, dout, out, lse, B, T, NH, NHm,
                                                                dq_, dvh);
        CUDA_CHECK(cudaGetLastError());
    }
    float *dAp = m ? dA : nullptr;
    if (dvh == 64) {
        if (grads_bf16) fa_launch_bwd_wgmma<64, bf16>(g, dAp, dout, ld2, a, st);
        else fa_launch_bwd_wgmma<64, float>(g, dAp, dout, ld2, a, st);
    } else {
        if (grads_bf16) fa_launch_bwd_wgmma<128, bf16>(g, dAp, dout, ld2, a, st);
        else fa_launch_bwd_wgmma<128, float>(g, dAp, dout, ld2, a, st);
    }
}

// ---- the softmax op's entry points: the bf16 kernels in bf16 mode where they take the head dims, else the
// TF32 kernels (3xTF32 in fp32 mode). In bf16 mode q, k, v are stored in bf16 (their producers write them so) and go
// to the bf16 kernels as they are; the output is stored in bf16 where AttnArgs.out_mp says so (the A and N layers'),
// else (the tests' fp32 outputs) the kernels' bf16 output is widened to fp32. The gradient dout is fp32 and copied. NATSL_ATTN_BF16=0
// in the environment keeps the TF32 kernels in bf16 mode: on the fp32 values of the bf16 operands, the output rounded
// to bf16 where it is stored so. train_natsl.c -p bf16 rounds the same values.
static int attention_in_bf16(const AttnArgs *a) {
    return g_bf16 && env_flag("NATSL_ATTN_BF16", 1) && flash_bf16_supported(a->head_k, a->head_v);
}
static int attention_out_bf16(const AttnArgs *a) { return g_bf16 && a->out_mp; }
// The bf16 output operands of one call of the bf16 kernels (which read q, k, v as stored), out and dout (packed
// [B*T][heads*head_v]): out itself where it is stored in bf16, else a scratch; dout (fp32, the backward's) is copied
// by the caller into its scratch.
typedef struct { bf16 *out, *dout; } AttnBf16;
static AttnBf16 attention_bf16_operands(const AttnArgs *a, real *out) {
    size_t nv = (size_t)a->B * a->T * a->heads * a->head_v;
    bf16 *buf = (bf16 *)device_scratch(SCRATCH_ATTN_BF16, 2 * nv * sizeof(bf16));
    AttnBf16 c = {attention_out_bf16(a) ? (bf16 *)out : buf, buf + nv};
    return c;
}
// For the TF32 kernels in bf16 mode: *a gets the fp32 values of q, k, v; *out and *dout, when given and stored in bf16,
// are widened too (packed) and pointed at their copies.
static void attention_widen(AttnArgs *a, const real **out, const real **dout) {
    const real *x[5] = {a->q, a->k, a->v, out ? *out : NULL, dout ? *dout : NULL};
    const int hk = a->heads * a->head_k, hv = a->heads * a->head_v;
    const int ld[5] = {a->ldqk, a->ldqk, a->ldv, hv, hv}, cols[5] = {hk, hk, hv, hv, hv};
    widen_operands(SCRATCH_ATTN_WIDE, x, ld, cols, out && attention_out_bf16(a) ? 5 : 3, (size_t)a->B * a->T);
    a->q = x[0]; a->k = x[1]; a->v = x[2];
    if (out) { *out = x[3]; *dout = x[4]; }
}

// Operands in AttnArgs (common/layout.h); out [B*T][heads*head_v], lse [B][heads][T].
static void attention_forward(real *out, real *lse, const AttnArgs *args) {
    PROF_OP();
    int B = args->B, T = args->T, NH = args->heads;
    int dq = args->head_k, dvh = args->head_v;
    size_t BT = (size_t)B * T;
    cudaStream_t st = 0;
    if (attention_in_bf16(args)) {
        AttnBf16 c = attention_bf16_operands(args, out);
        flash_bf16_forward(c.out, lse, args, st);
        if (!attention_out_bf16(args)) rows_from_bf16(out, NH * dvh, c.out, NH * dvh, BT, NH * dvh);
        return;
    }
    AttnArgs w = *args;
    float *o = out;
    if (g_bf16) attention_widen(&w, NULL, NULL);
    if (attention_out_bf16(args)) o = (float *)device_scratch(SCRATCH_ATTN_BF16, BT * NH * dvh * sizeof(float));
    attn_check_args("attention_forward", &w);
#define ATT_FWD_CASE(A, C)                                                                                          \
    if (dq == A && dvh == C) {                                                                                      \
        if (g_attn_passes == 3) launch_fwd<A, C, true>(o, lse, &w, st);                                             \
        else launch_fwd<A, C, false>(o, lse, &w, st);                                                               \
        if (o != out) rows_to_bf16((bf16 *)out, NH * dvh, o, NH * dvh, BT, NH * dvh);                               \
        return;                                                                                                     \
    }
    ATT_SHAPES(ATT_FWD_CASE)
#undef ATT_FWD_CASE
    fprintf(stderr, "attention_forward: unsupported head dims dq=%d dvh=%d\n", dq, dvh);
    exit(1);
}

static float *g_att_scratch = nullptr;
static size_t g_att_scratch_n = 0;

// The bf16 kernels' part of attention_backward. dk16, dv16 (NULL: dk, dv as attention_backward writes them; the A
// layer's W_qkv operand): dk, rotated back by RoPE (4.2), and dv in bf16 there (row strides ldqk, ldv), by the kernel.
static void attention_backward_flash(real *dq, real *dk, real *dv, real *dA, const real *dout, const real *out,
                                     const real *lse, const AttnArgs *args, bf16 *dk16, bf16 *dv16) {
    PROF_OP();
    int B = args->B, T = args->T, NH = args->heads;
    size_t BT = (size_t)B * T, nv = (size_t)NH * args->head_v;
    AttnBf16 c = attention_bf16_operands(args, (real *)out);
    const bf16 *d16 = (const bf16 *)dout;
    if (!attention_out_bf16(args)) {
        rows_to_bf16(c.out, (int)nv, out, (int)nv, BT, (int)nv);
        rows_to_bf16(c.dout, (int)nv, dout, (int)nv, BT, (int)nv);
        d16 = c.dout;
    }
    const int kv16 = dk16 != NULL;
    const FlashGrads g = {dq, kv16 ? (void *)dk16 : dk, kv16 ? (void *)dv16 : dv, args->ldqk, args->ldqk, args->ldv,
                          kv16, 0, dA, kv16 ? rope_table(T, args->head_k) : NULL};
    flash_bf16_backward(&g, d16, c.out, lse, args, 0);
}
// WRITES dq, dk, dv (their heads' columns) and dA[...,0] (when the mask is given). dout is stored in bf16 where the
// output is (AttnArgs.out_mp): the bf16 kernels read it as it is (else a bf16 copy), the TF32 ones an fp32 copy.
static void attention_backward(real *dq, real *dk, real *dv, real *dA, const real *dout, const real *out,
                               const real *lse, const AttnArgs *args) {
    PROF_OP();
    int B = args->B, T = args->T, NH = args->heads, NHm = attn_mask_heads(args);
    int dq_ = args->head_k, dvh = args->head_v;
    cudaStream_t st = 0;
    if (attention_in_bf16(args)) {
        attention_backward_flash(dq, dk, dv, dA, dout, out, lse, args, NULL, NULL);
        return;
    }
    AttnArgs w = *args;
    if (g_bf16) attention_widen(&w, &out, &dout);
    const float *m = w.mask;
    int ldqk = w.ldqk;
    attn_check_args("attention_backward", &w);
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
            launch_bwd<A, C, true>(dq, dk, dv, dA, dout, lse2, delta, &w, st);                                     \
        else launch_bwd<A, C, false>(dq, dk, dv, dA, dout, lse2, delta, &w, st);                                   \
        return;                                                                                                     \
    }
    ATT_SHAPES(ATT_BWD_CASE)
#undef ATT_BWD_CASE
    fprintf(stderr, "attention_backward: unsupported head dims dq=%d dvh=%d\n", dq_, dvh);
    exit(1);
}

// ================================================================================================
// Appendix D. The GDN kernels: the token recurrence and the chunked WY/UT form
// ================================================================================================

// The op's path: gdn_op_forward / gdn_op_backward (the end of this appendix) → gdn_operands (the operands each kernel
// family reads) → gdnc::forward / gdnc::backward (a GA of pointers into the workspace) → gdnc::fwd_impl / bwd_impl →
// prep_pass, state_pass and the output or gradient kernels; in bf16 mode on the *_bf16 kernels, else on the fp32
// ones (TF32 block matmuls in bf16 mode); shapes the chunked form does not take run the token recurrence
// (gdn_tokens_forward / backward). Definitions come before their uses: the kernels first, the host side of each form
// after them, the op's entry points last.

// The gradients the op's backward writes (or, dv with GdnArgs.dv_add, adds to), in fp32: gdn_op_backward's outputs, or
// its fp32 scratch where it stores them in bf16 (GdnArgs.grads_mp). dA: the routing mask's gradient (NULL: no mask).
typedef struct { float *dq, *dk, *dv, *dg, *dbeta, *dA; } GdnGrads;

// ---- the GDN op with chunk commits (§3.2, §5.4): token recurrence (the fallback of gdn_op_*) ------------
// Same semantics and layouts as train_natsl.c's gdn_op_forward/backward (its backward accumulates every
// gradient, into buffers the caller zeroed; the chunked kernels below write them). Parallelization: the delta
// rule is separable over value columns j (Z[:, j] evolves using only k̂, q̂, v[j], α, β), so one block =
// one warp owns (b, h) and VB = 32/P value columns; P lanes share a column, each lane keeping rows
// i = r·P + lane%P (r < GDN_R) of that column of the state in registers (P·GDN_R >= dk). Single-warp
// blocks: B·H·dv·P/32 of them (384 at B=2 for the 340M shapes), so the sequential token loops of many
// warps overlap on each SM; every reduction is a warp shuffle.
#define GDN_R 32

template <int P> __device__ __forceinline__ float sum_rows(float x) { // over the P lanes of one column
#pragma unroll
    for (int o = 1; o < P; o <<= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
template <int P> __device__ __forceinline__ float sum_cols(float x) { // over the 32/P columns of a warp
#pragma unroll
    for (int o = P; o < 32; o <<= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// The op's chunk-start states (the layer's `state` activation): fp32, or bf16 in bf16 mode (st16 = 1: half the memory
// and traffic). With bf16 states each chunk runs from its stored, rounded start state while the carried state keeps
// full precision: S^start_{c+1} = (1 − m) Dec_c S + m (Z_last + Dec_c (S − s0)), s0 = bf16(S) (doc/model.md (5.4h);
// in fp32 s0 = S and this is (5.4e) as written). Indices are in elements of the buffer.
__device__ __forceinline__ float st_round(float x, int st16) { return st16 ? mp_round<bf16>(x) : x; }
__device__ __forceinline__ void st_put(float *st, size_t i, float x, int st16) {
    if (st16) reinterpret_cast<bf16 *>(st)[i] = __float2bfloat16_rn(x); else st[i] = x;
}
__device__ __forceinline__ float st_get(const float *st, size_t i, int st16) {
    return st16 ? __bfloat162float(reinterpret_cast<const bf16 *>(st)[i]) : st[i];
}

template <int P>
__global__ void __launch_bounds__(32)
gdn_op_forward_kernel(float *out, float *state, GdnArgs a, float scale, int st16) {
    const float *q = a.q, *k = a.k, *v = a.v, *g = a.g, *beta = a.beta, *m = a.mask;
    const int ldqk = a.ldqk, ldv = a.ldv, T = a.T, H = a.H, dk = a.head_k, dv = a.head_v;
    constexpr int VB = 32 / P;
    const int b = blockIdx.x / H, h = blockIdx.x % H;
    const int lane = threadIdx.x & 31, rg = lane % P;
    const int j = blockIdx.y * VB + lane / P;
    const bool jok = j < dv;
    const int Nc = T / CH;
    const size_t KV = (size_t)dk * dv;
    float S[GDN_R], Z[GDN_R];
#pragma unroll
    for (int r = 0; r < GDN_R; r++) S[r] = 0.f;
    for (int c = 0; c < Nc; c++) {
        const size_t st0 = (((size_t)b * H + h) * Nc + c) * KV;
#pragma unroll
        for (int r = 0; r < GDN_R; r++) {
            int i = r * P + rg;
            Z[r] = st_round(S[r], st16);
            if (i < dk && jok) st_put(state, st0 + (size_t)i * dv + j, Z[r], st16);
        }
        float gsum = 0.f;
        for (int tt = 0; tt < CH; tt++) {
            size_t row = (size_t)b * T + c * CH + tt;
            const float *qt = q + row * ldqk + h * dk, *kt = k + row * ldqk + h * dk;
            float gt = g[row * H + h], a = expf(gt), bt = beta[row * H + h];
            gsum += gt;
            float kz = 0.f;
#pragma unroll
            for (int r = 0; r < GDN_R; r++) {
                int i = r * P + rg;
                float kv = i < dk ? kt[i] : 0.f;
                Z[r] *= a;
                kz += kv * Z[r];
            }
            kz = sum_rows<P>(kz);
            float vj = jok ? v[row * ldv + h * dv + j] : 0.f;
            float u = bt * (vj - kz), o = 0.f;
#pragma unroll
            for (int r = 0; r < GDN_R; r++) {
                int i = r * P + rg;
                float kv = i < dk ? kt[i] : 0.f, qv = i < dk ? qt[i] : 0.f;
                Z[r] += kv * u;
                o += qv * Z[r];
            }
            o = sum_rows<P>(o);
            if (rg == 0 && jok) out[row * H * dv + h * dv + j] = o * scale;
        }
        float mc = m ? m[(((size_t)b * Nc + c) * H + h) * 2 + 1] : 1.f, dec = expf(gsum);
#pragma unroll
        for (int r = 0; r < GDN_R; r++) S[r] = (1.f - mc) * dec * S[r] + mc * (Z[r] + dec * (S[r] - st_round(S[r], st16)));
    }
}

static int g_gdn_st16 = 0; // bf16 mode (gdn_set_lowp): q̂, k̂, v come in bf16; the op stores its chunk-start states in bf16
static int gdn_lanes_per_column(int dk) {
    int P = 1;
    while (P * GDN_R < dk) P *= 2;
    if (P > 8) { fprintf(stderr, "error: GDN key head dim %d > %d is not supported by the GPU GDN op\n", dk, 8 * GDN_R); exit(1); }
    return P;
}

// The op on the fp32 operands of *a
static void gdn_tokens_forward(real *out, real *state, const GdnArgs *a) {
    int P = gdn_lanes_per_column(a->head_k);
    dim3 grid(a->B * a->H, CEIL_DIV(a->head_v, 32 / P));
    float scale = 1.f / sqrtf((float)a->head_k);
#define GDN_FWD(PP) gdn_op_forward_kernel<PP><<<grid, 32>>>(out, state, *a, scale, g_gdn_st16)
    if (P == 1) GDN_FWD(1); else if (P == 2) GDN_FWD(2); else if (P == 4) GDN_FWD(4); else GDN_FWD(8);
#undef GDN_FWD
    CUDA_CHECK(cudaGetLastError());
}

// Exact backward (§3.4, §6.1, §6.4), chunk by chunk in reverse, carrying dS = dL/dS_{c+1} (registers).
// Inside a chunk the run is recomputed from the saved S_c; every Z_t of the chunk goes to a per-block
// global scratch zs [CH+1][dk][VB], u_t and r_t to shared memory; then token by token in reverse:
//   D = dZ_t + s q̂_t dO_tᵀ;  dq̂ = s Z_t dO;  dk̂ = D u;  du = Dᵀk̂;  r = v − P_tᵀk̂ (P_t = α_t Z_{t−1});
//   dβ = du·r;  dr = β du;  dv = dr;  dP = D − k̂ drᵀ;  dk̂ −= P dr;  dg_t = ⟨dP, P_t⟩;  dZ_{t−1} = α_t dP
// Sums over value columns (dq̂, dk̂, dβ, dg, dA) are reduced in the warp and added with atomics.
template <int P>
__global__ void __launch_bounds__(32)
gdn_op_backward_kernel(GdnGrads d, const float *dout, const float *state, GdnArgs a, float scale, int st16) {
    float *dq = d.dq, *dk = d.dk, *dv = d.dv, *dg = d.dg, *dbeta = d.dbeta, *dA = d.dA, *zs_all = a.ws;
    const float *q = a.q, *k = a.k, *v = a.v, *g = a.g, *beta = a.beta, *m = a.mask;
    const int ldqk = a.ldqk, ldv = a.ldv, T = a.T, H = a.H, dkh = a.head_k, dvh = a.head_v;
    constexpr int VB = 32 / P;
    __shared__ float su[CH][VB], sr[CH][VB];
    const int b = blockIdx.x / H, h = blockIdx.x % H;
    const int lane = threadIdx.x & 31, rg = lane % P;
    const int col = lane / P, j = blockIdx.y * VB + col;
    const bool jok = j < dvh;
    const int Nc = T / CH;
    const size_t KV = (size_t)dkh * dvh;
    float *zs = zs_all + ((size_t)blockIdx.x * gridDim.y + blockIdx.y) * (CH + 1) * dkh * VB;
#define ZS(tt, i) zs[((size_t)(tt) * dkh + (i)) * VB + col]
    float dS[GDN_R], dZ[GDN_R], Zr[GDN_R];
#pragma unroll
    for (int r = 0; r < GDN_R; r++) dS[r] = 0.f;
    for (int c = Nc - 1; c >= 0; c--) {
        const size_t st0 = (((size_t)b * H + h) * Nc + c) * KV;
        // recompute the chunk's virtual run, keeping every Z_t (zs), u_t and r_t (smem)
#pragma unroll
        for (int r = 0; r < GDN_R; r++) {
            int i = r * P + rg;
            Zr[r] = (i < dkh && jok) ? st_get(state, st0 + (size_t)i * dvh + j, st16) : 0.f;
            if (i < dkh) ZS(0, i) = Zr[r];
        }
        float gsum = 0.f;
        for (int tt = 0; tt < CH; tt++) {
            size_t row = (size_t)b * T + c * CH + tt;
            const float *kt = k + row * ldqk + h * dkh;
            float gt = g[row * H + h], a = expf(gt), bt = beta[row * H + h];
            gsum += gt;
            float kz = 0.f;
#pragma unroll
            for (int r = 0; r < GDN_R; r++) {
                int i = r * P + rg;
                float kv = i < dkh ? kt[i] : 0.f;
                kz += a * Zr[r] * kv;
            }
            kz = sum_rows<P>(kz);
            float rr = (jok ? v[row * ldv + h * dvh + j] : 0.f) - kz, u = bt * rr;
#pragma unroll
            for (int r = 0; r < GDN_R; r++) {
                int i = r * P + rg;
                float kv = i < dkh ? kt[i] : 0.f;
                Zr[r] = a * Zr[r] + kv * u;
                if (i < dkh) ZS(tt + 1, i) = Zr[r];
            }
            if (rg == 0) { su[tt][col] = u; sr[tt][col] = rr; }
        }
        __syncwarp();
        float mc = m ? m[(((size_t)b * Nc + c) * H + h) * 2 + 1] : 1.f, dec = expf(gsum);
        if (m) {
            float dm = 0.f, dd = 0.f;
#pragma unroll
            for (int r = 0; r < GDN_R; r++) {
                int i = r * P + rg;
                float s0 = i < dkh ? ZS(0, i) : 0.f;
                dm += dS[r] * (Zr[r] - dec * s0);
                dd += dS[r] * s0;
            }
            dm = warp_sum(dm);
            dd = warp_sum(dd);
            if (lane == 0 && mc != 0.f) atomicAdd(dA + (((size_t)b * Nc + c) * H + h) * 2 + 1, dm);
            float add = (1.f - mc) * dec * dd;
            if (add != 0.f)
                for (int tt = lane; tt < CH; tt += 32) atomicAdd(dg + ((size_t)b * T + c * CH + tt) * H + h, add);
        }
#pragma unroll
        for (int r = 0; r < GDN_R; r++) dZ[r] = mc * dS[r];
        for (int tt = CH - 1; tt >= 0; tt--) {
            size_t row = (size_t)b * T + c * CH + tt;
            const float *qt = q + row * ldqk + h * dkh, *kt = k + row * ldqk + h * dkh;
            float dot = jok ? dout[row * H * dvh + h * dvh + j] : 0.f;
            float a = expf(g[row * H + h]), bt = beta[row * H + h];
            float u = su[tt][col], rr = sr[tt][col];
            float du = 0.f;
#pragma unroll
            for (int r = 0; r < GDN_R; r++) { // D = dZ + s q dOᵀ (in dZ);  du = Dᵀk̂
                int i = r * P + rg;
                float qv = i < dkh ? qt[i] : 0.f, kv = i < dkh ? kt[i] : 0.f;
                dZ[r] += scale * qv * dot;
                du += kv * dZ[r];
            }
            du = sum_rows<P>(du);
            float db = rg == 0 ? du * rr : 0.f;
            float dr = bt * du;
            if (rg == 0 && jok) dv[row * ldv + h * dvh + j] += dr;
            float dgt = 0.f;
#pragma unroll
            for (int r = 0; r < GDN_R; r++) {
                if (r * P >= dkh) break; // warp-uniform
                int i = r * P + rg;
                bool iok = i < dkh;
                float kv = iok ? kt[i] : 0.f;
                float Zt = iok ? ZS(tt + 1, i) : 0.f, Pv = iok ? a * ZS(tt, i) : 0.f;
                float sq = Zt * dot, sk = dZ[r] * u - Pv * dr;
                float dP = dZ[r] - kv * dr;
                dgt += dP * Pv;
                dZ[r] = a * dP;
                sq = sum_cols<P>(sq);
                sk = sum_cols<P>(sk);
                if (lane < P && iok) {
                    atomicAdd(dq + row * ldqk + h * dkh + i, scale * sq);
                    atomicAdd(dk + row * ldqk + h * dkh + i, sk);
                }
            }
            dgt = warp_sum(dgt);
            db = warp_sum(db);
            if (lane == 0) {
                atomicAdd(dg + row * H + h, dgt);
                atomicAdd(dbeta + row * H + h, db);
            }
        }
#pragma unroll
        for (int r = 0; r < GDN_R; r++) dS[r] = dZ[r] + (1.f - mc) * dec * dS[r];
        __syncwarp();
    }
#undef ZS
}

// Scratch of the token-recurrence backward: every block's Z_t of one chunk.
static size_t gdn_tokens_ws_floats(int B, int H, int dkh, int dvh) {
    int P = gdn_lanes_per_column(dkh);
    return (size_t)B * H * CEIL_DIV(dvh, 32 / P) * (CH + 1) * dkh * (32 / P);
}
// The op's backward on the fp32 operands of *a, its scratch in a->ws; dv: written, or added to with a->dv_add
static void gdn_tokens_backward(const GdnGrads *d, const real *dout, const real *state, const GdnArgs *a) {
    real *dq = d->dq, *dk = d->dk, *dv = d->dv, *dg = d->dg, *dbeta = d->dbeta, *dA = d->dA;
    const int ldqk = a->ldqk, ldv = a->ldv, B = a->B, T = a->T, H = a->H, dkh = a->head_k, dvh = a->head_v;
    int P = gdn_lanes_per_column(dkh);
    dim3 grid(B * H, CEIL_DIV(dvh, 32 / P));
    float scale = 1.f / sqrtf((float)dkh);
    // the kernel accumulates (float atomics): clear what the op writes first
    const size_t BT = (size_t)B * T, nA = (size_t)B * (T / CH) * H;
    CUDA_CHECK(cudaMemset2DAsync(dq, (size_t)ldqk * sizeof(float), 0, (size_t)H * dkh * sizeof(float), BT));
    CUDA_CHECK(cudaMemset2DAsync(dk, (size_t)ldqk * sizeof(float), 0, (size_t)H * dkh * sizeof(float), BT));
    if (!a->dv_add) CUDA_CHECK(cudaMemset2DAsync(dv, (size_t)ldv * sizeof(float), 0, (size_t)H * dvh * sizeof(float), BT));
    CUDA_CHECK(cudaMemsetAsync(dg, 0, BT * H * sizeof(float)));
    CUDA_CHECK(cudaMemsetAsync(dbeta, 0, BT * H * sizeof(float)));
    if (dA) CUDA_CHECK(cudaMemset2DAsync(dA + 1, 2 * sizeof(float), 0, sizeof(float), nA)); // dA[...,1]
#define GDN_BWD(PP) gdn_op_backward_kernel<PP><<<grid, 32>>>(*d, dout, state, *a, scale, g_gdn_st16)
    if (P == 1) GDN_BWD(1); else if (P == 2) GDN_BWD(2); else if (P == 4) GDN_BWD(4); else GDN_BWD(8);
#undef GDN_BWD
    CUDA_CHECK(cudaGetLastError());
}

// ROWS × D bf16 tile, global (row stride ld elements) -> swizzled smem, 16-byte cp.async (the GDN op's kernels)
template <int D, int ROWS, int NT>
__device__ __forceinline__ void load_tile(bf16 *s, const bf16 *g, int ld, int tid) {
    constexpr int CPR = D / 8;
    static_assert((ROWS * CPR) % NT == 0, "tile loader: whole passes");
#pragma unroll
    for (int it = 0; it < ROWS * CPR / NT; ++it) {
        const int i = tid + it * NT, r = i / CPR, c = i % CPR;
        cp_async16(s + swz<D>(r, c), g + (size_t)r * ld + c * 8);
    }
}

// ---- the GDN op, chunked WY/UT form (dev/cuda/gdn/NOTES.md; its test harness: dev/cuda/gdn/gdn_chunk.cu) ----
// Per (b, h, chunk c of 64 tokens), local index i = 0..63:
//   G_i = Σ_{t≤i} g_t, γ_i = e^{G_i}, λ_i = e^{G_63 − G_i}, Γ_ij = e^{G_i − G_j}
//   A = strict_lower(diag(β)(K Kᵀ) ⊙ Γ),  T = (I + A)⁻¹,  W = T diag(βγ) K,  U = T diag(β) V
//   Vn = U − W S0 (S0 = committed state before the chunk),  O = s diag(γ) Q S0 + s (Q Kᵀ ⊙ Γ ⊙ [i≥j]) Vn
//   S^start_{c+1} = γ_63 S0 + m Kᵀ diag(λ) Vn
// Kernels: fwd = prep (per chunk: G, A, T, P, W, U) → fwd_state (sequential over chunks per value tile:
// state[c], Vn) → fwd_out.  bwd = prep → bwd_local → bwd_rhs → bwd_state (reverse sequential: dS^end_c,
// dVn) → bwd_vloop ×3 (reductions over dv) → bwd_final (dq, dk, dβ, dg, dA[...,1]). The intra-chunk products
// are block matmuls on shared memory (mm: fp32 FMA in fp32 mode, TF32 mma.sync in bf16 mode). In bf16 mode with
// dk ∈ {64, 128, 192} and dv % 64 == 0 (the 340m and 760m presets), every kernel (prep, the state passes, fwd_out,
// bwd_local, the vloops, bwd_final) runs as its *_bf16 form on bf16 tensor cores instead, the backward as prep →
// bwd_state → bwd_local → bwd_final (bwd_rhs folded into bwd_state; the vloops' parts 0 and 2 into bwd_local, which
// runs after bwd_state for the dS^end snapshots that part 2 reads; part 1 into bwd_final as its first phase; prep makes
// s Pᵀ for bwd_state).
// Needs T % 64 == 0 and dk ∈ {32, 48, 64, 128} with dv % 32 == 0, or (bf16 mode only: dk = 192 has no
// fp32 kernels) dk = 192 with dv % 64 == 0 (gdnc::supported); other shapes take the token recurrence above.
// Writes out, state, dq, dk, dg, dβ and dA[...,1] (0 where m == 0 and at the last chunk); dv written, or ACCUMULATED
// into with dv_add.
// Workspace: an explicit buffer of gdnc::ws_floats(...) floats (the model owns it, M->gdn_ws).
#ifndef GDN_KERNEL_MARK
#define GDN_KERNEL_MARK(name) do { } while (0) // test harness hook: per-kernel timing (dev/cuda/gdn)
#endif
namespace gdnc {
#define GC_NT 256   // threads per block
#define GC_BV 32    // value-dim tile
#define GC_L64 68   // padded stride of 64-wide smem rows (== 4 mod 32: conflict-free)
#define GC_LBV 36   // padded stride of GC_BV-wide smem rows
#define GC_PADK 4   // smem row stride of dk-wide rows: DK + GC_PADK
static_assert(CH == 64, "the chunked GDN kernels assume 64-token chunks");

struct GA {
    const float *q, *k, *v, *g, *beta, *m, *dout;  // q, k, v: the fp32 kernels' (fp32 mode, or fp32 copies: gdn_op_forward)
    const bf16 *q16, *k16, *v16;                   // the bf16 kernels': q̂, k̂, v as stored in bf16 mode
    const bf16 *dout16;                            // the bf16 kernels' dO (as stored: GdnArgs.out_mp; else a bf16 copy)
    float *o, *state;
    bf16 *o16;                                     // the bf16 kernels' output where it is stored in bf16 (else o)
    float *dq, *dk, *dv, *dg, *dbeta, *dA;
    int ldqk, ldv, B, T, H, dvd, Nc;
    int vec;  // all user tensors 16-byte aligned (rows and bases) -> 16B cp.async, else scalar copies
    int st16; // state holds bf16 values (bf16 mode: st_put / st_get / ld_state)
    int ds16; // the workspace's dstate holds bf16 values (written by the bf16 state kernel)
    int bwd;  // the backward pass (prep stores T for it)
    int dv_add; // the backward adds its dV to dv (GdnArgs.dv_add), else writes it
    const float *rho; // bwd_final_bf16 returns dQ, dK through the L2 norm of these 1/norms (GdnArgs.rho); or nullptr
    int d16;  // dq, dk, dv hold bf16 values (GdnArgs.grads_mp; the bf16 kernels with rho: st_grad / ld_grad)
    float scale;
    // workspace
    float *Gc, *Tm, *Pm, *dPm, *dTV, *W, *dQ1, *dWm, *X, *U, *dVn, *dstate, *Rc, *sdot, *dbv;
    bf16 *Wb;            // bf16 W for the bf16 kernels (nullptr: the fp32 kernels run)
    bf16 *Vb;            // forward with the bf16 kernels: Vn in bf16, [BH][Nc][dv][CH] (in the dVn region, free then)
    bf16 *Tb;            // backward with the bf16 kernels: T [BH*Nc][CH][CH] in bf16 (in the Tm region)
    bf16 *Pb;            // backward with the bf16 kernels: s Pᵀ [BH*Nc][CH][CH] in bf16 (prep's, in the Pm region, free then)
    bf16 *dVb;           // backward with the bf16 kernels: dVnᵀ in bf16, [BH][Nc][dv][CH] (in the dVn region)
};

// ------------------------------------------------------------------------------------------------
// async global->shared copies: cp_async16 and its groups (appendix A). Each thread waits for its own groups; a
// __syncthreads() after the wait makes the data visible to the block.
// dst[r*lds + c] = src[r*ldg + c], r < ROWS, c < COLS (COLS % 4 == 0)
template <int ROWS, int COLS>
__device__ __forceinline__ void ld_tile(float *dst, int lds, const float *src, size_t ldg, bool vec) {
    if (vec) {
        constexpr int C4 = COLS / 4;
#pragma unroll 1
        for (int idx = threadIdx.x; idx < ROWS * C4; idx += GC_NT) {
            const int r = idx / C4, c = (idx % C4) * 4;
            cp_async16(dst + r * lds + c, src + r * ldg + c);
        }
    } else {
        for (int idx = threadIdx.x; idx < ROWS * COLS; idx += GC_NT) {
            const int r = idx / COLS, c = idx % COLS;
            dst[r * lds + c] = src[r * ldg + c];
        }
    }
}

// S0 tile (ROWS rows of d_k, COLS value columns) of the chunk-start states at element offset off -> fp32 smem
// (base: a.state, or the workspace's dstate with st16 = a.ds16)
template <int ROWS, int COLS>
__device__ __forceinline__ void ld_state(float *dst, int lds, const GA &a, size_t off, const float *base, int st16) {
    if (!st16) { ld_tile<ROWS, COLS>(dst, lds, base + off, a.dvd, a.vec); return; }
    const bf16 *src = reinterpret_cast<const bf16 *>(base) + off;
    if (a.vec) {
        constexpr int C8 = COLS / 8;
#pragma unroll 2
        for (int idx = threadIdx.x; idx < ROWS * C8; idx += GC_NT) {
            const int r = idx / C8, c = (idx % C8) * 8;
            const uint4 u = *reinterpret_cast<const uint4 *>(src + (size_t)r * a.dvd + c);
            const __nv_bfloat162 *e = reinterpret_cast<const __nv_bfloat162 *>(&u);
            const float2 f0 = __bfloat1622float2(e[0]), f1 = __bfloat1622float2(e[1]), f2 = __bfloat1622float2(e[2]),
                         f3 = __bfloat1622float2(e[3]);
            float4 *d = reinterpret_cast<float4 *>(dst + r * lds + c);
            d[0] = make_float4(f0.x, f0.y, f1.x, f1.y);
            d[1] = make_float4(f2.x, f2.y, f3.x, f3.y);
        }
    } else {
        for (int idx = threadIdx.x; idx < ROWS * COLS; idx += GC_NT) {
            const int r = idx / COLS, c = idx % COLS;
            dst[r * lds + c] = __bfloat162float(src[(size_t)r * a.dvd + c]);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// block-level small matmul on shared memory:  C[M][N] = beta*C + alpha * diag(rs) op(A) op(B)
//   A: TA ? stored K x M (A[k*lda+i]) : stored M x K (A[i*lda+k])
//   B: TB ? stored N x K (B[j*ldb+k]) : stored K x N (B[k*ldb+j])
//   rs: optional row scale (nullptr = 1). beta == 0 -> C not read.
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
// SIMT: thread grid TR x TC (TR*TC == GC_NT); each warp covers 4 (rows) x 8 (cols) threads. A thread owns RM rows
// and RN cols: rows are contiguous (tr*RM + r) when A is transposed (so one vector load along i), strided
// (tr + r*TR) otherwise (vector loads along k); cols contiguous (tc*RN + s) when B is not transposed, strided
// (tc + s*TC) otherwise. With row strides == 4 (mod 32) (or 20) every shared load is conflict-free.
// TF32 form (bf16 mode, c_gdn_tf32 set; shapes with M ∈ {16, 32, 64, 128}): mma.sync m16n8k8 on operands rounded to
// tf32, fp32 accumulation. The 8 warps split C into 16-row strips (8/(M/16) warps per strip), each warp owning NW
// 8-column tiles of its strip: the A fragment is loaded once per k-step and used NW times.
// NOTE: the element->thread mapping depends on <M,N,TA,TB> (SIMT) or on <M,N> (TF32): calls with different TA/TB on
// the same C need a barrier.
__constant__ int c_gdn_tf32; // 1: mm runs on the TF32 tensor cores where the shape allows (gdn_set_lowp)
template <int M, int N, int K> __host__ __device__ constexpr bool mm_tc_fits() {
    return M % 16 == 0 && 8 % (M / 16) == 0 && (N / 8) % (8 / (M / 16)) == 0 && N % 8 == 0 && K % 8 == 0;
}
template <int M, int N, int K, bool TA, bool TB>
__device__ __forceinline__ void mm_tc(float *__restrict__ C, int ldc, const float *__restrict__ A, int lda,
                                      const float *__restrict__ Bm, int ldb, float alpha, float beta, const float *rs) {
    constexpr int WPS = 8 / (M / 16), NW = N / 8 / WPS; // warps per strip, 8-column tiles per warp
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int i0 = (w / WPS) * 16, j0 = (w % WPS) * NW * 8;
    auto Aat = [&](int i, int k) { return TA ? A[k * lda + i] : A[i * lda + k]; };
    auto Bat = [&](int k, int j) { return TB ? Bm[j * ldb + k] : Bm[k * ldb + j]; };
    float acc[NW][4];
#pragma unroll
    for (int n = 0; n < NW; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
#pragma unroll 2
    for (int k0 = 0; k0 < K; k0 += 8) {
        const uint32_t a[4] = {f2tf32(Aat(i0 + g, k0 + t)), f2tf32(Aat(i0 + g + 8, k0 + t)), f2tf32(Aat(i0 + g, k0 + t + 4)),
                               f2tf32(Aat(i0 + g + 8, k0 + t + 4))};
#pragma unroll
        for (int n = 0; n < NW; n++) {
            const int j = j0 + n * 8 + g;
            mma_tf32(acc[n], a, f2tf32(Bat(k0 + t, j)), f2tf32(Bat(k0 + t + 4, j)));
        }
    }
#pragma unroll
    for (int n = 0; n < NW; n++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int i = i0 + g + 8 * hh;
            const float al = rs ? alpha * rs[i] : alpha;
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float *c = &C[i * ldc + j0 + n * 8 + 2 * t + e];
                *c = (beta == 0.f) ? al * acc[n][2 * hh + e] : fmaf(beta, *c, al * acc[n][2 * hh + e]);
            }
        }
}
template <int M, int N, int K, bool TA, bool TB>
__device__ __forceinline__ void mm(float *__restrict__ C, int ldc, const float *__restrict__ A, int lda,
                                   const float *__restrict__ Bm, int ldb, float alpha, float beta, const float *rs = nullptr) {
    if constexpr (mm_tc_fits<M, N, K>()) {
        if (c_gdn_tf32) { mm_tc<M, N, K, TA, TB>(C, ldc, A, lda, Bm, ldb, alpha, beta, rs); return; }
    }
    constexpr int per = (M * N) / GC_NT;
    constexpr int RN = mm_pick_rn(N, per);
    constexpr int RM = per / RN;
    constexpr int TR = M / RM, TC = N / RN;
    static_assert((M * N) % GC_NT == 0 && per % RN == 0 && M % RM == 0 && N % RN == 0 && K % 4 == 0, "mm tile");
    static_assert(TR * TC == GC_NT && TR % 4 == 0 && TC % 8 == 0, "mm thread grid");
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

__device__ __forceinline__ float mval_of(const GA &a, int b, int c, int h) {
    return a.m ? a.m[((size_t)(b * a.Nc + c) * a.H + h) * 2 + 1] : 1.f;
}

// ------------------------------------------------------------------------------------------------
// K1 prep (fwd and bwd): per chunk: G (cumsum), A, T = (I+A)^-1, Pm = QK^T.*Gam.*[i>=j], W, U.
// grid (Nc, H, B). The fp32 / TF32 path; prep_bf16_kernel serves the bf16 kernels (prep_pass).
template <int DK>
__global__ void __launch_bounds__(GC_NT) prep_kernel(GA a) {
    constexpr int LDK = DK + GC_PADK;
    extern __shared__ __align__(128) float sm[];
    float *Ks = sm, *Qs = Ks + CH * LDK, *As = Qs + CH * LDK, *Ts = As + CH * GC_L64, *Gs = Ts + CH * GC_L64, *bs = Gs + CH, *es = bs + CH;
    const int c = blockIdx.x, h = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
    const int H = a.H, T = a.T, dv = a.dvd, Nc = a.Nc, nvt = dv / GC_BV;
    const size_t tok0 = (size_t)b * T + (size_t)c * CH;
    const size_t bh = (size_t)b * H + h;
    const size_t wrow0 = bh * T + (size_t)c * CH;  // row index into [BH,T,*] workspace
    const size_t cc = bh * Nc + c;                  // chunk index into [BH,Nc,*] workspace

    ld_tile<CH, DK>(Ks, LDK, a.k + tok0 * a.ldqk + (size_t)h * DK, a.ldqk, a.vec);
    ld_tile<CH, DK>(Qs, LDK, a.q + tok0 * a.ldqk + (size_t)h * DK, a.ldqk, a.vec);
    cp_async_commit();
    if (tid < CH) { Gs[tid] = a.g[(tok0 + tid) * H + h]; bs[tid] = a.beta[(tok0 + tid) * H + h]; }
    cp_async_wait<0>();
    __syncthreads();
    if (tid == 0) { float s = 0.f; for (int i = 0; i < CH; i++) { s += Gs[i]; Gs[i] = s; } }
    mm<CH, CH, DK, false, true>(As, GC_L64, Ks, LDK, Ks, LDK, 1.f, 0.f);  // K K^T
    mm<CH, CH, DK, false, true>(Ts, GC_L64, Qs, LDK, Ks, LDK, 1.f, 0.f);  // Q K^T
    __syncthreads();
    if (tid < CH) { es[tid] = expf(Gs[tid]); a.Gc[wrow0 + tid] = Gs[tid]; }
    for (int idx = tid; idx < CH * CH; idx += GC_NT) {
        const int i = idx >> 6, j = idx & 63;
        const float d = (i >= j) ? expf(Gs[i] - Gs[j]) : 0.f;
        As[i * GC_L64 + j] = (i > j) ? bs[i] * As[i * GC_L64 + j] * d : 0.f;
        a.Pm[cc * CH * CH + idx] = (i >= j) ? Ts[i * GC_L64 + j] * d : 0.f;
    }
    __syncthreads();
    for (int idx = tid; idx < CH * CH; idx += GC_NT) { const int i = idx >> 6, j = idx & 63; Ts[i * GC_L64 + j] = (i == j) ? 1.f : 0.f; }
    __syncthreads();
    // right-looking forward substitution: (I + A) T = I, A strictly lower. Step l: rows i > l, cols j <= l.
    {
        const int j = tid & 63, r0 = tid >> 6;
        for (int l = 0; l < CH - 1; l++) {
            if (j <= l) {
                const float tl = Ts[l * GC_L64 + j];
                for (int i = l + 1 + r0; i < CH; i += GC_NT / CH) Ts[i * GC_L64 + j] -= As[i * GC_L64 + l] * tl;
            }
            __syncthreads();
        }
    }
    if (a.bwd)  // T: only the backward reads it
        for (int idx = tid; idx < CH * CH; idx += GC_NT) a.Tm[cc * CH * CH + idx] = Ts[(idx >> 6) * GC_L64 + (idx & 63)];
    __syncthreads();
    for (int idx = tid; idx < CH * DK; idx += GC_NT) { const int i = idx / DK, d = idx % DK; Ks[i * LDK + d] *= bs[i] * es[i]; }
    __syncthreads();
    mm<CH, DK, CH, false, false>(Qs, LDK, Ts, GC_L64, Ks, LDK, 1.f, 0.f);  // W = T diag(beta gam) K
    __syncthreads();
    for (int idx = tid; idx < CH * DK; idx += GC_NT) { const int i = idx / DK, d = idx % DK; a.W[(wrow0 + i) * DK + d] = Qs[i * LDK + d]; }
    for (int idx = tid; idx < CH * CH; idx += GC_NT) { const int i = idx >> 6, j = idx & 63; Ts[i * GC_L64 + j] *= bs[j]; }  // T diag(beta)
    __syncthreads();
    // U = T diag(beta) V over value tiles, double-buffered (buffers in the free Ks / Qs regions, U tile in As)
    const float *vsrc = a.v + tok0 * a.ldv + (size_t)h * dv;
    ld_tile<CH, GC_BV>(Ks, GC_LBV, vsrc, a.ldv, a.vec); cp_async_commit();
    if (nvt > 1) { ld_tile<CH, GC_BV>(Qs, GC_LBV, vsrc + GC_BV, a.ldv, a.vec); cp_async_commit(); }
    for (int vt = 0; vt < nvt; vt++) {
        if (vt + 1 < nvt) cp_async_wait<1>(); else cp_async_wait<0>();
        __syncthreads();
        mm<CH, GC_BV, CH, false, false>(As, GC_LBV, Ts, GC_L64, (vt & 1) ? Qs : Ks, GC_LBV, 1.f, 0.f);
        __syncthreads();
        if (vt + 2 < nvt) { ld_tile<CH, GC_BV>((vt & 1) ? Qs : Ks, GC_LBV, vsrc + (vt + 2) * GC_BV, a.ldv, a.vec); cp_async_commit(); }
        for (int idx = tid; idx < CH * GC_BV; idx += GC_NT) {
            const int i = idx / GC_BV, j = idx % GC_BV;
            a.U[(wrow0 + i) * dv + vt * GC_BV + j] = As[i * GC_LBV + j];
        }
    }
}
template <int DK> constexpr size_t prep_smem() { return sizeof(float) * (2 * CH * (DK + GC_PADK) + 2 * CH * GC_L64 + 3 * CH); }

// ------------------------------------------------------------------------------------------------
// K2 forward state recurrence over chunks (sequential), one block per (value tile of BV columns, h, b).
// Writes state[c] (committed state before chunk c) and Vn (over U). Loads of the next chunk overlap compute.
template <int DK, int BV>
__global__ void __launch_bounds__(GC_NT) fwd_state_kernel(GA a) {
    constexpr int LBV = BV + 4;
    constexpr int LDK = DK + GC_PADK;
    constexpr int EPT = DK * BV / GC_NT;  // elements of the state tile per thread (elementwise mapping)
    static_assert((DK * BV) % GC_NT == 0, "EPT");
    extern __shared__ __align__(128) float sm[];
    float *Ss = sm, *Ws = Ss + DK * LBV, *Ks = Ws + CH * LDK, *Ub0 = Ks + CH * LDK, *Gs = Ub0 + 2 * CH * LBV;
    const int v0 = blockIdx.x * BV, h = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
    const int H = a.H, T = a.T, dv = a.dvd, Nc = a.Nc;
    const size_t bh = (size_t)b * H + h;
    for (int idx = tid; idx < DK * BV; idx += GC_NT) Ss[(idx / BV) * LBV + idx % BV] = 0.f;
    // prologue: W_0, U_0
    ld_tile<CH, DK>(Ws, LDK, a.W + (bh * T) * DK, DK, true);
    ld_tile<CH, BV>(Ub0, LBV, a.U + (bh * T) * dv + v0, dv, true);
    cp_async_commit();
    float mv_next = mval_of(a, b, 0, h);
    for (int c = 0; c < Nc; c++) {
        const size_t tok0 = (size_t)b * T + (size_t)c * CH, wrow0 = bh * T + (size_t)c * CH;
        float *Ub = Ub0 + (c & 1) * CH * LBV;
        const float mv = mv_next;
        if (c + 1 < Nc) mv_next = mval_of(a, b, c + 1, h);
        ld_tile<CH, DK>(Ks, LDK, a.k + tok0 * a.ldqk + (size_t)h * DK, a.ldqk, a.vec);
        ld_tile<1, CH>(Gs, CH, a.Gc + wrow0, CH, true);
        cp_async_commit();
        // the snapshot; with bf16 states the chunk runs from the rounded state and dl keeps what rounding took off
        const size_t st0 = (bh * Nc + c) * DK * dv + v0;
        float dl[EPT];
#pragma unroll
        for (int k = 0; k < EPT; k++) {
            const int e = tid + k * GC_NT, d = e / BV, j = e % BV;
            const float x = Ss[d * LBV + j], s0 = st_round(x, a.st16);
            st_put(a.state, st0 + (size_t)d * dv + j, s0, a.st16);
            Ss[d * LBV + j] = s0;
            dl[k] = x - s0;
        }
        cp_async_wait<1>();
        __syncthreads();
        mm<CH, BV, DK, false, false>(Ub, LBV, Ws, LDK, Ss, LBV, -1.f, 1.f);  // Vn = U - W S
        __syncthreads();
        if (c + 1 < Nc) {
            ld_tile<CH, DK>(Ws, LDK, a.W + (wrow0 + CH) * DK, DK, true);
            ld_tile<CH, BV>(Ub0 + ((c + 1) & 1) * CH * LBV, LBV, a.U + (wrow0 + CH) * dv + v0, dv, true);
            cp_async_commit();
        }
        for (int idx = tid; idx < CH * BV; idx += GC_NT) { const int i = idx / BV, j = idx % BV; a.U[(wrow0 + i) * dv + v0 + j] = Ub[i * LBV + j]; }
        if (c + 1 < Nc) cp_async_wait<1>(); else cp_async_wait<0>();
        __syncthreads();
        const float GL = Gs[CH - 1];
        for (int idx = tid; idx < CH * DK; idx += GC_NT) { const int i = idx / DK, d = idx % DK; Ks[i * LDK + d] *= mv * expf(GL - Gs[i]); }
        __syncthreads();
        mm<DK, BV, CH, true, false>(Ss, LBV, Ks, LDK, Ub, LBV, 1.f, expf(GL));  // S = gam_L S + m K^T diag(lam) Vn
        __syncthreads();
        if (a.st16)
#pragma unroll
            for (int k = 0; k < EPT; k++) { const int e = tid + k * GC_NT; Ss[(e / BV) * LBV + e % BV] += expf(GL) * dl[k]; }
    }
}
template <int DK, int BV> constexpr size_t fwd_state_smem() { return sizeof(float) * (DK * (BV + 4) + 2 * CH * (DK + GC_PADK) + 2 * CH * (BV + 4) + CH); }

// ------------------------------------------------------------------------------------------------
// K3 forward output, grid (dv/GC_BV, Nc, B*H):  O = s diag(gam) Q S0 + s Pm Vn
template <int DK>
__global__ void __launch_bounds__(GC_NT) fwd_out_kernel(GA a) {
    constexpr int LDK = DK + GC_PADK;
    extern __shared__ __align__(128) float sm[];
    float *Qs = sm, *S0 = Qs + CH * LDK, *Ps = S0 + DK * GC_LBV, *Vs = Ps + CH * GC_L64, *Os = Vs + CH * GC_LBV, *es = Os + CH * GC_LBV;
    const int v0 = blockIdx.x * GC_BV, c = blockIdx.y, tid = threadIdx.x;
    const int H = a.H, T = a.T, dv = a.dvd, Nc = a.Nc;
    const int bh = blockIdx.z, b = bh / H, h = bh % H;
    const size_t tok0 = (size_t)b * T + (size_t)c * CH, wrow0 = (size_t)bh * T + (size_t)c * CH, cc = (size_t)bh * Nc + c;
    ld_tile<CH, DK>(Qs, LDK, a.q + tok0 * a.ldqk + (size_t)h * DK, a.ldqk, a.vec);
    ld_state<DK, GC_BV>(S0, GC_LBV, a, cc * DK * dv + v0, a.state, a.st16);
    ld_tile<CH, CH>(Ps, GC_L64, a.Pm + cc * CH * CH, CH, true);
    ld_tile<CH, GC_BV>(Vs, GC_LBV, a.U + wrow0 * dv + v0, dv, true);
    cp_async_commit();
    if (tid < CH) es[tid] = expf(a.Gc[wrow0 + tid]);
    cp_async_wait<0>();
    __syncthreads();
    mm<CH, GC_BV, DK, false, false>(Os, GC_LBV, Qs, LDK, S0, GC_LBV, a.scale, 0.f, es);
    mm<CH, GC_BV, CH, false, false>(Os, GC_LBV, Ps, GC_L64, Vs, GC_LBV, a.scale, 1.f);
    __syncthreads();
    for (int idx = tid; idx < CH * GC_BV; idx += GC_NT) {
        const int i = idx / GC_BV, j = idx % GC_BV;
        a.o[(tok0 + i) * (size_t)(H * dv) + (size_t)h * dv + v0 + j] = Os[i * GC_LBV + j];
    }
}
template <int DK> constexpr size_t fwd_out_smem() { return sizeof(float) * (CH * (DK + GC_PADK) + DK * GC_LBV + CH * GC_L64 + 2 * CH * GC_LBV + CH); }

// ------------------------------------------------------------------------------------------------
// B1 backward local, grid (dv/GC_BV, Nc, B*H): Vn = U - W S0 (over U), dVn_local = s Pm^T dO
template <int DK>
__global__ void __launch_bounds__(GC_NT) bwd_local_kernel(GA a) {
    constexpr int LDK = DK + GC_PADK;
    extern __shared__ __align__(128) float sm[];
    float *Ws = sm, *S0 = Ws + CH * LDK, *Ps = S0 + DK * GC_LBV, *Vs = Ps + CH * GC_L64, *dOs = Vs + CH * GC_LBV, *dVs = dOs + CH * GC_LBV;
    const int v0 = blockIdx.x * GC_BV, c = blockIdx.y;
    const int H = a.H, T = a.T, dv = a.dvd, Nc = a.Nc;
    const int bh = blockIdx.z, b = bh / H, h = bh % H;
    const size_t tok0 = (size_t)b * T + (size_t)c * CH, wrow0 = (size_t)bh * T + (size_t)c * CH, cc = (size_t)bh * Nc + c;
    ld_tile<CH, DK>(Ws, LDK, a.W + wrow0 * DK, DK, true);
    ld_state<DK, GC_BV>(S0, GC_LBV, a, cc * DK * dv + v0, a.state, a.st16);
    ld_tile<CH, CH>(Ps, GC_L64, a.Pm + cc * CH * CH, CH, true);
    ld_tile<CH, GC_BV>(Vs, GC_LBV, a.U + wrow0 * dv + v0, dv, true);
    ld_tile<CH, GC_BV>(dOs, GC_LBV, a.dout + tok0 * (size_t)(H * dv) + (size_t)h * dv + v0, (size_t)H * dv, a.vec);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    mm<CH, GC_BV, DK, false, false>(Vs, GC_LBV, Ws, LDK, S0, GC_LBV, -1.f, 1.f);
    mm<CH, GC_BV, CH, true, false>(dVs, GC_LBV, Ps, GC_L64, dOs, GC_LBV, a.scale, 0.f);
    __syncthreads();
    for (int idx = threadIdx.x; idx < CH * GC_BV; idx += GC_NT) {
        const int i = idx / GC_BV, j = idx % GC_BV;
        a.U[(wrow0 + i) * dv + v0 + j] = Vs[i * GC_LBV + j];
        a.dVn[(wrow0 + i) * dv + v0 + j] = dVs[i * GC_LBV + j];
    }
}
template <int DK> constexpr size_t bwd_local_smem() { return sizeof(float) * (CH * (DK + GC_PADK) + DK * GC_LBV + CH * GC_L64 + 3 * CH * GC_LBV); }

// ------------------------------------------------------------------------------------------------
// B1b rhs of the dS recurrence, grid (dv/GC_BV, Nc, B*H): R_c = s Q^T diag(gam) dO (DK x dv) -> workspace Rc.
template <int DK>
__global__ void __launch_bounds__(GC_NT) bwd_rhs_kernel(GA a) {
    constexpr int LDK = DK + GC_PADK;
    extern __shared__ __align__(128) float sm[];
    float *Qs = sm, *dOs = Qs + CH * LDK, *Rs = dOs + CH * GC_LBV, *es = Rs + DK * GC_LBV;
    const int v0 = blockIdx.x * GC_BV, c = blockIdx.y, tid = threadIdx.x;
    const int H = a.H, T = a.T, dv = a.dvd, Nc = a.Nc;
    const int bh = blockIdx.z, b = bh / H, h = bh % H;
    const size_t tok0 = (size_t)b * T + (size_t)c * CH, wrow0 = (size_t)bh * T + (size_t)c * CH, cc = (size_t)bh * Nc + c;
    ld_tile<CH, DK>(Qs, LDK, a.q + tok0 * a.ldqk + (size_t)h * DK, a.ldqk, a.vec);
    ld_tile<CH, GC_BV>(dOs, GC_LBV, a.dout + tok0 * (size_t)(H * dv) + (size_t)h * dv + v0, (size_t)H * dv, a.vec);
    cp_async_commit();
    if (tid < CH) es[tid] = a.scale * expf(a.Gc[wrow0 + tid]);
    cp_async_wait<0>();
    __syncthreads();
    for (int idx = tid; idx < CH * GC_BV; idx += GC_NT) { const int i = idx / GC_BV, j = idx % GC_BV; dOs[i * GC_LBV + j] *= es[i]; }
    __syncthreads();
    mm<DK, GC_BV, CH, true, false>(Rs, GC_LBV, Qs, LDK, dOs, GC_LBV, 1.f, 0.f);
    __syncthreads();
    float *dst = a.Rc + cc * DK * dv;
    for (int idx = tid; idx < DK * GC_BV; idx += GC_NT) { const int d = idx / GC_BV, j = idx % GC_BV; dst[(size_t)d * dv + v0 + j] = Rs[d * GC_LBV + j]; }
}
template <int DK> constexpr size_t bwd_rhs_smem() { return sizeof(float) * (CH * (DK + GC_PADK) + CH * GC_LBV + DK * GC_LBV + CH); }

// ------------------------------------------------------------------------------------------------
// B2 backward state recurrence (reverse, sequential), grid (dv/BV, H, B).
//   dstate[c] = dS^end_c;  dVn += m diag(lam) K dS;  dS <- gam_L dS - W^T dVn + R_c
// Prefetch: K_{c-1}, G_{c-1}, dVn_{c-1} issued after mm1 of c; W_{c-1} after mm2 of c; R_c prefetched to L2
// after mm1, added after mm2.
template <int DK, int BV>
__global__ void __launch_bounds__(GC_NT, 2) bwd_state_kernel(GA a) {
    constexpr int LBV = BV + 4;
    constexpr int LDK = DK + GC_PADK;
    constexpr int EPT = DK * BV / GC_NT;  // elements of the dS tile per thread (elementwise mapping)
    static_assert((DK * BV) % GC_NT == 0, "EPT");
    extern __shared__ __align__(128) float sm[];
    float *dSs = sm, *Ks = dSs + DK * LBV, *Ws = Ks + CH * LDK, *dV0 = Ws + CH * LDK, *G0 = dV0 + 2 * CH * LBV;
    const int v0 = blockIdx.x * BV, h = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
    const int H = a.H, T = a.T, dv = a.dvd, Nc = a.Nc;
    const size_t bh = (size_t)b * H + h;
    for (int idx = tid; idx < DK * BV; idx += GC_NT) dSs[(idx / BV) * LBV + idx % BV] = 0.f;
    auto issue_k = [&](int c) {
        const size_t tok0 = (size_t)b * T + (size_t)c * CH, wrow0 = bh * T + (size_t)c * CH;
        ld_tile<CH, DK>(Ks, LDK, a.k + tok0 * a.ldqk + (size_t)h * DK, a.ldqk, a.vec);
        ld_tile<1, CH>(G0 + (c & 1) * CH, CH, a.Gc + wrow0, CH, true);
        cp_async_commit();
        ld_tile<CH, BV>(dV0 + (c & 1) * CH * LBV, LBV, a.dVn + wrow0 * dv + v0, dv, true);
        cp_async_commit();
    };
    auto issue_w = [&](int c) {
        ld_tile<CH, DK>(Ws, LDK, a.W + (bh * T + (size_t)c * CH) * DK, DK, true);
        cp_async_commit();
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
        for (int idx = tid; idx < DK * BV; idx += GC_NT) { const int d = idx / BV, j = idx % BV; dst[(size_t)d * dv + j] = dSs[d * LBV + j]; }
        cp_async_wait<1>();  // K, G, dVn of chunk c
        __syncthreads();
        const float GL = Gs[CH - 1];
        for (int idx = tid; idx < CH * DK; idx += GC_NT) { const int i = idx / DK, d = idx % DK; Ks[i * LDK + d] *= mv * expf(GL - Gs[i]); }
        __syncthreads();
        mm<CH, BV, DK, false, false>(dVb, LBV, Ks, LDK, dSs, LBV, 1.f, 1.f);
        __syncthreads();
        if (c > 0) issue_k(c - 1);
        if (tid < DK) asm volatile("prefetch.global.L2 [%0];" ::"l"(rsrc + (size_t)tid * dv));  // R_c rows (BV*4 bytes each)
        for (int idx = tid; idx < CH * BV; idx += GC_NT) { const int i = idx / BV, j = idx % BV; a.dVn[(wrow0 + i) * dv + v0 + j] = dVb[i * LBV + j]; }
        if (c > 0) cp_async_wait<2>(); else cp_async_wait<0>();  // W of chunk c
        __syncthreads();
        mm<DK, BV, CH, true, false>(dSs, LBV, Ws, LDK, dVb, LBV, -1.f, expf(GL));
        __syncthreads();
#pragma unroll
        for (int k = 0; k < EPT; k++) { const int e = tid + k * GC_NT; dSs[(e / BV) * LBV + e % BV] += rsrc[(size_t)(e / BV) * dv + e % BV]; }
        if (c > 0) issue_w(c - 1);
    }
}
template <int DK, int BV> constexpr size_t bwd_state_smem() { return sizeof(float) * (DK * (BV + 4) + 2 * CH * (DK + GC_PADK) + 2 * CH * (BV + 4) + 2 * CH); }

// ------------------------------------------------------------------------------------------------
// The chunk's CH rows of q̂ or k̂ of its head (x: as stored in bf16, rows of stride a.ldqk), the chunk given by the first
// of its head-major workspace rows, row0 = (b·H + h)·T + c·CH
template <int DK> __device__ __forceinline__ const bf16 *chunk_rows(const bf16 *x, const GA &a, size_t row0) {
    const size_t bh = row0 / a.T, t0 = row0 - bh * a.T;
    return x + ((bh / a.H) * a.T + t0) * a.ldqk + (bh % a.H) * DK;
}
// K2/B2 in bf16 mode: the state recurrences on Hopper's warpgroup MMA (wgmma m64nNk16, bf16 operands, fp32
// accumulation: wg_mma), dk ∈ {64, 128, 192}. The state lives transposed in registers: warp w of a block owns value
// columns v0 .. v0+15 (v0 = 16·(NW·x + w)) of Sᵀ (16 × dk, accumulator layout: rows = value columns), a warpgroup of
// 4 warps 64 of them. Every product of a chunk takes its A operand (rows = value columns) from the warps' registers
// (the state straight from the accumulators) and its B operand from the chunk's shared tiles, which the tensor cores
// read once for the warpgroup's 64 rows; each warpgroup is independent of the others: the block only shares the
// chunk's tiles (prep's bf16 W, K and Q as stored, s Pᵀ: cp.async into [CH][64] tiles of 128-byte swizzled rows,
// load_tile_wg) and its cumulative gates. Operands in bf16: the state, W, K, Q, Vn, dVn, dO (what fla's kernels round
// too); the accumulated state, U, Vn and dVn stay fp32; the snapshots (state, dstate) are stored in bf16 (the
// forward's from the A fragments through per-warp staging rows: store_state_cols), and so are Vn for fwd_out_bf16 and
// dVn for bwd_final_bf16's first phase, whose products take them in bf16: transposed ([dv][CH] a chunk), through the
// staging rows too (store_acc_rows).
//   forward:  Vnᵀ = Uᵀ − Sᵀ Wᵀ;   Sᵀ ← γ_L Sᵀ + Vnᵀ diag(m λ) K
//   backward: dVnᵀ = s dOᵀ P + (dSᵀ Kᵀ) diag(m λ);   dSᵀ ← γ_L dSᵀ + s dOᵀ diag(γ) Q − dVnᵀ W   (the local part from
//             prep_bf16's bf16 s Pᵀ, R_c of bwd_rhs computed here from Q as stored; dO as stored, bf16)
// ------------------------------------------------------------------------------------------------
// CH × D bf16 rows (global, row stride ld elements) -> D/64 tiles [CH][64] of 128-byte rows (16-byte chunk c of row r
// at c ^ (r & 7): swz<64>, what wgmma's descriptors call 128B swizzling; each tile 1024-byte aligned when s is), by
// 16-byte cp.async of NT threads
template <int D, int NT> __device__ __forceinline__ void load_tile_wg(bf16 *s, const bf16 *g, size_t ld) {
    constexpr int CPR = D / 8;
    static_assert((CH * CPR) % NT == 0, "tile loader: whole passes");
#pragma unroll
    for (int it = 0; it < CH * CPR / NT; ++it) {
        const int i = threadIdx.x + it * NT, r = i / CPR, c = i % CPR;
        cp_async16(s + (c >> 3) * CH * 64 + swz<64>(r, c & 7), g + (size_t)r * ld + c * 8);
    }
}
template <int DK, int NT>
__device__ __forceinline__ void state_issue(bf16 *Wsm, bf16 *Ksm, float *Gsm, const GA &a, size_t row0) {
    load_tile_wg<DK, NT>(Wsm, a.Wb + row0 * DK, DK);
    load_tile_wg<DK, NT>(Ksm, chunk_rows<DK>(a.k16, a, row0), a.ldqk);
    if (threadIdx.x < CH / 4) cp_async16(Gsm + threadIdx.x * 4, a.Gc + row0 + threadIdx.x * 4);
}
// bwd_state_bf16's per-warp dO slices (a warp's 16 value columns of a chunk's CH rows, bf16) have rows padded to GC_LO
// values (48 bytes): the accumulator-order reads (lanes 4 apart: one row's 8 consecutive values; lanes 1 apart: rows 2
// apart, 96 bytes) hit 16 distinct banks with no two lanes on one bank but for the same word
#define GC_LO 24
// bf16 fragments -> their negatives (the sign bits of both halves: the same bits as rounding −x)
template <int NK> __device__ __forceinline__ void frag_neg(uint32_t (&fa)[NK][4]) {
#pragma unroll
    for (int kk = 0; kk < NK; kk++)
#pragma unroll
        for (int e = 0; e < 4; e++) fa[kk][e] ^= 0x80008000u;
}
// acc (16 × 8·2·NK accumulator tiles) -> A fragments (bf16, times sgn) of NK k-steps of 16
template <int NK>
__device__ __forceinline__ void acc_to_a(uint32_t (&fa)[NK][4], const float (&acc)[2 * NK][4], float sgn) {
#pragma unroll
    for (int kk = 0; kk < NK; kk++) {
        fa[kk][0] = pack_bf16(sgn * acc[2 * kk][0], sgn * acc[2 * kk][1]);
        fa[kk][1] = pack_bf16(sgn * acc[2 * kk][2], sgn * acc[2 * kk][3]);
        fa[kk][2] = pack_bf16(sgn * acc[2 * kk + 1][0], sgn * acc[2 * kk + 1][1]);
        fa[kk][3] = pack_bf16(sgn * acc[2 * kk + 1][2], sgn * acc[2 * kk + 1][3]);
    }
}
// A warp's 16 value columns of a chunk-start state, held as the A fragments fa of Sᵀ (acc_to_a, sign +1), to
// dst[d_k][ld] (bf16, the warp's first column at dst): stmatrix writes the fragments transposed into the warp's
// staging rows stg [DK][16] (the two 16-byte halves of rows 4..7 of every 8 swapped: no bank conflicts), then each lane
// stores DK/16 runs of 16 bytes along d_v (in place of 4·DK/8 two-byte stores).
// (store_state_cols in two halves: the fragments into the staging rows, then the staging rows to dst, each lane DK/16
// runs of 16 bytes)
template <int DK> __device__ __forceinline__ void state_cols_stage(const uint32_t (&fa)[DK / 16][4], bf16 *stg) {
    const int lane = threadIdx.x & 31, mi = lane >> 3, r = lane & 7;
#pragma unroll
    for (int kk = 0; kk < DK / 16; kk++)
        stsm4t(smem_u32(stg + (16 * kk + 8 * (mi >> 1) + r) * 16 + 8 * ((mi & 1) ^ (r >> 2))), fa[kk]);
}
template <int DK> __device__ __forceinline__ void state_cols_out(bf16 *dst, size_t ld, const bf16 *stg) {
    const int lane = threadIdx.x & 31;
    __syncwarp();
#pragma unroll
    for (int i = 0; i < DK / 16; i++) {
        const int v = lane + 32 * i, row = v >> 1, half = v & 1;
        *reinterpret_cast<uint4 *>(dst + (size_t)row * ld + 8 * half) =
            *reinterpret_cast<const uint4 *>(stg + row * 16 + 8 * (half ^ ((row >> 2) & 1)));
    }
    __syncwarp();
}
template <int DK>
__device__ __forceinline__ void store_state_cols(bf16 *dst, size_t ld, const uint32_t (&fa)[DK / 16][4], bf16 *stg) {
    state_cols_stage<DK>(fa, stg);
    state_cols_out<DK>(dst, ld, stg);
}
// A warp's 16 × CH tile (rows: its 16 value columns, columns: the chunk's tokens), held as the A fragments fa of
// its accumulators (acc_to_a, sign +1), to dst[16][CH] (bf16): stmatrix writes them into the warp's staging rows
// stg [16][CH] (16-byte chunks XOR-swizzled by row: no bank conflicts), then each lane stores CH/16 runs of 16 bytes
// (in place of CH/4 four-byte stores).
__device__ __forceinline__ void store_acc_rows(bf16 *dst, const uint32_t (&fa)[CH / 16][4], bf16 *stg) {
    const int lane = threadIdx.x & 31, mi = lane >> 3, r = lane & 7;
#pragma unroll
    for (int kk = 0; kk < CH / 16; kk++)  // matrices (rows 0-7 | 8-15) × (tokens 16 kk .. | 16 kk + 8 ..)
        stsm4(smem_u32(stg + (r + 8 * (mi & 1)) * CH + 8 * ((2 * kk + (mi >> 1)) ^ r)), fa[kk]);
    __syncwarp();
#pragma unroll
    for (int i = 0; i < CH / 16; i++) {
        const int v = lane + 32 * i, row = v >> 3, blk = v & 7;
        *reinterpret_cast<uint4 *>(dst + (size_t)row * CH + 8 * blk) =
            *reinterpret_cast<const uint4 *>(stg + row * CH + 8 * (blk ^ (row & 7)));
    }
    __syncwarp();
}
// acc[16 × NN] += A[16 × NK] · B[:, n0 .. n0+NN), B read by ldmatrix from a swizzled bf16 tile X (rows of LD): XT: X =
// Bᵀ, [N rows][NK] (k along the rows); else X = B, [NK rows][N] (ldmatrix.trans). n0 % 16 == 0.
template <int NK, int NN, int LD, bool XT>
__device__ __forceinline__ void mma_x(float (&acc)[NN / 8][4], const uint32_t (&fa)[NK / 16][4], const bf16 *X, int n0 = 0) {
    const int lane = threadIdx.x & 31, q = lane >> 3, r = lane & 7;
#pragma unroll
    for (int kk = 0; kk < NK / 16; kk++)
#pragma unroll
        for (int jp = 0; jp < NN / 16; jp++) {
            uint32_t bw[4];
            if constexpr (XT) ldsm4(bw, smem_u32(X + swz<LD>(n0 + 16 * jp + 8 * (q >> 1) + r, 2 * kk + (q & 1))));
            else ldsm4t(bw, smem_u32(X + swz<LD>(16 * kk + 8 * (q & 1) + r, n0 / 8 + 2 * jp + (q >> 1))));
            mma16816(acc[2 * jp], fa[kk], bw[0], bw[1]);
            mma16816(acc[2 * jp + 1], fa[kk], bw[2], bw[3]);
        }
}
// A fragments of rows r0 .. r0+15 of a swizzled bf16 tile [rows][LD] (k = the NK columns)
template <int NK, int LD>
__device__ __forceinline__ void lds_a(uint32_t (&fa)[NK / 16][4], const bf16 *X, int r0) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int kk = 0; kk < NK / 16; kk++) ldsm4(fa[kk], smem_u32(X + swz<LD>(r0 + (lane & 15), 2 * kk + (lane >> 4))));
}
// Hopper's warpgroup MMA for the bf16 state kernels: d(64 × N) += A(64 × 16) B(16 × N), fp32 accumulation, issued by
// the 4 warps of a warpgroup together (wgmma.mma_async m64nNk16). A in registers: each warp the m16n8k16 A fragments a
// of its 16 rows (warp i of the warpgroup: rows 16i .. 16i+15); d: each warp its 16 rows as N/8 accumulator tiles in
// mma.sync's layout. B is read by the tensor cores from 128B-swizzled shared tiles through the descriptor db
// (wgmma_desc_of): TB = 0 K-major (stored [n][k], rows of 64 k), TB = 1 MN-major (stored [k][n], 64 n a tile). The
// caller runs wgmma_fence after writing a or d, then wgmma_commit, wgmma_wait and wg_keep before reading d.
template <int N, int TB>
__device__ __forceinline__ void wg_mma(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t db) {
    static_assert(N == 64 || N == 128 || N == 192, "wg_mma: N of 64, 128 or 192");
    if constexpr (N == 64)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" WG_REGS32 "}, {%32,%33,%34,%35}, %36, p, 1, 1, %38;\n}\n"
                     : WG_T4(0), WG_T4(4) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1), "n"(TB));
    else if constexpr (N == 128)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" WG_REGS64 "}, {%64,%65,%66,%67}, %68, p, 1, 1, %70;\n}\n"
                     : WG_T4(0), WG_T4(4), WG_T4(8), WG_T4(12) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1), "n"(TB));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %101, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 {" WG_REGS96 "}, {%96,%97,%98,%99}, %100, p, 1, 1, %102;\n}\n"
                     : WG_T4(0), WG_T4(4), WG_T4(8), WG_T4(12), WG_T4(16), WG_T4(20) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1), "n"(TB));
}
// d(64 × 64) −= A(64 × 16) B(16 × 64): wg_mma<64, TB> with A negated by the instruction (imm-scale-a = −1)
template <int TB> __device__ __forceinline__ void wg_mma_sub64(float (&d)[8][4], const uint32_t (&a)[4], uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" WG_REGS32 "}, {%32,%33,%34,%35}, %36, p, -1, 1, %38;\n}\n"
                 : WG_T4(0), WG_T4(4) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1), "n"(TB));
}
// the accumulators the wgmma statements name: the compiler must not move their reads and writes across the wait
template <int N> __device__ __forceinline__ void wg_keep(float (&d)[N][4]) {
    wgmma_keep(reinterpret_cast<float (&)[4 * N]>(d));
}
// the A fragments a wgmma statement names, defined before the wgmma_fence that precedes it (else the compiler may
// compute them after it and ptxas inserts a fence of its own at each)
template <int K> __device__ __forceinline__ void wg_pin(uint32_t (&a)[K][4]) {
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
        for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(a[k][e])::"memory");
}
// this thread's completed writes to shared memory (stores, cp.async), ordered before the tensor cores' reads of wgmma
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// x[0..8) = s · p[0..8) (p 16-byte aligned)
__device__ __forceinline__ void ld8(float (&x)[8], const float *p, float s) {
    const float4 x0 = *reinterpret_cast<const float4 *>(p), x1 = *reinterpret_cast<const float4 *>(p + 4);
    x[0] = s * x0.x; x[1] = s * x0.y; x[2] = s * x0.z; x[3] = s * x0.w;
    x[4] = s * x1.x; x[5] = s * x1.y; x[6] = s * x1.z; x[7] = s * x1.w;
}
__device__ __forceinline__ void ld8(float (&x)[8], const bf16 *p, float s) {
    const uint4 u = *reinterpret_cast<const uint4 *>(p);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&w[q]));
        x[2 * q] = s * f.x; x[2 * q + 1] = s * f.y;
    }
}
// 8 values -> bf16 (hi) and the bf16 of what hi leaves out (lo): hi + lo = x to about 2^-16 relative
__device__ __forceinline__ void split8(uint4 &hi, uint4 &lo, const float (&x)[8]) {
    uint32_t h[4], l[4];
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const __nv_bfloat162 v = __floats2bfloat162_rn(x[2 * q], x[2 * q + 1]);
        const float2 f = __bfloat1622float2(v);
        h[q] = *reinterpret_cast<const uint32_t *>(&v);
        l[q] = pack_bf16(x[2 * q] - f.x, x[2 * q + 1] - f.y);
    }
    hi = make_uint4(h[0], h[1], h[2], h[3]);
    lo = make_uint4(l[0], l[1], l[2], l[3]);
}
__device__ __forceinline__ uint4 pack8(const float (&x)[8]) {
    return make_uint4(pack_bf16(x[0], x[1]), pack_bf16(x[2], x[3]), pack_bf16(x[4], x[5]), pack_bf16(x[6], x[7]));
}
// CH × D fp32 (or bf16) tile (row stride ld, 16-byte aligned rows) -> swizzled bf16 tile [CH][D], NT threads
template <int D, int NT>
__device__ __forceinline__ void tile_to_bf16(bf16 *dst, const float *src, size_t ld) {
    for (int idx = threadIdx.x; idx < CH * D / 8; idx += NT) {
        const int r = idx / (D / 8), ch = idx % (D / 8);
        float x[8];
        ld8(x, src + r * ld + ch * 8, 1.f);
        *reinterpret_cast<uint4 *>(dst + swz<D>(r, ch)) = pack8(x);
    }
}
template <int D, int NT>
__device__ __forceinline__ void tile_to_bf16(bf16 *dst, const bf16 *src, size_t ld) {
    for (int idx = threadIdx.x; idx < CH * D / 8; idx += NT) {
        const int r = idx / (D / 8), ch = idx % (D / 8);
        *reinterpret_cast<uint4 *>(dst + swz<D>(r, ch)) = *reinterpret_cast<const uint4 *>(src + r * ld + ch * 8);
    }
}
// the pair (row r, columns c, c + 1) of a swizzled bf16 tile [rows][LD], c even
template <int LD> __device__ __forceinline__ void st_pair(bf16 *X, int r, int c, float x0, float x1) {
    *reinterpret_cast<uint32_t *>(X + swz<LD>(r, c >> 3) + (c & 7)) = pack_bf16(x0, x1);
}
// element `at` and the next of dq, dk or dv (base), which hold bf16 values with a.d16, else fp32
__device__ __forceinline__ float2 ld_grad(const GA &a, const float *base, size_t at) {
    return a.d16 ? ld2(reinterpret_cast<const bf16 *>(base) + at) : ld2(base + at);
}
__device__ __forceinline__ void st_grad(const GA &a, float *base, size_t at, float x, float y) {
    if (a.d16) st2(reinterpret_cast<bf16 *>(base) + at, x, y);
    else st2(base + at, x, y);
}
template <int LD> __device__ __forceinline__ float2 ld_pair(const bf16 *X, int r, int c) { return ld2(X + swz<LD>(r, c >> 3) + (c & 7)); }
// f(j, hh, i, col) for each pair of this thread's accumulator elements acc[j][2hh], acc[j][2hh + 1] of a 16 × NN tile
// whose rows start at r0 and columns at c0: they hold (row i, columns col, col + 1)
template <int NN, class F> __device__ __forceinline__ void acc_pairs(int r0, int c0, F f) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < NN / 8; j++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) f(j, hh, r0 + (lane >> 2) + 8 * hh, c0 + 8 * j + 2 * (lane & 3));
}
// an accumulator tile (N n-tiles of 8 columns) to 0
template <int N> __device__ __forceinline__ void acc_zero(float (&acc)[N][4]) {
    for (auto &x : acc) x[0] = x[1] = x[2] = x[3] = 0.f;
}
// Rows r0 and r0 + 8 of a 16 × NN accumulator tile (this thread's columns 8j + 2t, + 1), row r0's times s0 and
// row r0 + 8's times s1, to rows of stride ld (fp32, or bf16: OT); dst points at row r0, column 0.
template <int NN, class OT>
__device__ __forceinline__ void store_acc(OT *dst, size_t ld, const float (&acc)[NN / 8][4], float s0, float s1) {
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int j = 0; j < NN / 8; j++) {
        st2(dst + 8 * j + 2 * t, s0 * acc[j][0], s0 * acc[j][1]);
        st2(dst + 8 * ld + 8 * j + 2 * t, s1 * acc[j][2], s1 * acc[j][3]);
    }
}
// A[16 × CH] = rows of acc scaled per token (column) by this thread's factors f[kk][e] of tokens 16 kk + 2t + (e & 1) +
// 8 (e >> 1) (t = lane & 3: the columns of its accumulators, tok_of): bf16 fragments
__device__ __forceinline__ int tok_of(int kk, int e) { return 16 * kk + 2 * (threadIdx.x & 3) + (e & 1) + 8 * (e >> 1); }
__device__ __forceinline__ void acc_to_a_fac(uint32_t (&fa)[4][4], const float (&acc)[8][4], const float (&f)[4][4]) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        fa[kk][0] = pack_bf16(acc[2 * kk][0] * f[kk][0], acc[2 * kk][1] * f[kk][1]);
        fa[kk][1] = pack_bf16(acc[2 * kk][2] * f[kk][0], acc[2 * kk][3] * f[kk][1]);
        fa[kk][2] = pack_bf16(acc[2 * kk + 1][0] * f[kk][2], acc[2 * kk + 1][1] * f[kk][3]);
        fa[kk][3] = pack_bf16(acc[2 * kk + 1][2] * f[kk][2], acc[2 * kk + 1][3] * f[kk][3]);
    }
}
// A fragments of a 16 × CH bf16 tile (fl, as acc_to_a makes them) times a factor per column (token) fs: bf16
__device__ __forceinline__ void frag_scaled(uint32_t (&fo)[4][4], const uint32_t (&fl)[4][4], const float *fs) {
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        const float f0 = fs[16 * kk + 2 * t], f1 = fs[16 * kk + 2 * t + 1], f2 = fs[16 * kk + 8 + 2 * t], f3 = fs[16 * kk + 9 + 2 * t];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&fl[kk][e]));
            fo[kk][e] = e < 2 ? pack_bf16(x.x * f0, x.y * f1) : pack_bf16(x.x * f2, x.y * f3);
        }
    }
}
// ---- tiled operands for the bf16 kernels' warpgroup products (wg_mma_ss, wg_n32, wg_dk). A tile of D columns
// (d_k or CH) is stored as D/64 tiles [R][64] of 128-byte rows, each swz<64> (wgmma's 128B swizzle, load_tile_wg's
// layout), one after the other: element offset of (row r, 16-byte chunk c). D = 64 is swz<64> itself.
template <int R> __device__ __forceinline__ int swt(int r, int c) { return (c >> 3) * (R * 64) + swz<64>(r, c & 7); }
template <int R> __device__ __forceinline__ float2 ld_pair_t(const bf16 *X, int r, int c) { return ld2(X + swt<R>(r, c >> 3) + (c & 7)); }
template <int R> __device__ __forceinline__ void st_pair_t(bf16 *X, int r, int c, float x0, float x1) {
    *reinterpret_cast<uint32_t *>(X + swt<R>(r, c >> 3) + (c & 7)) = pack_bf16(x0, x1);
}
// d[J0 .. J0 + N/8) (64 × N, the warpgroup's accumulators, a slice of a longer array) += A(64 × 16) B(16 × N) by
// wgmma m64nNk16, N = 32 or 64, both operands read by the tensor cores from 128B-swizzled shared tiles through the
// descriptors da, db (wgmma_desc_of): TA = 0 A K-major (stored [m][k]), 1 MN-major (stored [k][m]); TB likewise for B
// (0: stored [n][k], 1: [k][n]). The caller runs wgmma_fence after writing d, then wgmma_commit, wgmma_wait and
// wg_keep before reading d.
template <int N, int TA, int TB, int J0 = 0, int M>
__device__ __forceinline__ void wg_mma_ss(float (&d)[M][4], uint64_t da, uint64_t db) {
    static_assert((N == 32 || N == 64) && J0 + N / 8 <= M, "wg_mma_ss: N of 32 or 64 inside d");
    if constexpr (N == 32)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {" WG_REGS16 "}, %16, %17, p, 1, 1, %19, %20;\n}\n"
                     : WG_T4(J0) : "l"(da), "l"(db), "r"(1), "n"(TA), "n"(TB));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" WG_REGS32 "}, %32, %33, p, 1, 1, %35, %36;\n}\n"
                     : WG_T4(J0), WG_T4(J0 + 4) : "l"(da), "l"(db), "r"(1), "n"(TA), "n"(TB));
}
// d(64 × 32) −= A(64 × 16) B(16 × 32): wg_mma_ss<32, TA, TB> with A negated by the instruction (imm-scale-a = −1)
template <int TA, int TB>
__device__ __forceinline__ void wg_mma_ss_sub32(float (&d)[4][4], uint64_t da, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {" WG_REGS16 "}, %16, %17, p, -1, 1, %19, %20;\n}\n"
                 : WG_T4(0) : "l"(da), "l"(db), "r"(1), "n"(TA), "n"(TB));
}
#undef WG_T4
#undef WG_T
#undef WG_REGS96
#undef WG_REGS64
#undef WG_REGS32
#undef WG_REGS16
// the k-step kk (16 of k) of an operand of 64 rows (m or n) from its descriptor's low word, in 16-byte units: K-major
// (T = 0: rows of k, k/64 tiles [64][64] one after the other: 32 bytes along a row) or MN-major (T = 1: stored [k][64],
// 16 rows of 128 bytes)
template <int T> __device__ __forceinline__ uint32_t wg_kstep(int kk) { return T ? 128 * kk : (kk >> 2) * 512 + 2 * (kk & 3); }
// d(64 × 32) += A(64 × NK) Bᵀ-rows c0 .. c0+31: A through alo (TA as wg_mma_ss; K-major A: NK/64 tiles [64][64]), B
// K-major: X [64 rows][NK] in NK/64 tiles [64][64] (swt<64>), the product's columns X's rows c0 .. (c0 % 8 == 0);
// alo, blo = wgmma_desc_lo of A's and X's first tiles. Issues only (the caller fences, commits and waits).
template <int NK, int TA>
__device__ __forceinline__ void wg_n32(float (&d)[4][4], uint32_t alo, uint32_t blo, int c0) {
#pragma unroll
    for (int kk = 0; kk < NK / 16; kk++)
        wg_mma_ss<32, TA, 0>(d, wgmma_desc_of(alo + wg_kstep<TA>(kk)), wgmma_desc_of(blo + c0 * 8 + wg_kstep<0>(kk)));
}
// d(64 × 32) −= A(64 × NK) B[:, c0 .. c0+31], A through alo (TA as wg_mma_ss; K-major A: NK/64 tiles [64][64]), B
// MN-major: X [NK rows][64] one swz<64> tile, the product's columns X's columns c0 .. (c0 = 0 or 32: a 32-column piece
// starts 64 bytes into the tile's rows, as wg_dk's); alo, blo = wgmma_desc_lo of A's first tile and of X. Issues only.
template <int NK, int TA>
__device__ __forceinline__ void wg_n32_mn_sub(float (&d)[4][4], uint32_t alo, uint32_t blo, int c0) {
#pragma unroll
    for (int kk = 0; kk < NK / 16; kk++)
        wg_mma_ss_sub32<TA, 1>(d, wgmma_desc_of(alo + wg_kstep<TA>(kk)), wgmma_desc_of(blo + c0 / 8 + wg_kstep<1>(kk)));
}
// The d_k/2 columns of a d_k-wide product that warpgroup wg (of two) accumulates, as accumulator tiles j = 0 .. d_k/16:
// tile j holds columns dk_col(wg, j) .. +7. At d_k = 64 and 128 warpgroup wg owns columns (d_k/2)·wg .. +d_k/2−1 in
// order; at 192 it owns the 64-column tile 2wg (j < 8) and the 32 columns 64 + 32wg .. of the middle one (j ≥ 8),
// so that no wgmma's B straddles a 64-column tile
template <int DK> __device__ __forceinline__ int dk_col(int wg, int j) {
    if constexpr (DK == 192) return j < 8 ? 128 * wg + 8 * j : 64 + 32 * wg + 8 * (j - 8);
    else return DK / 2 * wg + 8 * j;
}
// f(j, hh, i, col) over the pairs of a d_k-wide accumulator (dk_col's columns) whose rows start at r0, as acc_pairs
template <int DK, class F> __device__ __forceinline__ void acc_pairs_dk(int r0, int wg, F f) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < DK / 16; j++)
#pragma unroll
        for (int hh = 0; hh < 2; hh++) f(j, hh, r0 + (lane >> 2) + 8 * hh, dk_col<DK>(wg, j) + 2 * (lane & 3));
}
// d(64 × d_k/2) += A(64 × NK) B[:, dk_col(wg, ·)], A through alo (TA as wg_mma_ss, NK = 64), B = X: TB = 1: X [NK
// rows][d_k] in d_k/64 tiles [NK][64] (MN-major; a 32-column piece starts 64 bytes into its tile's rows); TB = 0:
// B = Xᵀ, X [d_k rows][64] one swz<64> tile (K-major). alo, blo = wgmma_desc_lo of A and X. Issues only.
template <int DK, int NK, int TA, int TB>
__device__ __forceinline__ void wg_dk(float (&d)[DK / 16][4], uint32_t alo, uint32_t blo, int wg) {
    static_assert(NK == 64, "wg_dk: k of 64");
    auto at = [](int c) -> uint32_t { return TB ? (c >> 6) * (NK * 8) + (c & 63) / 8 : c * 8; };  // column c, 16-byte units
#pragma unroll
    for (int kk = 0; kk < NK / 16; kk++) {
        const uint64_t da = wgmma_desc_of(alo + wg_kstep<TA>(kk));
        const uint32_t k = blo + wg_kstep<TB>(kk);
        if constexpr (DK == 192) {
            wg_mma_ss<64, TA, TB, 0>(d, da, wgmma_desc_of(k + at(128 * wg)));
            wg_mma_ss<32, TA, TB, 8>(d, da, wgmma_desc_of(k + at(64 + 32 * wg)));
        } else {
            wg_mma_ss<DK / 2, TA, TB, 0>(d, da, wgmma_desc_of(k + at(DK / 2 * wg)));
        }
    }
}
// The d_k each kernel family is compiled for: the bf16 tensor-core kernels 64, 128 and 192 (the 760m preset); the fp32
// ones 32 .. 128 (their shared tiles of fp32 rows outgrow an SM at 192, so the 760m's fp32 mode takes the token
// recurrence). The 8-warp bf16 kernels keep two blocks per SM (128 registers a thread) up to d_k = 128, one at 192.
template <int DK> __host__ __device__ constexpr bool dk_bf16() { return DK == 64 || DK == 128 || DK == 192; }
template <int DK> __host__ __device__ constexpr bool dk_fp32() { return DK <= 128; }
template <int DK> __host__ __device__ constexpr int blocks8() { return DK <= 128 ? 2 : 1; }
// K1 in bf16 mode (dk ∈ {64, 128, 192}): prep with its products on Hopper's warpgroup MMA, grid (Nc, B*H), 8 warps
// = two warpgroups.
// The same outputs as prep_kernel for the bf16 kernels (G, W in bf16, U; for the backward also T and s Pᵀ =
// s K Qᵀ ⊙ Γᵀ ⊙ [i ≥ j] in bf16, Q loaded into Kx's room; no fp32 W): A = diag(β) (K Kᵀ ⊙ Γ) strictly lower;
// T = (I + A)⁻¹ in fp32 by blocks of 16 (each diagonal block by column-wise forward substitution, one thread per
// column, in registers; then the off-diagonal blocks by diagonals: T_ij = −T_ii Σ_{j ≤ l < i} A_il T_lj);
// W = (T diag(β)) (diag(γ) K) and U = (T diag(β)) V. q̂, k̂ and v arrive in bf16 (as stored), so K Kᵀ and the
// products with V take them exactly (one mma a product, V tiles by cp.async); T diag(β) goes in as two bf16 operands
// (x = hi + lo: two mma a product) and diag(γ) K rounded to bf16. With T as one plain bf16 operand the router
// gradient dA = Σ_j k_j·X_j, a sum with cancellation downstream of U, moved by 1.1e-2 (dev/cuda/gdn/NOTES.md). fp32
// accumulation. Each product is wgmma m64nNk16 with both operands read by the tensor cores from shared [rows][64]
// tiles of 128-byte swizzled rows (wg_mma_ss; K, Q and diag(γ) K as d_k/64 tiles, swt, load_tile_wg): warpgroup
// wg = w >> 2 computes all 64 rows (its warp w & 3 the rows R0 = 16(w & 3) .. +15) and, of a 64-wide result, the
// columns C0 = 32·wg .. +31 (K Kᵀ, K Qᵀ: wg_n32), of W the d_k/2 columns dk_col (wg_dk, MN-major diag(γ) K). U is
// made transposed, Uᵀ = Vᵀ (T diag(β))ᵀ per 64-column V tile (rows: the tile's value columns, columns: tokens
// C0 .. +31), so that both operands are whole tiles (V's MN-major, T diag(β)'s K-major).
template <int DK>
__global__ void __launch_bounds__(256, blocks8<DK>()) prep_bf16_kernel(GA a) {
    constexpr int LA = GC_L64;
    static_assert(dk_bf16<DK>(), "prep_bf16: dk 64, 128 or 192");
    extern __shared__ uint4 pb_smem[];
    bf16 *Ks = fa_align1024(pb_smem), *Kx = Ks + CH * DK, *Th = Kx + CH * DK, *Tl = Th + CH * CH;  // Kx: diag(γ) K
    bf16 *Vs = Tl + CH * CH;  // two V tiles [CH][64]
    float *As = reinterpret_cast<float *>(Vs + 2 * CH * 64), *Tf = As + CH * LA, *Xs = Tf + CH * LA, *Gs = Xs + 3 * 256, *bs = Gs + CH, *es = bs + CH;
    const int c = blockIdx.x, bh = blockIdx.y, b = bh / a.H, h = bh % a.H;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, wg = w >> 2;
    const int H = a.H, dv = a.dvd, nvt = dv / 64;
    const size_t row0 = (size_t)bh * a.T + (size_t)c * CH, cc = (size_t)bh * a.Nc + c, tok0 = (size_t)b * a.T + (size_t)c * CH;
    const int R0 = 16 * (w & 3), C0 = 32 * wg;
    const bf16 *kg = a.k16 + tok0 * a.ldqk + (size_t)h * DK;
    // the descriptors' low words: K-major operands (LBO unused), MN-major ones (LBO: one [CH][64] tile)
    auto lo_k = [](const bf16 *X) { return wgmma_desc_lo(smem_u32(X), 16); };
    auto lo_mn = [](const bf16 *X) { return wgmma_desc_lo(smem_u32(X), CH * 64 * sizeof(bf16)); };
    // cp.async groups: K, then the first two V tiles (of 64 columns), all in flight from the start
    const bf16 *vg = a.v16 + tok0 * a.ldv + (size_t)h * dv;
    auto issue_v = [&](int vt) { load_tile<64, CH, 256>(Vs + (vt & 1) * CH * 64, vg + vt * 64, a.ldv, tid); cp_async_commit(); };
    load_tile_wg<DK, 256>(Ks, kg, a.ldqk);
    if (a.bwd) load_tile_wg<DK, 256>(Kx, chunk_rows<DK>(a.q16, a, row0), a.ldqk);  // Q, in Kx's room until P
    cp_async_commit();
    issue_v(0);
    if (nvt > 1) issue_v(1);

    if (w == 0) {  // G = cumulative log gate over the chunk (lane: tokens lane, lane + 32), γ = exp(G), β
        float g0 = a.g[(tok0 + lane) * H + h], g1 = a.g[(tok0 + lane + 32) * H + h];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const float y0 = __shfl_up_sync(0xffffffffu, g0, o), y1 = __shfl_up_sync(0xffffffffu, g1, o);
            if (lane >= o) { g0 += y0; g1 += y1; }
        }
        g1 += __shfl_sync(0xffffffffu, g0, 31);
        Gs[lane] = g0; Gs[lane + 32] = g1; es[lane] = expf(g0); es[lane + 32] = expf(g1);
        bs[lane] = a.beta[(tok0 + lane) * H + h]; bs[lane + 32] = a.beta[(tok0 + lane + 32) * H + h];
        a.Gc[row0 + lane] = g0; a.Gc[row0 + lane + 32] = g1;
    }
    if (nvt > 1) cp_async_wait<2>(); else cp_async_wait<1>();  // K
    fence_async_smem();
    __syncthreads();
    {   // A = β_i (K Kᵀ)_ij Γ_ij below the diagonal, else 0 (fp32)
        float P[4][4];
        acc_zero(P);
        wg_keep(P);
        wgmma_fence();
        wg_n32<DK, 0>(P, lo_k(Ks), lo_k(Ks), C0);  // K Kᵀ
        wgmma_commit();
        wgmma_wait<0>();
        wg_keep(P);
        acc_pairs<32>(R0, C0, [&](int j, int hh, int i, int col) {
            const float a0 = (i > col) ? bs[i] * P[j][2 * hh] * expf(Gs[i] - Gs[col]) : 0.f;
            const float a1 = (i > col + 1) ? bs[i] * P[j][2 * hh + 1] * expf(Gs[i] - Gs[col + 1]) : 0.f;
            *reinterpret_cast<float2 *>(As + i * LA + col) = make_float2(a0, a1);
        });
        if (a.bwd) {  // s Pᵀ = s K Qᵀ ⊙ Γᵀ ⊙ [i ≥ j] in bf16 for bwd_state_bf16 (rows: keys j, columns: queries i)
            acc_zero(P);
            wg_keep(P);
            wgmma_fence();
            wg_n32<DK, 0>(P, lo_k(Ks), lo_k(Kx), C0);
            wgmma_commit();
            wgmma_wait<0>();
            wg_keep(P);
            acc_pairs<32>(R0, C0, [&](int j, int hh, int r, int col) {
                const float p0 = col >= r ? a.scale * expf(Gs[col] - Gs[r]) * P[j][2 * hh] : 0.f;
                const float p1 = col + 1 >= r ? a.scale * expf(Gs[col + 1] - Gs[r]) * P[j][2 * hh + 1] : 0.f;
                *reinterpret_cast<uint32_t *>(a.Pb + cc * CH * CH + r * CH + col) = pack_bf16(p0, p1);
            });
        }
    }
    if (a.bwd) __syncthreads();  // Q is spent: Kx's room is free
    for (int idx = tid; idx < CH * DK / 8; idx += 256) {  // diag(γ) K in bf16
        const int r = idx / (DK / 8), ch = idx % (DK / 8);
        float x[8];
        ld8(x, Ks + swt<CH>(r, ch), es[r]);
        *reinterpret_cast<uint4 *>(Kx + swt<CH>(r, ch)) = pack8(x);
    }
    __syncthreads();
    if (tid < CH) {  // the diagonal blocks: thread (block bb, column j) solves (I + A_bb) t = e_j
        const int bb = tid >> 4, j = tid & 15, o = 16 * bb;
        float tc[16];
#pragma unroll
        for (int i = 0; i < 16; i++) {
            float s = (i == j) ? 1.f : 0.f;
#pragma unroll
            for (int k = 0; k < i; k++) s = fmaf(-As[(o + i) * LA + o + k], tc[k], s);
            tc[i] = s;
        }
#pragma unroll
        for (int i = 0; i < 16; i++) Tf[(o + i) * LA + o + j] = tc[i];
    } else {  // the blocks above the diagonal: 0
        for (int idx = tid - CH; idx < 6 * 256; idx += 256 - CH) {
            const int p = idx >> 8, bi = p < 3 ? 0 : p < 5 ? 1 : 2, bj = p < 3 ? p + 1 : p < 5 ? p - 1 : 3;
            Tf[(16 * bi + ((idx >> 4) & 15)) * LA + 16 * bj + (idx & 15)] = 0.f;
        }
    }
    __syncthreads();
    for (int d = 1; d < 4; d++) {  // the blocks (bj + d, bj): X = Σ_{bj ≤ l < bi} A_il T_lj, then T_ij = −T_ii X
        const int n = (4 - d) * 256;
        for (int idx = tid; idx < n; idx += 256) {
            const int bj = idx >> 8, r = (idx >> 4) & 15, q = idx & 15, bi = bj + d;
            float s = 0.f;
            for (int x = 16 * bj; x < 16 * bi; x++) s = fmaf(As[(16 * bi + r) * LA + x], Tf[x * LA + 16 * bj + q], s);
            Xs[idx] = s;
        }
        __syncthreads();
        for (int idx = tid; idx < n; idx += 256) {
            const int bj = idx >> 8, r = (idx >> 4) & 15, q = idx & 15, bi = bj + d;
            float s = 0.f;
#pragma unroll
            for (int m = 0; m < 16; m++) s = fmaf(Tf[(16 * bi + r) * LA + 16 * bi + m], Xs[(bj << 8) + 16 * m + q], s);
            Tf[(16 * bi + r) * LA + 16 * bj + q] = -s;
        }
        __syncthreads();
    }
    for (int idx = tid; idx < CH * CH / 8; idx += 256) {  // T diag(β) (hi, lo) in bf16; T in bf16 to global for the backward
        const int r = idx >> 3, ch = idx & 7;
        float x[8];
        uint4 hi, lo;
        ld8(x, Tf + r * LA + 8 * ch, 1.f);
        if (a.bwd) *reinterpret_cast<uint4 *>(a.Tb + cc * CH * CH + r * CH + 8 * ch) = pack8(x);
#pragma unroll
        for (int e = 0; e < 8; e++) x[e] *= bs[8 * ch + e];
        split8(hi, lo, x);
        *reinterpret_cast<uint4 *>(Th + swz<CH>(r, ch)) = hi;
        *reinterpret_cast<uint4 *>(Tl + swz<CH>(r, ch)) = lo;
    }
    fence_async_smem();
    __syncthreads();
    const uint32_t hlo = lo_k(Th), llo = lo_k(Tl);
    {   // W = (T diag(β)) (diag(γ) K) -> bf16
        float W[DK / 16][4];
        acc_zero(W);
        wg_keep(W);
        wgmma_fence();
        wg_dk<DK, CH, 0, 1>(W, hlo, lo_mn(Kx), wg);
        wg_dk<DK, CH, 0, 1>(W, llo, lo_mn(Kx), wg);
        wgmma_commit();
        wgmma_wait<0>();
        wg_keep(W);
        acc_pairs_dk<DK>(R0, wg, [&](int j, int hh, int i, int col) {
            *reinterpret_cast<uint32_t *>(a.Wb + (row0 + i) * DK + col) = pack_bf16(W[j][2 * hh], W[j][2 * hh + 1]);
        });
    }
    for (int vt = 0; vt < nvt; vt++) {  // Uᵀ = Vᵀ (T diag(β))ᵀ (fp32): rows the tile's 64 value columns, columns tokens
        if (vt + 1 < nvt) cp_async_wait<1>(); else cp_async_wait<0>();
        fence_async_smem();
        __syncthreads();
        float U[4][4];
        acc_zero(U);
        const uint32_t vlo = lo_mn(Vs + (vt & 1) * CH * 64);  // A = Vᵀ: V's tile MN-major
        wg_keep(U);
        wgmma_fence();
        wg_n32<CH, 1>(U, vlo, hlo, C0);
        wg_n32<CH, 1>(U, vlo, llo, C0);
        wgmma_commit();
        wgmma_wait<0>();
        wg_keep(U);
        acc_pairs<32>(R0, C0, [&](int j, int hh, int v, int i) {  // (value column v, tokens i, i + 1)
            float *u = a.U + (row0 + i) * dv + vt * 64 + v;
            u[0] = U[j][2 * hh];
            u[dv] = U[j][2 * hh + 1];
        });
        __syncthreads();  // buffer vt & 1 is free
        if (vt + 2 < nvt) issue_v(vt + 2);
    }
}
// (1024: the tiles' alignment)
template <int DK> constexpr size_t prep_bf16_smem() {
    return 1024 + sizeof(float) * (2 * CH * GC_L64 + 3 * 256 + 3 * CH) + sizeof(bf16) * (2 * CH * DK + 2 * CH * CH + 2 * CH * 64);
}

// element (row r of the warp's 16 value columns, column e of n-tile j) of an accumulator tile: r = g (+8), e = 2t (+1)
#define GC_ACC_ROW(q) ((lane >> 2) + 8 * ((q) >> 1))
#define GC_ACC_COL(j, q) (8 * (j) + 2 * (lane & 3) + ((q) & 1))

// fwd_state_bf16's per-warp U slices (a warp's 16 value columns of a chunk's CH rows, fp32) have rows padded to FS_UL
// values (80 bytes): the accumulator-order reads (lanes 4 apart: rows 2 apart, 8 banks; lanes 1 apart: consecutive
// columns) hit 32 distinct banks
#define FS_UL 20
// K2 on Hopper's warpgroup MMA: NW/4 warpgroups a block (warpgroup g: value columns 16·NW·x + 64g .. + 63). Per chunk
// c (first to last), from the warps' registers as A operand:
//   Vnᵀ = Uᵀ − Sᵀ Wᵀ (N = CH, K-major B: W's rows);  Sᵀ ← γ_L Sᵀ + (Vnᵀ diag(m λ)) K (N = d_k, MN-major B: K's rows)
// The chain of a chunk step is the two products and what joins them; everything else runs beside them. W, K and the
// gates ([CH][64] tiles, load_tile_wg) double-buffered; Uᵀ (the warp's 16 value columns of the chunk's U rows, fp32)
// as a per-warp slice by cp.async (its rows fetched into L2 a step before); chunk c + 1's of both issued while step
// c's Sᵀ Wᵀ runs, and so are the state snapshot's stores; m of chunk c + 1 read during step c; the Vnᵀ tile stored
// while the state update runs. The gate factors m λ_i are each thread's own (the tokens of its accumulator columns),
// so a step has one block barrier (chunk c's tiles whole; every warp done with chunk c − 1's buffer). 102 KB a 4-warp
// block at d_k = 128, two blocks an SM.
template <int DK, int NW>
__global__ void __launch_bounds__(32 * NW) fwd_state_bf16_kernel(GA a) {
    static_assert(NW % 4 == 0, "fwd_state_bf16: whole warpgroups");
    constexpr int NT = 32 * NW, TK = CH * DK;
    extern __shared__ uint4 fs_smem[];
    bf16 *Wsm = fa_align1024(fs_smem), *Ksm = Wsm + 2 * TK, *Stg = Ksm + 2 * TK;
    float *Gsm = reinterpret_cast<float *>(Stg + NW * DK * 16);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int v0 = (blockIdx.x * NW + w) * 16, h = blockIdx.y, b = blockIdx.z;
    const int T = a.T, dv = a.dvd, Nc = a.Nc;
    const size_t bh = (size_t)b * a.H + h;
    float *Us = Gsm + 2 * CH + w * CH * FS_UL;  // this warp's U slice [CH][16] (rows FS_UL apart)
    bf16 *Sw = Stg + w * DK * 16;               // its staging rows
    auto issue_u = [&](int c) {  // chunk c's U slice (by this warp's lanes alone: four 16-byte copies a row)
        const float *src = a.U + (bh * T + (size_t)c * CH) * dv + v0;
#pragma unroll
        for (int i = lane; i < 4 * CH; i += 32) cp_async16(Us + (i >> 2) * FS_UL + (i & 3) * 4, src + (size_t)(i >> 2) * dv + (i & 3) * 4);
    };
    auto prefetch_u = [&](int c) {  // chunk c's U rows of this warp (64 bytes each) into L2
        const float *src = a.U + (bh * T + (size_t)c * CH) * dv + v0;
        for (int i = lane; i < CH; i += 32) asm volatile("prefetch.global.L2 [%0];" ::"l"(src + (size_t)i * dv));
    };
    // the descriptors' low words (wgmma_desc_lo) of buffer 0's W (K-major) and K (MN-major: LBO = one [CH][64] tile); a
    // k-step of 16 is 32 bytes along a K-major row, 16 rows (2 KB) of an MN-major tile
    constexpr uint32_t TBYTES = CH * 64 * sizeof(bf16);
    const uint32_t wlo = wgmma_desc_lo(smem_u32(Wsm), 16), klo = wgmma_desc_lo(smem_u32(Ksm), TBYTES);
    float S[DK / 8][4];
    acc_zero(S);
    // cp.async groups, two a chunk step c: W, K, G of chunk c + 1 and its U slice (once chunk c's is in registers),
    // both issued while Sᵀ Wᵀ runs; each step waits for all (chunk c's)
    state_issue<DK, NT>(Wsm, Ksm, Gsm, a, bh * T);
    cp_async_commit();
    issue_u(0);
    cp_async_commit();
    if (Nc > 1) prefetch_u(1);
    float mv = mval_of(a, b, 0, h);
    for (int c = 0; c < Nc; c++) {
        const int s = c & 1;
        const size_t row0 = bh * T + (size_t)c * CH;
        const float mv_next = mval_of(a, b, c + 1 < Nc ? c + 1 : c, h);
        cp_async_wait<0>();  // chunk c's W, K, G and U slice
        fence_async_smem();
        __syncthreads();
        float V[8][4];  // Vnᵀ, initialised with Uᵀ
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int q = 0; q < 4; q++) V[j][q] = Us[GC_ACC_COL(j, q) * FS_UL + GC_ACC_ROW(q)];
        // the snapshot S^start_c, [dk][dv] in bf16 (the bf16 kernels run with bf16 states: takes_bf16): the fragments of
        // Sᵀ into the staging rows now, to global memory while Sᵀ Wᵀ runs; then γ_L Sᵀ for the update
        const float *Gs = Gsm + s * CH, GL = Gs[CH - 1];
        uint32_t fa[DK / 16][4];
        acc_to_a<DK / 16>(fa, S, 1.f);
        state_cols_stage<DK>(fa, Sw);
        const float gam = expf(GL);
#pragma unroll
        for (int j = 0; j < DK / 8; j++)
#pragma unroll
            for (int q = 0; q < 4; q++) S[j][q] *= gam;
        const uint32_t ws0 = wlo + s * (TK / 8);
        wg_pin(fa);
        wg_keep(V);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < DK / 16; kk++)  // Vnᵀ = Uᵀ − Sᵀ Wᵀ
            wg_mma_sub64<0>(V, fa[kk], wgmma_desc_of(ws0 + (kk >> 2) * (TBYTES / 16) + 2 * (kk & 3)));
        wgmma_commit();
        // beside it: chunk c + 1's loads (W, K, G into the other buffer, which every warp is done with; the U slice,
        // read into V above), the snapshot's stores and the update's factors m λ_i = m e^{G_L − G_i} of this thread's
        // tokens
        if (c + 1 < Nc) state_issue<DK, NT>(Wsm + (s ^ 1) * TK, Ksm + (s ^ 1) * TK, Gsm + (s ^ 1) * CH, a, row0 + CH);
        cp_async_commit();
        __syncwarp();
        if (c + 1 < Nc) issue_u(c + 1);
        cp_async_commit();
        if (c + 2 < Nc) prefetch_u(c + 2);
        state_cols_out<DK>(reinterpret_cast<bf16 *>(a.state) + (bh * Nc + c) * (size_t)DK * dv + v0, dv, Sw);
        float f[4][4];
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
#pragma unroll
            for (int e = 0; e < 4; e++) f[kk][e] = mv * expf(GL - Gs[tok_of(kk, e)]);
        wgmma_wait<0>();
        wg_keep(V);
        wg_pin(fa);
        // the update (after the last chunk too, its result unused: no branch around the wgmma statements)
        uint32_t fv[4][4];
        acc_to_a_fac(fv, V, f);
        const uint32_t ks0 = klo + s * (TK / 8);
        wg_pin(fv);
        wg_keep(S);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < CH / 16; kk++)  // Sᵀ ← γ_L Sᵀ + Vnᵀ diag(m λ) K
            wg_mma<DK, 1>(S, fv[kk], wgmma_desc_of(ks0 + kk * (16 * 128 / 16)));
        wgmma_commit();
        {   // beside it: the Vnᵀ rows of this warp's value columns
            uint32_t fn[4][4];
            acc_to_a<4>(fn, V, 1.f);
            store_acc_rows(a.Vb + ((bh * Nc + c) * dv + v0) * CH, fn, Sw);
        }
        wgmma_wait<0>();
        wg_keep(S);
        wg_pin(fv);
        mv = mv_next;
    }
}
// (1024: the tiles' alignment)
template <int DK> constexpr size_t fwd_state_bf16_smem(int nw) {
    return 1024 + (4 * CH + 16 * nw) * DK * sizeof(bf16) + (2 * CH + nw * CH * FS_UL) * sizeof(float);
}

// bwd_state_bf16 stores its dS snapshots through staging rows too (store_state_cols: [DK][16] a warp, which
// store_acc_rows's [16][CH] share) where the block's shared memory allows: d_k ≤ 128 (at 192 the 8-warp block would
// need 170 KB and the 4-warp block could no longer run two a SM); its staging rows per warp: 16 × bwd_state_srow
// elements
template <int DK> __host__ __device__ constexpr bool ds_staged() { return DK <= 128; }
template <int DK> __host__ __device__ constexpr int bwd_state_srow() { return ds_staged<DK>() && DK > CH ? DK : CH; }
// B2 on Hopper's warpgroup MMA: NW/4 warpgroups a block, warpgroup g the 64 value columns 16·NW·x + 64g .. + 63 (its
// warp i the 16 of them at 16i: v0), each warpgroup independent of the others but for the shared chunk tiles. Per
// chunk c (last to first), each product m64nNk16 with the A operand from the warps' registers (rows: value columns):
//   P = dSᵀ Kᵀ (N = CH, K-major B: K's rows);  dVnᵀ = s dOᵀ P + P diag(m λ) (the local part: N = CH, s Pᵀ's rows);
//   dSᵀ ← γ_L dSᵀ + (s dOᵀ diag(γ)) Q − dVnᵀ W (N = d_k, MN-major B: Q's and W's rows of d_k)
// (dO: the warp's 16 value columns of the chunk's rows, as stored in bf16: a per-warp slice by cp.async.) The tiles
// are d_k/64 (K, Q, W) or one (s Pᵀ) [CH][64] 128B-swizzled tiles (load_tile_wg); K, s Pᵀ and the gates
// double-buffered (chunk c − 1's land while chunk c runs), Q and W in one buffer (chunk c − 1's issued once chunk c's
// update has read them, landing while chunk c − 1's P and dVn run): 110 KB a 4-warp block at d_k = 128, two blocks
// an SM.
template <int DK, int NW>
__global__ void __launch_bounds__(32 * NW) bwd_state_bf16_kernel(GA a) {
    static_assert(NW % 4 == 0, "bwd_state_bf16: whole warpgroups");
    constexpr int NT = 32 * NW, TK = CH * DK, TP = CH * CH;
    extern __shared__ uint4 bs_smem[];
    bf16 *Ksm = fa_align1024(bs_smem), *Psm = Ksm + 2 * TK, *Qsm = Psm + 2 * TP, *Wsm = Qsm + TK;
    float *Gsm = reinterpret_cast<float *>(Wsm + TK), *Fs = Gsm + 2 * CH, *Es = Fs + CH;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, t = lane & 3;
    const int v0 = (blockIdx.x * NW + w) * 16, h = blockIdx.y, b = blockIdx.z;
    const int T = a.T, dv = a.dvd, Nc = a.Nc;
    const size_t bh = (size_t)b * a.H + h, ldo = (size_t)a.H * dv;
    bf16 *Ob = reinterpret_cast<bf16 *>(Es + CH) + w * CH * GC_LO;  // this warp's dO slice [CH][16] (rows GC_LO apart)
    bf16 *Stg = reinterpret_cast<bf16 *>(Es + CH) + NW * CH * GC_LO + w * 16 * bwd_state_srow<DK>();  // its staging rows
    auto issue_kp = [&](int c) {  // chunk c's K, s Pᵀ and gates into buffer c & 1
        const int s = c & 1;
        const size_t row0 = bh * T + (size_t)c * CH;
        load_tile_wg<DK, NT>(Ksm + s * TK, chunk_rows<DK>(a.k16, a, row0), a.ldqk);
        load_tile<CH, CH, NT>(Psm + s * TP, a.Pb + (bh * Nc + c) * CH * CH, CH, threadIdx.x);
        if (threadIdx.x < CH / 4) cp_async16(Gsm + s * CH + threadIdx.x * 4, a.Gc + row0 + threadIdx.x * 4);
    };
    auto issue_qw = [&](int c) {  // chunk c's Q and W
        const size_t row0 = bh * T + (size_t)c * CH;
        load_tile_wg<DK, NT>(Qsm, chunk_rows<DK>(a.q16, a, row0), a.ldqk);
        load_tile_wg<DK, NT>(Wsm, a.Wb + row0 * DK, DK);
    };
    auto issue_slice = [&](int c) {  // (by this warp's lanes alone: two 16-byte copies a row)
        const bf16 *src = a.dout16 + ((size_t)b * T + (size_t)c * CH) * ldo + (size_t)h * dv + v0;
#pragma unroll
        for (int i = lane; i < 2 * CH; i += 32)
            cp_async16(Ob + (i >> 1) * GC_LO + (i & 1) * 8, src + (size_t)(i >> 1) * ldo + (i & 1) * 8);
    };
    // the descriptors' low words (wgmma_desc_lo) of buffer 0's K and s Pᵀ (K-major) and of Q and W (MN-major: LBO =
    // one [CH][64] tile); a k-step of 16 is 32 bytes along a K-major row, 16 rows (2 KB) of an MN-major tile
    constexpr uint32_t TBYTES = CH * 64 * sizeof(bf16);
    const uint32_t klo = wgmma_desc_lo(smem_u32(Ksm), 16), plo = wgmma_desc_lo(smem_u32(Psm), 16),
                   qlo = wgmma_desc_lo(smem_u32(Qsm), TBYTES), wlo = wgmma_desc_lo(smem_u32(Wsm), TBYTES);
    float dS[DK / 8][4];
    acc_zero(dS);
    // cp.async groups, three a chunk step c: K, s Pᵀ, G of chunk c − 1 (as step c begins); its dO slice (once chunk c's
    // is in registers); its Q and W (once step c is done with chunk c's). One group each, empty where there is no
    // chunk c − 1, so the waits are wait_group 2.
    issue_kp(Nc - 1);
    cp_async_commit();
    issue_slice(Nc - 1);
    cp_async_commit();
    issue_qw(Nc - 1);
    cp_async_commit();
    for (int c = Nc - 1; c >= 0; c--) {
        const int s = c & 1;
        if (c > 0) issue_kp(c - 1);
        cp_async_commit();
        cp_async_wait<2>();  // chunk c's K, s Pᵀ, G and slice
        fence_async_smem();
        __syncwarp();
        float D[8][4], P[8][4];  // dVnᵀ, dSᵀ Kᵀ
        uint32_t fl[4][4];        // dOᵀ (bf16 values: exact)
        {
            float O[8][4];
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    O[j][q] = __bfloat162float(Ob[GC_ACC_COL(j, q) * GC_LO + GC_ACC_ROW(q)]);
                    D[j][q] = P[j][q] = 0.f;
                }
            acc_to_a<4>(fl, O, 1.f);
        }
        __syncwarp();
        if (c > 0) issue_slice(c - 1);
        cp_async_commit();
        {
            uint32_t fa[DK / 16][4];
            acc_to_a<DK / 16>(fa, dS, 1.f);
            const size_t dst0 = (bh * Nc + c) * (size_t)DK * dv + v0;  // dS^end_c, [dk][dv], bf16
            if constexpr (ds_staged<DK>()) store_state_cols<DK>(reinterpret_cast<bf16 *>(a.dstate) + dst0, dv, fa, Stg);
            else
#pragma unroll
                for (int j = 0; j < DK / 8; j++)
#pragma unroll
                    for (int q = 0; q < 4; q++) st_put(a.dstate, dst0 + (size_t)GC_ACC_COL(j, q) * dv + GC_ACC_ROW(q), dS[j][q], 1);
            __syncthreads();  // chunk c's K, s Pᵀ, G are whole
            const uint32_t ks0 = klo + s * (TK / 8);
            wg_pin(fa);
            wg_keep(P);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < DK / 16; kk++)  // P = dSᵀ Kᵀ
                wg_mma<CH, 0>(P, fa[kk], wgmma_desc_of(ks0 + (kk >> 2) * (TBYTES / 16) + 2 * (kk & 3)));
            wgmma_commit();
            wgmma_wait<0>();
            wg_keep(P);
        }
        // the local part: dVnᵀ = s dOᵀ P (off the chain: in flight while the gates' factors are made; issued after P so
        // that the registers of P's A operand are free)
        const uint32_t ps0 = plo + s * (TP / 8);
        wg_pin(fl);
        wg_keep(D);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < CH / 16; kk++) wg_mma<CH, 0>(D, fl[kk], wgmma_desc_of(ps0 + 2 * kk));
        wgmma_commit();
        const float *Gs = Gsm + s * CH, GL = Gs[CH - 1];
        const float mv = mval_of(a, b, c, h);
        for (int i = threadIdx.x; i < CH; i += NT) { Fs[i] = mv * expf(GL - Gs[i]); Es[i] = a.scale * expf(Gs[i]); }
        cp_async_wait<2>();  // chunk c's Q and W
        fence_async_smem();
        __syncthreads();
        wgmma_wait<0>();
        wg_keep(D);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float f0 = Fs[8 * j + 2 * t], f1 = Fs[8 * j + 2 * t + 1];
            D[j][0] = fmaf(f0, P[j][0], D[j][0]); D[j][1] = fmaf(f1, P[j][1], D[j][1]);
            D[j][2] = fmaf(f0, P[j][2], D[j][2]); D[j][3] = fmaf(f1, P[j][3], D[j][3]);
        }
        uint32_t fd[4][4];
        acc_to_a<4>(fd, D, 1.f);
        store_acc_rows(a.dVb + ((bh * Nc + c) * dv + v0) * CH, fd, Stg);  // dVnᵀ rows of this warp's value columns
        if (c > 0) {
            uint32_t fo[4][4];
            frag_neg(fd);  // −dVn
            frag_scaled(fo, fl, Es);  // s dOᵀ diag(γ)
            const float gam = expf(GL);
#pragma unroll
            for (int j = 0; j < DK / 8; j++)
#pragma unroll
                for (int q = 0; q < 4; q++) dS[j][q] *= gam;
            wg_pin(fo);
            wg_pin(fd);
            wg_keep(dS);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < CH / 16; kk++)  // + R_cᵀ = s dOᵀ diag(γ) Q
                wg_mma<DK, 1>(dS, fo[kk], wgmma_desc_of(qlo + kk * (16 * 128 / 16)));
#pragma unroll
            for (int kk = 0; kk < CH / 16; kk++)  // − dVnᵀ W
                wg_mma<DK, 1>(dS, fd[kk], wgmma_desc_of(wlo + kk * (16 * 128 / 16)));
            wgmma_commit();
            wgmma_wait<0>();
            wg_keep(dS);
        }
        __syncthreads();  // buffer s, Q, W, Fs and Es are free
        if (c > 0) issue_qw(c - 1);
        cp_async_commit();
    }
}
// (1024: the tiles' alignment)
template <int DK> constexpr size_t bwd_state_bf16_smem(int nw) {
    return 1024 + (4 * CH * DK + 2 * CH * CH + 16 * nw * bwd_state_srow<DK>() + nw * CH * GC_LO) * sizeof(bf16) + 4 * CH * sizeof(float);
}

// K3 in bf16 mode (dk ∈ {64, 128, 192}, dv % 64 == 0), grid (Nc, B*H), 4 warps; warp w answers the chunk's queries
// 16w .. 16w+15: Pw = s (Q Kᵀ ⊙ Γ ⊙ [i ≥ j]) once (bf16 A operand), then per 64 value columns
// O = s diag(γ) Q S0 + Pw Vn, with Q, K as stored (bf16), S0 the bf16 start states, Vnᵀ the state kernel's
// bf16 copy; the value tiles double-buffered by cp.async, fp32 accumulation. K ([CH][DK]) lands in the second S0
// buffer ([DK][64], the same size), whose tile is issued once Pw is made: 64 KB a block at d_k = 128, three an SM
// (at most 168 registers a thread).
// cp.async groups: Q, K, G and value tile 0; tile 1's Vnᵀ; tile 1's S0 (after Pw); then one a value tile, tile
// vt + 2's once tile vt is done (each possibly empty): tile vt's are whole at wait_group 1.
template <int DK>
__global__ void __launch_bounds__(128, DK <= 128 ? 3 : 2) fwd_out_bf16_kernel(GA a) {
    extern __shared__ __align__(128) unsigned char smraw[];
    bf16 *Qs = reinterpret_cast<bf16 *>(smraw), *Ss = Qs + CH * DK, *Ks = Ss + DK * 64, *Vs = Ss + 2 * DK * 64;
    float *Gs = reinterpret_cast<float *>(Vs + 2 * 64 * CH);
    const int c = blockIdx.x, bh = blockIdx.y, b = bh / a.H, h = bh % a.H;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, t = lane & 3;
    const int dv = a.dvd, Nc = a.Nc, nvt = dv / 64;
    const size_t row0 = (size_t)bh * a.T + (size_t)c * CH, cc = (size_t)bh * Nc + c;
    const bf16 *st = reinterpret_cast<const bf16 *>(a.state) + cc * DK * dv, *vn = a.Vb + cc * dv * CH;
    auto issue_s = [&](int vt) { load_tile<64, DK, 128>(Ss + (vt & 1) * DK * 64, st + vt * 64, dv, tid); };  // S0 columns
    auto issue_v = [&](int vt) { load_tile<CH, 64, 128>(Vs + (vt & 1) * 64 * CH, vn + (size_t)vt * 64 * CH, CH, tid); };  // Vnᵀ rows
    load_tile<DK, CH, 128>(Qs, chunk_rows<DK>(a.q16, a, row0), a.ldqk, tid);
    load_tile<DK, CH, 128>(Ks, chunk_rows<DK>(a.k16, a, row0), a.ldqk, tid);
    if (tid < CH / 4) cp_async16(Gs + tid * 4, a.Gc + row0 + tid * 4);
    issue_s(0);
    issue_v(0);
    cp_async_commit();
    if (nvt > 1) issue_v(1);
    cp_async_commit();
    uint32_t fq[DK / 16][4], fp[4][4];
    float e0 = 0.f, e1 = 0.f;
    const int i0 = 16 * w + g;
    const size_t out0 = ((size_t)b * a.T + (size_t)c * CH + i0) * (size_t)(a.H * dv) + (size_t)h * dv;
    for (int vt = 0; vt < nvt; vt++) {
        cp_async_wait<1>();
        __syncthreads();
        if (vt == 0) {
            lds_a<DK, DK>(fq, Qs, 16 * w);
            float P[8][4];
            acc_zero(P);
            mma_x<DK, CH, DK, true>(P, fq, Ks);
            const float G0 = Gs[i0], G1 = Gs[i0 + 8];
#pragma unroll
            for (int j = 0; j < 8; j++)
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const int col = 8 * j + 2 * t + (q & 1), row = i0 + 8 * (q >> 1);
                    P[j][q] = col <= row ? a.scale * expf((q < 2 ? G0 : G1) - Gs[col]) * P[j][q] : 0.f;
                }
            acc_to_a<4>(fp, P, 1.f);
            e0 = a.scale * expf(G0);
            e1 = a.scale * expf(G1);
            __syncthreads();  // K is spent: its room takes tile 1's S0
            if (nvt > 1) issue_s(1);
            cp_async_commit();
        }
        float O[8][4];
        acc_zero(O);
        mma_x<DK, 64, 64, false>(O, fq, Ss + (vt & 1) * DK * 64);  // Q S0
#pragma unroll
        for (int j = 0; j < 8; j++) { O[j][0] *= e0; O[j][1] *= e0; O[j][2] *= e1; O[j][3] *= e1; }
        mma_x<CH, 64, 64, true>(O, fp, Vs + (vt & 1) * 64 * CH);  // + Pw Vn
        if (a.o16) store_acc<64>(a.o16 + out0 + vt * 64, (size_t)a.H * dv, O, 1.f, 1.f);
        else store_acc<64>(a.o + out0 + vt * 64, (size_t)a.H * dv, O, 1.f, 1.f);
        __syncthreads();  // buffer vt & 1 is free
        if (vt + 2 < nvt) { issue_s(vt + 2); issue_v(vt + 2); }
        cp_async_commit();
    }
}
template <int DK> constexpr size_t fwd_out_bf16_smem() { return (CH * DK + 2 * DK * 64 + 2 * 64 * CH) * sizeof(bf16) + CH * sizeof(float); }

// B1 in bf16 mode (same shapes), grid (Nc, B*H), 8 warps = two warpgroups, after bwd_state_bf16 (it reads the chunk's
// dS^end snapshot dSe). Per 64-column value tile (S0, dSe: those columns of the chunk-start state and of dS^end,
// [DK][64] bf16; U fp32, dO bf16 as stored: 64 × 64):
//   Vn = U − W S0 (fp32: the accumulators start at U; into shared memory as two bf16 tiles, hi + lo),
//   dQ1 += dO S0ᵀ,  dPm += s dO Vnᵀ,  X += diag(λ) Vn dSeᵀ,  sdot += ⟨dSe, S0⟩
// (dev/cuda/gdn/NOTES.md; doc/model.md §6.1). Vn goes into X as hi + lo: X feeds the router gradient dA = Σ_j k_j·X_j,
// a sum with cancellation, which a plain bf16 Vn moves by ~1e-2; dPm takes hi alone. Every product is wgmma m64nNk16
// with both operands read by the tensor cores from 128B-swizzled shared tiles (wg_mma_ss): warpgroup wg = w >> 2
// computes all 64 rows (its warp w & 3 the rows R0 = 16(w & 3) .. +15) and, of W S0 and dO Vnᵀ, the columns
// C0 = 32·wg .. +31 (wg_n32_mn_sub with S0 MN-major; wg_n32), of the d_k-wide dQ1 and X the d_k/2 columns dk_col (wg_dk,
// S0 and dSe K-major). W is swt<CH> (load_tile_wg), the S0, dSe, dO and Vn tiles swz<64>. Per thread the accumulators
// of dQ1, X and dPm (d_k/4 + d_k/4 + 16 registers) live over the whole loop, those of W S0 (16) from U's loads (in
// the tile before) to Vn: two blocks an SM at d_k ≤ 128 (at most 128 registers a thread; 105 KB of shared memory at d_k = 128), one
// at 192. The loads: S0 and dSe by cp.async, double-buffered a tile ahead; U straight from global memory into the
// accumulators of W S0 (each thread its own elements), issued while the tile before runs its products (half a tile
// ahead); dO by cp.async, single-buffered, issued as the tile before ends (landing while W S0 and Vn are made).
// Three barriers a tile. What limits it: each product waits for its result before the next step (W S0 before Vn,
// Vn before the rest), with the other block on the SM as the only overlap.
// cp.async groups, in order: S0(0), dSe(0) with W and G; dO(0); S0(1), dSe(1); then at the end of tile vt dO(vt + 1),
// then S0(vt + 2), dSe(vt + 2) (each possibly empty), so that tile vt's S0 and dSe are whole at wait_group 2 as it
// starts and its dO at wait_group 1 once Vn is made.
template <int DK>
__global__ void __launch_bounds__(256, blocks8<DK>()) bwd_local_bf16_kernel(GA a) {
    static_assert(dk_bf16<DK>(), "bwd_local_bf16: dk 64, 128 or 192");
    constexpr int TS = 2 * DK * 64;  // per buffer the S0, dSe tiles [DK][64]
    extern __shared__ uint4 bl_smem[];
    bf16 *Ws = fa_align1024(bl_smem), *Ss = Ws + CH * DK, *Os = Ss + 2 * TS, *Nh = Os + CH * 64, *Nl = Nh + CH * 64;
    float *Gs = reinterpret_cast<float *>(Nl + CH * 64), *red = Gs + CH;  // Os: dO [CH][64]; Nh, Nl: Vn [CH][64] hi, lo
    const int c = blockIdx.x, bh = blockIdx.y, b = bh / a.H, h = bh % a.H;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, wg = w >> 2;
    const int dv = a.dvd, Nc = a.Nc, nvt = dv / 64;
    const int R0 = 16 * (w & 3), C0 = 32 * wg;
    const size_t row0 = (size_t)bh * a.T + (size_t)c * CH, cc = (size_t)bh * Nc + c, ldo = (size_t)a.H * dv;
    const bf16 *st = reinterpret_cast<const bf16 *>(a.state) + cc * DK * dv;
    const bf16 *ds = reinterpret_cast<const bf16 *>(a.dstate) + cc * DK * dv;
    const bf16 *dO = a.dout16 + ((size_t)b * a.T + (size_t)c * CH) * ldo + (size_t)h * dv;
    // the descriptors' low words: K-major operands (LBO unused), MN-major ones (LBO: one [CH][64] tile)
    auto lo_k = [](const bf16 *X) { return wgmma_desc_lo(smem_u32(X), 16); };
    auto lo_mn = [](const bf16 *X) { return wgmma_desc_lo(smem_u32(X), CH * 64 * sizeof(bf16)); };
    // x as a value the compiler cannot see through: the loads' per-thread addresses (from tid) and the descriptors'
    // low words are made anew in each tile from it, where hoisted out of the loop they would hold ~30 registers
    auto opq = [](uint32_t x) { asm volatile("" : "+r"(x)); return x; };
    auto ld_se = [&](int vt) {
        if (vt < nvt) {
            const int t = opq(tid);
            bf16 *s = Ss + (vt & 1) * TS;
            load_tile<64, DK, 256>(s, st + vt * 64, dv, t);
            load_tile<64, DK, 256>(s + DK * 64, ds + vt * 64, dv, t);
        }
    };
    auto ld_o = [&](int vt) { if (vt < nvt) load_tile<64, CH, 256>(Os, dO + vt * 64, (int)ldo, opq(tid)); };
    float V[4][4];  // Vn = U − W S0: the accumulators start at U
    auto ld_u = [&](int vt) {  // U's tile vt into V: this thread's elements (rows R0 + g, + 8; columns C0 + 8j + 2t)
        const float *u = a.U + (row0 + R0 + g) * dv + vt * 64 + C0 + 2 * (opq(lane) & 3);
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                const float2 x = *reinterpret_cast<const float2 *>(u + (size_t)(8 * hh) * dv + 8 * j);
                V[j][2 * hh] = x.x;
                V[j][2 * hh + 1] = x.y;
            }
    };
    load_tile_wg<DK, 256>(Ws, a.Wb + row0 * DK, DK);
    if (tid < CH / 4) cp_async16(Gs + tid * 4, a.Gc + row0 + tid * 4);
    ld_se(0);
    cp_async_commit();
    ld_o(0);
    cp_async_commit();
    ld_se(1);
    cp_async_commit();
    ld_u(0);
    float Q1[DK / 16][4], X[DK / 16][4], P1[4][4], sd = 0.f;  // dQ1, X (dk_col's columns), dO Vnᵀ (keys C0 ..)
    acc_zero(Q1);
    acc_zero(X);
    acc_zero(P1);
    const uint32_t wlo = lo_k(Ws), olo = lo_k(Os), hlo = lo_k(Nh), llo = lo_k(Nl);
    for (int vt = 0; vt < nvt; vt++) {
        const bf16 *S0 = Ss + (vt & 1) * TS, *dSe = S0 + DK * 64;
        cp_async_wait<2>();  // S0 and dSe of tile vt (W and G with tile 0's)
        fence_async_smem();
        __syncthreads();
        wg_keep(V);
        wgmma_fence();
        wg_n32_mn_sub<DK, 0>(V, opq(wlo), opq(lo_mn(S0)), C0);  // U − W S0
        wgmma_commit();
        wgmma_wait<0>();
        wg_keep(V);
        acc_pairs<32>(R0, C0, [&](int j, int hh, int r, int col) {  // Vn = hi + lo
            const float x0 = V[j][2 * hh], x1 = V[j][2 * hh + 1];
            const float2 hi = __bfloat1622float2(__floats2bfloat162_rn(x0, x1));
            st_pair<64>(Nh, r, col, hi.x, hi.y);
            st_pair<64>(Nl, r, col, x0 - hi.x, x1 - hi.y);
        });
        // ⟨dSe, S0⟩ (both tiles swizzled alike) while dO lands; not unrolled (fewer live registers)
#pragma unroll 1
        for (int e = tid; e < DK * 8; e += 256) {
            const uint4 x = reinterpret_cast<const uint4 *>(S0)[e], y = reinterpret_cast<const uint4 *>(dSe)[e];
            const __nv_bfloat162 *xs = reinterpret_cast<const __nv_bfloat162 *>(&x), *ys = reinterpret_cast<const __nv_bfloat162 *>(&y);
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const float2 u = __bfloat1622float2(xs[q]), v = __bfloat1622float2(ys[q]);
                sd = fmaf(u.x, v.x, fmaf(u.y, v.y, sd));
            }
        }
        cp_async_wait<1>();  // dO of tile vt
        fence_async_smem();
        __syncthreads();  // the Vn tiles are whole
        wg_keep(Q1); wg_keep(P1); wg_keep(X);
        wgmma_fence();
        const uint32_t od = opq(olo), ed = opq(lo_k(dSe)), hd = opq(hlo);
        wg_dk<DK, 64, 0, 0>(Q1, od, opq(lo_k(S0)), wg);  // dQ1 += dO S0ᵀ
        wg_n32<64, 0>(P1, od, hd, C0);                   // dPm += dO Vnᵀ
        wg_dk<DK, 64, 0, 0>(X, hd, ed, wg);              // X += Vn dSeᵀ, Vn's hi and lo
        wg_dk<DK, 64, 0, 0>(X, opq(llo), ed, wg);
        wgmma_commit();
        if (vt + 1 < nvt) ld_u(vt + 1);  // while the products run
        wgmma_wait<0>();
        wg_keep(Q1); wg_keep(P1); wg_keep(X);
        __syncthreads();  // Os, Nh, Nl and buffer vt & 1 are free
        ld_o(vt + 1);
        cp_async_commit();
        ld_se(vt + 2);
        cp_async_commit();
    }
    const float GL = Gs[CH - 1], l0 = expf(GL - Gs[R0 + g]), l1 = expf(GL - Gs[R0 + g + 8]);  // λ of rows R0 + g, + 8
    // row0 and cc made anew (kept over the loop, they spill at d_k = 128)
    const size_t rw0 = (size_t)opq(bh) * a.T + (size_t)opq(c) * CH, ch0 = (size_t)opq(bh) * Nc + c;
    acc_pairs_dk<DK>(R0, wg, [&](int j, int hh, int i, int col) {
        const float l = hh ? l1 : l0;
        st2(a.dQ1 + (rw0 + i) * DK + col, Q1[j][2 * hh], Q1[j][2 * hh + 1]);
        st2(a.X + (rw0 + i) * DK + col, l * X[j][2 * hh], l * X[j][2 * hh + 1]);  // times λ_i
    });
    store_acc<32>(a.dPm + ch0 * CH * CH + (R0 + g) * CH + C0, CH, P1, a.scale, a.scale);
    sd = warp_sum(sd);
    if (lane == 0) red[w] = sd;
    __syncthreads();
    if (tid == 0) {
        float s = 0.f;
        for (int i = 0; i < 8; i++) s += red[i];
        a.sdot[ch0] = s;
    }
}
// (1024: the tiles' alignment)
template <int DK> constexpr size_t bwd_local_bf16_smem() {
    return 1024 + (CH * DK + 4 * DK * 64 + 3 * CH * 64) * sizeof(bf16) + (CH + 8) * sizeof(float);
}

#undef GC_ACC_ROW
#undef GC_ACC_COL

// ------------------------------------------------------------------------------------------------
// B3 loops over the value dim, grid (Nc, B*H). PART 0: dQ1 = dO S0^T, dPm = s dO Vn^T
// PART 1: dWm = dVn S0^T, dTV = dVn V^T diag(beta), dv = diag(beta) T^T dVn, dbv = rowdot(V, T^T dVn)
// PART 2: X = diag(lam) Vn dSe^T, sdot = <dSe, S0>
template <int DK, int PART>
__global__ void __launch_bounds__(GC_NT) bwd_vloop_kernel(GA a) {
    constexpr int LDK = DK + GC_PADK;
    extern __shared__ __align__(128) float sm[];
    const int c = blockIdx.x, tid = threadIdx.x;
    const int H = a.H, T = a.T, dv = a.dvd, Nc = a.Nc;
    const int bh = blockIdx.y, b = bh / H, h = bh % H;
    const size_t tok0 = (size_t)b * T + (size_t)c * CH, wrow0 = (size_t)bh * T + (size_t)c * CH, cc = (size_t)bh * Nc + c;
    float *accA = sm, *accB = accA + CH * LDK;
    float *S0s = (PART == 2) ? accB : accB + CH * GC_L64;  // PART2 has no accB
    float *R1 = S0s + DK * GC_LBV;                           // PART2 only
    float *R2 = (PART == 2) ? R1 + DK * GC_LBV : R1;
    // PART0: T1 = dO tile, T2 = Vn tile
    // PART1: T1 = dVn tile, T2 = V tile, T3 = Y tile, then Ts (CH*GC_L64), then bsm[64], dbvs[64]
    // PART2: R1 = dSe tile, T1 = Vn tile, then red[GC_NT]
    float *T1 = R2, *T2 = R2 + CH * GC_LBV, *T3 = R2 + 2 * CH * GC_LBV, *Ts = R2 + 3 * CH * GC_LBV, *bsm = Ts + CH * GC_L64, *dbvs = bsm + CH;
    float *red = R2 + CH * GC_LBV;
    float part = 0.f;
    if (PART == 1) {
        ld_tile<CH, CH>(Ts, GC_L64, a.Tm + cc * CH * CH, CH, true);
        if (tid < CH) { bsm[tid] = a.beta[(tok0 + tid) * H + h]; dbvs[tid] = 0.f; }
    }
    const size_t ldo = (size_t)H * dv;
    for (int v0 = 0; v0 < dv; v0 += GC_BV) {
        const float bb = v0 ? 1.f : 0.f;
        ld_state<DK, GC_BV>(S0s, GC_LBV, a, cc * DK * dv + v0, a.state, a.st16);
        if (PART == 0) {
            ld_tile<CH, GC_BV>(T1, GC_LBV, a.dout + tok0 * ldo + (size_t)h * dv + v0, ldo, a.vec);
            ld_tile<CH, GC_BV>(T2, GC_LBV, a.U + wrow0 * dv + v0, dv, true);
        } else if (PART == 1) {
            ld_tile<CH, GC_BV>(T1, GC_LBV, a.dVn + wrow0 * dv + v0, dv, true);
            ld_tile<CH, GC_BV>(T2, GC_LBV, a.v + tok0 * a.ldv + (size_t)h * dv + v0, a.ldv, a.vec);
        } else {
            ld_state<DK, GC_BV>(R1, GC_LBV, a, cc * DK * dv + v0, a.dstate, a.ds16);
            ld_tile<CH, GC_BV>(T1, GC_LBV, a.U + wrow0 * dv + v0, dv, true);
        }
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        if (PART == 0) {
            mm<CH, DK, GC_BV, false, true>(accA, LDK, T1, GC_LBV, S0s, GC_LBV, 1.f, bb);
            mm<CH, CH, GC_BV, false, true>(accB, GC_L64, T1, GC_LBV, T2, GC_LBV, a.scale, bb);
        } else if (PART == 1) {
            mm<CH, DK, GC_BV, false, true>(accA, LDK, T1, GC_LBV, S0s, GC_LBV, 1.f, bb);
            mm<CH, CH, GC_BV, false, true>(accB, GC_L64, T1, GC_LBV, T2, GC_LBV, 1.f, bb);
            mm<CH, GC_BV, CH, true, false>(T3, GC_LBV, Ts, GC_L64, T1, GC_LBV, 1.f, 0.f);
        } else {
            mm<CH, DK, GC_BV, false, true>(accA, LDK, T1, GC_LBV, R1, GC_LBV, 1.f, bb);
            for (int idx = tid; idx < DK * GC_BV; idx += GC_NT) part += S0s[(idx / GC_BV) * GC_LBV + idx % GC_BV] * R1[(idx / GC_BV) * GC_LBV + idx % GC_BV];
        }
        __syncthreads();
        if (PART == 1) {
            for (int idx = tid; idx < CH * GC_BV; idx += GC_NT) {
                const int i = idx / GC_BV, j = idx % GC_BV;
                float *dvp = a.dv + (tok0 + i) * a.ldv + (size_t)h * dv + v0 + j;
                *dvp = (a.dv_add ? *dvp : 0.f) + bsm[i] * T3[i * GC_LBV + j];  // dv_add: the softmax op wrote dV first
            }
            if (tid < CH) {
                float s = 0.f;
                for (int j = 0; j < GC_BV; j++) s += T2[tid * GC_LBV + j] * T3[tid * GC_LBV + j];
                dbvs[tid] += s;
            }
            __syncthreads();
        }
    }
    if (PART == 0) {
        for (int idx = tid; idx < CH * DK; idx += GC_NT) a.dQ1[(wrow0 + idx / DK) * DK + idx % DK] = accA[(idx / DK) * LDK + idx % DK];
        for (int idx = tid; idx < CH * CH; idx += GC_NT) a.dPm[cc * CH * CH + idx] = accB[(idx >> 6) * GC_L64 + (idx & 63)];
    } else if (PART == 1) {
        for (int idx = tid; idx < CH * DK; idx += GC_NT) a.dWm[(wrow0 + idx / DK) * DK + idx % DK] = accA[(idx / DK) * LDK + idx % DK];
        for (int idx = tid; idx < CH * CH; idx += GC_NT) a.dTV[cc * CH * CH + idx] = accB[(idx >> 6) * GC_L64 + (idx & 63)] * bsm[idx & 63];
        if (tid < CH) a.dbv[wrow0 + tid] = dbvs[tid];
    } else {
        const float GL = a.Gc[wrow0 + CH - 1];
        for (int idx = tid; idx < CH * DK; idx += GC_NT) {
            const int i = idx / DK, d = idx % DK;
            a.X[(wrow0 + i) * DK + d] = accA[i * LDK + d] * expf(GL - a.Gc[wrow0 + i]);
        }
        red[tid] = part;
        __syncthreads();
        if (tid == 0) { float s = 0.f; for (int i = 0; i < GC_NT; i++) s += red[i]; a.sdot[cc] = s; }
    }
}
template <int DK, int PART> constexpr size_t bwd_vloop_smem() {
    return sizeof(float) * (CH * (DK + GC_PADK) + DK * GC_LBV +
                            (PART == 0 ? CH * GC_L64 + 2 * CH * GC_LBV : PART == 1 ? CH * GC_L64 + 3 * CH * GC_LBV + CH * GC_L64 + 2 * CH : DK * GC_LBV + CH * GC_LBV + GC_NT));
}

// ------------------------------------------------------------------------------------------------
// B4 final per-chunk gradients, grid (Nc, B*H): dq, dk, dbeta, dg, dA.
template <int DK>
__global__ void __launch_bounds__(GC_NT) bwd_final_kernel(GA a) {
    constexpr int LDK = DK + GC_PADK;
    extern __shared__ __align__(128) float sm[];
    float *Qs = sm, *Ks = Qs + CH * LDK, *D1 = Ks + CH * LDK, *D2 = D1 + CH * LDK;
    float *M1 = D2 + CH * LDK, *M2 = M1 + CH * GC_L64, *M3 = M2 + CH * GC_L64, *M4 = M3 + CH * GC_L64;
    float *Gs = M4 + CH * GC_L64, *es = Gs + CH, *bs = es + CH, *dG = bs + CH, *dB = dG + CH, *red = dB + CH;
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
    ld_tile<CH, CH>(M1, GC_L64, a.Tm + cc * CH * CH, CH, true);
    ld_tile<CH, CH>(M2, GC_L64, a.Pm + cc * CH * CH, CH, true);
    ld_tile<CH, CH>(M3, GC_L64, a.dPm + cc * CH * CH, CH, true);
    ld_tile<CH, CH>(M4, GC_L64, a.dTV + cc * CH * CH, CH, true);
    ld_tile<1, CH>(Gs, CH, a.Gc + wrow0, CH, true);
    cp_async_commit();
    if (tid < CH) { bs[tid] = a.beta[(tok0 + tid) * H + h]; dG[tid] = 0.f; dB[tid] = a.dbv[wrow0 + tid]; }
    const float sdot = a.sdot[cc];
    cp_async_wait<0>();
    __syncthreads();
    // E = dPm .* Pm (-> dG) in M2, dPmm = dPm .* Gam .* [i>=j] in M3; xk_j = k_j . X_j
    for (int idx = tid; idx < CH * CH; idx += GC_NT) {
        const int i = idx >> 6, j = idx & 63, o = i * GC_L64 + j;
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
        for (int j = 0; j < CH; j++) { rs += M2[tid * GC_L64 + j]; cs += M2[j * GC_L64 + tid]; }
        for (int d = 0; d < DK; d++) qd += Qs[tid * LDK + d] * D1[tid * LDK + d];
        dG[tid] += rs - cs + scale * es[tid] * qd - mv * red[tid];
    }
    __syncthreads();
    for (int idx = tid; idx < CH * DK; idx += GC_NT) {
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
    mm<CH, DK, CH, false, false>(D1, LDK, M3, GC_L64, Ks, LDK, 1.f, 1.f);  // dQ
    mm<CH, DK, CH, true, false>(D2, LDK, M3, GC_L64, Qs, LDK, 1.f, 1.f);   // dK = m X + dPmm^T Q
    mm<CH, CH, DK, false, true>(M2, GC_L64, Ks, LDK, Ks, LDK, 1.f, 0.f);   // KK^T
    __syncthreads();
    for (int idx = tid; idx < CH * DK; idx += GC_NT) {
        const int i = idx / DK, d = idx % DK;
        a.dq[(tok0 + i) * a.ldqk + (size_t)h * DK + d] = D1[i * LDK + d];
    }
    __syncthreads();
    ld_tile<CH, DK>(D1, LDK, a.dWm + wrow0 * DK, DK, true);  // dW = -D1
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    mm<CH, DK, CH, true, false>(Qs, LDK, M1, GC_L64, D1, LDK, -1.f, 0.f);  // R = T^T dW
    __syncthreads();
    if (tid < CH) {
        float kr = 0.f;
        for (int d = 0; d < DK; d++) kr += Ks[tid * LDK + d] * Qs[tid * LDK + d];
        dB[tid] += es[tid] * kr;
        dG[tid] += bs[tid] * es[tid] * kr;
    }
    for (int idx = tid; idx < CH * DK; idx += GC_NT) { const int i = idx / DK, d = idx % DK; D2[i * LDK + d] += bs[i] * es[i] * Qs[i * LDK + d]; }
    __syncthreads();
    for (int idx = tid; idx < CH * DK; idx += GC_NT) { const int i = idx / DK, d = idx % DK; Qs[i * LDK + d] = bs[i] * es[i] * Ks[i * LDK + d]; }
    __syncthreads();
    mm<CH, CH, DK, false, true>(M4, GC_L64, D1, LDK, Qs, LDK, -1.f, 1.f);  // dT = dTV + dW Kb^T
    __syncthreads();
    mm<CH, CH, CH, false, true>(M3, GC_L64, M4, GC_L64, M1, GC_L64, 1.f, 0.f);  // dT T^T
    __syncthreads();
    mm<CH, CH, CH, true, false>(M4, GC_L64, M1, GC_L64, M3, GC_L64, -1.f, 0.f);  // dA = -T^T dT T^T
    __syncthreads();
    for (int idx = tid; idx < CH * CH; idx += GC_NT) {
        const int i = idx >> 6, j = idx & 63, o = i * GC_L64 + j;
        if (i > j) {
            const float gm = expf(Gs[i] - Gs[j]), da = M4[o];
            M2[o] = da * gm * M2[o];
            M3[o] = da * bs[i] * gm;
        } else { M2[o] = 0.f; M3[o] = 0.f; }
    }
    __syncthreads();
    if (tid < CH) {
        float rs = 0.f, cs = 0.f;
        for (int j = 0; j < CH; j++) { rs += M2[tid * GC_L64 + j]; cs += bs[j] * M2[j * GC_L64 + tid]; }
        dB[tid] += rs;
        dG[tid] += bs[tid] * rs - cs;
    }
    mm<CH, DK, CH, false, false>(D2, LDK, M3, GC_L64, Ks, LDK, 1.f, 1.f);
    __syncthreads();  // different TA -> different element mapping on D2
    mm<CH, DK, CH, true, false>(D2, LDK, M3, GC_L64, Ks, LDK, 1.f, 1.f);
    __syncthreads();
    for (int idx = tid; idx < CH * DK; idx += GC_NT) {
        const int i = idx / DK, d = idx % DK;
        a.dk[(tok0 + i) * a.ldqk + (size_t)h * DK + d] = D2[i * LDK + d];
    }
    if (tid == 0) {
        float s = 0.f;
        for (int i = CH - 1; i >= 0; i--) { s += dG[i]; a.dg[(tok0 + i) * H + h] = s; }
    }
    if (tid < CH) a.dbeta[(tok0 + tid) * H + h] = dB[tid];
}
template <int DK> constexpr size_t bwd_final_smem() { return sizeof(float) * (4 * CH * (DK + GC_PADK) + 4 * CH * GC_L64 + 6 * CH); }

// warps w and w + 4 of an 8-warp block (the two that share a row strip) meet: named barrier 1 + (w & 3), 64 threads
// (immediate ids: a register id would reserve all 16 barriers)
__device__ __forceinline__ void pair_sync(int w) {
    switch (w & 3) {
    case 0: asm volatile("bar.sync 1, 64;\n" ::: "memory"); break;
    case 1: asm volatile("bar.sync 2, 64;\n" ::: "memory"); break;
    case 2: asm volatile("bar.sync 3, 64;\n" ::: "memory"); break;
    default: asm volatile("bar.sync 4, 64;\n" ::: "memory");
    }
}
// B4 in bf16 mode (dk ∈ {64, 128, 192}): bwd_final on Hopper's warpgroup MMA, grid (Nc, B*H), 8 warps = two
// warpgroups, two blocks per SM (one at dk = 192).
// The same math as bwd_final_kernel with every 64×64 and 64×dk product as wgmma m64nNk16 (bf16 operands, fp32
// accumulation), both operands read by the tensor cores from the shared tiles through descriptors (wg_mma_ss: once a
// warpgroup, no fragments in registers; a transposed operand is the MN-major read of its tile). Warpgroup wg = w >> 2
// computes all 64 rows of a product, its warp w & 3 the rows R0 = 16(w & 3) .. +15 (accumulator layout of mma.sync);
// of a 64-wide result the columns C0 = 32·wg .. +31 (wg_n32: N = 32, every such B K-major, rows C0 .. of a tile), of a
// dk-wide one the dk/2 columns dk_col (wg_dk: MN-major B, Q's, K's, dWm's columns; K-major S0 in the first phase).
// Operands in shared memory as [rows][64] tiles of 128-byte swizzled rows (swt, 1024-byte aligned): Q, K (as stored,
// d_k/64 tiles each), dWm (bf16, from the first phase), T (bf16, prep's),
// and three 64×64 tiles for the intermediates (M1 = dPm ⊙ Γ, M2 = dT and then the dA term, M3t = (dT Tᵀ)ᵀ = T dTᵀ,
// stored transposed so that dA = −Tᵀ M3 reads it K-major); P = QKᵀ ⊙ Γ and KKᵀ are recomputed from Q and K instead of
// being read. A first phase is B3 part 1 (dWm, dTV, dv, dbv over the value tiles: they stay in the block, dTV as an
// fp32 tile read at the same accumulator positions that made it). Products that do not depend on each other go in
// flight together, each wgmma group waited for (wait<1>) only when its accumulators are read, the next one running
// under the elementwise work of the last: Tᵀ dVn before dVn S0ᵀ and dVn Vᵀ (phase 1), Q Kᵀ before dWm Kᵀ, T dTᵀ
// before K Kᵀ, dA before Tᵀ dWm; Q and K load under phase 1's last stores. Elementwise factors at the accumulator
// positions: dPm, X and dQ1 (fp32) by cp.async into per-thread shared slots (PS, XQ), dPm with Q and K, X and dQ1
// under the products before their epilogues; q, k from the shared tiles. dK is summed in one pass (registers), dQ
// after it. The per-token sums that feed dg and dβ go to shared memory: a row's from its two warps by atomics (two
// terms: the same sum in either order), a column's
// from its four row strips as four partial sums, added in a fixed order (so the op is bitwise reproducible). With
// a.rho (the layers') the L2 norm's backward (3.4i) is folded in: the row dots q̂·dq̂, k̂·dk̂ summed as dg's row sums
// are, then dK = ρ(dk̂ − k̂(k̂·dk̂)) from the registers, and dQ likewise from dq̂ parked in dQ1's shared slots while the
// two warps of its row strip meet at a barrier of their own: l2norm_backward's two passes over dq̂, dk̂ gone.
// What limits it: latency (no pipe busy, 2 blocks of 8 warps an SM): each pass's products wait for the last pass's
// elementwise results through a block barrier, the products are narrow (m64n32), and the loads of each phase start
// only when its shared tiles are free.
template <int DK>
__global__ void __launch_bounds__(256, blocks8<DK>()) bwd_final_bf16_kernel(GA a) {
    constexpr int NH = DK / 2, LTV = CH + 8;
    static_assert(dk_bf16<DK>(), "bwd_final_bf16: dk 64, 128 or 192");
    extern __shared__ uint4 bf_smem[];
    bf16 *Qs = fa_align1024(bf_smem), *Ks = Qs + CH * DK, *M1 = Ks + CH * DK, *Ds = M1 + CH * CH;
    float *TVs = reinterpret_cast<float *>(Ds + CH * DK);  // dTV [CH][LTV] (fp32), phase 1's
    bf16 *Ts = reinterpret_cast<bf16 *>(TVs + CH * LTV), *M2 = Ts + CH * CH, *M3 = M2 + CH * CH;
    static_assert((CH * LTV * sizeof(float)) % 1024 == 0, "bwd_final_bf16: the tiles after TVs 1024-byte aligned");
    // dPm's pairs at each thread's accumulator positions of phase 2's 64-wide products, each thread's own (as XQ's),
    // loaded with Q and K: over M3 (written after phase 2) and a tile of their own (M2 is written in phase 2)
    float2 *PS = reinterpret_cast<float2 *>(M3);
    float *Gs = reinterpret_cast<float *>(M3 + 2 * CH * CH), *bs = Gs + CH, *es = bs + CH, *dbs = es + CH, *red = dbs + CH;
    // the dK and dQ passes' fp32 pairs at each thread's accumulator positions (X, then dQ1 and with a.rho dq̂ in its
    // place), each thread's own: pair (j, hh) of thread tid at XQ[(2j + hh)·256 + tid] (conflict-free, no barrier
    // between a thread's cp.async and its reads), over Ds, TVs and Ts, spent when the dK pass starts
    static_assert(CH * DK * 4 <= CH * DK * 2 + CH * LTV * 4 + CH * CH * 2, "bwd_final_bf16: X, dQ1 must fit in Ds, TVs, Ts");
    float2 *XQ = reinterpret_cast<float2 *>(Ds);
    // per-token sums: rows and columns of E = dPm ⊙ P, q·dQ1, k·R, rows of V (the KKᵀ term), its β-weighted columns, k·X
    // (csE and cw2: [4][CH], one row of partial sums per row strip)
    float *rsE = red, *csE = rsE + CH, *qd = csE + 4 * CH, *kr = qd + CH, *rs2 = kr + CH, *cw2 = rs2 + CH, *xk = cw2 + 4 * CH;
    float *qn = xk + CH, *kn = qn + CH; // with a.rho: q̂·dq̂, k̂·dk̂ per token (the L2 norm's backward)
    float *rq = kn + CH, *rk = rq + CH; // with a.rho: the tokens' 1/norms ρ of Q, K
    const int c = blockIdx.x, bh = blockIdx.y, b = bh / a.H, h = bh % a.H;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, t = lane & 3, wg = w >> 2;
    const int H = a.H, Nc = a.Nc;
    const size_t row0 = (size_t)bh * a.T + (size_t)c * CH, cc = (size_t)bh * Nc + c, tok0 = (size_t)b * a.T + (size_t)c * CH;
    const int R0 = 16 * (w & 3), C0 = 32 * wg;
    const float mv = mval_of(a, b, c, h), scale = a.scale;
    // the descriptors' low words: K-major operands (LBO unused), MN-major ones (LBO: one [CH][64] tile)
    auto lo_k = [](const bf16 *X) { return wgmma_desc_lo(smem_u32(X), 16); };
    auto lo_mn = [](const bf16 *X) { return wgmma_desc_lo(smem_u32(X), CH * 64 * sizeof(bf16)); };

    if (tid < CH) { bs[tid] = a.beta[(tok0 + tid) * H + h]; dbs[tid] = 0.f; }
    for (int i = tid; i < 15 * CH; i += 256) red[i] = 0.f;
    if (a.rho && tid < CH) {
        rq[tid] = a.rho[(tok0 + tid) * H + h];
        rk[tid] = a.rho[((size_t)a.B * a.T + tok0 + tid) * H + h];
    }
    {   // phase 1 (B3 part 1), over 64-column value tiles: dWm = dVn S0ᵀ (into Ds, bf16), dTV = dVn Vᵀ diag(β) (into TVs),
        // dv += diag(β) Tᵀ dVn, dbv = rowdot(V, Tᵀ dVn) (into dbs). dVnᵀ as bwd_state_bf16 stored it ([dv][CH] a chunk,
        // bf16: its A fragments by ldmatrix.trans); the S0 ([DK][64]: K-major B of dVn S0ᵀ), V, dVnᵀ tiles (K-major B
        // of dVn Vᵀ and Tᵀ dVn) double-buffered by cp.async over Qs .. TVs, which the phase leaves unwritten until its
        // last barrier
        bf16 *Ss = Qs, *Vs = Ss + 2 * DK * 64, *Dv = Vs + 2 * CH * 64;  // Ss: 2 × [DK][64], Vs: 2 × [CH][64], Dv: 2 × dVnᵀ [64][CH]
        static_assert(2 * DK * 64 + 4 * CH * 64 <= 3 * CH * DK + CH * CH + 2 * CH * LTV, "bwd_final_bf16: phase 1's tiles");
        const int dv = a.dvd, nvt = dv / 64;
        const bf16 *st = reinterpret_cast<const bf16 *>(a.state) + cc * DK * dv;
        const bf16 *vsrc = a.v16 + tok0 * a.ldv + (size_t)h * dv;
        auto issue = [&](int vt) {  // the value columns 64 vt .. of S0, V and dVnᵀ
            load_tile<64, DK, 256>(Ss + (vt & 1) * DK * 64, st + vt * 64, dv, tid);
            load_tile<64, CH, 256>(Vs + (vt & 1) * CH * 64, vsrc + vt * 64, a.ldv, tid);
            load_tile<CH, 64, 256>(Dv + (vt & 1) * 64 * CH, a.dVb + (cc * dv + vt * 64) * CH, CH, tid);
            cp_async_commit();
        };
        load_tile<CH, CH, 256>(Ts, a.Tb + cc * CH * CH, CH, tid);  // (T and G in the first group)
        if (tid < CH / 4) cp_async16(Gs + 4 * tid, a.Gc + row0 + 4 * tid);
        issue(0);
        if (nvt > 1) issue(1);
        float W1[DK / 16][4], P2[4][4], dbv0 = 0.f, dbv1 = 0.f;
        acc_zero(W1);
        acc_zero(P2);
        for (int vt = 0; vt < nvt; vt++) {
            if (vt + 1 < nvt) cp_async_wait<1>(); else cp_async_wait<0>();
            fence_async_smem();
            __syncthreads();
            const bf16 *Vt = Vs + (vt & 1) * CH * 64, *Dt = Dv + (vt & 1) * 64 * CH;
            const uint32_t dlo = lo_mn(Dt);  // A = dVn (tokens × the tile's 64 value columns): dVnᵀ MN-major
            float Y[4][4];
            acc_zero(Y);
            wg_keep(W1); wg_keep(P2); wg_keep(Y);
            wgmma_fence();
            wg_n32<CH, 1>(Y, lo_mn(Ts), lo_k(Dt), C0);                        // Tᵀ dVn (A = T MN-major)
            wgmma_commit();
            wg_dk<DK, 64, 1, 0>(W1, dlo, lo_k(Ss + (vt & 1) * DK * 64), wg);  // dVn S0ᵀ (in flight under Y's epilogue)
            wg_n32<64, 1>(P2, dlo, lo_k(Vt), C0);                              // dVn Vᵀ
            wgmma_commit();
            wgmma_wait<1>();
            wg_keep(Y);
            acc_pairs<32>(R0, C0, [&](int j, int hh, int r, int col) {
                const float2 vv = ld_pair<64>(Vt, r, col);
                const size_t at = (tok0 + r) * a.ldv + (size_t)h * dv + vt * 64 + col;
                const float2 o = a.dv_add ? ld_grad(a, a.dv, at) : make_float2(0.f, 0.f), y0 = make_float2(Y[j][2 * hh], Y[j][2 * hh + 1]);
                st_grad(a, a.dv, at, fmaf(bs[r], y0.x, o.x), fmaf(bs[r], y0.y, o.y));  // dv_add: the softmax op wrote dV first
                const float d = fmaf(vv.x, y0.x, vv.y * y0.y);
                if (hh) dbv1 += d; else dbv0 += d;
            });
            wgmma_wait<0>();
            wg_keep(W1); wg_keep(P2);
            __syncthreads();  // buffers vt & 1 are free
            if (vt + 2 < nvt) issue(vt + 2);
        }
        // Q, K over the spent S0 tiles and dPm's pairs, in flight under the stores of dWm, dTV
        load_tile_wg<DK, 256>(Qs, chunk_rows<DK>(a.q16, a, row0), a.ldqk);
        load_tile_wg<DK, 256>(Ks, chunk_rows<DK>(a.k16, a, row0), a.ldqk);
        acc_pairs<32>(R0, C0, [&](int j, int hh, int i, int col) { cp_async8(PS + (2 * j + hh) * 256 + tid, a.dPm + cc * CH * CH + i * CH + col); });
        cp_async_commit();
        dbv0 += __shfl_xor_sync(0xffffffffu, dbv0, 1); dbv0 += __shfl_xor_sync(0xffffffffu, dbv0, 2);
        dbv1 += __shfl_xor_sync(0xffffffffu, dbv1, 1); dbv1 += __shfl_xor_sync(0xffffffffu, dbv1, 2);
        if (t == 0) { atomicAdd(dbs + R0 + g, dbv0); atomicAdd(dbs + R0 + g + 8, dbv1); }
        acc_pairs_dk<DK>(R0, wg, [&](int j, int hh, int r, int col) { st_pair_t<CH>(Ds, r, col, W1[j][2 * hh], W1[j][2 * hh + 1]); });
        acc_pairs<32>(R0, C0, [&](int j, int hh, int r, int col) {  // dTV's columns times β_j
            *reinterpret_cast<float2 *>(TVs + r * LTV + col) = make_float2(P2[j][2 * hh] * bs[col], P2[j][2 * hh + 1] * bs[col + 1]);
        });
    }
    if (tid < CH) es[tid] = expf(Gs[tid]);
    cp_async_wait<0>();
    fence_async_smem();  // (and Ds's stores)
    __syncthreads();
    const uint32_t klo = lo_k(Ks);

    // the warp's per-row partial sums (rows R0 + g, R0 + g + 8) -> shared, over the 4 threads of a row
    auto add_rows = [&](float *dst, float s0, float s1) {
        s0 += __shfl_xor_sync(0xffffffffu, s0, 1); s0 += __shfl_xor_sync(0xffffffffu, s0, 2);
        s1 += __shfl_xor_sync(0xffffffffu, s1, 1); s1 += __shfl_xor_sync(0xffffffffu, s1, 2);
        if (t == 0) { atomicAdd(dst + R0 + g, s0); atomicAdd(dst + R0 + g + 8, s1); }
    };
    // the warp's per-column partial sums (columns C0 + 8j + 2t (+1)) over its 8 row groups -> row w & 3 of dst [4][CH]
    auto add_cols = [&](float *dst, float (&s)[4][2]) {
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float x = s[j][e];
                x += __shfl_xor_sync(0xffffffffu, x, 4); x += __shfl_xor_sync(0xffffffffu, x, 8); x += __shfl_xor_sync(0xffffffffu, x, 16);
                if (g == 0) dst[(w & 3) * CH + C0 + 8 * j + 2 * t + e] = x;
            }
    };

    {   // M1 = dPmm = dPm ⊙ Γ ⊙ [i ≥ j];  E = dPmm ⊙ QKᵀ -> row and column sums (dg).  M2 = dT = dTV − dWm (diag(β γ) K)ᵀ
        float P[4][4], Z[4][4], cs[4][2] = {}, r0s = 0.f, r1s = 0.f;
        acc_zero(P);
        acc_zero(Z);
        wg_keep(P);
        wg_keep(Z);
        wgmma_fence();
        wg_n32<DK, 0>(P, lo_k(Qs), klo, C0);  // Q Kᵀ
        wgmma_commit();
        wg_n32<DK, 0>(Z, lo_k(Ds), klo, C0);  // dWm Kᵀ (in flight under Q Kᵀ's epilogue)
        wgmma_commit();
        wgmma_wait<1>();
        wg_keep(P);
        acc_pairs<32>(R0, C0, [&](int j, int hh, int i, int col) {
            const float2 dp = PS[(2 * j + hh) * 256 + tid];
            const float d0 = (i >= col) ? dp.x * expf(Gs[i] - Gs[col]) : 0.f;
            const float d1 = (i >= col + 1) ? dp.y * expf(Gs[i] - Gs[col + 1]) : 0.f;
            st_pair<CH>(M1, i, col, d0, d1);
            const float e0 = d0 * P[j][2 * hh], e1 = d1 * P[j][2 * hh + 1];
            if (hh) r1s += e0 + e1; else r0s += e0 + e1;
            cs[j][0] += e0; cs[j][1] += e1;
        });
        add_rows(rsE, r0s, r1s);
        add_cols(csE, cs);
        wgmma_wait<0>();
        wg_keep(Z);
        acc_pairs<32>(R0, C0, [&](int j, int hh, int i, int col) {
            const float2 tv = *reinterpret_cast<const float2 *>(TVs + i * LTV + col);
            st_pair<CH>(M2, i, col, fmaf(-bs[col] * es[col], Z[j][2 * hh], tv.x), fmaf(-bs[col + 1] * es[col + 1], Z[j][2 * hh + 1], tv.y));
        });
    }
    fence_async_smem();
    __syncthreads();
    // K Kᵀ (the dA pass's) and Tᵀ dWm (the dK pass's first term, −R) depend on phase 1 and Q, K alone: K Kᵀ is issued
    // in the M3t pass (in flight under M3's stores and the barrier), Tᵀ dWm beside dA (in flight under dA's epilogue)
    float KK[4][4], dK[NH / 8][4];
    {   // M3t = M3ᵀ = T dTᵀ (M3 = dT Tᵀ: stored transposed, the K-major B of dA = −Tᵀ M3)
        float Y[4][4];
        acc_zero(Y);
        acc_zero(KK);
        wg_keep(Y);
        wg_keep(KK);
        wgmma_fence();
        wg_n32<CH, 0>(Y, lo_k(Ts), lo_k(M2), C0);
        wgmma_commit();
        wg_n32<DK, 0>(KK, klo, klo, C0);  // (waited for in the dA pass)
        wgmma_commit();
        wgmma_wait<1>();
        wg_keep(Y);
        acc_pairs<32>(R0, C0, [&](int j, int hh, int i, int col) { st_pair<CH>(M3, i, col, Y[j][2 * hh], Y[j][2 * hh + 1]); });
    }
    fence_async_smem();
    __syncthreads();
    {   // dA = −Tᵀ M3; below the diagonal: V = dA ⊙ Γ ⊙ KKᵀ (rows, β-weighted columns: dg, dβ); M2 = dA ⊙ Γ diag(β) rows
        float dA[4][4], cs[4][2] = {}, r0s = 0.f, r1s = 0.f, k0s = 0.f, k1s = 0.f;
        acc_zero(dA);
        acc_zero(dK);
        wg_keep(dA);
        wg_keep(dK);
        wgmma_fence();
        wg_n32<CH, 1>(dA, lo_mn(Ts), lo_k(M3), C0);  // (A = Tᵀ: T MN-major)
        wgmma_commit();
        wg_dk<DK, CH, 1, 1>(dK, lo_mn(Ts), lo_mn(Ds), wg);  // Tᵀ dWm (= −R)
        wgmma_commit();
        wgmma_wait<1>();  // (K Kᵀ and dA)
        wg_keep(KK); wg_keep(dA);
        acc_pairs<32>(R0, C0, [&](int j, int hh, int i, int col) {
            float m3[2];
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const float gm = (i > col + e) ? expf(Gs[i] - Gs[col + e]) : 0.f, da = -dA[j][2 * hh + e];
                const float v = da * gm * KK[j][2 * hh + e];
                m3[e] = da * bs[i] * gm;
                if (hh) r1s += v; else r0s += v;
                cs[j][e] += bs[i] * v;
            }
            st_pair<CH>(M2, i, col, m3[0], m3[1]);
        });
        add_rows(rs2, r0s, r1s);
        add_cols(cw2, cs);
        // dK's first term diag(β γ) R, R = −Tᵀ dWm;  kr = k·R (dg, dβ)
        wgmma_wait<0>();
        wg_keep(dK);
        acc_pairs_dk<DK>(R0, wg, [&](int j, int hh, int i, int col) {
            const float2 kv = ld_pair_t<CH>(Ks, i, col);
            const float mbe = -bs[i] * es[i], x0 = dK[j][2 * hh], x1 = dK[j][2 * hh + 1];
            const float s = -fmaf(kv.x, x0, kv.y * x1);
            if (hh) k1s += s; else k0s += s;
            dK[j][2 * hh] = mbe * x0;
            dK[j][2 * hh + 1] = mbe * x1;
        });
        add_rows(kr, k0s, k1s);
    }
    fence_async_smem();
    __syncthreads();
    {   // dK = diag(β γ) R + dPmmᵀ Q + M2 K + M2ᵀ K + m X;  xk = k·X (dg, dA), kn = k·dK
        float x0s = 0.f, x1s = 0.f, n0 = 0.f, n1 = 0.f;
        wg_keep(dK);
        wgmma_fence();
        wg_dk<DK, CH, 1, 1>(dK, lo_mn(M1), lo_mn(Qs), wg);  // dPmmᵀ Q
        wg_dk<DK, CH, 0, 1>(dK, lo_k(M2), lo_mn(Ks), wg);   // M2 K
        wg_dk<DK, CH, 1, 1>(dK, lo_mn(M2), lo_mn(Ks), wg);  // M2ᵀ K
        wgmma_commit();
        // X's pairs (the epilogue's), in flight under the products
        acc_pairs_dk<DK>(R0, wg, [&](int j, int hh, int i, int col) { cp_async8(XQ + (2 * j + hh) * 256 + tid, a.X + (row0 + i) * DK + col); });
        cp_async_commit();
        cp_async_wait<0>();
        wgmma_wait<0>();  // (its "memory" clobber: XQ's reads stay after the cp.async wait)
        wg_keep(dK);
        acc_pairs_dk<DK>(R0, wg, [&](int j, int hh, int i, int col) {
            const float2 x = XQ[(2 * j + hh) * 256 + tid];
            const float2 kv = ld_pair_t<CH>(Ks, i, col);
            const float d0 = fmaf(mv, x.x, dK[j][2 * hh]), d1 = fmaf(mv, x.y, dK[j][2 * hh + 1]);
            if (a.rho) { dK[j][2 * hh] = d0; dK[j][2 * hh + 1] = d1; } // stored below, through the L2 norm
            else *reinterpret_cast<float2 *>(a.dk + (tok0 + i) * a.ldqk + (size_t)h * DK + col) = make_float2(d0, d1);
            const float s = fmaf(kv.x, x.x, kv.y * x.y), sn = fmaf(kv.x, d0, kv.y * d1);
            if (hh) { x1s += s; n1 += sn; } else { x0s += s; n0 += sn; }
        });
        add_rows(xk, x0s, x1s);
        if (a.rho) add_rows(kn, n0, n1);
        __syncthreads();
        // dQ1's pairs (the dQ pass's) into X's slots, in flight under dK's stores and dQ's product
        acc_pairs_dk<DK>(R0, wg, [&](int j, int hh, int i, int col) { cp_async8(XQ + (2 * j + hh) * 256 + tid, a.dQ1 + (row0 + i) * DK + col); });
        cp_async_commit();
        if (a.rho) // dK = ρ (dk̂ − k̂ (k̂·dk̂))  (3.4i)
            acc_pairs_dk<DK>(R0, wg, [&](int j, int hh, int i, int col) {
                const float2 kv = ld_pair_t<CH>(Ks, i, col);
                st_grad(a, a.dk, (tok0 + i) * a.ldqk + (size_t)h * DK + col, rk[i] * (dK[j][2 * hh] - kv.x * kn[i]),
                        rk[i] * (dK[j][2 * hh + 1] - kv.y * kn[i]));
            });
    }
    {   // dQ = dPmm K + s diag(γ) dQ1 (registers);  qd = q·dQ1 (dg). With a.rho, dq̂ goes to shared memory (XQ, in
        // dQ1's place) and leaves as ρ (dq̂ − q̂ (q̂·dq̂))  (3.4i)
        float q0 = 0.f, q1 = 0.f, n0 = 0.f, n1 = 0.f;
        float dQ[NH / 8][4];
        acc_zero(dQ);
        wg_keep(dQ);
        wgmma_fence();
        wg_dk<DK, CH, 0, 1>(dQ, lo_k(M1), lo_mn(Ks), wg);
        wgmma_commit();
        cp_async_wait<0>();
        wgmma_wait<0>();  // (XQ's reads after the cp.async wait)
        wg_keep(dQ);
        acc_pairs_dk<DK>(R0, wg, [&](int j, int hh, int i, int col) {
            const float se = scale * es[i];
            const float2 d1 = XQ[(2 * j + hh) * 256 + tid], qv = ld_pair_t<CH>(Qs, i, col);
            const float2 dq = make_float2(fmaf(se, d1.x, dQ[j][2 * hh]), fmaf(se, d1.y, dQ[j][2 * hh + 1]));
            if (a.rho) XQ[(2 * j + hh) * 256 + tid] = dq;
            else *reinterpret_cast<float2 *>(a.dq + (tok0 + i) * a.ldqk + (size_t)h * DK + col) = dq;
            const float s = fmaf(qv.x, d1.x, qv.y * d1.y), sn = fmaf(qv.x, dq.x, qv.y * dq.y);
            if (hh) { q1 += s; n1 += sn; } else { q0 += s; n0 += sn; }
        });
        add_rows(qd, q0, q1);
        if (a.rho) {
            add_rows(qn, n0, n1);
            pair_sync(w); // the row strip's other warp: its half of the sums
            acc_pairs_dk<DK>(R0, wg, [&](int j, int hh, int i, int col) {
                const float2 d = XQ[(2 * j + hh) * 256 + tid], qv = ld_pair_t<CH>(Qs, i, col);
                st_grad(a, a.dq, (tok0 + i) * a.ldqk + (size_t)h * DK + col, rq[i] * (d.x - qv.x * qn[i]),
                        rq[i] * (d.y - qv.y * qn[i]));
            });
        }
    }
    __syncthreads();
    if (w == 0) {  // per token: dG, dβ; dg = reverse cumulative sum of dG; lane l owns tokens l (lo) and l + 32 (hi)
        float sx = xk[lane] + xk[lane + 32];
#pragma unroll
        for (int o = 16; o; o >>= 1) sx += __shfl_xor_sync(0xffffffffu, sx, o);
        float dG[2];
#pragma unroll
        for (int u = 0; u < 2; u++) {
            const int i = lane + 32 * u;
            const float ce = csE[i] + csE[CH + i] + csE[2 * CH + i] + csE[3 * CH + i];
            const float cw = cw2[i] + cw2[CH + i] + cw2[2 * CH + i] + cw2[3 * CH + i];
            dG[u] = rsE[i] - ce + scale * es[i] * qd[i] - mv * xk[i] + bs[i] * es[i] * kr[i] + bs[i] * rs2[i] - cw;
            a.dbeta[(tok0 + i) * H + h] = dbs[i] + es[i] * kr[i] + rs2[i];
        }
        if (lane == 31) dG[1] += mv * sx + es[CH - 1] * a.sdot[cc];
        if (lane == 0 && a.dA) a.dA[((size_t)(b * Nc + c) * H + h) * 2 + 1] = (mv != 0.f) ? sx : 0.f;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1)
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const float y = __shfl_down_sync(0xffffffffu, dG[u], o);
                if (lane + o < 32) dG[u] += y;
            }
        dG[0] += __shfl_sync(0xffffffffu, dG[1], 0);
        a.dg[(tok0 + lane) * H + h] = dG[0];
        a.dg[(tok0 + lane + 32) * H + h] = dG[1];
    }
}
// (1024: the tiles' alignment)
template <int DK> constexpr size_t bwd_final_bf16_smem() {
    return 1024 + (3 * CH * DK + 5 * CH * CH) * sizeof(bf16) + (CH * (CH + 8) + 21 * CH) * sizeof(float);
}
static_assert(2 * (bwd_final_bf16_smem<128>() + 1024) <= 228 * 1024, "bwd_final_bf16: two blocks an SM at d_k = 128");

// ------------------------------------------------------------------------------------------------
// ---- host side
static int g_lowp = 0;  // bf16 mode: TF32 block matmuls, bf16 state kernels (set_lowp)
static void set_lowp(int on) { g_lowp = on; CUDA_CHECK(cudaMemcpyToSymbol(c_gdn_tf32, &on, sizeof(int))); }
static bool state_bf16(int dk, int dv) { return g_lowp && (dk == 64 || dk == 128 || dk == 192) && dv % 64 == 0; }
// d_k = 192 has only the bf16 kernels (dk_fp32): the chunked op in bf16 mode, the token recurrence in fp32 mode
static bool supported(int dk, int dv) {
    return ((dk == 32 || dk == 48 || dk == 64 || dk == 128) && dv % GC_BV == 0) || (dk == 192 && state_bf16(dk, dv));
}

static size_t ws_floats(int B, int T, int H, int dk, int dv) {
    const size_t BH = (size_t)B * H, BT = BH * T, Nc = T / CH;
    return BT /*Gc*/ + 4 * BT * CH /*Tm,Pm,dPm,dTV*/ + 4 * BT * dk /*W,dQ1,dWm,X*/ + 2 * BT * dv /*U,dVn*/ +
           2 * BH * Nc * dk * dv /*dstate, Rc*/ + BH * Nc /*sdot*/ + BT /*dbv*/ + BT * dk / 2 /*Wb (bf16)*/;
}

static GA make_ga(int B, int T, int H, int dk, int dv, float *ws) {
    if (T % CH != 0) { fprintf(stderr, "gdn_op: T=%d must be a multiple of %d\n", T, CH); exit(1); }
    GA a;
    memset(&a, 0, sizeof(a));
    a.B = B; a.T = T; a.H = H; a.dvd = dv; a.Nc = T / CH;
    a.scale = 1.f / sqrtf((float)dk);
    a.st16 = g_gdn_st16;
    const size_t BH = (size_t)B * H, BT = BH * T, Nc = a.Nc;
    float *p = ws;
    a.Gc = p; p += BT;
    a.Tm = p; p += BT * CH; a.Pm = p; p += BT * CH; a.dPm = p; p += BT * CH; a.dTV = p; p += BT * CH;
    a.W = p; p += BT * dk; a.dQ1 = p; p += BT * dk; a.dWm = p; p += BT * dk; a.X = p; p += BT * dk;
    a.U = p; p += BT * dv; a.dVn = p; p += BT * dv;
    a.dstate = p; p += BH * Nc * dk * dv;
    a.Rc = p; p += BH * Nc * dk * dv;
    a.sdot = p; p += BH * Nc;
    a.dbv = p; p += BT;
    if (state_bf16(dk, dv) && a.st16) { a.Wb = reinterpret_cast<bf16 *>(p); a.ds16 = 1; }
    return a;
}

// the bf16 state kernel of a pass (FWD: K2, else B2) with nw ∈ {4, 8} warps per block (whole warpgroups)
template <int DK, bool FWD> static void (*state_kernel(int nw))(GA) {
    if constexpr (FWD) return nw == 8 ? fwd_state_bf16_kernel<DK, 8> : fwd_state_bf16_kernel<DK, 4>;
    else return nw == 8 ? bwd_state_bf16_kernel<DK, 8> : bwd_state_bf16_kernel<DK, 4>;
}
// its shared memory (the chunk tiles; each warp's staging rows; the backward's also each warp's dO slice)
template <int DK, bool FWD> static size_t state_smem(int nw) {
    return FWD ? fwd_state_bf16_smem<DK>(nw) : bwd_state_bf16_smem<DK>(nw);
}
template <int DK> static void set_attrs() {
    static bool done = false;
    if (done) return;
    done = true;
    if constexpr (dk_fp32<DK>()) {
        smem_attr(prep_kernel<DK>, prep_smem<DK>());
        smem_attr(fwd_state_kernel<DK, 16>, fwd_state_smem<DK, 16>());
        smem_attr(fwd_state_kernel<DK, 32>, fwd_state_smem<DK, 32>());
        smem_attr(fwd_out_kernel<DK>, fwd_out_smem<DK>());
        smem_attr(bwd_local_kernel<DK>, bwd_local_smem<DK>());
        smem_attr(bwd_rhs_kernel<DK>, bwd_rhs_smem<DK>());
        smem_attr(bwd_state_kernel<DK, 16>, bwd_state_smem<DK, 16>());
        smem_attr(bwd_state_kernel<DK, 32>, bwd_state_smem<DK, 32>());
        smem_attr(bwd_vloop_kernel<DK, 0>, bwd_vloop_smem<DK, 0>());
        smem_attr(bwd_vloop_kernel<DK, 1>, bwd_vloop_smem<DK, 1>());
        smem_attr(bwd_vloop_kernel<DK, 2>, bwd_vloop_smem<DK, 2>());
        smem_attr(bwd_final_kernel<DK>, bwd_final_smem<DK>());
    }
    if constexpr (dk_bf16<DK>()) {
        for (int nw = 4; nw <= 8; nw *= 2) {
            smem_attr(state_kernel<DK, true>(nw), state_smem<DK, true>(nw));
            smem_attr(state_kernel<DK, false>(nw), state_smem<DK, false>(nw));
        }
        smem_attr(fwd_out_bf16_kernel<DK>, fwd_out_bf16_smem<DK>());
        smem_attr(bwd_local_bf16_kernel<DK>, bwd_local_bf16_smem<DK>());
        smem_attr(bwd_final_bf16_kernel<DK>, bwd_final_bf16_smem<DK>());
        smem_attr(prep_bf16_kernel<DK>, prep_bf16_smem<DK>());
    }
}

// The sequential state kernels run one block per (value tile, head, sequence): where 32-column tiles would leave SMs
// idle (B·H·dv/32 below the SM count: long sequences at a small batch), 16-column tiles give twice the blocks.
static int state_tile(const GA &a) { return a.B * a.H * (a.dvd / 32) < num_sms() ? 16 : 32; }
// The bf16 state kernels: NW ∈ {4, 8} warps per block (16 value columns each, a warpgroup 64). Every warpgroup runs
// the same sequential chain, so the warps per block that need the fewest waves (blocks per SM from the occupancy API:
// the kernel's registers and shared memory), and of those 4 (the most parallel loads of the chunk tiles). The 340m
// (d_k = 128, B = 8) takes 4 in both passes: 192 warpgroups, two blocks an SM (K2 102 KB, B2 110 KB), one wave on 132
// SMs. The 760m's backward at B = 4 takes 8: its 4-warp blocks (134 KB) run one an SM and would need two waves. The
// blocks per SM of each kernel (fixed registers and shared memory) are asked once, not at every op call.
template <int DK, bool FWD> static int state_warps(const GA &a) {
    static int per_sm[2];  // of 4, 8 warps
    int best = 4;
    long best_waves = -1;
    for (int k = 0, nw = 4; nw <= 8 && a.dvd % (16 * nw) == 0; k++, nw *= 2) {
        if (!per_sm[k])
            CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm[k], state_kernel<DK, FWD>(nw), 32 * nw, state_smem<DK, FWD>(nw)));
        const long slots = (long)std::max(per_sm[k], 1) * num_sms(), blocks = (long)a.B * a.H * (a.dvd / (16 * nw));
        const long waves = (blocks + slots - 1) / slots;
        if (best_waves < 0 || waves < best_waves) { best = nw; best_waves = waves; }
    }
    return best;
}
// the sequential pass (FWD: K2, else B2): the bf16 kernels where prep wrote the bf16 W, else the fp32 ones
template <int DK, bool FWD> static void state_pass(const GA &a) {
    if constexpr (dk_bf16<DK>())
        if (a.Wb) {
            const int nw = state_warps<DK, FWD>(a);
            state_kernel<DK, FWD>(nw)<<<dim3(a.dvd / (16 * nw), a.H, a.B), 32 * nw, state_smem<DK, FWD>(nw)>>>(a);
            return;
        }
    if constexpr (dk_fp32<DK>()) {
        const int bv = state_tile(a);
        const dim3 grid(a.dvd / bv, a.H, a.B);
        auto k = FWD ? (bv == 16 ? fwd_state_kernel<DK, 16> : fwd_state_kernel<DK, 32>) : (bv == 16 ? bwd_state_kernel<DK, 16> : bwd_state_kernel<DK, 32>);
        k<<<grid, GC_NT, FWD ? (bv == 16 ? fwd_state_smem<DK, 16>() : fwd_state_smem<DK, 32>()) : (bv == 16 ? bwd_state_smem<DK, 16>() : bwd_state_smem<DK, 32>())>>>(a);
    }
}
// K1 (both passes): the bf16 prep where the bf16 kernels follow, else the fp32 one
template <int DK> static void prep_pass(const GA &a) {
    if constexpr (dk_bf16<DK>())
        if (a.Wb) { prep_bf16_kernel<DK><<<dim3(a.Nc, a.B * a.H), 256, prep_bf16_smem<DK>()>>>(a); GDN_KERNEL_MARK("prep"); return; }
    if constexpr (dk_fp32<DK>()) prep_kernel<DK><<<dim3(a.Nc, a.H, a.B), GC_NT, prep_smem<DK>()>>>(a);
    GDN_KERNEL_MARK("prep");
}
// Each pass below runs its bf16 kernel where prep wrote the bf16 W (a.Wb; dk_bf16), else its fp32 kernel (dk_fp32;
// forward/backward see that one of the two exists).
template <int DK> static void fwd_impl(const GA &a) {
    set_attrs<DK>();
    const int B = a.B, H = a.H, Nc = a.Nc;
    prep_pass<DK>(a);
    state_pass<DK, true>(a);
    GDN_KERNEL_MARK("fwd_state");
    if constexpr (dk_bf16<DK>())
        if (a.Vb) fwd_out_bf16_kernel<DK><<<dim3(Nc, B * H), 128, fwd_out_bf16_smem<DK>()>>>(a);
    if constexpr (dk_fp32<DK>())
        if (!a.Vb) fwd_out_kernel<DK><<<dim3(a.dvd / GC_BV, Nc, B * H), GC_NT, fwd_out_smem<DK>()>>>(a);
    GDN_KERNEL_MARK("fwd_out");
    CUDA_CHECK(cudaGetLastError());
}
template <int DK> static void bwd_impl(const GA &a) {
    set_attrs<DK>();
    const int B = a.B, H = a.H, Nc = a.Nc;
    const dim3 g2(Nc, B * H);
    prep_pass<DK>(a);
    if constexpr (dk_bf16<DK>())
        if (a.Wb) {
            state_pass<DK, false>(a); GDN_KERNEL_MARK("bwd_state");
            bwd_local_bf16_kernel<DK><<<g2, 256, bwd_local_bf16_smem<DK>()>>>(a); GDN_KERNEL_MARK("bwd_local");
            bwd_final_bf16_kernel<DK><<<g2, 256, bwd_final_bf16_smem<DK>()>>>(a); GDN_KERNEL_MARK("bwd_final");
        }
    if constexpr (dk_fp32<DK>())
        if (!a.Wb) {
            const dim3 g3(a.dvd / GC_BV, Nc, B * H);
            bwd_local_kernel<DK><<<g3, GC_NT, bwd_local_smem<DK>()>>>(a); GDN_KERNEL_MARK("bwd_local");
            bwd_rhs_kernel<DK><<<g3, GC_NT, bwd_rhs_smem<DK>()>>>(a); GDN_KERNEL_MARK("bwd_rhs");
            state_pass<DK, false>(a); GDN_KERNEL_MARK("bwd_state");
            bwd_vloop_kernel<DK, 0><<<g2, GC_NT, bwd_vloop_smem<DK, 0>()>>>(a); GDN_KERNEL_MARK("vloop0");
            bwd_vloop_kernel<DK, 1><<<g2, GC_NT, bwd_vloop_smem<DK, 1>()>>>(a); GDN_KERNEL_MARK("vloop1");
            bwd_vloop_kernel<DK, 2><<<g2, GC_NT, bwd_vloop_smem<DK, 2>()>>>(a); GDN_KERNEL_MARK("vloop2");
            bwd_final_kernel<DK><<<g2, GC_NT, bwd_final_smem<DK>()>>>(a); GDN_KERNEL_MARK("bwd_final");
        }
    CUDA_CHECK(cudaGetLastError());
}
#define GC_DISPATCH(dk, F, a) do { switch (dk) { \
    case 32: F<32>(a); break; case 48: F<48>(a); break; case 64: F<64>(a); break; case 128: F<128>(a); break; \
    case 192: F<192>(a); break; \
    default: fprintf(stderr, "gdn_op: dk=%d not instantiated (32/48/64/128/192)\n", dk); exit(1); } } while (0)

static bool aligned16(const void *p) { return (uintptr_t)p % 16 == 0; }
// The bf16 kernels take the op in bf16 mode where they are compiled for d_k (state_bf16) and every tensor they load or
// store in 8- and 16-byte vectors is 16-byte aligned, rows included (q̂, k̂, v in bf16: strides % 8; the model's layouts
// always are). ptrs: the op's tensors. Where they do not, the op runs the fp32 kernels (or the token recurrence) on fp32
// copies of q̂, k̂, v (gdn_op_forward); those have no d_k = 192, which then stops with an error (only a caller of the op
// with an unaligned layout can get there).
static bool takes_bf16(int dk, int dv, int ldqk, int ldv, std::initializer_list<const void *> ptrs) {
    if (!state_bf16(dk, dv) || !g_gdn_st16 || ldqk % 8 || ldv % 8) return false;
    for (const void *p : ptrs)
        if (p && !aligned16(p)) return false;
    return true;
}
// the fp32 kernels load with 16-byte cp.async where their tensors are aligned (a.vec), else element by element
static void fp32_kernels(GA &a, int dk, bool vec) {
    if (dk > 128) { fprintf(stderr, "gdn_op: d_k=%d needs 16-byte aligned q, k, v rows (the bf16 kernels)\n", dk); exit(1); }
    a.Wb = nullptr;
    a.ds16 = 0;
    a.vec = vec;
}

// The op on the operands of *w (workspace w->ws). in16: q, k, v are bf16 (takes_bf16 said so) and the bf16 kernels
// run, storing o in bf16 with o16; else they are fp32 and the fp32 kernels run (o fp32)
static void forward(float *o, float *state, const GdnArgs *w, bool in16, bool o16) {
    const float *q = w->q, *k = w->k, *v = w->v, *g = w->g, *beta = w->beta, *m = w->mask;
    const int ldqk = w->ldqk, ldv = w->ldv, dk = w->head_k;
    GA a = make_ga(w->B, w->T, w->H, dk, w->head_v, w->ws);
    a.o = o; a.state = state; a.ldqk = ldqk; a.ldv = ldv; a.g = g; a.beta = beta; a.m = m;
    a.o16 = in16 && o16 ? reinterpret_cast<bf16 *>(o) : nullptr;
    if (in16) {
        a.q16 = (const bf16 *)q; a.k16 = (const bf16 *)k; a.v16 = (const bf16 *)v;
        a.vec = 1;
        a.Vb = reinterpret_cast<bf16 *>(a.dVn);
    } else {
        a.q = q; a.k = k; a.v = v;
        fp32_kernels(a, dk, aligned16(q) && aligned16(k) && aligned16(v) && aligned16(state) && aligned16(o) &&
                            ldqk % 4 == 0 && ldv % 4 == 0 && dk % 4 == 0);
    }
    GC_DISPATCH(dk, fwd_impl, a);
}
// The backward into *d (dv added to with w->dv_add); rho: bwd_final_bf16 returns dQ, dK through the L2 norm (NULL:
// dq̂, dk̂); d16: the bf16 kernels store dq, dk, dv in bf16
static void backward(const GdnGrads *d, const float *dout, const float *state, const GdnArgs *w, bool in16,
                     const float *rho, bool d16) {
    float *dq = d->dq, *dk = d->dk, *dv = d->dv;
    const float *q = w->q, *k = w->k, *v = w->v, *g = w->g, *beta = w->beta, *m = w->mask;
    const int ldqk = w->ldqk, ldv = w->ldv, dkd = w->head_k;
    GA a = make_ga(w->B, w->T, w->H, dkd, w->head_v, w->ws);
    a.bwd = 1;
    a.dv_add = w->dv_add;
    a.rho = rho;
    a.d16 = d16;
    a.dq = dq; a.dk = dk; a.dv = dv; a.dg = d->dg; a.dbeta = d->dbeta; a.dA = d->dA;
    a.state = (float *)state; a.ldqk = ldqk; a.ldv = ldv; a.g = g; a.beta = beta; a.m = m;
    if (in16) {
        a.q16 = (const bf16 *)q; a.k16 = (const bf16 *)k; a.v16 = (const bf16 *)v; a.dout16 = (const bf16 *)dout;
        a.vec = 1;
        a.Tb = reinterpret_cast<bf16 *>(a.Tm); a.Pb = reinterpret_cast<bf16 *>(a.Pm);
        a.dVb = reinterpret_cast<bf16 *>(a.dVn);
    } else {
        a.q = q; a.k = k; a.v = v; a.dout = dout;
        fp32_kernels(a, dkd, aligned16(q) && aligned16(k) && aligned16(v) && aligned16(state) && aligned16(dout) &&
                             aligned16(dq) && aligned16(dk) && aligned16(dv) && ldqk % 4 == 0 && ldv % 4 == 0 && dkd % 4 == 0);
    }
    GC_DISPATCH(dkd, bwd_impl, a);
}
#undef GC_DISPATCH
} // namespace gdnc
#undef GC_NT
#undef GC_BV
#undef GC_L64
#undef GC_LBV
#undef GC_PADK

// ---- the GDN op (§5.4, §6.1, §6.4): the chunked kernels where the shape allows, else the token recurrence --
// Same semantics and layouts as train_natsl.c's gdn_op_forward/backward, plus ws: an explicit device
// workspace of gdn_op_workspace_floats(B, T, H, dk, dv) floats (owned by the caller; M->gdn_ws in the
// model). gdn_op_backward writes dq, dk, dg, dβ, dA[...,1] and dv, or accumulates into dv with dv_add (the softmax
// op of an N layer has written dv and dA[...,0] before). NATSL_GDN_TOKENS=1 in the environment forces the token
// recurrence everywhere (comparisons, timings).
static int g_gdn_tokens = -1;
static int gdn_use_chunked(int dk, int dv) {
    if (g_gdn_tokens < 0) { const char *e = getenv("NATSL_GDN_TOKENS"); g_gdn_tokens = e && atoi(e) != 0; }
    return !g_gdn_tokens && gdnc::supported(dk, dv);
}
// on = 1 (bf16 mode): the chunked op runs every product on the bf16 tensor cores for d_k ∈ {64, 128, 192} (the *_bf16
// kernels; errors in dev/cuda/gdn/NOTES.md), its block matmuls on the TF32 ones for the other d_k; on = 0 (fp32 mode,
// the default): fp32 FMA throughout, for the CPU comparison's 1e-5. NATSL_GDN_TF32=0 in the environment keeps the
// fp32 op in bf16 mode too (the exact bf16 check).
static void gdn_set_lowp(int on) {
    const char *e = getenv("NATSL_GDN_TF32");
    gdnc::set_lowp(on && !(e && atoi(e) == 0));
    g_gdn_st16 = on;
}
static size_t gdn_op_workspace_floats(int B, int T, int H, int dk, int dv) {
    return gdn_use_chunked(dk, dv) ? gdnc::ws_floats(B, T, H, dk, dv) : gdn_tokens_ws_floats(B, H, dk, dv);
}
// In bf16 mode q̂, k̂ and v are stored in bf16 (GdnArgs), and so is the backward's dout where GdnArgs.out_mp says so:
// the bf16 kernels read them so (in16; a dout in fp32 gets a bf16 copy, *dout pointed at it); the others (fp32 mode's,
// or bf16 mode's where the bf16 kernels do not take the shape: other d_k, unaligned rows, NATSL_GDN_TF32=0) get fp32
// copies of them here (widen_operands, one scratch for the op). dout: the backward's, else NULL.
static bool gdn_operands(GdnArgs *w, const GdnArgs *a, std::initializer_list<const void *> ptrs, const real **dout) {
    *w = *a;
    if (!g_gdn_st16) return false;
    const size_t BT = (size_t)a->B * a->T;
    const int nv = a->H * a->head_v;
    if (gdn_use_chunked(a->head_k, a->head_v) && gdnc::takes_bf16(a->head_k, a->head_v, a->ldqk, a->ldv, ptrs)) {
        if (dout && !a->out_mp) {
            bf16 *d16 = (bf16 *)device_scratch(SCRATCH_GDN_DOUT, BT * nv * sizeof(bf16));
            rows_to_bf16(d16, nv, *dout, nv, BT, nv);
            *dout = (const real *)d16;
        }
        return true;
    }
    const real *x[4] = {a->q, a->k, a->v, dout ? *dout : NULL};
    const int ld[4] = {a->ldqk, a->ldqk, a->ldv, nv}, cols[4] = {a->H * a->head_k, a->H * a->head_k, nv, nv};
    widen_operands(SCRATCH_GDN_WIDE, x, ld, cols, dout && a->out_mp ? 4 : 3, BT);
    w->q = x[0]; w->k = x[1]; w->v = x[2];
    if (dout) *dout = x[3];
    return false;
}
// In bf16 mode the layers' output is stored in bf16 (GdnArgs.out_mp): the bf16 kernels store it so; the others write
// fp32 into a scratch, rounded into out here.
static void gdn_op_forward(real *out, real *state, const GdnArgs *args) {
    PROF_OP();
    GdnArgs w;
    const bool in16 = gdn_operands(&w, args, {args->q, args->k, args->v, out, state}, NULL);
    const GdnArgs *a = &w;
    int B = a->B, T = a->T, H = a->H, dk = a->head_k, dv = a->head_v;
    const bool chunked = gdn_use_chunked(dk, dv), o16 = g_gdn_st16 && a->out_mp;
    const size_t BT = (size_t)B * T;
    real *o = o16 && !(chunked && in16) ? (real *)device_scratch(SCRATCH_GDN_OUT, BT * H * dv * sizeof(float)) : out;
    if (chunked) gdnc::forward(o, state, a, in16, o16);
    else gdn_tokens_forward(o, state, a);
    if (o != out) rows_to_bf16((bf16 *)out, H * dv, o, H * dv, BT, H * dv);
}
// WRITES dq, dk, dg, dβ, dA[...,1] and dv; with args->dv_add ACCUMULATES into dv. In bf16 mode with args->grads_mp
// (a G layer's) dq, dk, dv are stored in bf16: the bf16 kernels with the L2 norm folded in store them so; the other
// paths write fp32 into a scratch (rows of the same strides), rounded into dq, dk, dv here after the L2 norm's backward.
static void gdn_op_backward(real *dq, real *dk, real *dv, real *dg, real *dbeta, real *dA, const real *dout,
                            const real *state, const GdnArgs *args) {
    PROF_OP();
    GdnArgs w;
    const bool in16 = gdn_operands(&w, args, {args->q, args->k, args->v, dq, dk, dv, dout, state}, &dout);
    const GdnArgs *a = &w;
    const real *q = a->q, *k = a->k;
    int ldqk = a->ldqk, ldv = a->ldv, B = a->B, T = a->T, H = a->H, dkh = a->head_k, dvh = a->head_v;
    const bool chunked = gdn_use_chunked(dkh, dvh), fold = chunked && in16 && a->rho; // bwd_final_bf16 takes GdnArgs.rho
    const bool d16 = g_gdn_st16 && a->grads_mp;
    if (d16 && (a->dv_add || !a->rho)) die("gdn_op_backward: bf16 gradients (grads_mp) need rho and dv_add = 0");
    const size_t BT = (size_t)B * T, nqk = BT * ldqk;
    real *dq32 = dq, *dk32 = dk, *dv32 = dv; // where the op writes: dq, dk, dv, or the fp32 scratch (d16 unfolded)
    if (d16 && !fold) {
        dq32 = (real *)device_scratch(SCRATCH_GDN_OUT, (2 * nqk + BT * ldv) * sizeof(float));
        dk32 = dq32 + nqk;
        dv32 = dk32 + nqk;
    }
    const GdnGrads d = {dq32, dk32, dv32, dg, dbeta, dA};
    if (chunked) gdnc::backward(&d, dout, state, a, in16, fold ? a->rho : nullptr, d16 && fold);
    else gdn_tokens_backward(&d, dout, state, a);
    if (a->rho && !fold) {
        l2norm_backward(dq32, dq32, q, a->rho, B * T, H, dkh, ldqk);
        l2norm_backward(dk32, dk32, k, a->rho + BT * H, B * T, H, dkh, ldqk);
    }
    if (dq32 != dq) {
        rows_to_bf16((bf16 *)dq, ldqk, dq32, ldqk, BT, H * dkh);
        rows_to_bf16((bf16 *)dk, ldqk, dk32, ldqk, BT, H * dkh);
        rows_to_bf16((bf16 *)dv, ldv, dv32, ldv, BT, H * dvh);
    }
}

// ================================================================================================
// Appendix E. GEMM selection: cuBLAS, and cuBLASLt with a timed choice of algorithm in bf16 mode
// ================================================================================================

// bf16 mode runs the products through cuBLASLt with, for each distinct product (shape, transposes, strides, accumulate
// or not, output type), the fastest of the algorithms gemm_candidates lists, timed at its first call on the product's
// own operands (cublasGemmEx's choice, the heuristic's first, is not the fastest for every product: dev/cuda/gemm_tune;
// NATSL_GEMM_REPORT=1 prints a line for each product timed). The choice is fixed for the run, so
// recompute reruns stay bit-identical; a run keeps its choices in the file that NATSL_GEMM_ALGOS names or else, with
// -o, in <dir>/gemm_algos.bin (several ranks: each its own, _rNNN), and a run that finds the file (a resume) takes them
// from there, so that it computes the same bits as the run it continues (gemm_cache_*). cuBLASLt's algorithms may need
// aligned pointers: the key holds the operands' alignments. NATSL_GEMM_TIMED=0 takes the heuristic's first candidate
// untimed, so that separate runs compute the same bits (make test's CPU-vs-GPU comparison: timing noise can pick other
// algorithms from run to run, whose bf16 roundings move a gradient across the comparison's bar).
#define GEMM_CANDIDATES 8
#define GEMM_WORKSPACE (32u << 20)
typedef struct {
    int ta, tb, m, n, k, lda, ldb, ldc, accumulate, C_mp; // the product (cublasOperation_t as int)
    int align_a, align_b, align_c;                          // its pointers' alignments in bytes (≤ 256)
    cublasLtMatmulAlgo_t algo;
} GemmKey;
typedef struct {
    GemmKey key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
} GemmPlan;
static cublasLtHandle_t g_lt;
static void *g_lt_ws;
static std::deque<GemmPlan> g_plans;    // (a deque: the plans handed out stay where they are)
static std::vector<GemmKey> g_plan_cache; // the choices read from the file
static char g_plan_path[1100];            // where this run keeps its choices ("" = nowhere)
static size_t g_plans_saved;              // how many of g_plans the file holds
static int gemm_key_same(const GemmKey *x, const GemmKey *y) { // the product, not the algorithm
    return x->ta == y->ta && x->tb == y->tb && x->m == y->m && x->n == y->n && x->k == y->k && x->lda == y->lda &&
           x->ldb == y->ldb && x->ldc == y->ldc && x->accumulate == y->accumulate && x->C_mp == y->C_mp &&
           x->align_a == y->align_a && x->align_b == y->align_b && x->align_c == y->align_c;
}
static int ptr_align(const void *p) { uintptr_t u = (uintptr_t)p; return u % 256 ? (int)(u & (~u + 1)) : 256; }
// The file: "NATSLGEMM2", the cuBLASLt version, the GPU's name, the count, the GemmKeys. A file written for another
// GPU or cuBLASLt, or one that does not read whole, is passed over with a note (it is a cache: nothing is lost).
static void gemm_cache_identity(size_t *version, char name[256]) {
    cudaDeviceProp prop;
    int dev;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    memset(name, 0, 256);
    snprintf(name, 256, "%s", prop.name);
    *version = cublasLtGetVersion();
}
static void gemm_cache_open(const char *dir, int rank, int world) {
    const char *env = getenv("NATSL_GEMM_ALGOS");
    if (!env && !dir) return;
    const char *base = env ? env : dir, *file = env ? "" : "/gemm_algos";
    if (world > 1) snprintf(g_plan_path, sizeof(g_plan_path), "%s%s_r%03d%s", base, file, rank, env ? "" : ".bin");
    else snprintf(g_plan_path, sizeof(g_plan_path), "%s%s%s", base, file, env ? "" : ".bin");
    FILE *f = fopen(g_plan_path, "rb");
    if (!f) return;
    char magic[10], name[256], want_name[256];
    size_t version, want_version;
    int n = 0, ok = fread(magic, 10, 1, f) == 1 && !memcmp(magic, "NATSLGEMM2", 10) && fread(&version, sizeof(version), 1, f) == 1 &&
                    fread(name, 256, 1, f) == 1 && fread(&n, sizeof(n), 1, f) == 1 && n >= 0 && n < 100000;
    gemm_cache_identity(&want_version, want_name);
    if (ok && (version != want_version || memcmp(name, want_name, 256))) {
        printf("note: %s was chosen on another GPU or cuBLASLt (%.60s, %zu): the products are timed again\n",
               g_plan_path, name, version);
        fclose(f);
        return;
    }
    if (ok) {
        g_plan_cache.resize(n);
        ok = fread(g_plan_cache.data(), sizeof(GemmKey), n, f) == (size_t)n;
    }
    if (!ok) {
        printf("note: %s does not read whole: the products are timed again\n", g_plan_path);
        g_plan_cache.clear();
    }
    fclose(f);
}
// Writes the file when this run chose products that it does not hold yet (called between steps): this run's
// choices and the file's others.
static void gemm_cache_save(void) {
    if (!g_plan_path[0] || g_plans.size() == g_plans_saved) return;
    char tmp[1200], name[256];
    size_t version;
    gemm_cache_identity(&version, name);
    snprintf(tmp, sizeof(tmp), "%s.tmp", g_plan_path);
    FILE *f = fopen(tmp, "wb");
    std::vector<GemmKey> keys;
    for (const GemmPlan &p : g_plans) keys.push_back(p.key);
    for (const GemmKey &k : g_plan_cache) {
        int used = 0;
        for (const GemmPlan &p : g_plans) used |= gemm_key_same(&p.key, &k);
        if (!used) keys.push_back(k);
    }
    int n = (int)keys.size(), ok = f != NULL;
    ok = ok && fwrite("NATSLGEMM2", 10, 1, f) == 1 && fwrite(&version, sizeof(version), 1, f) == 1 &&
         fwrite(name, 256, 1, f) == 1 && fwrite(&n, sizeof(n), 1, f) == 1;
    ok = ok && fwrite(keys.data(), sizeof(GemmKey), n, f) == (size_t)n;
    if (f && fclose(f)) ok = 0;
    if (!ok || rename(tmp, g_plan_path)) {
        fprintf(stderr, "error: %s: cannot write the products' algorithms: %s\n", g_plan_path, strerror(errno));
        exit(1);
    }
    g_plans_saved = g_plans.size();
}
// Whether the candidates are timed (NATSL_GEMM_TIMED, default 1; 0: the heuristic's first, untimed)
static int gemm_timed(void) {
    static int r = -1;
    if (r < 0) { const char *e = getenv("NATSL_GEMM_TIMED"); r = !(e && atoi(e) == 0); }
    return r;
}
// NATSL_GEMM_REPORT=1: a line for each product timed (its candidates, their best, the one taken)
static int gemm_report(void) {
    static int r = -1;
    if (r < 0) { const char *e = getenv("NATSL_GEMM_REPORT"); r = e && atoi(e) != 0; }
    return r;
}
// The algorithms a product may take: the heuristic's first GEMM_CANDIDATES (its best fit, in its order), then (when
// they are timed) for every algorithm id cuBLASLt has for these types, up to GEMM_CANDIDATES_PER_ID configurations
// of that id that its heuristic offers (those not already in: ~13 more at the 340m). Returns how many came first.
#define GEMM_CANDIDATES_PER_ID 32
static int gemm_candidates(const GemmPlan *p, const GemmKey *want, std::vector<cublasLtMatmulAlgo_t> *out) {
    cublasLtMatmulPreference_t pref;
    const size_t ws = GEMM_WORKSPACE;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    const uint32_t al[4] = {(uint32_t)want->align_a, (uint32_t)want->align_b, (uint32_t)want->align_c, (uint32_t)want->align_c};
    const cublasLtMatmulPreferenceAttributes_t al_attr[4] = {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++) CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, al_attr[i], &al[i], sizeof(al[i])));
    cublasLtMatmulHeuristicResult_t cand[GEMM_CANDIDATES_PER_ID];
    int ncand = 0;
    CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(g_lt, p->op, p->a, p->b, p->c, p->c, pref, GEMM_CANDIDATES, cand, &ncand));
    if (ncand == 0) {
        fprintf(stderr, "error: cuBLASLt has no algorithm for a %dx%dx%d product\n", want->m, want->n, want->k);
        exit(1);
    }
    for (int i = 0; i < ncand; i++) out->push_back(cand[i].algo);
    const int n_first = ncand;
    if (gemm_timed()) {
        const cudaDataType_t ct = want->C_mp ? CUDA_R_16BF : CUDA_R_32F;
        int ids[256], nids = 0;
        CUBLAS_CHECK(cublasLtMatmulAlgoGetIds(g_lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, ct, ct, 256,
                                              ids, &nids));
        const uint32_t mode = CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID;
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_SEARCH_MODE, &mode, sizeof(mode)));
        for (int j = 0; j < nids; j++) {
            cublasLtMatmulAlgo_t algo;
            if (cublasLtMatmulAlgoInit(g_lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, ct, ct, ids[j],
                                       &algo) != CUBLAS_STATUS_SUCCESS) continue;
            for (cublasLtMatmulHeuristicResult_t &c : cand) c.algo = algo; // the id the search keeps to
            int nj = 0;
            if (cublasLtMatmulAlgoGetHeuristic(g_lt, p->op, p->a, p->b, p->c, p->c, pref, GEMM_CANDIDATES_PER_ID, cand,
                                               &nj) != CUBLAS_STATUS_SUCCESS) continue;
            for (int i = 0; i < nj; i++) {
                int seen = 0;
                for (const cublasLtMatmulAlgo_t &a : *out) seen |= !memcmp(&a, &cand[i].algo, sizeof(a));
                if (!seen && cand[i].state == CUBLAS_STATUS_SUCCESS) out->push_back(cand[i].algo);
            }
        }
    }
    cublasLtMatmulPreferenceDestroy(pref);
    return n_first;
}
// The plan of a product: a known one, one read from the run directory, or a new choice, timed on its operands into D
// itself where D's old values are not read, else into a scratch output (the heuristic's first candidate where no
// scratch fits in memory). The candidates take turns: a round that warms each up and times it once, which drops
// those over 1.15× the fastest, then GEMM_ROUNDS rounds whose median decides (the clocks move: timed one after the
// other, the same algorithm can measure far apart from run to run).
#define GEMM_ROUNDS 5
static const GemmPlan *gemm_plan(const GemmKey *want, const void *A, const void *B, const float *Cin, void *D) {
    for (const GemmPlan &p : g_plans)
        if (gemm_key_same(&p.key, want)) return &p;
    if (!g_lt) {
        CUBLAS_CHECK(cublasLtCreate(&g_lt));
        g_lt_ws = xcudamalloc(GEMM_WORKSPACE);
    }
    GemmPlan p = {*want, NULL, NULL, NULL, NULL};
    const cublasOperation_t ta = (cublasOperation_t)want->ta, tb = (cublasOperation_t)want->tb;
    const int m = want->m, n = want->n, k = want->k;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, want->lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, want->ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, want->C_mp ? CUDA_R_16BF : CUDA_R_32F, m, n, want->ldc));
    for (size_t i = 0; i < g_plan_cache.size(); i++)
        if (gemm_key_same(&g_plan_cache[i], want)) {
            cublasLtMatmulHeuristicResult_t check;
            if (cublasLtMatmulAlgoCheck(g_lt, p.op, p.a, p.b, p.c, p.c, &g_plan_cache[i].algo, &check) == CUBLAS_STATUS_SUCCESS) {
                g_plans.push_back(p);
                g_plans.back().key.algo = g_plan_cache[i].algo;
                g_plans_saved++; // (the file holds it)
                return &g_plans.back();
            }
        }
    std::vector<cublasLtMatmulAlgo_t> cand;
    const int n_first = gemm_candidates(&p, want, &cand);
    const int ncand = gemm_timed() ? (int)cand.size() : 1;
    p.key.algo = cand[0];
    void *out = D, *scratch = NULL;
    int timed = ncand > 1;
    if (timed && want->accumulate && Cin == D) { // the product reads D: time it elsewhere
        size_t bytes = (size_t)want->ldc * n * (want->C_mp ? 2 : 4);
        if (cudaMalloc(&scratch, bytes) == cudaSuccess) CUDA_CHECK(cudaMemset(scratch, 0, bytes));
        else { (void)cudaGetLastError(); timed = 0; }
        out = scratch;
    }
    if (timed) {
        cudaEvent_t e0, e1;
        CUDA_CHECK(cudaEventCreate(&e0)); CUDA_CHECK(cudaEventCreate(&e1));
        const float one = 1.f, beta = want->accumulate ? 1.f : 0.f;
        const void *C = Cin == D ? out : Cin;
        auto run = [&](int i) {
            return cublasLtMatmul(g_lt, p.op, &one, A, p.a, B, p.b, &beta, C, p.c, out, p.c, &cand[i], g_lt_ws,
                                  GEMM_WORKSPACE, cudaStreamPerThread) == CUBLAS_STATUS_SUCCESS;
        };
        std::vector<float> t((size_t)ncand * (GEMM_ROUNDS + 1), INFINITY); // t[i·(R+1) + r]: candidate i, round r
        float best0 = INFINITY;
        for (int r = 0; r <= GEMM_ROUNDS; r++)
            for (int i = 0; i < ncand; i++) {
                float *ti = &t[(size_t)i * (GEMM_ROUNDS + 1)];
                if (r > 0 && ti[0] > 1.15f * best0) continue; // failed or far from the fastest in round 0
                if (r == 0 && !run(i)) continue;                // (warm-up; a candidate that does not run stays out)
                CUDA_CHECK(cudaEventRecord(e0));
                if (!run(i)) { ti[0] = INFINITY; continue; }
                CUDA_CHECK(cudaEventRecord(e1)); CUDA_CHECK(cudaEventSynchronize(e1));
                CUDA_CHECK(cudaEventElapsedTime(&ti[r], e0, e1));
                if (r == 0) best0 = std::min(best0, ti[0]);
            }
        float best = INFINITY, best_first = INFINITY, first = 0.f;
        int best_i = 0;
        for (int i = 0; i < ncand; i++) {
            float *ti = &t[(size_t)i * (GEMM_ROUNDS + 1)];
            std::sort(ti + 1, ti + GEMM_ROUNDS + 1);
            const float med = ti[1 + GEMM_ROUNDS / 2], rep = isinf(med) ? ti[0] : med; // (rep: for the report)
            if (i == 0) first = rep;
            if (i < n_first) best_first = std::min(best_first, rep);
            if (med < best) { best = med; best_i = i; p.key.algo = cand[i]; }
        }
        cudaEvent_t ev[] = {e0, e1};
        for (cudaEvent_t e : ev) CUDA_CHECK(cudaEventDestroy(e));
        if (gemm_report()) {
            int cfg[4] = {0, 0, 0, 0}; // algorithm id, tile, stages, split-K
            const cublasLtMatmulAlgoConfigAttributes_t at[4] = {CUBLASLT_ALGO_CONFIG_ID, CUBLASLT_ALGO_CONFIG_TILE_ID,
                CUBLASLT_ALGO_CONFIG_STAGES_ID, CUBLASLT_ALGO_CONFIG_SPLITK_NUM};
            for (int j = 0; j < 4; j++) cublasLtMatmulAlgoConfigGetAttribute(&p.key.algo, at[j], &cfg[j], sizeof(int), NULL);
            printf("gemm %c%c m=%d n=%d k=%d%s%s: %d candidates (%d best-fit); the heuristic's first %.3f ms, best of "
                   "its %d %.3f, best %.3f ms (%.0f TFLOP/s; #%d: id %d tile %d stages %d split-K %d)\n",
                   "NT"[want->ta != 0], "NT"[want->tb != 0], m, n, k, want->accumulate ? " +C" : "",
                   want->C_mp ? " bf16" : "", ncand, n_first, first, n_first, best_first, best,
                   2e-9 * m * n * k / best, best_i, cfg[0], cfg[1], cfg[2], cfg[3]);
        }
    }
    if (scratch) CUDA_CHECK(cudaFree(scratch));
    g_plans.push_back(p);
    return &g_plans.back();
}
// C = op(A) op(B) + beta C (column-major, cuBLAS's convention), or with add: C = op(A) op(B) + add (bf16: in the
// product's epilogue; fp32: a second pass). C_mp: C is stored in the matmul precision (bf16 mode: bf16, rounded
// from the fp32 accumulator).
static void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *A, int lda,
                 const void *B, int ldb, float beta, float *C, int ldc, int C_mp, const float *add) {
    const float one = 1.f;
    if (g_bf16) {
        const float b = add ? 1.f : beta;
        const float *Cin = add ? add : C;
        const GemmKey want = {ta, tb, m, n, k, lda, ldb, ldc, b != 0.f, C_mp, ptr_align(A), ptr_align(B),
                              std::min(ptr_align(Cin), ptr_align(C)), {}};
        const GemmPlan *p = gemm_plan(&want, A, B, Cin, C);
        CUBLAS_CHECK(cublasLtMatmul(g_lt, p->op, &one, A, p->a, B, p->b, &b, Cin, p->c, C, p->c, &p->key.algo, g_lt_ws,
                                    GEMM_WORKSPACE, cudaStreamPerThread));
    } else {
        CUBLAS_CHECK(cublasSgemm(g_cublas, ta, tb, m, n, k, &one, (const float *)A, lda, (const float *)B, ldb, &beta, C, ldc));
        if (add) residual_add(C, C, add, (size_t)ldc * n);
    }
}

// ================================================================================================
// Appendix F. Several GPUs: NCCL (doc/model.md §9.4)
// ================================================================================================

// One process per GPU over NCCL; each bucket's gradients are summed over the
// ranks on a second stream as soon as the last micro-step's backward pass has finished them (grads_ready); -z 0
// all-reduces them, -z 1 (ZeRO-1) reduce-scatters them, each rank updates its slices with its moments and the
// parameters are all-gathered. Every wait on another rank ends after NATSL_TIMEOUT seconds with an error naming
// this rank, never a hang. The communicator is non-blocking: any NCCL call may answer "in progress" (nccl_done).
// The communicator's state (Nccl, g_nccl) and the reduction's timeline (g_rtl) are declared in section 4.
#define NCCL_SUM_MAX 4096

static void reduce_timeline_summary(const Model *M) {
    float bwd, fin, red;
    CUDA_CHECK(cudaEventElapsedTime(&bwd, g_rtl.begin, g_rtl.end));
    double busy = 0, hidden = 0, prev = 0, last = 0;
    for (int k = M->nbucket - 1; k >= 0; k--) { // the order the backward pass hands them over
        if (!g_rtl.used[k]) continue;
        CUDA_CHECK(cudaEventElapsedTime(&fin, g_rtl.begin, g_rtl.final_[k]));
        CUDA_CHECK(cudaEventElapsedTime(&red, g_rtl.begin, g_rtl.reduced[k]));
        double start = std::max((double)fin, prev);
        busy += red - start;
        hidden += std::max(0.0, std::min((double)red, (double)bwd) - start);
        prev = last = red;
    }
    snprintf(g_rtl.summary, sizeof(g_rtl.summary), "gradient reduction in the last backward pass (rank %d): backward %.2f ms, "
             "NCCL busy %.2f ms, %.2f ms of it (%.0f%%) while the backward pass ran; the last bucket reduced %.2f ms after "
             "the backward pass ended", g_rank, bwd, busy, hidden, busy > 0 ? 100 * hidden / busy : 100.0, last - bwd);
}

static void dist_fail(const char *what) {
    fprintf(stderr, "error: rank %d: %s\n", g_rank, what);
    fflush(stderr);
    if (g_nccl.comm) ncclCommAbort(g_nccl.comm);
    _exit(1); // not exit(): a collective left waiting on a dead rank must not hold the process in CUDA's teardown
}

// Waits until a call on the non-blocking communicator is through; any error ends the program.
static void nccl_done(ncclResult_t r, const char *what) {
    double t0 = now_s();
    char msg[600];
    while (r == ncclInProgress) {
        if (now_s() - t0 > g_nccl.timeout) {
            snprintf(msg, sizeof(msg), "%s: not done after %.0f s (a rank died, or not every rank started; NATSL_TIMEOUT)",
                     what, g_nccl.timeout);
            dist_fail(msg);
        }
        usleep(1000);
        ncclCommGetAsyncError(g_nccl.comm, &r);
    }
    if (r != ncclSuccess) {
        snprintf(msg, sizeof(msg), "%s: NCCL error: %s (%s)", what, ncclGetErrorString(r), ncclGetLastError(g_nccl.comm));
        dist_fail(msg);
    }
}

// Waits for the reduction stream with the timeout; an NCCL error or a rank that never answers ends the program.
static void dist_wait(const char *what) {
    double t0 = now_s();
    char msg[600];
    for (;;) {
        cudaError_t e = cudaStreamQuery(g_nccl.stream);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) CUDA_CHECK(e);
        ncclResult_t r;
        ncclCommGetAsyncError(g_nccl.comm, &r);
        if (r != ncclSuccess && r != ncclInProgress) nccl_done(r, what);
        if (now_s() - t0 > g_nccl.timeout) {
            snprintf(msg, sizeof(msg), "%s: no answer from the other ranks for %.0f s (one died or stalled; NATSL_TIMEOUT "
                     "sets the wait)", what, g_nccl.timeout);
            dist_fail(msg);
        }
        usleep(50);
    }
}

// One process per GPU: the GPU of this node's rank, and the communicator, from rank 0's NCCL id handed over as -pi says.
static void dist_start(const TrainArgs *a) {
    g_nccl.timeout = dist_timeout();
    if (g_world == 1) return;
    int ndev;
    char msg[1200], err[1024];
    CUDA_CHECK(cudaGetDeviceCount(&ndev));
    if (g_local_rank >= ndev) {
        snprintf(msg, sizeof(msg), "local rank %d, but this node has %d GPUs (start at most one rank per GPU)", g_local_rank, ndev);
        die(msg);
    }
    CUDA_CHECK(cudaSetDevice(g_local_rank));
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    if (g_rank == 0) nccl_done(ncclGetUniqueId(&id), "ncclGetUniqueId");
    const char *how = a->pi, *dir = a->pf ? a->pf : a->outdir ? a->outdir : "/tmp";
    const char *host = a->ps ? a->ps : getenv("MASTER_ADDR") && *getenv("MASTER_ADDR") ? getenv("MASTER_ADDR") : "127.0.0.1";
#ifdef USE_MPI
    if (!how) how = g_job.mpi ? "mpi" : "tcp";
    if (!strcmp(how, "mpi")) {
        MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    } else
#else
    if (!how) how = "tcp";
    if (!strcmp(how, "mpi")) die("-pi mpi: this train_natsl_cu was built without MPI (make USE_MPI=1)");
#endif
    if (dist_exchange(&g_job, &id, sizeof(id), how, dir, host, g_nccl.timeout, err, sizeof(err))) die(err);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    nccl_done(ncclCommInitRankConfig(&g_nccl.comm, g_world, id, g_rank, &cfg), "joining the other ranks (ncclCommInitRank)");
    if (!strcmp(how, "fs")) dist_fs_done(&g_job, dir);
    CUDA_CHECK(cudaStreamCreateWithFlags(&g_nccl.stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&g_nccl.ready, cudaEventDisableTiming));
    g_nccl.dsum = (double *)xcudamalloc(NCCL_SUM_MAX * sizeof(double));
    CUDA_CHECK(cudaMallocHost(&g_nccl.hsum, NCCL_SUM_MAX * sizeof(double)));
    if (g_prof) {
        CUDA_CHECK(cudaEventCreate(&g_rtl.begin)); CUDA_CHECK(cudaEventCreate(&g_rtl.end));
        for (int k = 0; k < NB_MAX; k++) { CUDA_CHECK(cudaEventCreate(&g_rtl.final_[k])); CUDA_CHECK(cudaEventCreate(&g_rtl.reduced[k])); }
    }
    int v;
    ncclGetVersion(&v);
    printf("ranks: %d (from %s; NCCL id by %s), ZeRO stage %d; NCCL %d.%d.%d; rank 0 on GPU %d\n", g_world,
           g_job.launcher, how, g_zero, v / 10000, v / 100 % 100, v % 100, g_local_rank);
}

static void dist_finish(void) {
    if (g_world == 1) return;
    nccl_done(ncclCommFinalize(g_nccl.comm), "ncclCommFinalize");
    dist_wait("finishing");
    ncclCommDestroy(g_nccl.comm);
    g_nccl.comm = NULL;
}

// The sums of n doubles over the ranks, in place on every rank (statistics, decisions of rank 0, the norm).
static void backend_allreduce(double *x, int n) {
    if (g_world == 1) return;
    if (n > NCCL_SUM_MAX) { fprintf(stderr, "error: backend_allreduce: %d values, at most %d\n", n, NCCL_SUM_MAX); exit(1); }
    memcpy(g_nccl.hsum, x, n * sizeof(double));
    CUDA_CHECK(cudaMemcpyAsync(g_nccl.dsum, g_nccl.hsum, n * sizeof(double), cudaMemcpyHostToDevice, g_nccl.stream));
    nccl_done(ncclAllReduce(g_nccl.dsum, g_nccl.dsum, n, ncclDouble, ncclSum, g_nccl.comm, g_nccl.stream), "ncclAllReduce");
    CUDA_CHECK(cudaMemcpyAsync(g_nccl.hsum, g_nccl.dsum, n * sizeof(double), cudaMemcpyDeviceToHost, g_nccl.stream));
    dist_wait("summing over the ranks");
    memcpy(x, g_nccl.hsum, n * sizeof(double));
}

// The reduction stream waits for what the default stream has queued so far (a bucket's gradients, the update).
static void comm_after_compute(void) {
    CUDA_CHECK(cudaEventRecord(g_nccl.ready, 0));
    CUDA_CHECK(cudaStreamWaitEvent(g_nccl.stream, g_nccl.ready, 0));
}

// This rank's ZeRO-1 slice of bucket k: [*lo, *lo + n) of the flat buffer, its moments at *mom.
static size_t zero_slice(const Model *M, int k, size_t *lo, size_t *mom) {
    size_t n = (M->bucket[k + 1] - M->bucket[k]) / g_world;
    *lo = M->bucket[k] + (size_t)g_rank * n;
    *mom = (M->bucket[k] - M->bucket[0]) / g_world;
    return n;
}

// Bucket k's gradients are final (model_backward calls this as it goes). In the last micro-step of a step, the
// reduction stream waits for them and sums them over the ranks: all of them on every rank (-z 0), or this rank's
// slice (-z 1).
static void grads_ready(Model *M, int k) {
    if (g_world == 1 || !g_nccl.reduce) return;
    size_t lo = M->bucket[k], n = M->bucket[k + 1] - lo, slo, mom;
    if (!n) return;
    comm_after_compute();
    if (g_rtl.on) { CUDA_CHECK(cudaEventRecord(g_rtl.final_[k], 0)); g_rtl.used[k] = 1; }
    if (g_zero) {
        size_t sn = zero_slice(M, k, &slo, &mom);
        nccl_done(ncclReduceScatter(M->grads + lo, M->grads + slo, sn, ncclFloat, ncclSum, g_nccl.comm, g_nccl.stream),
                  "ncclReduceScatter of the gradients");
    } else
        nccl_done(ncclAllReduce(M->grads + lo, M->grads + lo, n, ncclFloat, ncclSum, g_nccl.comm, g_nccl.stream),
                  "ncclAllReduce of the gradients");
    if (g_rtl.on) CUDA_CHECK(cudaEventRecord(g_rtl.reduced[k], g_nccl.stream));
}
