// A libcuda.so.1 stand-in for tests without a GPU: the driver functions that allocation
// capture and the fake runtime use, with the real signatures (<cuda.h> of CUDA 13.0) and error
// codes. "Device" memory is host address space from mmap (reserved, not committed); capacity
// and the other knobs come from the environment:
//   FAKECUDA_CAPACITY        bytes per device (1GiB, 512MiB, …; default 1GiB)
//   FAKECUDA_DEVICES         number of devices (default 1)
//   FAKECUDA_CONTEXT_BYTES   memory a primary context takes (default 32MiB): the "untracked" part
//   FAKECUDA_CONTEXT_GROWTH  SIZE@N: the context takes SIZE more after the process's N-th device
//                            allocation (as kernels loaded lazily and library handles make a
//                            real one grow after the first allocation)
//   FAKECUDA_OTHER_PROCESS_BYTES  memory another process holds on each device (default 0): in
//                            the free memory the driver reports, not in this process's (the
//                            fake NVML, fake_nvml.cpp, lists both)
//   FAKECUDA_UNBACKED        1: classic allocations get addresses but no memory (no mmap per
//                            call), for benchmarks of the hooks; the memory must not be touched
// Allocations are counted in 256-byte units; VMM physical memory in 2 MiB granules.
// Not a CUDA emulator: no kernels, copies are memcpy, streams are ignored.
#include "common/size.h"
#include "interpose/cuda_extra.h"

#include <cupti.h>  // callback ids and parameter structs, for the fake CUPTI's callbacks
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <pthread.h>
#include <string>
#include <sys/mman.h>
#include <vector>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

struct CUctx_st {
    int device;
};
struct CUmemPoolHandle_st {
    int device;
    uint64_t reserved = 0;
    uint64_t used = 0;
    uint64_t reservedHigh = 0;
    uint64_t usedHigh = 0;
};

