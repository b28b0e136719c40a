// Test program for the device limit (OOMSCOPE_DEVICE_LIMIT): asks each door in turn and prints
// one line per call, "<what> <result>", so that the test compares them with and without the
// limit. The runtime is linked; the driver is reached as a static runtime does (driver_common.h).
//   query     the memory query through both APIs: "runtime_info FREE TOTAL", "driver_info ..."
//   fill      200 MiB, then exactly what the query says is left, then one byte more through
//             each door: cudaMalloc, cuMemAlloc_v2, cudaMallocAsync, cuMemCreate; then pinned
//             host memory and managed memory (never limited); then a free and a fit again
#include "driver_common.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

namespace {

constexpr size_t MiB = size_t(1) << 20;

void query(DriverApi& api)
{
    size_t free = 0, total = 0;
    const int runtime = int(cudaMemGetInfo(&free, &total));
    std::printf("runtime_info %d %zu %zu\n", runtime, free, total);
    const int driver = int(api.memGetInfo(&free, &total));
    std::printf("driver_info %d %zu %zu\n", driver, free, total);
}

CUresult createOne(DriverApi& api, size_t size)
{
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle handle = 0;
    const CUresult rc = api.memCreate(&handle, size, &prop, 0);
    if (rc == CUDA_SUCCESS)
        api.memRelease(handle);
    return rc;
}

} // namespace

int main(int argc, char** argv)
{
    setvbuf(stdout, nullptr, _IOLBF, 0);
    const std::string mode = argc > 1 ? argv[1] : "fill";
    DriverApi api;
    api.load();
    cudaFree(nullptr);
    query(api);
    if (mode == "query")
        return 0;
    void* first = nullptr;
    std::printf("cudaMalloc_200MiB %d\n", int(cudaMalloc(&first, 200 * MiB)));
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    void* rest = nullptr;
    const int filled = int(cudaMalloc(&rest, free));
    std::printf("cudaMalloc_rest %d %zu\n", filled, free);
    void* p = nullptr;
    std::printf("cudaMalloc_1 %d\n", int(cudaMalloc(&p, 1)));
    CUdeviceptr d = 0;
    std::printf("cuMemAlloc_1 %d\n", int(api.memAlloc(&d, 1)));
    std::printf("cudaMallocAsync_1 %d\n", int(cudaMallocAsync(&p, 1, nullptr)));
    std::printf("cuMemCreate_2MiB %d\n", int(createOne(api, 2 * MiB)));
    void* host = nullptr;
    std::printf("cudaMallocHost_64MiB %d\n", int(cudaMallocHost(&host, 64 * MiB)));
    void* managed = nullptr;
    std::printf("cudaMallocManaged_64MiB %d\n", int(cudaMallocManaged(&managed, 64 * MiB)));
    std::printf("cudaFree_200MiB %d\n", int(cudaFree(first)));
    std::printf("cudaMalloc_100MiB %d\n", int(cudaMalloc(&first, 100 * MiB)));
    query(api);
    return 0;
}
