// dev/cuda/gemm_tune.cu — how far cuBLAS's default choice is from the best algorithm cuBLASLt offers, for the 340m
// model's linear layers at B·T = 32768 tokens in bf16 (the products train_natsl.cu's gemm() runs: forward, the
// input gradient and the weight gradient of each). Prints, per product, the time of cublasGemmEx (what the trainer
// calls), of cuBLASLt's first heuristic choice and of the fastest of its first 16 candidates, and the TFLOP/s.
// Decides whether an algorithm search in the trainer would pay, and which shape a merged product should take. Random
// bf16 operands, fp32 output.
//   nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 dev/cuda/gemm_tune.cu -o gemm_tune -lcublasLt -lcublas && ./gemm_tune
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#include "bench_timing.h"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "error: %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define BK(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { fprintf(stderr, "error: %s: status %d\n", #x, (int)s_); exit(1); } } while (0)

__global__ void fill_kernel(__nv_bfloat16 *x, size_t n, unsigned seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
        x[i] = __float2bfloat16((h & 0xffff) / 65536.f - 0.5f);
    }
}

// One column-major product C (m×n, fp32) = op(A) op(B) (+ C when beta = 1), A and B bf16, as gemm() in train_natsl.cu.
struct Product { const char *name; cublasOperation_t ta, tb; int m, n, k, lda, ldb, ldc; float beta; };

int main() {
    const int BT = 32768;
    // ldo: the rows of out / dout (≥ OC). The G and N layers' input projection as separate products (wqkv, wg, wab)
    // and merged ones: all four weights (OC = 4620, rows padded to 4624), the same padded to a 4624-row weight, and
    // W_qkv|W_g alone (4608) in rows of 4608 or 4624.
    struct Layer { const char *name; int C, OC, ldo; } layers[] = {
        {"wqkv", 1024, 3072, 3072}, {"wg", 1024, 1536, 1536}, {"wab", 1024, 12, 12}, {"win", 1024, 4620, 4624},
        {"win16", 1024, 4624, 4624}, {"wqg", 1024, 4608, 4608}, {"wqgld", 1024, 4608, 4624},
        {"wo", 1536, 1024, 1024}, {"wgu", 1024, 5632, 5632}, {"wdown", 2816, 1024, 1024}, {"head", 1024, 32000, 32000}};
    size_t maxA = 0, maxB = 0, maxC = 0;
    std::vector<Product> ps;
    for (auto &l : layers) {
        // forward: out (OC×BT) = Wᵀ-view (OC×C) · inp (C×BT)
        ps.push_back({l.name, CUBLAS_OP_T, CUBLAS_OP_N, l.OC, BT, l.C, l.C, l.C, l.ldo, 0.f});
        // input gradient: dinp (C×BT) = W (C×OC) · dout (OC×BT)
        ps.push_back({l.name, CUBLAS_OP_N, CUBLAS_OP_N, l.C, BT, l.OC, l.C, l.ldo, l.C, 0.f});
        // weight gradient: dW (C×OC) += inp (C×BT) · doutᵀ (BT×OC)
        ps.push_back({l.name, CUBLAS_OP_N, CUBLAS_OP_T, l.C, l.OC, BT, l.C, l.ldo, l.C, 1.f});
        maxA = std::max(maxA, (size_t)l.C * std::max(l.OC, BT));
        maxB = std::max(maxB, (size_t)std::max(l.C, l.ldo) * BT);
        maxC = std::max(maxC, (size_t)std::max(l.C, l.ldo) * BT);
    }
    __nv_bfloat16 *A, *B; float *Cm; void *ws;
    const size_t wsz = 64 << 20;
    CK(cudaMalloc(&A, maxA * 2)); CK(cudaMalloc(&B, maxB * 2)); CK(cudaMalloc(&Cm, maxC * 4)); CK(cudaMalloc(&ws, wsz));
    fill_kernel<<<1024, 256>>>(A, maxA, 1); fill_kernel<<<1024, 256>>>(B, maxB, 2);
    CK(cudaMemset(Cm, 0, maxC * 4));
    cublasHandle_t h; BK(cublasCreate(&h));
    cublasLtHandle_t lt; BK(cublasLtCreate(&lt));
    cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s; B·T = %d, bf16 operands, fp32 output; median of 10; Lt workspace 64 MiB\n", prop.name, BT);
    double tot_def = 0, tot_best = 0, tot_flop = 0;
    const char *kind[3] = {"fwd", "dinp", "dW"};
    for (size_t i = 0; i < ps.size(); i++) {
        const Product &p = ps[i];
        const float one = 1.f;
        double flop = 2.0 * p.m * p.n * p.k;
        float t_def = median_ms([&] {
            BK(cublasGemmEx(h, p.ta, p.tb, p.m, p.n, p.k, &one, A, CUDA_R_16BF, p.lda, B, CUDA_R_16BF, p.ldb, &p.beta, Cm,
                            CUDA_R_32F, p.ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        }, 10);
        cublasLtMatmulDesc_t op;
        BK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        BK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &p.ta, sizeof(p.ta)));
        BK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &p.tb, sizeof(p.tb)));
        cublasLtMatrixLayout_t la, lb, lc;
        BK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, p.ta == CUBLAS_OP_N ? p.m : p.k, p.ta == CUBLAS_OP_N ? p.k : p.m, p.lda));
        BK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, p.tb == CUBLAS_OP_N ? p.k : p.n, p.tb == CUBLAS_OP_N ? p.n : p.k, p.ldb));
        BK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, p.m, p.n, p.ldc));
        cublasLtMatmulPreference_t pref;
        BK(cublasLtMatmulPreferenceCreate(&pref));
        BK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, sizeof(wsz)));
        cublasLtMatmulHeuristicResult_t res[16];
        int nres = 0;
        BK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 16, res, &nres));
        float t_first = 0, t_best = 1e30f;
        int best = -1;
        for (int r = 0; r < nres; r++) {
            float t = median_ms([&] {
                BK(cublasLtMatmul(lt, op, &one, A, la, B, lb, &p.beta, Cm, lc, Cm, lc, &res[r].algo, ws, wsz, 0));
            }, 10);
            if (r == 0) t_first = t;
            if (t < t_best) { t_best = t; best = r; }
        }
        printf("RESULT gemm_tune %-5s %-4s m=%5d n=%5d k=%5d  GemmEx %7.3f ms %4.0f TF/s  Lt first %7.3f ms  Lt best %7.3f ms "
               "%4.0f TF/s (candidate %d of %d)  gain %4.1f%%\n", p.name, kind[i % 3], p.m, p.n, p.k, t_def,
               flop / t_def / 1e9, t_first, t_best, flop / t_best / 1e9, best, nres, 100.0 * (t_def - t_best) / t_def);
        tot_def += t_def; tot_best += std::min(t_best, t_def); tot_flop += flop;
        cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb); cublasLtMatrixLayoutDestroy(lc);
        cublasLtMatmulDescDestroy(op);
    }
    printf("RESULT gemm_tune total: GemmEx %.3f ms (%.0f TF/s), best of each %.3f ms (%.0f TF/s)\n", tot_def,
           tot_flop / tot_def / 1e9, tot_best, tot_flop / tot_best / 1e9);
    return 0;
}