namespace {

constexpr uint64_t kGranularity = 2ull << 20;

// FAKECUDA_* sizes read by oomscope's own grammar (common/size.h); garbage keeps the fallback.
uint64_t envSize(const char* name, uint64_t fallback)
{
    const char* v = std::getenv(name);
    uint64_t n = 0;
    return v && *v && oomscope::common::parseSize(v, &n) ? n : fallback;
}

uint64_t roundUp(uint64_t v, uint64_t to)
{
    return (v + to - 1) / to * to;
}

enum class Kind { Device, Managed, Host, Pool };

struct Allocation {
    uint64_t size;     // bytes mapped
    uint64_t charged;  // bytes counted against the device
    int device;
    Kind kind;
    CUmemPoolHandle_st* pool;
};

struct PhysicalHandle {
    uint64_t size;
    int device;
    bool released;
    int mappings;
};

struct Mapping {
    uint64_t size;
    CUmemGenericAllocationHandle handle;
};

struct Device {
    uint64_t capacity = 0;
    uint64_t used = 0;   // this process's and the other's (FAKECUDA_OTHER_PROCESS_BYTES)
    uint64_t other = 0;
    int primaryRefs = 0;
    CUctx_st context{};
    CUmemPoolHandle_st pool{};
};

struct State {
    std::mutex mutex;
    bool initialized = false;
    uint64_t contextBytes = 0;
    uint64_t growthBytes = 0, growthAt = 0, deviceAllocations = 0;  // FAKECUDA_CONTEXT_GROWTH
    std::vector<Device> devices;
    std::map<uint64_t, Allocation> allocations;
    std::map<CUmemGenericAllocationHandle, PhysicalHandle> handles;
    std::map<uint64_t, Mapping> mappings;
    std::map<uint64_t, uint64_t> reservations;
    CUmemGenericAllocationHandle nextHandle = 1;
};

State& state();

// fork(): the child must not inherit the state's mutex held by another thread (the allocating
// thread of the parent). The real driver gives a forked child no CUDA at all; the fake keeps
// working, as the fork tests want the preload's own fork handling exercised.
void forkPrepare()
{
    state().mutex.lock();
}
void forkParent()
{
    state().mutex.unlock();
}
void forkChild()
{
    new (&state().mutex) std::mutex();
}

State& state()
{
    static State* s = [] {
        auto* st = new State();
        pthread_atfork(forkPrepare, forkParent, forkChild);
        const int count = std::max(1, int(envSize("FAKECUDA_DEVICES", 1)));
        st->contextBytes = envSize("FAKECUDA_CONTEXT_BYTES", 32ull << 20);
        if (const char* g = std::getenv("FAKECUDA_CONTEXT_GROWTH"); g && std::strchr(g, '@')) {
            const std::string text(g);
            const size_t at = text.find('@');
            uint64_t bytes = 0;
            if (oomscope::common::parseSize(text.substr(0, at).c_str(), &bytes)) {
                st->growthBytes = bytes;
                st->growthAt = std::strtoull(text.c_str() + at + 1, nullptr, 10);
            }
        }
        st->devices.resize(size_t(count));
        for (int i = 0; i < count; ++i) {
            st->devices[size_t(i)].capacity = envSize("FAKECUDA_CAPACITY", 1ull << 30);
            st->devices[size_t(i)].other = envSize("FAKECUDA_OTHER_PROCESS_BYTES", 0);
            st->devices[size_t(i)].used = st->devices[size_t(i)].other;
            st->devices[size_t(i)].context.device = i;
            st->devices[size_t(i)].pool.device = i;
        }
        return st;
    }();
    return *s;
}

// The context stack of a thread. Plain arrays, no destructor: a report written by an atexit
// handler still asks for the current context after thread_local destructors have run.
constexpr int kMaxContextDepth = 16;
thread_local CUcontext t_contexts[kMaxContextDepth];
thread_local int t_contextDepth = 0;

CUcontext currentContext()
{
    return t_contextDepth == 0 ? nullptr : t_contexts[t_contextDepth - 1];
}

// ---- CUPTI callbacks (tests/fakecuda/fake_cupti.cpp subscribes through this door): the memory
// functions below report their entry and exit, as the real driver does to CUPTI.
using FakeCuptiDispatch = void (*)(CUpti_CallbackDomain, CUpti_CallbackId, const CUpti_CallbackData*);
std::atomic<FakeCuptiDispatch> g_cuptiDispatch{nullptr};

template <class Body>
CUresult traced(CUpti_CallbackId cbid, const char* name, const void* params, Body body)
{
    const FakeCuptiDispatch dispatch = g_cuptiDispatch.load(std::memory_order_acquire);
    if (!dispatch)
        return body();
    CUresult rc = CUDA_SUCCESS;
    CUpti_CallbackData data{};
    data.callbackSite = CUPTI_API_ENTER;
    data.functionName = name;
    data.functionParams = params;
    data.functionReturnValue = &rc;
    data.context = currentContext();
    dispatch(CUPTI_CB_DOMAIN_DRIVER_API, cbid, &data);
    rc = body();
    data.callbackSite = CUPTI_API_EXIT;
    dispatch(CUPTI_CB_DOMAIN_DRIVER_API, cbid, &data);
    return rc;
}

} // namespace

FAKE_EXPORT void fakecuda_set_cupti_dispatch(FakeCuptiDispatch dispatch)
{
    g_cuptiDispatch.store(dispatch, std::memory_order_release);
}

// The fake runtime's door to the same callbacks (CUPTI's runtime domain).
FAKE_EXPORT void fakecuda_cupti_runtime_callback(CUpti_CallbackId cbid, const CUpti_CallbackData* data)
{
    if (const FakeCuptiDispatch dispatch = g_cuptiDispatch.load(std::memory_order_acquire))
        dispatch(CUPTI_CB_DOMAIN_RUNTIME_API, cbid, data);
}

