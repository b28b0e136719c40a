#include "cupti/calls.h"

#include <cupti.h>  // the callback ids and the parameter structs (generated_*_meta.h, unguarded)

namespace oomscope::cupti {
namespace {

using interpose::HookId;
using track::MemKind;

constexpr CUpti_CallbackDomain kDriver = CUPTI_CB_DOMAIN_DRIVER_API;
constexpr CUpti_CallbackDomain kRuntime = CUPTI_CB_DOMAIN_RUNTIME_API;

#define DRIVER(name, op, kind) {kDriver, CUPTI_DRIVER_TRACE_CBID_##name, HookId::name, Op::op, MemKind::kind}
#define RUNTIME(name, cbid, op, kind) {kRuntime, CUPTI_RUNTIME_TRACE_CBID_##cbid, HookId::name, Op::op, MemKind::kind}

const CallSpec kCalls[] = {
    // Runtime: a program's cudaMalloc is named as such; the driver calls it makes inside are
    // nested and not counted again.
    RUNTIME(cudaMalloc, cudaMalloc_v3020, Alloc, Device),
    RUNTIME(cudaFree, cudaFree_v3020, Free, Device),
    RUNTIME(cudaMallocManaged, cudaMallocManaged_v6000, Alloc, Managed),
    RUNTIME(cudaMallocPitch, cudaMallocPitch_v3020, Alloc, Device),
    RUNTIME(cudaMalloc3D, cudaMalloc3D_v3020, Alloc, Device),
    RUNTIME(cudaMallocAsync, cudaMallocAsync_v11020, Alloc, Device),
    RUNTIME(cudaMallocAsync_ptsz, cudaMallocAsync_ptsz_v11020, Alloc, Device),
    RUNTIME(cudaFreeAsync, cudaFreeAsync_v11020, Free, Device),
    RUNTIME(cudaFreeAsync_ptsz, cudaFreeAsync_ptsz_v11020, Free, Device),
    RUNTIME(cudaMallocFromPoolAsync, cudaMallocFromPoolAsync_v11020, Alloc, Device),
    RUNTIME(cudaMallocFromPoolAsync_ptsz, cudaMallocFromPoolAsync_ptsz_v11020, Alloc, Device),
    RUNTIME(cudaMallocHost, cudaMallocHost_v3020, Alloc, HostPinned),
    RUNTIME(cudaHostAlloc, cudaHostAlloc_v3020, Alloc, HostPinned),
    RUNTIME(cudaFreeHost, cudaFreeHost_v3020, Free, HostPinned),
    // Driver.
    DRIVER(cuMemAlloc_v2, Alloc, Device),
    DRIVER(cuMemAllocPitch_v2, Alloc, Device),
    DRIVER(cuMemAllocManaged, Alloc, Managed),
    DRIVER(cuMemFree_v2, Free, Device),
    DRIVER(cuMemAllocHost_v2, Alloc, HostPinned),
    DRIVER(cuMemHostAlloc, Alloc, HostPinned),
    DRIVER(cuMemFreeHost, Free, HostPinned),
    DRIVER(cuMemAllocAsync, Alloc, Device),
    DRIVER(cuMemAllocAsync_ptsz, Alloc, Device),
    DRIVER(cuMemAllocFromPoolAsync, Alloc, Device),
    DRIVER(cuMemAllocFromPoolAsync_ptsz, Alloc, Device),
    DRIVER(cuMemFreeAsync, Free, Device),
    DRIVER(cuMemFreeAsync_ptsz, Free, Device),
    DRIVER(cuMemPoolTrimTo, PoolTrim, Device),
    DRIVER(cuMemCreate, VmmCreate, Device),
    DRIVER(cuMemRelease, VmmRelease, Device),
    DRIVER(cuMemMap, VmmMap, Device),
    DRIVER(cuMemUnmap, VmmUnmap, Device),
    DRIVER(cuMemAddressReserve, Reserve, Device),
    DRIVER(cuMemAddressFree, AddressFree, Device),
};

#undef DRIVER
#undef RUNTIME

template <class P>
const P& params(const CUpti_CallbackData& data)
{
    return *static_cast<const P*>(data.functionParams);
}

uint64_t u64(const void* p)
{
    return reinterpret_cast<uint64_t>(p);
}

// A device pointer the function wrote at exit: 0 when the out-parameter is null.
uint64_t writtenDevice(const CUdeviceptr* out)
{
    return out ? uint64_t(*out) : 0;
}

} // namespace

const CallSpec* memoryCallbacks(size_t* count) noexcept
{
    *count = sizeof(kCalls) / sizeof(kCalls[0]);
    return kCalls;
}

const CallSpec* findCall(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) noexcept
{
    for (const CallSpec& c : kCalls) {
        if (c.domain == domain && c.cbid == cbid)
            return &c;
    }
    return nullptr;
}

namespace {

// The runtime's allocation calls: false for a call it does not know.
bool readRuntimeCall(HookId hook, const CUpti_CallbackData& data, bool ok, Call& c) noexcept
{
    switch (hook) {
    case HookId::cudaMalloc: {
        const auto& p = params<cudaMalloc_v3020_params>(data);
        c.requested = c.size = p.size;
        c.address = ok && p.devPtr ? u64(*p.devPtr) : 0;
        break;
    }
    case HookId::cudaMallocManaged: {
        const auto& p = params<cudaMallocManaged_v6000_params>(data);
        c.requested = c.size = p.size;
        c.address = ok && p.devPtr ? u64(*p.devPtr) : 0;
        break;
    }
    case HookId::cudaMallocPitch: {
        const auto& p = params<cudaMallocPitch_v3020_params>(data);
        c.requested = c.size = uint64_t(p.width) * p.height;
        if (ok && p.devPtr && p.pitch) {
            c.address = u64(*p.devPtr);
            c.size = uint64_t(*p.pitch) * p.height;
        }
        break;
    }
    case HookId::cudaMalloc3D: {
        const auto& p = params<cudaMalloc3D_v3020_params>(data);
        c.requested = c.size = uint64_t(p.extent.width) * p.extent.height * p.extent.depth;
        if (ok && p.pitchedDevPtr) {
            c.address = u64(p.pitchedDevPtr->ptr);
            c.size = uint64_t(p.pitchedDevPtr->pitch) * p.extent.height * p.extent.depth;
        }
        break;
    }
    case HookId::cudaMallocAsync:
    case HookId::cudaMallocAsync_ptsz: {
        // Both parameter structs have this layout (devPtr, size, hStream).
        const auto& p = params<cudaMallocAsync_v11020_params>(data);
        c.requested = c.size = p.size;
        c.stream = u64(p.hStream);
        c.address = ok && p.devPtr ? u64(*p.devPtr) : 0;
        break;
    }
    case HookId::cudaMallocFromPoolAsync:
    case HookId::cudaMallocFromPoolAsync_ptsz: {
        const auto& p = params<cudaMallocFromPoolAsync_v11020_params>(data);
        c.requested = c.size = p.size;
        c.stream = u64(p.stream);
        c.handle = u64(p.memPool);
        c.address = ok && p.ptr ? u64(*p.ptr) : 0;
        break;
    }
    case HookId::cudaMallocHost: {
        const auto& p = params<cudaMallocHost_v3020_params>(data);
        c.requested = c.size = p.size;
        c.address = ok && p.ptr ? u64(*p.ptr) : 0;
        break;
    }
    case HookId::cudaHostAlloc: {
        const auto& p = params<cudaHostAlloc_v3020_params>(data);
        c.requested = c.size = p.size;
        c.address = ok && p.pHost ? u64(*p.pHost) : 0;
        break;
    }
    case HookId::cudaFree: c.address = u64(params<cudaFree_v3020_params>(data).devPtr); break;
    case HookId::cudaFreeHost: c.address = u64(params<cudaFreeHost_v3020_params>(data).ptr); break;
    case HookId::cudaFreeAsync:
    case HookId::cudaFreeAsync_ptsz: {
        const auto& p = params<cudaFreeAsync_v11020_params>(data);
        c.address = u64(p.devPtr);
        c.stream = u64(p.hStream);
        break;
    }
    default: return false;
    }
    return true;
}

// The driver's allocation and free calls: false for a call it does not know.
bool readDriverAllocCall(HookId hook, const CUpti_CallbackData& data, bool ok, Call& c) noexcept
{
    switch (hook) {
    case HookId::cuMemAlloc_v2: {
        const auto& p = params<cuMemAlloc_v2_params>(data);
        c.requested = c.size = p.bytesize;
        c.address = ok ? writtenDevice(p.dptr) : 0;
        break;
    }
    case HookId::cuMemAllocManaged: {
        const auto& p = params<cuMemAllocManaged_params>(data);
        c.requested = c.size = p.bytesize;
        c.address = ok ? writtenDevice(p.dptr) : 0;
        break;
    }
    case HookId::cuMemAllocPitch_v2: {
        const auto& p = params<cuMemAllocPitch_v2_params>(data);
        c.requested = c.size = uint64_t(p.WidthInBytes) * p.Height;
        if (ok && p.pPitch) {
            c.address = writtenDevice(p.dptr);
            c.size = uint64_t(*p.pPitch) * p.Height;
        }
        break;
    }
    case HookId::cuMemAllocHost_v2: {
        const auto& p = params<cuMemAllocHost_v2_params>(data);
        c.requested = c.size = p.bytesize;
        c.address = ok && p.pp ? u64(*p.pp) : 0;
        break;
    }
    case HookId::cuMemHostAlloc: {
        const auto& p = params<cuMemHostAlloc_params>(data);
        c.requested = c.size = p.bytesize;
        c.address = ok && p.pp ? u64(*p.pp) : 0;
        break;
    }
    case HookId::cuMemAllocAsync:
    case HookId::cuMemAllocAsync_ptsz: {
        const auto& p = params<cuMemAllocAsync_params>(data);
        c.requested = c.size = p.bytesize;
        c.stream = u64(p.hStream);
        c.address = ok ? writtenDevice(p.dptr) : 0;
        break;
    }
    case HookId::cuMemAllocFromPoolAsync:
    case HookId::cuMemAllocFromPoolAsync_ptsz: {
        const auto& p = params<cuMemAllocFromPoolAsync_params>(data);
        c.requested = c.size = p.bytesize;
        c.stream = u64(p.hStream);
        c.handle = u64(p.pool);
        c.address = ok ? writtenDevice(p.dptr) : 0;
        break;
    }
    case HookId::cuMemFree_v2: c.address = uint64_t(params<cuMemFree_v2_params>(data).dptr); break;
    case HookId::cuMemFreeHost: c.address = u64(params<cuMemFreeHost_params>(data).p); break;
    case HookId::cuMemFreeAsync:
    case HookId::cuMemFreeAsync_ptsz: {
        const auto& p = params<cuMemFreeAsync_params>(data);
        c.address = uint64_t(p.dptr);
        c.stream = u64(p.hStream);
        break;
    }
    default: return false;
    }
    return true;
}

// The driver's pool, virtual memory and address-space calls: false for a call it does not know.
bool readDriverVmmCall(HookId hook, const CUpti_CallbackData& data, bool ok, Call& c) noexcept
{
    switch (hook) {
    case HookId::cuMemPoolTrimTo: {
        const auto& p = params<cuMemPoolTrimTo_params>(data);
        c.handle = u64(p.pool);
        c.size = p.minBytesToKeep;
        break;
    }
    case HookId::cuMemCreate: {
        const auto& p = params<cuMemCreate_params>(data);
        c.requested = c.size = p.size;
        c.address = ok && p.handle ? uint64_t(*p.handle) : 0;
        if (p.prop && p.prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
            c.device = p.prop->location.id;
        break;
    }
    case HookId::cuMemRelease: c.address = uint64_t(params<cuMemRelease_params>(data).handle); break;
    case HookId::cuMemMap: {
        const auto& p = params<cuMemMap_params>(data);
        c.address = uint64_t(p.ptr);
        c.size = p.size;
        c.handle = uint64_t(p.handle);
        break;
    }
    case HookId::cuMemUnmap: {
        const auto& p = params<cuMemUnmap_params>(data);
        c.address = uint64_t(p.ptr);
        c.size = p.size;
        break;
    }
    case HookId::cuMemAddressReserve: {
        const auto& p = params<cuMemAddressReserve_params>(data);
        c.requested = c.size = p.size;
        c.address = ok ? writtenDevice(p.ptr) : 0;
        break;
    }
    case HookId::cuMemAddressFree: {
        const auto& p = params<cuMemAddressFree_params>(data);
        c.address = uint64_t(p.ptr);
        c.size = p.size;
        break;
    }
    default: return false;
    }
    return true;
}

} // namespace

bool readCall(const CallSpec& spec, const CUpti_CallbackData& data, Call* out) noexcept
{
    const bool atEntry = data.callbackSite == CUPTI_API_ENTER;
    if (atEntry != recordedAtEntry(spec.op) || !data.functionParams)
        return false;
    Call c;
    c.spec = &spec;
    if (!atEntry && data.functionReturnValue)
        c.result = *static_cast<const int*>(data.functionReturnValue);
    const bool ok = c.result == 0;
    if (!readRuntimeCall(spec.hook, data, ok, c) && !readDriverAllocCall(spec.hook, data, ok, c) &&
        !readDriverVmmCall(spec.hook, data, ok, c))
        return false;
    *out = c;
    return true;
}

} // namespace oomscope::cupti
