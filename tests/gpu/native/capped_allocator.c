/* A bounded allocator for torch.cuda.memory.CUDAPluggableAllocator, as a MemPool's allocator:
 * cudaMalloc while the pool holds less than CAPPED_BYTES (default 512 MiB), then NULL, so that
 * the pool is full while the device has room (pytorch#159674). For the GPU suite's torch_pool_full. */
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <sys/types.h>

static size_t g_used, g_cap;

void* capped_malloc(ssize_t size, int device, cudaStream_t stream)
{
    (void)device;
    (void)stream;
    if (!g_cap) {
        const char* text = getenv("CAPPED_BYTES");
        g_cap = text ? strtoull(text, NULL, 10) : (size_t)512 << 20;
    }
    if (size < 0 || g_used + (size_t)size > g_cap)
        return NULL;
    void* p = NULL;
    if (cudaMalloc(&p, (size_t)size) != cudaSuccess)
        return NULL;
    g_used += (size_t)size;
    return p;
}

void capped_free(void* p, ssize_t size, int device, cudaStream_t stream)
{
    (void)device;
    (void)stream;
    cudaFree(p);
    g_used -= (size_t)size;
}