namespace {

bool unbacked()
{
    static const bool on = [] {
        const char* v = std::getenv("FAKECUDA_UNBACKED");
        return v && std::strcmp(v, "1") == 0;
    }();
    return on;
}

void* mapMemory(uint64_t size)
{
    if (unbacked()) {  // addresses from a range nobody maps, 4 KiB apart at least
        static std::atomic<uint64_t> next{uint64_t(0x5a0000000000)};
        return reinterpret_cast<void*>(next.fetch_add(roundUp(std::max<uint64_t>(size, 1), 4096)));
    }
    void* p = mmap(nullptr, roundUp(std::max<uint64_t>(size, 1), 4096), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
}

// Charges `charge` bytes to the device and records the mapping; caller holds the mutex.
CUresult allocateLocked(State& s, int device, uint64_t size, uint64_t charge, Kind kind, CUmemPoolHandle_st* pool,
                        uint64_t* out)
{
    Device& d = s.devices[size_t(device)];
    if (charge > d.capacity - std::min(d.used, d.capacity))
        return CUDA_ERROR_OUT_OF_MEMORY;
    void* p = mapMemory(size);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    d.used += charge;
    s.allocations[uint64_t(p)] = Allocation{size, charge, device, kind, pool};
    *out = uint64_t(p);
    return CUDA_SUCCESS;
}

CUresult deviceAlloc(uint64_t* out, size_t bytes, Kind kind)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUcontext ctx = currentContext();
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    const uint64_t charge = kind == Kind::Device ? roundUp(bytes, 256) : 0;
    const CUresult rc = allocateLocked(s, ctx->device, bytes, charge, kind, nullptr, out);
    if (rc == CUDA_SUCCESS && kind == Kind::Device && s.growthBytes && ++s.deviceAllocations == s.growthAt) {
        Device& d = s.devices[size_t(ctx->device)];  // the context grows, where the device has room
        d.used += std::min(s.growthBytes, d.capacity - std::min(d.used, d.capacity));
    }
    return rc;
}

CUresult release(uint64_t ptr, bool host)
{
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.allocations.find(ptr);
    if (it == s.allocations.end() || (it->second.kind == Kind::Host) != host)
        return CUDA_ERROR_INVALID_VALUE;
    Allocation a = it->second;
    s.allocations.erase(it);
    if (a.kind == Kind::Pool) {
        a.pool->used -= a.size;  // the bytes stay reserved by the pool until a trim
    } else {
        s.devices[size_t(a.device)].used -= a.charged;
    }
    if (!unbacked())
        munmap(reinterpret_cast<void*>(ptr), roundUp(std::max<uint64_t>(a.size, 1), 4096));
    return CUDA_SUCCESS;
}

CUresult poolAlloc(uint64_t* out, size_t bytes, CUmemPoolHandle_st* pool)
{
    if (!out || !pool || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    const uint64_t size = roundUp(bytes, 256);
    const uint64_t idle = pool->reserved - pool->used;
    const uint64_t grow = idle >= size ? 0 : roundUp(size - idle, kGranularity);
    const CUresult rc = allocateLocked(s, pool->device, size, grow, Kind::Pool, pool, out);
    if (rc != CUDA_SUCCESS)
        return rc;
    s.allocations[*out].charged = 0;
    pool->reserved += grow;
    pool->used += size;
    pool->reservedHigh = std::max(pool->reservedHigh, pool->reserved);
    pool->usedHigh = std::max(pool->usedHigh, pool->used);
    return CUDA_SUCCESS;
}

void freePhysicalIfDone(State& s, CUmemGenericAllocationHandle handle)
{
    auto it = s.handles.find(handle);
    if (it != s.handles.end() && it->second.released && it->second.mappings == 0) {
        s.devices[size_t(it->second.device)].used -= it->second.size;
        s.handles.erase(it);
    }
}

struct ErrorName {
    CUresult code;
    const char* name;
    const char* text;
};
constexpr ErrorName kErrors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
};

} // namespace

// ---- initialisation, devices, contexts ----

