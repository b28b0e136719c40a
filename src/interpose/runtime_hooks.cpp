// Wrappers of the CUDA runtime's allocation functions (libcudart.so.13). One line each: the
// helpers in hooks.h call the real function, read the result and record.
#include "interpose/recording.h"
#include "interpose/hooks.h"

namespace oi = oomscope::interpose;
using oomscope::interpose::allocHook;
using oomscope::interpose::freeHook;
using oomscope::interpose::HookId;
using oomscope::interpose::notePool;
using oomscope::interpose::toU64;
using oomscope::track::MemKind;

namespace {

// Reads back the pointer an allocation function stored, with the size it was asked for.
inline auto pointerOut(void** ptr)
{
    return [ptr](uint64_t& address, uint64_t&) { address = toU64(*ptr); };
}

inline uint64_t streamId(cudaStream_t stream)
{
    return toU64(stream);
}

} // namespace

OOMSCOPE_EXPORT cudaError_t cudaMalloc(void** devPtr, size_t size)
{
    return allocHook<HookId::cudaMalloc>(MemKind::Device, size, 0, pointerOut(devPtr), devPtr, size);
}

OOMSCOPE_EXPORT cudaError_t cudaFree(void* devPtr)
{
    return freeHook<HookId::cudaFree>(toU64(devPtr), 0, devPtr);
}

OOMSCOPE_EXPORT cudaError_t cudaMallocManaged(void** devPtr, size_t size, unsigned int flags)
{
    return allocHook<HookId::cudaMallocManaged>(MemKind::Managed, size, 0, pointerOut(devPtr), devPtr, size, flags);
}

OOMSCOPE_EXPORT cudaError_t cudaMallocPitch(void** devPtr, size_t* pitch, size_t width, size_t height)
{
    // The size is known once the runtime has chosen the pitch.
    auto out = [=](uint64_t& address, uint64_t& size) {
        address = toU64(*devPtr);
        size = uint64_t(*pitch) * height;
    };
    return allocHook<HookId::cudaMallocPitch>(MemKind::Device, uint64_t(width) * height, 0, out, devPtr, pitch, width,
                                              height);
}

OOMSCOPE_EXPORT cudaError_t cudaMalloc3D(cudaPitchedPtr* pitchedDevPtr, cudaExtent extent)
{
    auto out = [=](uint64_t& address, uint64_t& size) {
        address = toU64(pitchedDevPtr->ptr);
        size = uint64_t(pitchedDevPtr->pitch) * extent.height * extent.depth;
    };
    return allocHook<HookId::cudaMalloc3D>(MemKind::Device, uint64_t(extent.width) * extent.height * extent.depth, 0, out,
                                           pitchedDevPtr, extent);
}

OOMSCOPE_EXPORT cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t stream)
{
    return allocHook<HookId::cudaMallocAsync>(MemKind::Device, size, streamId(stream), pointerOut(devPtr), devPtr, size,
                                              stream);
}

OOMSCOPE_EXPORT cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t stream)
{
    return allocHook<HookId::cudaMallocAsync_ptsz>(MemKind::Device, size, streamId(stream), pointerOut(devPtr), devPtr,
                                                   size, stream);
}

OOMSCOPE_EXPORT cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t stream)
{
    return freeHook<HookId::cudaFreeAsync>(toU64(devPtr), streamId(stream), devPtr, stream);
}

OOMSCOPE_EXPORT cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t stream)
{
    return freeHook<HookId::cudaFreeAsync_ptsz>(toU64(devPtr), streamId(stream), devPtr, stream);
}

OOMSCOPE_EXPORT cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream)
{
    notePool(pool);
    return allocHook<HookId::cudaMallocFromPoolAsync>(MemKind::Device, size, streamId(stream), pointerOut(ptr), ptr, size,
                                                      pool, stream);
}

OOMSCOPE_EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream)
{
    notePool(pool);
    return allocHook<HookId::cudaMallocFromPoolAsync_ptsz>(MemKind::Device, size, streamId(stream), pointerOut(ptr), ptr,
                                                           size, pool, stream);
}

OOMSCOPE_EXPORT cudaError_t cudaMallocHost(void** ptr, size_t size)
{
    return allocHook<HookId::cudaMallocHost>(MemKind::HostPinned, size, 0, pointerOut(ptr), ptr, size);
}

OOMSCOPE_EXPORT cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags)
{
    return allocHook<HookId::cudaHostAlloc>(MemKind::HostPinned, size, 0, pointerOut(pHost), pHost, size, flags);
}

OOMSCOPE_EXPORT cudaError_t cudaFreeHost(void* ptr)
{
    return freeHook<HookId::cudaFreeHost>(toU64(ptr), 0, ptr);
}

OOMSCOPE_EXPORT cudaError_t cudaMemGetInfo(size_t* free, size_t* total)
{
    const auto real = oi::realFn<HookId::cudaMemGetInfo>();
    if (!real)
        return oi::unresolvedResult<cudaError_t>();
    oi::HookScope scope;  // the driver's query inside it is not adjusted twice
    const cudaError_t rc = real(free, total);
    if (rc == cudaSuccess && oi::deviceLimitOn() && scope.recording())
        oi::deviceLimitAdjust(oi::currentDevice(oi::Family::Runtime), free, total);
    return rc;
}
