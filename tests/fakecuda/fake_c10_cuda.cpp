// libc10_cuda.so of the fake torch: as in PyTorch, the caching allocator's CUDA calls are made
// from this library (so that oomscope attributes them to torch by the module that called CUDA),
// and the Python side reaches it without the GIL (ctypes.CDLL), as PyTorch's bindings release it.
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