FAKE_EXPORT CUresult cuInit(unsigned int flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    // As the real driver: the first cuInit opens the library named by CUDA_INJECTION64_PATH
    // and calls its InitializeInjection.
    static std::atomic<bool> injected{false};
    if (!injected.exchange(true)) {
        const char* path = std::getenv("CUDA_INJECTION64_PATH");
        if (void* lib = path && *path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr) {
            if (auto init = reinterpret_cast<int (*)()>(dlsym(lib, "InitializeInjection")))
                init();
        }
    }
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.initialized = true;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDriverGetVersion(int* version)
{
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = CUDA_VERSION;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetCount(int* count)
{
    State& s = state();
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    if (!s.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    *count = int(s.devices.size());
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal)
{
    State& s = state();
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (!s.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (ordinal < 0 || size_t(ordinal) >= s.devices.size())
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetName(char* name, int len, CUdevice dev)
{
    State& s = state();
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || size_t(dev) >= s.devices.size())
        return CUDA_ERROR_INVALID_DEVICE;
    std::snprintf(name, size_t(len), "oomscope fakecuda (simulated GPU)");
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev)
{
    State& s = state();
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || size_t(dev) >= s.devices.size())
        return CUDA_ERROR_INVALID_DEVICE;
    for (int i = 0; i < 16; ++i)
        uuid->bytes[i] = char(0xfa + (i == 15 ? dev : 0));
    return CUDA_SUCCESS;
}

// For the fake NVML: what this process and the other one hold on a device; false where the
// process has no context there (the real driver lists a process once it has one).
FAKE_EXPORT bool fakecuda_process_bytes(int dev, uint64_t* own, uint64_t* other)
{
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (dev < 0 || size_t(dev) >= s.devices.size())
        return false;
    const Device& d = s.devices[size_t(dev)];
    *own = d.used - d.other;
    *other = d.other;
    return d.primaryRefs > 0;
}

FAKE_EXPORT CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev)
{
    return cuDeviceGetUuid_v2(uuid, dev);
}

FAKE_EXPORT CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev)
{
    State& s = state();
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || size_t(dev) >= s.devices.size())
        return CUDA_ERROR_INVALID_DEVICE;
    *bytes = s.devices[size_t(dev)].capacity;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev)
{
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!ctx || dev < 0 || size_t(dev) >= s.devices.size())
        return CUDA_ERROR_INVALID_VALUE;
    Device& d = s.devices[size_t(dev)];
    if (d.primaryRefs++ == 0) {
        if (s.contextBytes > d.capacity - std::min(d.used, d.capacity)) {
            d.primaryRefs = 0;
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        d.used += s.contextBytes;
    }
    *ctx = &d.context;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (dev < 0 || size_t(dev) >= s.devices.size())
        return CUDA_ERROR_INVALID_DEVICE;
    Device& d = s.devices[size_t(dev)];
    if (d.primaryRefs == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (--d.primaryRefs == 0)
        d.used -= s.contextBytes;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active)
{
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || size_t(dev) >= s.devices.size())
        return CUDA_ERROR_INVALID_DEVICE;
    *flags = 0;
    *active = s.devices[size_t(dev)].primaryRefs > 0;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxGetCurrent(CUcontext* ctx)
{
    if (!ctx)
        return CUDA_ERROR_INVALID_VALUE;
    if (!state().initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    *ctx = currentContext();
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
    if (t_contextDepth == 0)
        t_contextDepth = 1;
    t_contexts[t_contextDepth - 1] = ctx;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    if (!ctx || t_contextDepth == kMaxContextDepth)
        return CUDA_ERROR_INVALID_CONTEXT;
    t_contexts[t_contextDepth++] = ctx;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext* ctx)
{
    if (t_contextDepth == 0 || !t_contexts[t_contextDepth - 1])
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx)
        *ctx = t_contexts[t_contextDepth - 1];
    --t_contextDepth;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxGetDevice(CUdevice* device)
{
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    CUcontext ctx = currentContext();
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    *device = ctx->device;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxSynchronize()
{
    return currentContext() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

FAKE_EXPORT CUresult cuMemGetInfo_v2(size_t* free, size_t* total)
{
    if (!free || !total)
        return CUDA_ERROR_INVALID_VALUE;
    CUcontext ctx = currentContext();
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    const Device& d = s.devices[size_t(ctx->device)];
    *total = d.capacity;
    *free = d.capacity - std::min(d.used, d.capacity);
    return CUDA_SUCCESS;
}

// ---- classic allocations ----

static CUresult cuMemAlloc_v2_impl(CUdeviceptr* dptr, size_t bytes);

FAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes)
{
    cuMemAlloc_v2_params params{dptr, bytes};
    return traced(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, "cuMemAlloc_v2", &params, [&] { return cuMemAlloc_v2_impl(dptr, bytes); });
}

static CUresult cuMemAlloc_v2_impl(CUdeviceptr* dptr, size_t bytes)
{
    return deviceAlloc(reinterpret_cast<uint64_t*>(dptr), bytes, Kind::Device);
}

FAKE_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                                         unsigned int elementSize)
{
    if (!pitch || (elementSize != 4 && elementSize != 8 && elementSize != 16))
        return CUDA_ERROR_INVALID_VALUE;
    const size_t p = roundUp(width, 512);
    const CUresult rc = deviceAlloc(reinterpret_cast<uint64_t*>(dptr), p * height, Kind::Device);
    if (rc == CUDA_SUCCESS)
        *pitch = p;
    return rc;
}

static CUresult cuMemAllocManaged_impl(CUdeviceptr* dptr, size_t bytes, unsigned int flags);

FAKE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytes, unsigned int flags)
{
    cuMemAllocManaged_params params{dptr, bytes, flags};
    return traced(CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged, "cuMemAllocManaged", &params, [&] { return cuMemAllocManaged_impl(dptr, bytes, flags); });
}

static CUresult cuMemAllocManaged_impl(CUdeviceptr* dptr, size_t bytes, unsigned int flags)
{
    (void)flags;
    return deviceAlloc(reinterpret_cast<uint64_t*>(dptr), bytes, Kind::Managed);
}

static CUresult cuMemFree_v2_impl(CUdeviceptr dptr);

FAKE_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    cuMemFree_v2_params params{dptr};
    return traced(CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, "cuMemFree_v2", &params, [&] { return cuMemFree_v2_impl(dptr); });
}

