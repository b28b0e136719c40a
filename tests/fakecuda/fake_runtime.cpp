// A libcudart.so.13 stand-in for tests without a GPU, built on the fake libcuda.so.1 the way
// the real runtime is built on the real driver: it dlopen()s libcuda.so.1, takes
// cuGetProcAddress_v2 with dlsym and every driver function through it. So the interposer's
// entry-point doors are exercised exactly as on a GPU. Signatures and error codes are those of
// <cuda_runtime_api.h> (CUDA 13.0); symbols carry the version node libcudart.so.13.
#include "interpose/cuda_extra.h"

#include <cupti.h>  // runtime-domain callbacks of the fakecuda_static_* entries

#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <mutex>
#include <new>
#include <pthread.h>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

struct Driver {
    decltype(&cuInit) init = nullptr;
    decltype(&cuDriverGetVersion) driverGetVersion = nullptr;
    decltype(&cuDeviceGetCount) deviceGetCount = nullptr;
    decltype(&cuDeviceGet) deviceGet = nullptr;
    decltype(&cuDeviceGetName) deviceGetName = nullptr;
    decltype(&cuDeviceGetUuid_v2) deviceGetUuid = nullptr;
    decltype(&cuDeviceTotalMem_v2) deviceTotalMem = nullptr;
    decltype(&cuDevicePrimaryCtxRetain) primaryCtxRetain = nullptr;
    decltype(&cuCtxSetCurrent) ctxSetCurrent = nullptr;
    decltype(&cuCtxGetCurrent) ctxGetCurrent = nullptr;
    decltype(&cuMemGetInfo_v2) memGetInfo = nullptr;
    decltype(&cuMemAlloc_v2) memAlloc = nullptr;
    decltype(&cuMemAllocPitch_v2) memAllocPitch = nullptr;
    decltype(&cuMemAllocManaged) memAllocManaged = nullptr;
    decltype(&cuMemFree_v2) memFree = nullptr;
    decltype(&cuMemHostAlloc) memHostAlloc = nullptr;
    decltype(&cuMemFreeHost) memFreeHost = nullptr;
    decltype(&cuMemsetD8_v2) memsetD8 = nullptr;
    decltype(&cuMemAllocAsync) memAllocAsync = nullptr;
    decltype(&cuMemAllocAsync) memAllocAsyncPtsz = nullptr;
    decltype(&cuMemFreeAsync) memFreeAsync = nullptr;
    decltype(&cuMemFreeAsync) memFreeAsyncPtsz = nullptr;
    decltype(&cuMemAllocFromPoolAsync) memAllocFromPoolAsync = nullptr;
    decltype(&cuMemAllocFromPoolAsync) memAllocFromPoolAsyncPtsz = nullptr;
    decltype(&cuDeviceGetDefaultMemPool) deviceGetDefaultMemPool = nullptr;
    decltype(&cuMemPoolGetAttribute) memPoolGetAttribute = nullptr;
    decltype(&cuMemPoolTrimTo) memPoolTrimTo = nullptr;
    decltype(&cuGetProcAddress_v2) getProcAddress = nullptr;
    bool ok = false;
};

template <class Fn>
void load(Driver& d, Fn& slot, const char* symbol, bool ptsz = false)
{
    void* p = nullptr;
    const cuuint64_t flags = ptsz ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : CU_GET_PROC_ADDRESS_DEFAULT;
    if (d.getProcAddress(symbol, &p, CUDA_VERSION, flags, nullptr) == CUDA_SUCCESS)
        slot = reinterpret_cast<Fn>(p);
    else
        d.ok = false;
}

std::mutex g_contextMutex;

