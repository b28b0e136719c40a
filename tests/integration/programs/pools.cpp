// Stream-ordered allocations through the runtime: the default pool and an explicit one,
// frees at enqueue, a trim; a report at the end (oomscope_dump) with the pools' statistics.
#include "interpose/cuda_extra.h"

#include <cstdio>
#include <dlfcn.h>

int main()
{
    cudaStream_t stream = nullptr;
    cudaStreamCreate(&stream);
    void* a = nullptr;
    void* b = nullptr;
    void* c = nullptr;
    cudaMallocAsync(&a, 3 << 20, stream);
    cudaMallocAsync(&b, 5 << 20, stream);
    cudaFreeAsync(a, stream);
    cudaMemPool_t pool = nullptr;
    cudaDeviceGetDefaultMemPool(&pool, 0);
    cudaMallocFromPoolAsync(&c, 7 << 20, pool, stream);
    cudaStreamSynchronize(stream);
    cudaMemPoolTrimTo(pool, 0);
    using Dump = const char* (*)(const char*);
    auto dump = reinterpret_cast<Dump>(dlsym(RTLD_DEFAULT, "oomscope_dump"));
    std::printf("dump %s\n", dump ? dump("pools") : "");
    return 0;
}
