// ce_bench.cu -- the cross-entropy over the classifier's logits (doc/model.md §2) in bf16 mode at the 340m size
// (B·T = 32768 rows, V = 32000, and GPT-2's 50257 padded to 50304; bf16 logits): the trainer's crossentropy_forward /
// crossentropy_backward (included from train_natsl.cu with TESTING defined) against variants of the forward, each
// checked against a double-precision CPU oracle on sampled rows and timed (median of 20), with the bandwidth its bytes
// imply (the forward reads the logits once: 2.1 GB; the backward reads and writes them: 4.2 GB).
// Why: the forward ran at 45% of its bandwidth (1.40 ms against 0.63), the backward at 83%.
// Variants: one pass with a running maximum (the trainer's form) or two passes (max, then Σ exp: the row comes from L2
// the second time), at 256 / 512 / 1024 threads a row; and the trainer's crossentropy_forward_backward, the forward
// that also writes the gradient where dloss is known before it (train_step), against the two kernels.
// Measured (H100): one pass 1.387 / 1.056 / 0.913 ms at 1024 / 512 / 256 threads, two passes 1.233 / 1.001 / 1.425
// (the trainer launches 256, four runs a thread in flight: row_visit); the backward at 256 / 512 / 1024 threads
// 1.475 / 1.476 / 1.503 ms. The fused pass with the row in registers (1024 / 512 / 256 threads) 2.58 / 3.00 / 2.63 ms
// against the pair's 2.39; with the row in shared memory (the trainer's, three blocks an SM) 2.04 ms (V = 50257: 3.34
// against 3.67). Every gradient element within one bf16 step of the pair's.
//
// Build + run (device):  nvcc -O3 -arch=compute_90a -code=sm_90a -std=c++17 --default-stream per-thread -I. dev/cuda/ce_bench.cu -o /tmp/ce_bench \
//                            -lcublasLt -lcublas -lnccl && /tmp/ce_bench       (/tmp/ce_bench small: the checks alone, 64 rows)

#include <vector>
#include <algorithm>
#include <functional>
#include <cuda_runtime.h>

#define TESTING
#include "../../train_natsl.cu"
#include "bench_timing.h"

typedef __nv_bfloat16 bf16;

// The two-pass forward: max, then Σ exp(z − max) (the one-pass form is the trainer's crossentropy_forward_kernel,
// timed here at each block size).
__global__ void ce_fwd_two_pass(float *losses, float *lse, const bf16 *logits, const int *targets, int V, int Vp) {
    __shared__ float sh[32];
    const size_t bt = blockIdx.x;
    const bf16 *z = logits + bt * Vp;
    float m = -INFINITY, s = 0.f;
    row_visit(z, V, Vp % 4 == 0, [&](int, float x) { m = fmaxf(m, x); });
    m = block_max(m, sh);
    row_visit(z, V, Vp % 4 == 0, [&](int, float x) { s += expf(x - m); });
    s = block_sum(s, sh);
    const float l = m + logf(s);
    if (threadIdx.x == 0) { lse[bt] = l; losses[bt] = l - ld(z + targets[bt]); }
}

