// bench_timing.h -- the median time of a GPU call, shared by the kernel benchmarks under dev/cuda (ce_bench,
// conv_bench, norm_bench, gemm_tune): one untimed call (warm-up), then `reps` calls each between two events on the
// default stream; returns the median in ms.
#ifndef NATSL_BENCH_TIMING_H
#define NATSL_BENCH_TIMING_H

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

template <class F> static float median_ms(F f, int reps = 20) {
    auto check = [](cudaError_t e) {
        if (e != cudaSuccess) { fprintf(stderr, "CUDA error in median_ms: %s\n", cudaGetErrorString(e)); exit(1); }
    };
    cudaEvent_t a, b;
    check(cudaEventCreate(&a)); check(cudaEventCreate(&b));
    f();
    std::vector<float> t;
    for (int r = 0; r < reps; r++) {
        check(cudaEventRecord(a)); f(); check(cudaEventRecord(b)); check(cudaEventSynchronize(b));
        float ms; check(cudaEventElapsedTime(&ms, a, b)); t.push_back(ms);
    }
    check(cudaEventDestroy(a)); check(cudaEventDestroy(b));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

#endif