static CUresult cuMemFree_v2_impl(CUdeviceptr dptr)
{
    if (dptr == 0)
        return CUDA_SUCCESS;
    return release(dptr, false);
}

static CUresult cuMemHostAlloc_impl(void** pp, size_t bytes, unsigned int flags);

FAKE_EXPORT CUresult cuMemHostAlloc(void** pp, size_t bytes, unsigned int flags)
{
    cuMemHostAlloc_params params{pp, bytes, flags};
    return traced(CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc, "cuMemHostAlloc", &params, [&] { return cuMemHostAlloc_impl(pp, bytes, flags); });
}

static CUresult cuMemHostAlloc_impl(void** pp, size_t bytes, unsigned int flags)
{
    (void)flags;
    if (!pp)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t p = 0;
    const CUresult rc = deviceAlloc(&p, bytes, Kind::Host);
    if (rc == CUDA_SUCCESS)
        *pp = reinterpret_cast<void*>(p);
    return rc;
}

FAKE_EXPORT CUresult cuMemAllocHost_v2(void** pp, size_t bytes)
{
    return cuMemHostAlloc(pp, bytes, 0);
}

static CUresult cuMemFreeHost_impl(void* p);

FAKE_EXPORT CUresult cuMemFreeHost(void* p)
{
    cuMemFreeHost_params params{p};
    return traced(CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost, "cuMemFreeHost", &params, [&] { return cuMemFreeHost_impl(p); });
}

static CUresult cuMemFreeHost_impl(void* p)
{
    return release(uint64_t(p), true);
}

FAKE_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t n)
{
    std::memset(reinterpret_cast<void*>(dst), value, n);
    return CUDA_SUCCESS;
}

// ---- stream-ordered pools ----

FAKE_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev)
{
    State& s = state();
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || size_t(dev) >= s.devices.size())
        return CUDA_ERROR_INVALID_DEVICE;
    *pool = &s.devices[size_t(dev)].pool;
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream)
{
    return poolAlloc(reinterpret_cast<uint64_t*>(dptr), bytes, pool);
}

FAKE_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream stream)
{
    return cuMemAllocFromPoolAsync(dptr, bytes, pool, stream);
}

static CUresult cuMemAllocAsync_impl(CUdeviceptr* dptr, size_t bytes, CUstream stream);

FAKE_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream stream)
{
    cuMemAllocAsync_params params{dptr, bytes, stream};
    return traced(CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync, "cuMemAllocAsync", &params, [&] { return cuMemAllocAsync_impl(dptr, bytes, stream); });
}

