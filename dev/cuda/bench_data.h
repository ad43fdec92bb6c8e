// bench_data.h -- test data for the kernel harnesses under dev/cuda (conv_bench, gated_norm_bench, swiglu_bench):
// urand, a fixed-seed xorshift in (0, 1), and upload / download of host vectors to and from the device.
#ifndef NATSL_BENCH_DATA_H
#define NATSL_BENCH_DATA_H

#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

static void bench_check(cudaError_t e, const char *what) {
    if (e != cudaSuccess) { fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(e)); exit(1); }
}
static unsigned long long bench_rng = 0x9E3779B97F4A7C15ULL;
static double urand() {
    bench_rng ^= bench_rng << 13; bench_rng ^= bench_rng >> 7; bench_rng ^= bench_rng << 17;
    return ((bench_rng >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
template <class T> static T *upload(const std::vector<T> &h) {
    T *d;
    bench_check(cudaMalloc(&d, h.empty() ? 16 : h.size() * sizeof(T)), "upload");
    bench_check(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
    return d;
}
template <class T> static std::vector<T> download(const T *d, size_t n) {
    std::vector<T> h(n);
    bench_check(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return h;
}

#endif
