// narrow_bench.cu -- the narrow products (OC ≤ 32 outputs: W_ab's 2H, ω's 2Ha, the router's 2H) in bf16 mode: the
// trainer's matmul_forward and matmul_backward (included from train_natsl.cu with TESTING defined), which take them
// through narrow_forward and narrow_backward, against a double-precision oracle on the same bf16 operands, and timed
// (median of 20) against the cuBLAS products they ran before (the same gemm() calls), with the bandwidth their bytes
// imply.
// Why: bench_gpu gemm (session 18) put W_ab's forward at 0.050 ms and backward at 0.176 ms, ω's at 0.038 and 0.142 ms,
// at the 340m size, against ~0.02 and ~0.06 ms for the bytes they must move: ~4 ms of a 340m natsl-hybrid step.
// Checks: out, dinp and dW against the oracle (max |error| over max |value|, bar 1e-5); dinp written, added
// (dinp += ...) or stored in bf16 (bar 1e-2, the rounding); dW added to what dweight held. PASS/FAIL per case.
//
// Build + run (device):  nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 -I. dev/cuda/narrow_bench.cu -o /tmp/narrow_bench \
//                            -lcublasLt -lcublas -lnccl && /tmp/narrow_bench

#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

#define TESTING
#include "../../train_natsl.cu"
#include "bench_timing.h"

typedef __nv_bfloat16 bf16;

static float bf16_round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

struct Case { const char *name; int BT, C, OC, mode; };