Driver& driver()
{
    static Driver d;
    static std::once_flag once;
    std::call_once(once, [] {
        void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!lib)
            return;
        d.getProcAddress = reinterpret_cast<decltype(&cuGetProcAddress_v2)>(dlsym(lib, "cuGetProcAddress_v2"));
        if (!d.getProcAddress)
            return;
        d.ok = true;
        load(d, d.init, "cuInit");
        load(d, d.driverGetVersion, "cuDriverGetVersion");
        load(d, d.deviceGetCount, "cuDeviceGetCount");
        load(d, d.deviceGet, "cuDeviceGet");
        load(d, d.deviceGetName, "cuDeviceGetName");
        load(d, d.deviceGetUuid, "cuDeviceGetUuid");
        load(d, d.deviceTotalMem, "cuDeviceTotalMem");
        load(d, d.primaryCtxRetain, "cuDevicePrimaryCtxRetain");
        load(d, d.ctxSetCurrent, "cuCtxSetCurrent");
        load(d, d.ctxGetCurrent, "cuCtxGetCurrent");
        load(d, d.memGetInfo, "cuMemGetInfo");
        load(d, d.memAlloc, "cuMemAlloc");
        load(d, d.memAllocPitch, "cuMemAllocPitch");
        load(d, d.memAllocManaged, "cuMemAllocManaged");
        load(d, d.memFree, "cuMemFree");
        load(d, d.memHostAlloc, "cuMemHostAlloc");
        load(d, d.memFreeHost, "cuMemFreeHost");
        load(d, d.memsetD8, "cuMemsetD8");
        load(d, d.memAllocAsync, "cuMemAllocAsync");
        load(d, d.memAllocAsyncPtsz, "cuMemAllocAsync", true);
        load(d, d.memFreeAsync, "cuMemFreeAsync");
        load(d, d.memFreeAsyncPtsz, "cuMemFreeAsync", true);
        load(d, d.memAllocFromPoolAsync, "cuMemAllocFromPoolAsync");
        load(d, d.memAllocFromPoolAsyncPtsz, "cuMemAllocFromPoolAsync", true);
        load(d, d.deviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool");
        load(d, d.memPoolGetAttribute, "cuMemPoolGetAttribute");
        load(d, d.memPoolTrimTo, "cuMemPoolTrimTo");
        if (d.ok && d.init(0) != CUDA_SUCCESS)
            d.ok = false;
        if (d.ok) {
            // fork(): ensureContext holds g_contextMutex while it calls the driver, so a child
            // forked then would inherit it locked. Registered after the driver's own handlers
            // (deviceGetCount makes sure they are): prepare handlers run in reverse order, so
            // this lock is taken before the driver's, the order ensureContext takes them in.
            int count = 0;
            d.deviceGetCount(&count);
            pthread_atfork([] { g_contextMutex.lock(); }, [] { g_contextMutex.unlock(); },
                           [] { new (&g_contextMutex) std::mutex(); });
        }
    });
    return d;
}

thread_local int t_device = 0;
thread_local cudaError_t t_lastError = cudaSuccess;
CUcontext g_primary[64] = {};

cudaError_t fromDriver(CUresult rc)
{
    switch (rc) {
    case CUDA_SUCCESS: return cudaSuccess;
    case CUDA_ERROR_INVALID_VALUE: return cudaErrorInvalidValue;
    case CUDA_ERROR_OUT_OF_MEMORY: return cudaErrorMemoryAllocation;
    case CUDA_ERROR_NOT_INITIALIZED: return cudaErrorInitializationError;
    case CUDA_ERROR_INVALID_DEVICE: return cudaErrorInvalidDevice;
    case CUDA_ERROR_NOT_FOUND: return cudaErrorSymbolNotFound;
    default: return cudaErrorUnknown;
    }
}

cudaError_t fail(cudaError_t e)
{
    if (e != cudaSuccess)
        t_lastError = e;
    return e;
}

// Makes the thread's device current, creating its primary context on first use (lazily, as
// the real runtime does).
cudaError_t ensureContext()
{
    Driver& d = driver();
    if (!d.ok)
        return fail(cudaErrorInitializationError);
    int count = 0;
    d.deviceGetCount(&count);
    if (t_device < 0 || t_device >= count || t_device >= 64)
        return fail(cudaErrorInvalidDevice);
    CUcontext ctx;
    {
        std::lock_guard<std::mutex> lock(g_contextMutex);
        if (!g_primary[t_device]) {
            const CUresult rc = d.primaryCtxRetain(&g_primary[t_device], t_device);
            if (rc != CUDA_SUCCESS)
                return fail(fromDriver(rc));
        }
        ctx = g_primary[t_device];
    }
    CUcontext current = nullptr;
    d.ctxGetCurrent(&current);
    if (current != ctx)
        d.ctxSetCurrent(ctx);
    return cudaSuccess;
}

