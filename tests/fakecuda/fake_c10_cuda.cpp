// libc10_cuda.so of the fake torch: as in PyTorch, the caching allocator's CUDA calls are made
// from this library (so that oomscope attributes them to torch by the module that called CUDA),
// and the Python side reaches it without the GIL (ctypes.CDLL), as PyTorch's bindings release it.
#include <cuda.h>
#include <cuda_runtime_api.h>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

FAKE_EXPORT int fake_c10_cuda_malloc(void** ptr, size_t size)
{
    const cudaError_t rc = cudaMalloc(ptr, size);
    if (rc != cudaSuccess)
        cudaGetLastError();  // as PyTorch does before it decides what to do
    return int(rc);
}

FAKE_EXPORT int fake_c10_cuda_free(void* ptr)
{
    return int(cudaFree(ptr));
}

// What PyTorch's expandable segments do (expandable_segments:True): address space reserved for
// the segment, physical pages created and mapped as it grows, and on empty_cache() the free
// pages unmapped and released for good while the address space stays reserved. Not a pause:
// oomscope lists no paused memory for it.
FAKE_EXPORT int fake_c10_expandable_grow_and_release(size_t pageBytes, int pages)
{
    CUdeviceptr base = 0;
    if (cuMemAddressReserve(&base, pageBytes * size_t(pages) * 4, 0, 0, 0) != CUDA_SUCCESS)
        return 1;
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    for (int i = 0; i < pages; ++i) {
        CUmemGenericAllocationHandle h = 0;
        if (cuMemCreate(&h, pageBytes, &prop, 0) != CUDA_SUCCESS ||
            cuMemMap(base + pageBytes * size_t(i), pageBytes, 0, h, 0) != CUDA_SUCCESS)
            return 2;
        cuMemRelease(h);  // the mapping keeps it alive, as PyTorch does
    }
    for (int i = 0; i < pages; ++i)
        cuMemUnmap(base + pageBytes * size_t(i), pageBytes);
    return 0;
}
