// Calls every hooked runtime allocation function once and frees everything except one
// buffer per kind, so that a test can check one event per call under its own API name and
// the live bytes left. Prints "API name" for each call it made, then "done".
#include "interpose/cuda_extra.h"

#include <cstdio>

namespace {
int g_failures = 0;

void check(cudaError_t rc, const char* what)
{
    std::printf("%s %s\n", what, rc == cudaSuccess ? "ok" : cudaGetErrorName(rc));
    if (rc != cudaSuccess)
        ++g_failures;
}
} // namespace

int main()
{
    void* p = nullptr;
    check(cudaMalloc(&p, 1 << 20), "cudaMalloc");
    check(cudaFree(p), "cudaFree");
    check(cudaMallocManaged(&p, 2 << 20, cudaMemAttachGlobal), "cudaMallocManaged");
    check(cudaFree(p), "cudaFree");
    size_t pitch = 0;
    check(cudaMallocPitch(&p, &pitch, 1000, 100), "cudaMallocPitch");
    check(cudaFree(p), "cudaFree");
    cudaPitchedPtr pitched{};
    check(cudaMalloc3D(&pitched, cudaExtent{1000, 10, 10}), "cudaMalloc3D");
    check(cudaFree(pitched.ptr), "cudaFree");
    cudaStream_t stream = nullptr;
    cudaStreamCreate(&stream);
    check(cudaMallocAsync(&p, 3 << 20, stream), "cudaMallocAsync");
    check(cudaFreeAsync(p, stream), "cudaFreeAsync");
    check(cudaMallocAsync_ptsz(&p, 3 << 20, stream), "cudaMallocAsync_ptsz");
    check(cudaFreeAsync_ptsz(p, stream), "cudaFreeAsync_ptsz");
    cudaMemPool_t pool = nullptr;
    cudaDeviceGetDefaultMemPool(&pool, 0);
    check(cudaMallocFromPoolAsync(&p, 4 << 20, pool, stream), "cudaMallocFromPoolAsync");
    check(cudaFreeAsync(p, stream), "cudaFreeAsync");
    check(cudaMallocFromPoolAsync_ptsz(&p, 4 << 20, pool, stream), "cudaMallocFromPoolAsync_ptsz");
    check(cudaFreeAsync(p, stream), "cudaFreeAsync");
    check(cudaMallocHost(&p, 1 << 20), "cudaMallocHost");
    check(cudaFreeHost(p), "cudaFreeHost");
    check(cudaHostAlloc(&p, 1 << 20, cudaHostAllocDefault), "cudaHostAlloc");
    check(cudaFreeHost(p), "cudaFreeHost");
    // Kept until exit: one of each kind.
    void* keepDevice = nullptr;
    void* keepManaged = nullptr;
    void* keepHost = nullptr;
    check(cudaMalloc(&keepDevice, 5 << 20), "cudaMalloc");
    check(cudaMallocManaged(&keepManaged, 6 << 20, cudaMemAttachGlobal), "cudaMallocManaged");
    check(cudaMallocHost(&keepHost, 7 << 20), "cudaMallocHost");
    // Not recorded: a free of an unknown pointer passes through (and fails in the runtime).
    int local = 0;
    check(cudaFree(&local), "cudaFree-unknown");
    // A failed call that is not out of memory: recorded, no OOM report.
    check(cudaMalloc(nullptr, 1 << 20), "cudaMalloc-null");
    std::printf("done %d\n", g_failures);
    return 0;
}