static CUresult cuMemAllocAsync_impl(CUdeviceptr* dptr, size_t bytes, CUstream stream)
{
    CUcontext ctx = currentContext();
    if (!ctx)
        return CUDA_ERROR_INVALID_CONTEXT;
    return cuMemAllocFromPoolAsync(dptr, bytes, &state().devices[size_t(ctx->device)].pool, stream);
}

FAKE_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUstream stream)
{
    return cuMemAllocAsync(dptr, bytes, stream);
}

static CUresult cuMemFreeAsync_impl(CUdeviceptr dptr, CUstream);

FAKE_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream)
{
    cuMemFreeAsync_params params{dptr, stream};
    return traced(CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync, "cuMemFreeAsync", &params, [&] { return cuMemFreeAsync_impl(dptr, stream); });
}

static CUresult cuMemFreeAsync_impl(CUdeviceptr dptr, CUstream)
{
    return release(dptr, false);
}

FAKE_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream)
{
    return cuMemFreeAsync(dptr, stream);
}

FAKE_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    const uint64_t keep = std::max<uint64_t>(roundUp(pool->used, kGranularity), minBytesToKeep);
    if (pool->reserved > keep) {
        s.devices[size_t(pool->device)].used -= pool->reserved - keep;
        pool->reserved = keep;
    }
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value)
{
    if (!pool || !value)
        return CUDA_ERROR_INVALID_VALUE;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    auto* out = static_cast<cuuint64_t*>(value);
    switch (attr) {
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *out = pool->reserved; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *out = pool->reservedHigh; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *out = pool->used; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *out = pool->usedHigh; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *out = 0; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}

// ---- virtual memory management ----

FAKE_EXPORT CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                                    CUmemAllocationGranularity_flags)
{
    if (!granularity || !prop)
        return CUDA_ERROR_INVALID_VALUE;
    *granularity = kGranularity;
    return CUDA_SUCCESS;
}

static CUresult cuMemCreate_impl(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop, unsigned long long flags);

FAKE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop, unsigned long long flags)
{
    cuMemCreate_params params{handle, size, prop, flags};
    return traced(CUPTI_DRIVER_TRACE_CBID_cuMemCreate, "cuMemCreate", &params, [&] { return cuMemCreate_impl(handle, size, prop, flags); });
}

static CUresult cuMemCreate_impl(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop, unsigned long long flags)
{
    if (!handle || !prop || flags != 0 || size == 0 || size % kGranularity != 0)
        return CUDA_ERROR_INVALID_VALUE;
    // PyTorch asks for a fabric-exportable handle first; where fabric is not set up the driver
    // answers "not permitted" (measured on the H200) and PyTorch falls back to a plain handle.
    if (prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_FABRIC)
        return CUDA_ERROR_NOT_PERMITTED;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    const int dev = prop->location.id;
    if (dev < 0 || size_t(dev) >= s.devices.size())
        return CUDA_ERROR_INVALID_DEVICE;
    Device& d = s.devices[size_t(dev)];
    if (size > d.capacity - std::min(d.used, d.capacity))
        return CUDA_ERROR_OUT_OF_MEMORY;
    d.used += size;
    *handle = s.nextHandle++;
    s.handles[*handle] = PhysicalHandle{size, dev, false, 0};
    return CUDA_SUCCESS;
}

static CUresult cuMemRelease_impl(CUmemGenericAllocationHandle handle);

FAKE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    cuMemRelease_params params{handle};
    return traced(CUPTI_DRIVER_TRACE_CBID_cuMemRelease, "cuMemRelease", &params, [&] { return cuMemRelease_impl(handle); });
}