template <class Call>
cudaError_t withContext(Call&& call)
{
    if (const cudaError_t e = ensureContext(); e != cudaSuccess)
        return e;
    return fail(fromDriver(call(driver())));
}

struct RuntimeError {
    cudaError_t code;
    const char* name;
    const char* text;
};
constexpr RuntimeError kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorSymbolNotFound, "cudaErrorSymbolNotFound", "named symbol not found"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};

} // namespace

// ---- device management ----

FAKE_EXPORT cudaError_t cudaGetDeviceCount(int* count)
{
    if (!count)
        return fail(cudaErrorInvalidValue);
    Driver& d = driver();
    if (!d.ok)
        return fail(cudaErrorInitializationError);
    return fail(fromDriver(d.deviceGetCount(count)));
}

FAKE_EXPORT cudaError_t cudaGetDevice(int* device)
{
    if (!device)
        return fail(cudaErrorInvalidValue);
    *device = t_device;
    return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaSetDevice(int device)
{
    int count = 0;
    if (const cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess)
        return e;
    if (device < 0 || device >= count)
        return fail(cudaErrorInvalidDevice);
    t_device = device;
    return ensureContext();
}

FAKE_EXPORT cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device)
{
    if (!prop)
        return fail(cudaErrorInvalidValue);
    Driver& d = driver();
    int count = 0;
    if (!d.ok || d.deviceGetCount(&count) != CUDA_SUCCESS)
        return fail(cudaErrorInitializationError);
    if (device < 0 || device >= count)
        return fail(cudaErrorInvalidDevice);
    std::memset(prop, 0, sizeof(*prop));
    d.deviceGetName(prop->name, sizeof(prop->name), device);
    CUuuid uuid{};
    d.deviceGetUuid(&uuid, device);
    std::memcpy(&prop->uuid, &uuid, sizeof(uuid));
    d.deviceTotalMem(&prop->totalGlobalMem, device);
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 132;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->memoryPoolsSupported = 1;
    prop->managedMemory = 1;
    return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaDeviceSynchronize()
{
    return ensureContext();
}

FAKE_EXPORT cudaError_t cudaDeviceReset()
{
    return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaRuntimeGetVersion(int* version)
{
    if (!version)
        return fail(cudaErrorInvalidValue);
    *version = CUDART_VERSION;
    return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaDriverGetVersion(int* version)
{
    if (!version)
        return fail(cudaErrorInvalidValue);
    Driver& d = driver();
    if (!d.ok)
        return fail(cudaErrorInitializationError);
    return fail(fromDriver(d.driverGetVersion(version)));
}

FAKE_EXPORT cudaError_t cudaMemGetInfo(size_t* free, size_t* total)
{
    return withContext([&](Driver& d) { return d.memGetInfo(free, total); });
}

// ---- errors ----

FAKE_EXPORT cudaError_t cudaGetLastError()
{
    const cudaError_t e = t_lastError;
    t_lastError = cudaSuccess;
    return e;
}

FAKE_EXPORT cudaError_t cudaPeekAtLastError()
{
    return t_lastError;
}

FAKE_EXPORT const char* cudaGetErrorName(cudaError_t error)
{
    for (const RuntimeError& e : kErrors) {
        if (e.code == error)
            return e.name;
    }
    return "cudaErrorUnknown";
}

FAKE_EXPORT const char* cudaGetErrorString(cudaError_t error)
{
    for (const RuntimeError& e : kErrors) {
        if (e.code == error)
            return e.text;
    }
    return "unrecognized error code";
}

// ---- memory ----

FAKE_EXPORT cudaError_t cudaMalloc(void** devPtr, size_t size)
{
    if (!devPtr)
        return fail(cudaErrorInvalidValue);
    if (size == 0) {  // as the real runtime: success, and a null pointer
        *devPtr = nullptr;
        return ensureContext();
    }
    return withContext([&](Driver& d) { return d.memAlloc(reinterpret_cast<CUdeviceptr*>(devPtr), size); });
}

FAKE_EXPORT cudaError_t cudaFree(void* devPtr)
{
    if (!devPtr)
        return ensureContext();  // cudaFree(0): the classic way to create the context
    return withContext([&](Driver& d) { return d.memFree(CUdeviceptr(devPtr)); });
}

FAKE_EXPORT cudaError_t cudaMallocManaged(void** devPtr, size_t size, unsigned int flags)
{
    if (!devPtr || size == 0)
        return fail(cudaErrorInvalidValue);
    return withContext(
        [&](Driver& d) { return d.memAllocManaged(reinterpret_cast<CUdeviceptr*>(devPtr), size, flags ? flags : 1); });
}

FAKE_EXPORT cudaError_t cudaMallocPitch(void** devPtr, size_t* pitch, size_t width, size_t height)
{
    if (!devPtr || !pitch)
        return fail(cudaErrorInvalidValue);
    return withContext([&](Driver& d) {
        return d.memAllocPitch(reinterpret_cast<CUdeviceptr*>(devPtr), pitch, width, height, 4);
    });
}

FAKE_EXPORT cudaError_t cudaMalloc3D(cudaPitchedPtr* pitchedDevPtr, cudaExtent extent)
{
    if (!pitchedDevPtr)
        return fail(cudaErrorInvalidValue);
    size_t pitch = 0;
    void* p = nullptr;
    const cudaError_t e = cudaMallocPitch(&p, &pitch, extent.width, extent.height * extent.depth);
    if (e == cudaSuccess)
        *pitchedDevPtr = cudaPitchedPtr{p, pitch, extent.width, extent.height};
    return e;
}

FAKE_EXPORT cudaError_t cudaMallocHost(void** ptr, size_t size)
{
    if (!ptr)
        return fail(cudaErrorInvalidValue);
    return withContext([&](Driver& d) { return d.memHostAlloc(ptr, size, 0); });
}

FAKE_EXPORT cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags)
{
    if (!pHost)
        return fail(cudaErrorInvalidValue);
    return withContext([&](Driver& d) { return d.memHostAlloc(pHost, size, flags); });
}

FAKE_EXPORT cudaError_t cudaFreeHost(void* ptr)
{
    return withContext([&](Driver& d) { return d.memFreeHost(ptr); });
}

FAKE_EXPORT cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t stream)
{
    return withContext([&](Driver& d) {
        return d.memAllocAsync(reinterpret_cast<CUdeviceptr*>(devPtr), size, reinterpret_cast<CUstream>(stream));
    });
}

FAKE_EXPORT cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t stream)
{
    return withContext([&](Driver& d) {
        return d.memAllocAsyncPtsz(reinterpret_cast<CUdeviceptr*>(devPtr), size, reinterpret_cast<CUstream>(stream));
    });
}

