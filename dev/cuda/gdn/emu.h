// emu.h -- dev-only CPU emulation of the small CUDA subset used by gdn_chunk.cu.
// Build: g++ -O2 -std=c++17 -x c++ -DGDN_EMU dev/cuda/gdn/gdn_chunk.cu -lpthread
// One OS thread per CUDA thread, blocks run one after another, __syncthreads = pthread barrier,
// dynamic shared memory is a per-block buffer filled with NaN (catches reads of unwritten smem).
// Not part of the deliverable's GPU path; it lets the kernels' indexing/sync logic be checked without a GPU.
#pragma once
#include <pthread.h>
#include <thread>
#include <vector>
#include <cstring>
#include <cstdlib>
#include <cstdio>
#include <cmath>

struct dim3 { unsigned x, y, z; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
struct emu_uint3 { unsigned x, y, z; };
inline thread_local emu_uint3 threadIdx;
inline emu_uint3 blockIdx;
inline dim3 blockDim, gridDim;
inline pthread_barrier_t emu_bar;
inline float *emu_dsmem = nullptr;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__
inline void __syncthreads() { pthread_barrier_wait(&emu_bar); }

typedef int cudaError_t;
typedef void *cudaStream_t;
enum { cudaSuccess = 0 };
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum { cudaFuncAttributeMaxDynamicSharedMemorySize = 0 };
inline const char *cudaGetErrorString(cudaError_t) { return "emu"; }
template <class T> inline cudaError_t cudaMalloc(T **p, size_t n) { *p = (T *)malloc(n ? n : 1); return *p ? 0 : 2; }
inline cudaError_t cudaFree(void *p) { free(p); return 0; }
inline cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind) { memcpy(d, s, n); return 0; }
inline cudaError_t cudaMemset(void *d, int v, size_t n) { memset(d, v, n); return 0; }
inline cudaError_t cudaDeviceSynchronize() { return 0; }
inline cudaError_t cudaGetLastError() { return 0; }
template <class F> inline cudaError_t cudaFuncSetAttribute(F, int, int) { return 0; }

template <class F> void emu_launch(dim3 g, dim3 b, size_t smem, F f) {
    int nt = b.x * b.y * b.z;
    gridDim = g; blockDim = b;
    std::vector<float> sm(smem / 4 + 16);
    pthread_barrier_init(&emu_bar, nullptr, nt);
    for (unsigned z = 0; z < g.z; z++)
        for (unsigned y = 0; y < g.y; y++)
            for (unsigned x = 0; x < g.x; x++) {
                for (auto &e : sm) e = NAN;
                emu_dsmem = sm.data();
                blockIdx = {x, y, z};
                std::vector<std::thread> th;
                th.reserve(nt);
                for (int t = 0; t < nt; t++)
                    th.emplace_back([&, t] {
                        threadIdx = {(unsigned)(t % b.x), (unsigned)((t / b.x) % b.y), (unsigned)(t / (b.x * b.y))};
                        f();
                    });
                for (auto &t : th) t.join();
            }
    pthread_barrier_destroy(&emu_bar);
}
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