static CUresult cuMemRelease_impl(CUmemGenericAllocationHandle handle)
{
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.handles.find(handle);
    if (it == s.handles.end() || it->second.released)
        return CUDA_ERROR_INVALID_VALUE;
    it->second.released = true;
    freePhysicalIfDone(s, handle);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                          unsigned long long flags)
{
    (void)alignment;
    (void)addr;
    if (!ptr || size == 0 || size % kGranularity != 0 || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    void* p = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.reservations[uint64_t(p)] = size;
    *ptr = CUdeviceptr(p);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.reservations.find(ptr);
    if (it == s.reservations.end() || it->second != size)
        return CUDA_ERROR_INVALID_VALUE;
    munmap(reinterpret_cast<void*>(ptr), size);
    s.reservations.erase(it);
    return CUDA_SUCCESS;
}

static CUresult cuMemMap_impl(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags);

FAKE_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    cuMemMap_params params{ptr, size, offset, handle, flags};
    return traced(CUPTI_DRIVER_TRACE_CBID_cuMemMap, "cuMemMap", &params, [&] { return cuMemMap_impl(ptr, size, offset, handle, flags); });
}

static CUresult cuMemMap_impl(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    if (offset != 0 || flags != 0 || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    auto h = s.handles.find(handle);
    if (h == s.handles.end() || h->second.released || size > h->second.size || s.mappings.count(ptr))
        return CUDA_ERROR_INVALID_VALUE;
    ++h->second.mappings;
    s.mappings[ptr] = Mapping{size, handle};
    mprotect(reinterpret_cast<void*>(ptr), size, PROT_READ | PROT_WRITE);
    return CUDA_SUCCESS;
}

static CUresult cuMemUnmap_impl(CUdeviceptr ptr, size_t size);

FAKE_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    cuMemUnmap_params params{ptr, size};
    return traced(CUPTI_DRIVER_TRACE_CBID_cuMemUnmap, "cuMemUnmap", &params, [&] { return cuMemUnmap_impl(ptr, size); });
}