FAKE_EXPORT cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t stream)
{
    return withContext([&](Driver& d) { return d.memFreeAsync(CUdeviceptr(devPtr), reinterpret_cast<CUstream>(stream)); });
}

FAKE_EXPORT cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t stream)
{
    return withContext(
        [&](Driver& d) { return d.memFreeAsyncPtsz(CUdeviceptr(devPtr), reinterpret_cast<CUstream>(stream)); });
}

FAKE_EXPORT cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream)
{
    return withContext([&](Driver& d) {
        return d.memAllocFromPoolAsync(reinterpret_cast<CUdeviceptr*>(ptr), size, reinterpret_cast<CUmemoryPool>(pool),
                                       reinterpret_cast<CUstream>(stream));
    });
}

FAKE_EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream)
{
    return withContext([&](Driver& d) {
        return d.memAllocFromPoolAsyncPtsz(reinterpret_cast<CUdeviceptr*>(ptr), size,
                                           reinterpret_cast<CUmemoryPool>(pool), reinterpret_cast<CUstream>(stream));
    });
}

FAKE_EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device)
{
    return withContext([&](Driver& d) {
        return d.deviceGetDefaultMemPool(reinterpret_cast<CUmemoryPool*>(pool), device);
    });
}

FAKE_EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value)
{
    return withContext([&](Driver& d) {
        return d.memPoolGetAttribute(reinterpret_cast<CUmemoryPool>(pool), static_cast<CUmemPool_attribute>(attr), value);
    });
}

FAKE_EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t minBytesToKeep)
{
    return withContext([&](Driver& d) { return d.memPoolTrimTo(reinterpret_cast<CUmemoryPool>(pool), minBytesToKeep); });
}

