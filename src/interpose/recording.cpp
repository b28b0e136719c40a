#include "interpose/recording.h"

namespace oomscope::interpose {

ApiId apiOf(HookId id) noexcept
{
    return ApiId(uint16_t(kFirstApi + uint16_t(id)));
}

Family familyOfApi(ApiId api) noexcept
{
    const size_t index = size_t(api.value()) - kFirstApi;
    return api.value() >= kFirstApi && index < kHookCount ? kHooks[index].family : Family::Runtime;
}

int currentDevice(Family family) noexcept
{
    int device = -1;
    if (family == Family::Runtime) {
        using Fn = cudaError_t (*)(int*);
        static auto fn = reinterpret_cast<Fn>(auxFunction(Family::Runtime, "cudaGetDevice"));
        if (fn && fn(&device) == cudaSuccess)
            return device;
        return -1;
    }
    using Fn = CUresult (*)(CUdevice*);
    static auto fn = reinterpret_cast<Fn>(auxFunction(Family::Driver, "cuCtxGetDevice"));
    CUdevice d = -1;
    if (fn && fn(&d) == CUDA_SUCCESS)
        return int(d);
    return -1;
}

bool isOutOfMemory(Family family, int error) noexcept
{
    // cudaErrorMemoryAllocation and CUDA_ERROR_OUT_OF_MEMORY are both 2. Other failures
    // (PyTorch's fabric-handle probe gets CUDA_ERROR_NOT_PERMITTED, 800, from cuMemCreate on
    // the H200) are recorded but never start an OOM episode.
    (void)family;
    return error == 2;
}

void notePool(const void* pool) noexcept
{
    if (!enabled())
        return;
    if (track::Recorder* r = recorder())
        r->notePool(toU64(pool));
}

void afterAlloc(HookId id, track::MemKind kind, int result, uint64_t address, uint64_t size, uint64_t requested,
                uint64_t stream) noexcept
{
    track::Recorder* r = recorder();
    if (!r)
        return;
    const Family family = kHooks[size_t(id)].family;
    track::Allocation alloc;
    alloc.api = apiOf(id);
    alloc.kind = kind;
    alloc.device = currentDevice(family);
    alloc.stream = stream;
    alloc.stack = r->captureStack();
    if (result == 0) {
        alloc.address = address;
        alloc.size = size;
        r->recordAlloc(alloc);
    } else {
        alloc.size = requested;
        r->recordFailure(alloc, result, isOutOfMemory(family, result));
    }
}

void beforeFree(HookId id, uint64_t address, uint64_t stream) noexcept
{
    if (track::Recorder* r = recorder())
        r->recordFree(apiOf(id), address, stream);
}

} // namespace oomscope::interpose