static CUresult cuMemUnmap_impl(CUdeviceptr ptr, size_t size)
{
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.mappings.find(ptr);
    if (it == s.mappings.end() || it->second.size != size)
        return CUDA_ERROR_INVALID_VALUE;
    const CUmemGenericAllocationHandle handle = it->second.handle;
    s.mappings.erase(it);
    --s.handles[handle].mappings;
    mprotect(reinterpret_cast<void*>(ptr), size, PROT_NONE);
    freePhysicalIfDone(s, handle);
    return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemSetAccess(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t count)
{
    return count > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// ---- errors and entry points ----

FAKE_EXPORT CUresult cuGetErrorName(CUresult error, const char** name)
{
    if (!name)
        return CUDA_ERROR_INVALID_VALUE;
    for (const ErrorName& e : kErrors) {
        if (e.code == error) {
            *name = e.name;
            return CUDA_SUCCESS;
        }
    }
    *name = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
}

FAKE_EXPORT CUresult cuGetErrorString(CUresult error, const char** text)
{
    if (!text)
        return CUDA_ERROR_INVALID_VALUE;
    for (const ErrorName& e : kErrors) {
        if (e.code == error) {
            *text = e.text;
            return CUDA_SUCCESS;
        }
    }
    *text = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
}

FAKE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                          CUdriverProcAddressQueryResult* status);

namespace {

// cuGetProcAddress's table: base name, the first CUDA version of this variant, whether it is the
// per-thread-default-stream variant, and the function. The highest version not above the
// caller's wins, as in the real driver.
struct ProcEntry {
    const char* symbol;
    int version;
    bool ptsz;
    void* fn;
};
#define FAKE_PROC(sym, ver, fn) {sym, ver, false, reinterpret_cast<void*>(&fn)}
#define FAKE_PROC_PTSZ(sym, ver, fn) {sym, ver, true, reinterpret_cast<void*>(&fn)}
const ProcEntry kProcs[] = {
    FAKE_PROC("cuInit", 2000, cuInit),
    FAKE_PROC("cuDriverGetVersion", 2020, cuDriverGetVersion),
    FAKE_PROC("cuDeviceGetCount", 2000, cuDeviceGetCount),
    FAKE_PROC("cuDeviceGet", 2000, cuDeviceGet),
    FAKE_PROC("cuDeviceGetName", 2000, cuDeviceGetName),
    FAKE_PROC("cuDeviceGetUuid", 9020, cuDeviceGetUuid),
    FAKE_PROC("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2),
    FAKE_PROC("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    FAKE_PROC("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    FAKE_PROC("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    FAKE_PROC("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState),
    FAKE_PROC("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    FAKE_PROC("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    FAKE_PROC("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    FAKE_PROC("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    FAKE_PROC("cuCtxGetDevice", 2000, cuCtxGetDevice),
    FAKE_PROC("cuCtxSynchronize", 2000, cuCtxSynchronize),
    FAKE_PROC("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    FAKE_PROC("cuMemAlloc", 3020, cuMemAlloc_v2),
    FAKE_PROC("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    FAKE_PROC("cuMemAllocManaged", 6000, cuMemAllocManaged),
    FAKE_PROC("cuMemFree", 3020, cuMemFree_v2),
    FAKE_PROC("cuMemHostAlloc", 2020, cuMemHostAlloc),
    FAKE_PROC("cuMemAllocHost", 3020, cuMemAllocHost_v2),
    FAKE_PROC("cuMemFreeHost", 2000, cuMemFreeHost),
    FAKE_PROC("cuMemsetD8", 3020, cuMemsetD8_v2),
    FAKE_PROC("cuDeviceGetDefaultMemPool", 11020, cuDeviceGetDefaultMemPool),
    FAKE_PROC("cuMemAllocAsync", 11020, cuMemAllocAsync),
    FAKE_PROC_PTSZ("cuMemAllocAsync", 11020, cuMemAllocAsync_ptsz),
    FAKE_PROC("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync),
    FAKE_PROC_PTSZ("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync_ptsz),
    FAKE_PROC("cuMemFreeAsync", 11020, cuMemFreeAsync),
    FAKE_PROC_PTSZ("cuMemFreeAsync", 11020, cuMemFreeAsync_ptsz),
    FAKE_PROC("cuMemPoolTrimTo", 11020, cuMemPoolTrimTo),
    FAKE_PROC("cuMemPoolGetAttribute", 11020, cuMemPoolGetAttribute),
    FAKE_PROC("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),
    FAKE_PROC("cuMemCreate", 10020, cuMemCreate),
    FAKE_PROC("cuMemRelease", 10020, cuMemRelease),
    FAKE_PROC("cuMemAddressReserve", 10020, cuMemAddressReserve),
    FAKE_PROC("cuMemAddressFree", 10020, cuMemAddressFree),
    FAKE_PROC("cuMemMap", 10020, cuMemMap),
    FAKE_PROC("cuMemUnmap", 10020, cuMemUnmap),
    FAKE_PROC("cuMemSetAccess", 10020, cuMemSetAccess),
    FAKE_PROC("cuGetErrorName", 6000, cuGetErrorName),
    FAKE_PROC("cuGetErrorString", 6000, cuGetErrorString),
    FAKE_PROC("cuGetProcAddress", 11030, cuGetProcAddress),
    FAKE_PROC("cuGetProcAddress", 12000, cuGetProcAddress_v2),
};

} // namespace

FAKE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                          CUdriverProcAddressQueryResult* status)
{
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    const bool ptsz = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    // The per-thread variant when asked for and one exists; functions without a stream have
    // none, and then the plain one is returned, as the real driver does.
    const ProcEntry* best = nullptr;
    bool known = false;
    for (bool wantPtsz : {ptsz, false}) {
        for (const ProcEntry& e : kProcs) {
            if (std::strcmp(e.symbol, symbol) != 0)
                continue;
            known = true;
            if (e.ptsz == wantPtsz && e.version <= cudaVersion && (!best || e.version > best->version))
                best = &e;
        }
        if (best)
            break;
    }
    *pfn = best ? best->fn : nullptr;
    if (status)
        *status = best ? CU_GET_PROC_ADDRESS_SUCCESS
                       : known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return best ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

FAKE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags)
{
    return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, nullptr);
}

// The same functions under names the preload never interposes, for the hook benchmark's
// "direct" side (this library binds its own symbols locally: -Bsymbolic).
FAKE_EXPORT CUresult fakecuda_direct_cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes)
{
    return cuMemAlloc_v2(dptr, bytes);
}

FAKE_EXPORT CUresult fakecuda_direct_cuMemFree_v2(CUdeviceptr dptr)
{
    return cuMemFree_v2(dptr);
}
