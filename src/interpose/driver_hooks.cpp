// Wrappers of the CUDA driver's allocation functions (libcuda.so.1), reached as exported
// symbols or, far more often, through the entry-point doors (entry_points.cpp). One line each,
// but for VMM, whose accounting lives in track/vmm_table.
#include "interpose/recording.h"
#include "interpose/hooks.h"

#include <optional>

using oomscope::interpose::allocHook;
using oomscope::interpose::freeHook;
using oomscope::interpose::HookId;
using oomscope::interpose::toU64;
using oomscope::track::MemKind;

namespace oi = oomscope::interpose;

namespace {

inline auto devicePtrOut(CUdeviceptr* ptr)
{
    return [ptr](uint64_t& address, uint64_t&) { address = uint64_t(*ptr); };
}

inline auto hostPtrOut(void** ptr)
{
    return [ptr](uint64_t& address, uint64_t&) { address = toU64(*ptr); };
}

inline uint64_t streamId(CUstream stream)
{
    return toU64(stream);
}


using oomscope::track::Event;

// An address-space reservation or release: a timeline marker, nothing live.
void addressRange(oomscope::track::Recorder* r, HookId id, uint64_t address, uint64_t size)
{
    const int device = oi::currentDevice(oi::Family::Driver);
    if (id == HookId::cuMemAddressReserve)
        r->recordAddressReserve(oi::apiOf(id), device, address, size);
    else
        r->recordAddressFree(oi::apiOf(id), device, address, size);
}

// The hook is outermost and recording: the recorder, else null.
oomscope::track::Recorder* recordingRecorder(const oi::HookScope& scope)
{
    return scope.recording() ? oi::recorder() : nullptr;
}

} // namespace

// ---- device, managed and pinned host memory

OOMSCOPE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize)
{
    return allocHook<HookId::cuMemAlloc_v2>(MemKind::Device, bytesize, 0, devicePtrOut(dptr), dptr, bytesize);
}

OOMSCOPE_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t widthInBytes, size_t height,
                                             unsigned int elementSizeBytes)
{
    auto out = [=](uint64_t& address, uint64_t& size) {
        address = uint64_t(*dptr);
        size = uint64_t(*pPitch) * height;
    };
    return allocHook<HookId::cuMemAllocPitch_v2>(MemKind::Device, uint64_t(widthInBytes) * height, 0, out, dptr, pPitch,
                                                 widthInBytes, height, elementSizeBytes);
}

OOMSCOPE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags)
{
    return allocHook<HookId::cuMemAllocManaged>(MemKind::Managed, bytesize, 0, devicePtrOut(dptr), dptr, bytesize, flags);
}

OOMSCOPE_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    return freeHook<HookId::cuMemFree_v2>(uint64_t(dptr), 0, dptr);
}

OOMSCOPE_EXPORT CUresult cuMemAllocHost_v2(void** pp, size_t bytesize)
{
    return allocHook<HookId::cuMemAllocHost_v2>(MemKind::HostPinned, bytesize, 0, hostPtrOut(pp), pp, bytesize);
}

OOMSCOPE_EXPORT CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int flags)
{
    return allocHook<HookId::cuMemHostAlloc>(MemKind::HostPinned, bytesize, 0, hostPtrOut(pp), pp, bytesize, flags);
}

OOMSCOPE_EXPORT CUresult cuMemFreeHost(void* p)
{
    return freeHook<HookId::cuMemFreeHost>(toU64(p), 0, p);
}

// ---- stream-ordered allocator: recorded at enqueue

OOMSCOPE_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream)
{
    return allocHook<HookId::cuMemAllocAsync>(MemKind::Device, bytesize, streamId(hStream), devicePtrOut(dptr), dptr,
                                              bytesize, hStream);
}

OOMSCOPE_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream)
{
    return allocHook<HookId::cuMemAllocAsync_ptsz>(MemKind::Device, bytesize, streamId(hStream), devicePtrOut(dptr), dptr,
                                                   bytesize, hStream);
}

OOMSCOPE_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
    oi::notePool(pool);
    return allocHook<HookId::cuMemAllocFromPoolAsync>(MemKind::Device, bytesize, streamId(hStream), devicePtrOut(dptr),
                                                      dptr, bytesize, pool, hStream);
}

OOMSCOPE_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                                       CUstream hStream)
{
    oi::notePool(pool);
    return allocHook<HookId::cuMemAllocFromPoolAsync_ptsz>(MemKind::Device, bytesize, streamId(hStream),
                                                           devicePtrOut(dptr), dptr, bytesize, pool, hStream);
}

OOMSCOPE_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    return freeHook<HookId::cuMemFreeAsync>(uint64_t(dptr), streamId(hStream), dptr, hStream);
}

OOMSCOPE_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return freeHook<HookId::cuMemFreeAsync_ptsz>(uint64_t(dptr), streamId(hStream), dptr, hStream);
}

