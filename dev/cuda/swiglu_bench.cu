// swiglu_bench.cu -- SwiGLU (doc/model.md (2.2a), (2.2b)): the trainer's swiglu_forward and swiglu_backward (included
// from train_natsl.cu with TESTING defined) against a double-precision CPU oracle in bf16 and fp32 mode, then timed at
// the 340m step's shape (B·T = 32768 rows, F = 2816, bf16) with the bandwidth the bytes a pass must move imply.
//
// Checks, a case per mode and shape (F = 2816: every lane 11 runs in bf16; 264: 33 runs of 8 over 32 lanes; 8: one
// lane a row), every value of h (forward), dgate, dup and h (backward) against the oracle on the same stored inputs:
// |got − ref| ≤ q·|ref| + 2e-5·m, q the storage's rounding (2^-8 in bf16, 0 in fp32), m the size of the terms (the fast
// sigmoid's error is below 1e-5 relative for |gate| ≤ 40; gates up to ±40 are in the inputs); the backward's h must equal
// the forward's bit for bit, and the bytes past the last row must stay as they were.
//
// Build + run (device):  nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 --default-stream per-thread -I. dev/cuda/swiglu_bench.cu \
//                            -o /tmp/swiglu_bench -lcublasLt -lcublas -lnccl && /tmp/swiglu_bench
// Prints a PASS/FAIL line a case (largest error over its bound), then TIME lines; exits 1 on a failure.

#include <vector>
#include <cmath>
#include <cstring>
#include <cuda_runtime.h>

#define TESTING
#include "../../train_natsl.cu"
#include "bench_timing.h"
#include "bench_data.h"

typedef __nv_bfloat16 bf16;


template <class T> static double to_d(T v) { return (double)(float)v; }

// the largest |got − ref| / (q|ref| + 2e-5 m) over a tensor (≤ 1: within the bound)
struct Worst {
    double r = 0;
    void add(double got, double ref, double q, double m) { r = fmax(r, fabs(got - ref) / (q * fabs(ref) + 2e-5 * m + 1e-300)); }
};

// One case: BT rows of F in the precision MP (g_bf16 set to match); PAD values past the last row of every output, which
// must keep their bytes.
template <class MP> static bool check(int BT, int F) {
    g_bf16 = std::is_same<MP, bf16>::value;
    const double q = g_bf16 ? 1.0 / 256 : 0.0;
    const size_t N = (size_t)BT * F, PAD = 64;
    std::vector<MP> gu(2 * N), dh(N), fill(2 * N + PAD);
    for (size_t r = 0; r < (size_t)BT; r++)
        for (int i = 0; i < F; i++) {
            const double u = urand();
            // gates mostly in [−8, 8], one in 64 at ±40 (the fast sigmoid's tails)
            const double a = u < 1.0 / 128 ? -40 : u < 1.0 / 64 ? 40 : -8 + 16 * urand();
            gu[r * 2 * F + i] = (MP)(float)a;
            gu[r * 2 * F + F + i] = (MP)(float)(-3 + 6 * urand());
            dh[r * F + i] = (MP)(float)(0.02 * (urand() - 0.5));
        }
    for (auto &e : fill) e = (MP)(float)(1000 + 100 * urand()); // the outputs' bytes before the call
    MP *d_gu = upload(gu), *d_dh = upload(dh), *d_h = upload(fill), *d_h2 = upload(fill), *d_dgu = upload(fill);
    swiglu_forward((real *)d_h, (const real *)d_gu, BT, F);
    swiglu_backward((real *)d_dgu, (real *)d_h2, (const real *)d_dh, (const real *)d_gu, BT, F);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<MP> h = download(d_h, N + PAD), h2 = download(d_h2, N + PAD), dgu = download(d_dgu, 2 * N + PAD);
    Worst wh, wg, wu;
    for (size_t r = 0; r < (size_t)BT; r++)
        for (int i = 0; i < F; i++) {
            const double a = to_d(gu[r * 2 * F + i]), b = to_d(gu[r * 2 * F + F + i]), d = to_d(dh[r * F + i]);
            const double s = 1 / (1 + exp(-a)), sa = a * s, ds = s + sa * (1 - s);
            wh.add(to_d(h[r * F + i]), sa * b, q, fabs(sa * b));
            wg.add(to_d(dgu[r * 2 * F + i]), d * b * ds, q, fabs(d * b) * (s + fabs(sa) * (1 - s)));
            wu.add(to_d(dgu[r * 2 * F + F + i]), d * sa, q, fabs(d * sa));
        }
    const bool same_h = !memcmp(h.data(), h2.data(), N * sizeof(MP));
    const bool pad = !memcmp(h.data() + N, fill.data() + N, PAD * sizeof(MP)) && !memcmp(h2.data() + N, fill.data() + N, PAD * sizeof(MP)) &&
                     !memcmp(dgu.data() + 2 * N, fill.data() + 2 * N, PAD * sizeof(MP));
    const bool ok = wh.r <= 1 && wg.r <= 1 && wu.r <= 1 && same_h && pad;
    printf("%s  %s BT=%d F=%d: error/bound h %.3f, dgate %.3f, dup %.3f; backward's h %s the forward's; past the rows %s\n",
           ok ? "PASS" : "FAIL", g_bf16 ? "bf16" : "fp32", BT, F, wh.r, wg.r, wu.r, same_h ? "bit for bit" : "DIFFERS from",
           pad ? "untouched" : "WRITTEN");
    for (void *p : std::initializer_list<void *>{d_gu, d_dh, d_h, d_h2, d_dgu}) CUDA_CHECK(cudaFree(p));
    return ok;
}