FAKE_EXPORT cudaError_t cudaMemset(void* devPtr, int value, size_t count)
{
    return withContext([&](Driver& d) { return d.memsetD8(CUdeviceptr(devPtr), static_cast<unsigned char>(value), count); });
}

FAKE_EXPORT cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind)
{
    if (const cudaError_t e = ensureContext(); e != cudaSuccess)
        return e;
    std::memmove(dst, src, count);
    return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaStreamCreate(cudaStream_t* stream)
{
    static char streams[64];
    static int next = 0;
    if (!stream)
        return fail(cudaErrorInvalidValue);
    *stream = reinterpret_cast<cudaStream_t>(&streams[1 + (next++ % 63)]);
    return ensureContext();
}

FAKE_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t)
{
    return cudaSuccess;
}

FAKE_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t)
{
    return ensureContext();
}

// ---- driver entry points ----

FAKE_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                                                          unsigned long long flags,
                                                          cudaDriverEntryPointQueryResult* driverStatus)
{
    Driver& d = driver();
    if (!d.ok)
        return fail(cudaErrorInitializationError);
    CUdriverProcAddressQueryResult status{};
    const CUresult rc = d.getProcAddress(symbol, funcPtr, int(cudaVersion), flags, &status);
    if (driverStatus)
        *driverStatus = static_cast<cudaDriverEntryPointQueryResult>(status);
    return rc == CUDA_SUCCESS || rc == CUDA_ERROR_NOT_FOUND ? cudaSuccess : fail(fromDriver(rc));
}

FAKE_EXPORT cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char* symbol, void** funcPtr,
                                                               unsigned int cudaVersion, unsigned long long flags,
                                                               cudaDriverEntryPointQueryResult* driverStatus)
{
    return cudaGetDriverEntryPointByVersion(symbol, funcPtr, cudaVersion, flags | cudaEnablePerThreadDefaultStream,
                                            driverStatus);
}

FAKE_EXPORT cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long flags,
                                                 cudaDriverEntryPointQueryResult* driverStatus)
{
    return cudaGetDriverEntryPointByVersion(symbol, funcPtr, CUDART_VERSION, flags, driverStatus);
}

FAKE_EXPORT cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** funcPtr, unsigned long long flags,
                                                      cudaDriverEntryPointQueryResult* driverStatus)
{
    return cudaGetDriverEntryPointByVersion(symbol, funcPtr, CUDART_VERSION, flags | cudaEnablePerThreadDefaultStream,
                                            driverStatus);
}

// ---- as a statically linked runtime: the same cudaMalloc/cudaFree under names the preload
// never interposes, reporting to CUPTI's runtime domain (through the fake driver), and reaching
// the driver through the function pointers of cuGetProcAddress like every call here.

namespace {

template <class Body>
cudaError_t runtimeTraced(CUpti_CallbackId cbid, const char* name, const void* params, Body body)
{
    using Callback = void (*)(CUpti_CallbackId, const CUpti_CallbackData*);
    static const auto callback = reinterpret_cast<Callback>(dlsym(RTLD_DEFAULT, "fakecuda_cupti_runtime_callback"));
    cudaError_t rc = cudaSuccess;
    CUpti_CallbackData data{};
    data.functionName = name;
    data.functionParams = params;
    data.functionReturnValue = &rc;
    data.callbackSite = CUPTI_API_ENTER;
    if (callback)
        callback(cbid, &data);
    rc = body();
    data.callbackSite = CUPTI_API_EXIT;
    if (callback)
        callback(cbid, &data);
    return rc;
}

} // namespace

FAKE_EXPORT cudaError_t fakecuda_static_cudaMalloc(void** devPtr, size_t size)
{
    cudaMalloc_v3020_params params{devPtr, size};
    // The body of cudaMalloc, not a call to it: that would reach the preload's wrapper.
    return runtimeTraced(CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, "cudaMalloc", &params, [&] {
        return withContext([&](Driver& d) { return d.memAlloc(reinterpret_cast<CUdeviceptr*>(devPtr), size); });
    });
}

FAKE_EXPORT cudaError_t fakecuda_static_cudaFree(void* devPtr)
{
    cudaFree_v3020_params params{devPtr};
    return runtimeTraced(CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, "cudaFree", &params,
                         [&] { return withContext([&](Driver& d) { return d.memFree(CUdeviceptr(devPtr)); }); });
}