OOMSCOPE_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    const auto real = oi::realFn<HookId::cuMemPoolTrimTo>();
    if (!real)
        return oi::unresolvedResult<CUresult>();
    oi::HookScope scope;
    const CUresult rc = real(pool, minBytesToKeep);
    if (auto* r = recordingRecorder(scope); r && rc == CUDA_SUCCESS)
        r->recordEvent(Event::poolTrim(oi::apiOf(HookId::cuMemPoolTrimTo).value(), oi::currentDevice(oi::Family::Driver),
                                       toU64(pool), minBytesToKeep));
    return rc;
}

// ---- virtual memory management

OOMSCOPE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                                      unsigned long long flags)
{
    const auto real = oi::realFn<HookId::cuMemCreate>();
    if (!real)
        return oi::unresolvedResult<CUresult>();
    oi::HookScope scope;
    auto* recording = recordingRecorder(scope);
    const bool onDevice = prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
    const bool refused = recording && onDevice && oi::deviceLimitOn() && oi::deviceLimitRefuses(prop->location.id, size);
    std::optional<oi::LimitOpScope> inFlight;  // to the record (device_limit.h)
    if (recording && !refused)
        inFlight.emplace();
    const CUresult rc = refused ? CUDA_ERROR_OUT_OF_MEMORY  // rehearsing a smaller card (device_limit.h)
                                : real(handle, size, prop, flags);
    if (auto* r = recording) {
        oomscope::track::Allocation rec;
        rec.api = oi::apiOf(HookId::cuMemCreate);
        rec.kind = prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? MemKind::Device : MemKind::HostPinned;
        rec.device = prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? prop->location.id
                                                                                 : oi::currentDevice(oi::Family::Driver);
        rec.size = size;
        rec.stack = r->captureStack();
        if (rc == CUDA_SUCCESS && handle) {
            rec.handle = uint64_t(*handle);
            r->recordVmmCreate(rec);
        } else {
            // PyTorch probes for a fabric-exportable handle first and gets an error that is
            // not out-of-memory (CUDA_ERROR_NOT_PERMITTED on the H200): recorded, no episode.
            r->recordFailure(rec, int(rc), oi::isOutOfMemory(oi::Family::Driver, int(rc)));
        }
    }
    return rc;
}

OOMSCOPE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    const auto real = oi::realFn<HookId::cuMemRelease>();
    if (!real)
        return oi::unresolvedResult<CUresult>();
    oi::HookScope scope;
    auto* r = recordingRecorder(scope);
    if (!r)
        return real(handle);
    oi::LimitOpScope inFlight;  // from the record to the driver (device_limit.h)
    r->recordVmmRelease(oi::apiOf(HookId::cuMemRelease), uint64_t(handle));
    return real(handle);
}

OOMSCOPE_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                                   unsigned long long flags)
{
    const auto real = oi::realFn<HookId::cuMemMap>();
    if (!real)
        return oi::unresolvedResult<CUresult>();
    oi::HookScope scope;
    const CUresult rc = real(ptr, size, offset, handle, flags);
    if (auto* r = recordingRecorder(scope); r && rc == CUDA_SUCCESS)
        r->recordVmmMap(oi::apiOf(HookId::cuMemMap), uint64_t(ptr), size, uint64_t(handle));
    return rc;
}

OOMSCOPE_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    const auto real = oi::realFn<HookId::cuMemUnmap>();
    if (!real)
        return oi::unresolvedResult<CUresult>();
    oi::HookScope scope;
    if (auto* r = recordingRecorder(scope))
        r->recordVmmUnmap(oi::apiOf(HookId::cuMemUnmap), uint64_t(ptr), size);
    return real(ptr, size);
}

OOMSCOPE_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                              unsigned long long flags)
{
    const auto real = oi::realFn<HookId::cuMemAddressReserve>();
    if (!real)
        return oi::unresolvedResult<CUresult>();
    oi::HookScope scope;
    const CUresult rc = real(ptr, size, alignment, addr, flags);
    if (auto* r = recordingRecorder(scope); r && rc == CUDA_SUCCESS && ptr)
        addressRange(r, HookId::cuMemAddressReserve, uint64_t(*ptr), size);
    return rc;
}

OOMSCOPE_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    const auto real = oi::realFn<HookId::cuMemAddressFree>();
    if (!real)
        return oi::unresolvedResult<CUresult>();
    oi::HookScope scope;
    if (auto* r = recordingRecorder(scope))
        addressRange(r, HookId::cuMemAddressFree, uint64_t(ptr), size);
    return real(ptr, size);
}

OOMSCOPE_EXPORT CUresult cuMemGetInfo_v2(size_t* free, size_t* total)
{
    const auto real = oi::realFn<HookId::cuMemGetInfo_v2>();
    if (!real)
        return oi::unresolvedResult<CUresult>();
    oi::HookScope scope;
    const CUresult rc = real(free, total);
    // Rehearsing a smaller card: the program's allocator sizes itself to that card.
    if (rc == CUDA_SUCCESS && oi::deviceLimitOn() && scope.recording())
        oi::deviceLimitAdjust(oi::currentDevice(oi::Family::Driver), free, total);
    return rc;
}