int main() {
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s\n", prop.name);
    bool ok = true;
    ok &= check<bf16>(300, 2816);
    ok &= check<bf16>(37, 264);
    ok &= check<bf16>(9, 8);
    ok &= check<float>(300, 2816);
    ok &= check<float>(37, 264);
    ok &= check<float>(9, 8);

    // the 340m step's shape in bf16 mode: the forward reads gu (2F) and writes h (F); the backward reads dh and gu (3F)
    // and writes dgu and h (3F): 6 and 12 bytes a value of h
    g_bf16 = 1;
    const int BT = 32768, F = 2816;
    const size_t N = (size_t)BT * F;
    bf16 *gu = (bf16 *)xcudamalloc(2 * N * sizeof(bf16)), *dgu = (bf16 *)xcudamalloc(2 * N * sizeof(bf16));
    bf16 *dh = (bf16 *)xcudamalloc(N * sizeof(bf16)), *h = (bf16 *)xcudamalloc(N * sizeof(bf16));
    CUDA_CHECK(cudaMemset(gu, 0x3c, 2 * N * sizeof(bf16))); // 0x3c3c: 0.0115 everywhere
    CUDA_CHECK(cudaMemset(dh, 0x3c, N * sizeof(bf16)));
    const double tf = median_ms([&] { swiglu_forward((real *)h, (const real *)gu, BT, F); });
    const double tb = median_ms([&] { swiglu_backward((real *)dgu, (real *)h, (const real *)dh, (const real *)gu, BT, F); });
    const double bf = 6.0 * N, bb = 12.0 * N, at80 = 0.8 * 4.8e12;
    printf("TIME swiglu_forward  %d x %d bf16: %.4f ms  %5.0f GB/s  (%.0f MB; 80%% of 4.8 TB/s: %.4f ms)\n", BT, F, tf,
           bf / tf / 1e6, bf / 1e6, bf / at80 * 1e3);
    printf("TIME swiglu_backward %d x %d bf16: %.4f ms  %5.0f GB/s  (%.0f MB; 80%% of 4.8 TB/s: %.4f ms)\n", BT, F, tb,
           bb / tb / 1e6, bb / 1e6, bb / at80 * 1e3);
    for (void *p : std::initializer_list<void *>{gu, dgu, dh, h}) CUDA_CHECK(cudaFree(p));
    printf("%s\n", ok ? "ALL PASS" : "SOME FAILED");
    return ok ? 0 : 1;
}