// one vocabulary (V real tokens, rows of Vp) at BT rows: every check, and with timed every timing above; false if a
// check failed
static bool run_case(int V, int Vp, int BT, bool timed) {
    printf("-- B·T = %d rows, V = %d, Vp = %d\n", BT, V, Vp);
    const size_t n = (size_t)BT * Vp;
    std::vector<bf16> h(n);
    std::vector<int> tg(BT);
    uint64_t r = 42;
    for (size_t i = 0; i < n; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = __float2bfloat16(4.f * ((float)(r >> 40) / (float)(1 << 24) - 0.5f));
    }
    for (int i = 0; i < BT; i++) tg[i] = (int)((i * 2654435761u) % V);
    bf16 *z, *z0;
    float *loss, *lse;
    int *dt;
    CUDA_CHECK(cudaMalloc(&z, n * sizeof(bf16)));
    CUDA_CHECK(cudaMalloc(&z0, n * sizeof(bf16)));
    CUDA_CHECK(cudaMalloc(&loss, BT * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&lse, BT * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&dt, BT * sizeof(int)));
    CUDA_CHECK(cudaMemcpy(z0, h.data(), n * sizeof(bf16), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(dt, tg.data(), BT * sizeof(int), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(z, z0, n * sizeof(bf16), cudaMemcpyDeviceToDevice));
    g_bf16 = 1;  // the kernels take bf16 logits
    // the oracle's losses on every 97th row (every row of a small case)
    const int every = BT > 1000 ? 97 : 1;
    std::vector<double> ref;
    for (int b = 0; b < BT; b += every) {
        double mx = -1e30, s = 0;
        for (int i = 0; i < V; i++) mx = std::max(mx, (double)__bfloat162float(h[(size_t)b * Vp + i]));
        for (int i = 0; i < V; i++) s += exp((double)__bfloat162float(h[(size_t)b * Vp + i]) - mx);
        ref.push_back(mx + log(s) - (double)__bfloat162float(h[(size_t)b * Vp + tg[b]]));
    }
    std::vector<float> hl(BT);
    auto tm = [&](const std::function<void()> &f) { return timed ? median_ms(f) : 0.f; }; // (nothing printed untimed)
    auto check = [&](const char *name) {
        CUDA_CHECK(cudaMemcpy(hl.data(), loss, BT * sizeof(float), cudaMemcpyDeviceToHost));
        double e = 0;
        for (size_t k = 0; k < ref.size(); k++) e = std::max(e, fabs(hl[k * every] - ref[k]) / fabs(ref[k]));
        printf("%-44s loss rel. error %.2e %s", name, e, e < 1e-5 ? "PASS" : "FAIL");
        return e < 1e-5;
    };
    const double gb1 = n * sizeof(bf16) / 1e9, gb2 = 2 * gb1;
    bool ok = true;
    auto fwd_trainer = [&] { crossentropy_forward((real *)loss, (real *)lse, (const real *)z, dt, BT, V, Vp); };
    fwd_trainer(); CUDA_CHECK(cudaDeviceSynchronize());
    ok &= check("trainer forward");
    float t = tm(fwd_trainer);
    if (timed) printf("  %.3f ms  %.0f GB/s", t, gb1 / t * 1e3);
    printf("\n");
    auto run_variant = [&](const char *name, const std::function<void()> &f, int nt) {
        f(); CUDA_CHECK(cudaDeviceSynchronize());
        char nm[96]; snprintf(nm, sizeof nm, "%s, %d threads", name, nt);
        ok &= check(nm);
        const float tv = median_ms(f);
        printf("  %.3f ms  %.0f GB/s\n", tv, gb1 / tv * 1e3);
    };
    for (int nt : {256, 512, 1024}) {
        if (!timed) break;
        run_variant("one pass (running max)", [&] { crossentropy_forward_kernel<<<BT, nt>>>(loss, lse, (const bf16 *)z, dt, V, Vp); }, nt);
        run_variant("two passes", [&] { ce_fwd_two_pass<<<BT, nt>>>(loss, lse, z, dt, V, Vp); }, nt);
    }
    // forward + backward: the trainer's two kernels against one that writes the gradient too (logits restored first)
    auto restore = [&] { CUDA_CHECK(cudaMemcpyAsync(z, z0, n * sizeof(bf16), cudaMemcpyDeviceToDevice)); };
    const float tr = tm(restore);
    const float t2 = tm([&] {
        restore(); fwd_trainer();
        crossentropy_backward((real *)z, (const real *)lse, dt, 1.f / BT, BT, V, Vp);
    }) - tr;
    if (timed)
        printf("trainer forward + backward                   %.3f ms  %.0f GB/s (3 passes of DRAM)\n", t2, (gb1 + gb2) / t2 * 1e3);
    for (int nt : {256, 512, 1024}) {
        if (!timed) break;
        const float tb = median_ms([&] {
            restore(); crossentropy_backward_kernel<<<BT, nt>>>(z, lse, dt, 1.f / BT, V, Vp);
        }) - tr;
        printf("trainer's backward kernel, %4d threads      %.3f ms  %.0f GB/s\n", nt, tb, gb2 / tb * 1e3);
    }
    // the fused pass (the trainer's crossentropy_forward_backward): its losses
    // against the oracle, its gradient against the two kernels' (lse may differ in its last bit: a bf16 gradient value
    // may then round the other way, one unit in the last place; the bar: no element further apart than that)
    std::vector<bf16> g1(n), g2(n);
    restore(); fwd_trainer(); crossentropy_backward((real *)z, (const real *)lse, dt, 1.f / BT, BT, V, Vp);
    CUDA_CHECK(cudaMemcpy(g1.data(), z, n * sizeof(bf16), cudaMemcpyDeviceToHost));
    auto run_fused = [&](const char *name, const std::function<void()> &f) {
        restore(); CUDA_CHECK(cudaMemsetAsync(loss, 0, BT * sizeof(float))); f(); CUDA_CHECK(cudaDeviceSynchronize());
        ok &= check(name);
        CUDA_CHECK(cudaMemcpy(g2.data(), z, n * sizeof(bf16), cudaMemcpyDeviceToHost));
        size_t diff = 0, far = 0;
        for (size_t i = 0; i < n; i++) {
            uint16_t a, b;
            memcpy(&a, &g1[i], 2); memcpy(&b, &g2[i], 2);
            diff += a != b;
            far += a != b && (((a ^ b) & 0x8000) || (a > b ? a - b : b - a) > 1);
        }
        ok &= far == 0;
        const float tf = tm([&] { restore(); f(); }) - tr;
        if (timed) printf("\n  %.3f ms  %.0f GB/s (one read, one write);", tf, gb2 / tf * 1e3);
        printf(" gradient elements unlike the pair's: %zu, more than an ulp apart: %zu %s\n", diff, far, far ? "FAIL" : "PASS");
    };
    run_fused("fused (crossentropy_forward_backward)", [&] {
        crossentropy_forward_backward((real *)loss, (real *)lse, (real *)z, dt, 1.f / BT, BT, V, Vp);
    });
    CUDA_CHECK(cudaFree(z)); CUDA_CHECK(cudaFree(z0)); CUDA_CHECK(cudaFree(loss)); CUDA_CHECK(cudaFree(lse));
    CUDA_CHECK(cudaFree(dt));
    return ok;
}

// `ce_bench small`: the checks alone on 64 rows (for compute-sanitizer)
int main(int argc, char **argv) {
    const bool small = argc > 1 && !strcmp(argv[1], "small");
    const int BT = small ? 64 : 32768;
    bool ok = run_case(32000, 32000, BT, !small); // the benchmarks' vocabulary
    ok &= run_case(50257, 50304, BT, !small);     // GPT-2's, padded as the trainer pads it (FineWeb shards)
    printf("%s\n", ok ? "ALL PASS" : "SOME FAIL");
    return ok ? 0 : 1;
}
