// A program in the shape of what plain `nvcc` produces (runtime linked statically): no CUDA
// library linked, the driver reached only through dlopen + dlsym("cuGetProcAddress_v2").
// Allocates weights, leaks a buffer per step, then asks for more than the device has.
#include "driver_common.h"

#include <vector>

#define NOINLINE __attribute__((noinline))

namespace {
DriverApi api;

NOINLINE CUdeviceptr static_load_weights(size_t bytes)
{
    CUdeviceptr p = 0;
    return api.memAlloc(&p, bytes) == CUDA_SUCCESS ? p : 0;
}

NOINLINE void static_leak_step(std::vector<CUdeviceptr>& kept, size_t bytes)
{
    CUdeviceptr p = 0;
    if (api.memAlloc(&p, bytes) == CUDA_SUCCESS)
        kept.push_back(p);
}

NOINLINE int static_final_step(size_t bytes)
{
    CUdeviceptr p = 0;
    const CUresult rc = api.memAlloc(&p, bytes);
    std::printf("final step: cuMemAlloc(%zu bytes) = %d\n", bytes, int(rc));
    return rc == CUDA_SUCCESS ? 0 : 1;
}
} // namespace

int main()
{
    api.load();
    size_t freeBytes = 0, total = 0;
    api.memGetInfo(&freeBytes, &total);
    const size_t unit = (total / 64) & ~size_t(0xFFFFF);
    static_load_weights(12 * unit);
    std::vector<CUdeviceptr> kept;
    for (int i = 0; i < 8; ++i)
        static_leak_step(kept, 2 * unit);
    api.memGetInfo(&freeBytes, &total);
    return static_final_step(freeBytes + 8 * unit);
}
