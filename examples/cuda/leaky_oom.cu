// A small CUDA program that goes the way many training jobs go: it loads its "weights", runs a
// few steps that each leak a buffer, and finally asks for more memory than is left. Built two
// ways from this one source: with nvcc against the real runtime (nvcc -cudart shared), and
// with g++ against the fake runtime of tests/fakecuda. It uses only the runtime API.
//
// Run it under oomscope and the report names these functions: load_weights holds the most,
// leak_step_buffer grows each step, and run_final_step is the request that failed.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#define NOINLINE __attribute__((noinline))

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

NOINLINE void* load_weights(size_t bytes)
{
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess)
        return nullptr;
    cudaMemset(p, 0, 4096);
    return p;
}

NOINLINE void* allocate_activations(size_t bytes)
{
    void* p = nullptr;
    return cudaMalloc(&p, bytes) == cudaSuccess ? p : nullptr;
}

// The bug: a buffer per step that nobody frees.
NOINLINE void leak_step_buffer(std::vector<void*>& kept, size_t bytes)
{
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) == cudaSuccess)
        kept.push_back(p);
}

NOINLINE int run_final_step(size_t bytes)
{
    void* p = nullptr;
    const cudaError_t rc = cudaMalloc(&p, bytes);
    if (rc != cudaSuccess) {
        std::printf("final step: cudaMalloc(%zu bytes) failed: %s\n", bytes, cudaGetErrorString(rc));
        return 1;
    }
    cudaFree(p);
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    const int steps = argc > 1 ? std::atoi(argv[1]) : 8;
    size_t freeBytes = 0, totalBytes = 0;
    if (cudaMemGetInfo(&freeBytes, &totalBytes) != cudaSuccess) {
        std::fprintf(stderr, "leaky_oom: no CUDA device\n");
        return 2;
    }
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    std::printf("device: %s, %.0f MiB total, %.0f MiB free\n", prop.name, double(totalBytes) / kMiB,
                double(freeBytes) / kMiB);
    const size_t freeAtStart = freeBytes;

    const size_t unit = (totalBytes / 64) & ~size_t(0xFFFFF);  // 1/64 of the device, MiB-aligned
    void* weights = load_weights(12 * unit);
    std::printf("loaded weights: %.0f MiB\n", double(12 * unit) / kMiB);

    std::vector<void*> leaked;
    for (int step = 0; step < steps; ++step) {
        void* activations = allocate_activations(4 * unit);
        leak_step_buffer(leaked, 2 * unit);
        cudaFree(activations);
    }
    std::printf("after %d steps: %zu leaked buffers, %.0f MiB\n", steps, leaked.size(),
                double(leaked.size() * 2 * unit) / kMiB);

    cudaMemGetInfo(&freeBytes, &totalBytes);
    std::printf("driver used by the steps: %zu bytes\n", freeAtStart - freeBytes);
    const int rc = run_final_step(freeBytes + 8 * unit);
    for (void* p : leaked)
        cudaFree(p);
    cudaFree(weights);
    return rc;
}