int main() {
    g_bf16 = 1;
    CUBLAS_CHECK(cublasCreate(&g_cublas));
    const Case cases[] = {
        {"W_ab 340m", 32768, 1024, 12, DINP_WRITE}, {"omega 340m", 32768, 768, 24, DINP_ADD},
        {"router 340m", 512, 1024, 12, DINP_WRITE}, {"W_ab 760m", 32768, 1536, 12, DINP_WRITE},
        {"tiny W_ab", 1024, 128, 4, DINP_WRITE},    {"tiny omega", 1024, 96, 8, DINP_ADD},
        {"OC 20, bf16 dinp", 4000, 264, 20, DINP_WRITE_MP}, {"OC 32", 2056, 512, 32, DINP_ADD},
        {"OC 13, odd rows", 999, 1032, 13, DINP_WRITE},
    };
    int fails = 0;
    for (const Case &k : cases) {
        const size_t nx = (size_t)k.BT * k.C, nd = (size_t)k.BT * k.OC, nw = (size_t)k.OC * k.C;
        std::vector<float> x(nx), d(nd), w(nw), dx0(nx), dw0(nw);
        uint64_t r = rng_seed(7);
        for (auto &v : x) v = bf16_round(rng_normal(&r));
        for (auto &v : d) v = bf16_round(rng_normal(&r) * 1e-2f);
        for (auto &v : w) v = rng_normal(&r) * 0.02f; // fp32 master weights: the product rounds them
        for (auto &v : dx0) v = k.mode == DINP_ADD ? rng_normal(&r) : 0.f;
        for (auto &v : dw0) v = rng_normal(&r) * 1e-3f;
        // the oracle, in double on the bf16 values
        std::vector<double> rdx(nx), rdw(nw, 0.0);
        for (int i = 0; i < k.BT; i++)
            for (int c = 0; c < k.C; c++) {
                double s = k.mode == DINP_ADD ? dx0[(size_t)i * k.C + c] : 0.0;
                for (int j = 0; j < k.OC; j++) s += (double)d[(size_t)i * k.OC + j] * bf16_round(w[(size_t)j * k.C + c]);
                rdx[(size_t)i * k.C + c] = s;
            }
        for (int i = 0; i < k.BT; i++)
            for (int j = 0; j < k.OC; j++) {
                const double dj = d[(size_t)i * k.OC + j];
                const float *xr = &x[(size_t)i * k.C];
                double *o = &rdw[(size_t)j * k.C];
                for (int c = 0; c < k.C; c++) o[c] += dj * xr[c];
            }
        for (size_t i = 0; i < nw; i++) rdw[i] += dw0[i];
        std::vector<double> ry(nd);
        for (int i = 0; i < k.BT; i++)
            for (int j = 0; j < k.OC; j++) {
                double s = 0;
                for (int c = 0; c < k.C; c++) s += (double)x[(size_t)i * k.C + c] * bf16_round(w[(size_t)j * k.C + c]);
                ry[(size_t)i * k.OC + j] = s;
            }
        // device buffers: x, dout in bf16 (as the trainer stores them), w and dw fp32, dinp fp32 or bf16
        std::vector<bf16> xb(nx), db(nd);
        for (size_t i = 0; i < nx; i++) xb[i] = __float2bfloat16_rn(x[i]);
        for (size_t i = 0; i < nd; i++) db[i] = __float2bfloat16_rn(d[i]);
        bf16 *gx, *gd;
        float *gw, *gdw, *gdx, *gy;
        CUDA_CHECK(cudaMalloc(&gx, nx * 2)); CUDA_CHECK(cudaMalloc(&gd, nd * 2)); CUDA_CHECK(cudaMalloc(&gy, nd * 4));
        CUDA_CHECK(cudaMalloc(&gw, nw * 4)); CUDA_CHECK(cudaMalloc(&gdw, nw * 4)); CUDA_CHECK(cudaMalloc(&gdx, nx * 4));
        CUDA_CHECK(cudaMemcpy(gx, xb.data(), nx * 2, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(gd, db.data(), nd * 2, cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(gw, w.data(), nw * 4, cudaMemcpyHostToDevice));
        const int mp = k.mode == DINP_WRITE_MP;
        auto reset = [&] {
            CUDA_CHECK(cudaMemcpy(gdw, dw0.data(), nw * 4, cudaMemcpyHostToDevice));
            if (mp) {
                std::vector<bf16> z(nx, __float2bfloat16_rn(0.f));
                CUDA_CHECK(cudaMemcpy(gdx, z.data(), nx * 2, cudaMemcpyHostToDevice));
            } else CUDA_CHECK(cudaMemcpy(gdx, dx0.data(), nx * 4, cudaMemcpyHostToDevice));
        };
        const bool narrow = narrow_takes(k.C, k.OC, gx, gdx);
        reset();
        matmul_backward(gdx, gdw, (const real *)gd, (const real *)gx, gw, k.BT, k.C, k.OC, k.mode);
        CUDA_CHECK(cudaDeviceSynchronize());
        std::vector<float> odx(nx), odw(nw);
        if (mp) {
            std::vector<bf16> t(nx);
            CUDA_CHECK(cudaMemcpy(t.data(), gdx, nx * 2, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < nx; i++) odx[i] = __bfloat162float(t[i]);
        } else CUDA_CHECK(cudaMemcpy(odx.data(), gdx, nx * 4, cudaMemcpyDeviceToHost));
        CUDA_CHECK(cudaMemcpy(odw.data(), gdw, nw * 4, cudaMemcpyDeviceToHost));
        auto err = [](const std::vector<float> &a, const std::vector<double> &b) {
            double e = 0, m = 0;
            for (size_t i = 0; i < a.size(); i++) { e = std::max(e, fabs(a[i] - b[i])); m = std::max(m, fabs(b[i])); }
            return e / std::max(m, 1e-30);
        };
        matmul_forward(gy, (const real *)gx, gw, k.BT, k.C, k.OC, 0, NULL);
        std::vector<float> oy(nd);
        CUDA_CHECK(cudaMemcpy(oy.data(), gy, nd * 4, cudaMemcpyDeviceToHost));
        const double edx = err(odx, rdx), edw = err(odw, rdw), ey = err(oy, ry), bar = mp ? 1e-2 : 1e-5;
        const bool fnarrow = narrow_forward_takes(k.C, k.OC, gx, 0, NULL);
        const bool ok = narrow && fnarrow && edx <= bar && edw <= 1e-5 && ey <= 1e-5;
        fails += !ok;
        // timing: the trainer's call, and the cuBLAS products it made before (dinp, then dW)
        const bf16 *wb = (const bf16 *)weight_operand(gw, nw);
        auto t_new = median_ms([&] { matmul_backward(gdx, gdw, (const real *)gd, (const real *)gx, gw, k.BT, k.C, k.OC, k.mode); });
        auto t_old = median_ms([&] {
            gemm(CUBLAS_OP_N, CUBLAS_OP_N, k.C, k.BT, k.OC, wb, k.C, gd, k.OC, k.mode == DINP_ADD ? 1.f : 0.f, gdx, k.C, mp);
            gemm(CUBLAS_OP_N, CUBLAS_OP_T, k.C, k.OC, k.BT, gx, k.C, gd, k.OC, 1.f, gdw, k.C);
        });
        auto f_new = median_ms([&] { matmul_forward(gy, (const real *)gx, gw, k.BT, k.C, k.OC, 0, NULL); });
        auto f_old = median_ms([&] { gemm(CUBLAS_OP_T, CUBLAS_OP_N, k.OC, k.BT, k.C, wb, k.C, gx, k.C, 0.f, gy, k.OC); });
        const double bytes = nx * 2.0 + nx * (mp ? 2.0 : 4.0) * (k.mode == DINP_ADD ? 2 : 1) + nd * 2.0;
        printf("%s %-18s BT=%5d C=%4d OC=%2d %-10s out err %.2e  dinp err %.2e  dW err %.2e  |  forward %.4f ms (%.2f TB/s), "
               "cuBLAS %.4f  |  backward %.4f ms (%.2f TB/s), cuBLAS %.4f\n", ok ? "PASS" : "FAIL", k.name, k.BT, k.C, k.OC,
               k.mode == DINP_ADD ? "add" : mp ? "write-bf16" : "write", ey, edx, edw, f_new, (nx * 2.0 + nd * 4.0) / f_new / 1e9,
               f_old, t_new, bytes / t_new / 1e9, t_old);
        void *ps[] = {gx, gd, gw, gdw, gdx, gy};
        for (void *p : ps) CUDA_CHECK(cudaFree(p));
    }
    printf("%s: %d failed\n", fails ? "FAIL" : "ALL PASS", fails);
    return fails != 0;
}
