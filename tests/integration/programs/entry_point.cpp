// Driver functions through the runtime's doors: cudaGetDriverEntryPointByVersion (as PyTorch
// does for cuMemCreate & co.) or cudaGetDriverEntryPoint, chosen by argv[1].
#include "interpose/cuda_extra.h"

#include <cstdio>
#include <string>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

int main(int argc, char** argv)
{
    const std::string door = argc > 1 ? argv[1] : "by-version";
    cudaFree(nullptr);  // a context
    void* a = nullptr;
    void* f = nullptr;
    cudaDriverEntryPointQueryResult status{};
    if (door == "by-version") {
        cudaGetDriverEntryPointByVersion("cuMemAlloc", &a, 12000, cudaEnableDefault, &status);
        cudaGetDriverEntryPointByVersion("cuMemFree", &f, 12000, cudaEnableDefault, &status);
    } else {
        cudaGetDriverEntryPoint("cuMemAlloc", &a, cudaEnableDefault, &status);
        cudaGetDriverEntryPoint("cuMemFree", &f, cudaEnableDefault, &status);
    }
    auto alloc = reinterpret_cast<decltype(&cuMemAlloc_v2)>(a);
    auto release = reinterpret_cast<decltype(&cuMemFree_v2)>(f);
    if (!alloc || !release)
        return 3;
    CUdeviceptr ptrs[6] = {};
    int allocs = 0, frees = 0;
    for (int i = 0; i < 6; ++i)
        allocs += alloc(&ptrs[i], size_t(i + 1) << 20) == CUDA_SUCCESS;
    for (int i = 0; i < 6; i += 2)
        frees += release(ptrs[i]) == CUDA_SUCCESS;
    std::printf("door %s allocs %d frees %d\n", door.c_str(), allocs, frees);
    return 0;
}
