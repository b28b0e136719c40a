// The driver API called as linked symbols (DT_NEEDED libcuda.so.1): the exported door.
#include "interpose/cuda_extra.h"

#include <cstdio>

int main()
{
    CUcontext ctx = nullptr;
    if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&ctx, 0) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
        return 3;
    CUdeviceptr ptrs[6] = {};
    int allocs = 0, frees = 0;
    for (int i = 0; i < 6; ++i)
        allocs += cuMemAlloc_v2(&ptrs[i], size_t(i + 1) << 20) == CUDA_SUCCESS;
    for (int i = 0; i < 6; i += 2)
        frees += cuMemFree_v2(ptrs[i]) == CUDA_SUCCESS;
    void* host = nullptr;
    allocs += cuMemHostAlloc(&host, 1 << 20, 0) == CUDA_SUCCESS;
    frees += cuMemFreeHost(host) == CUDA_SUCCESS;
    std::printf("door exported allocs %d frees %d\n", allocs, frees);
    return 0;
}
