#include "interpose/device_probe.h"

#include "interpose/nvml_probe.h"
#include "interpose/recording.h"
#include "report/model.h"

#include <cstdio>
#include <new>

namespace oomscope::interpose {
namespace {

template <class Fn>
Fn driverFn(const char* name)
{
    return reinterpret_cast<Fn>(auxFunction(Family::Driver, name));
}

std::string uuidString(const CUuuid& uuid)
{
    // The form nvidia-smi prints: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
    char buf[64];
    const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
    std::snprintf(buf, sizeof(buf), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                  b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    return buf;
}

} // namespace

std::string deviceUuid(int ordinal)
{
    const auto getDevice = driverFn<CUresult (*)(CUdevice*, int)>("cuDeviceGet");
    const auto getUuid = driverFn<CUresult (*)(CUuuid*, CUdevice)>("cuDeviceGetUuid_v2");
    CUdevice dev = 0;
    CUuuid uuid{};
    if (!getDevice || !getUuid || getDevice(&dev, ordinal) != CUDA_SUCCESS || getUuid(&uuid, dev) != CUDA_SUCCESS)
        return {};
    return uuidString(uuid);
}

DriverDeviceProbe& DriverDeviceProbe::instance()
{
    static DriverDeviceProbe* probe = new DriverDeviceProbe();  // leaked: used at exit
    return *probe;
}

std::vector<report::Device> DriverDeviceProbe::probeDevices()
{
    return probe(true);
}

std::vector<report::Device> DriverDeviceProbe::probeDeviceFacts()
{
    return probe(false);
}

// Every device's facts; with `dynamic`, also what changes as the process runs: its context,
// the free memory, the process's own use.
std::vector<report::Device> DriverDeviceProbe::probe(bool dynamic)
{
    std::vector<report::Device> devices;
    const auto getCount = driverFn<CUresult (*)(int*)>("cuDeviceGetCount");
    const auto getDevice = driverFn<CUresult (*)(CUdevice*, int)>("cuDeviceGet");
    const auto getName = driverFn<CUresult (*)(char*, int, CUdevice)>("cuDeviceGetName");
    const auto totalMem = driverFn<CUresult (*)(size_t*, CUdevice)>("cuDeviceTotalMem_v2");
    const auto driverVersion = driverFn<CUresult (*)(int*)>("cuDriverGetVersion");
    const auto ctxGetCurrent = driverFn<CUresult (*)(CUcontext*)>("cuCtxGetCurrent");
    const auto ctxGetDevice = driverFn<CUresult (*)(CUdevice*)>("cuCtxGetDevice");
    const auto primaryState = driverFn<CUresult (*)(CUdevice, unsigned*, int*)>("cuDevicePrimaryCtxGetState");
    const auto primaryRetain = driverFn<CUresult (*)(CUcontext*, CUdevice)>("cuDevicePrimaryCtxRetain");
    const auto primaryRelease = driverFn<CUresult (*)(CUdevice)>("cuDevicePrimaryCtxRelease_v2");
    const auto ctxPush = driverFn<CUresult (*)(CUcontext)>("cuCtxPushCurrent_v2");
    const auto ctxPop = driverFn<CUresult (*)(CUcontext*)>("cuCtxPopCurrent_v2");
    const auto memGetInfo = driverFn<CUresult (*)(size_t*, size_t*)>("cuMemGetInfo_v2");
    int count = 0;
    if (!getCount || getCount(&count) != CUDA_SUCCESS || count <= 0)
        return devices;

    int driver = 0;
    const bool haveDriver = driverVersion && driverVersion(&driver) == CUDA_SUCCESS;
    int runtime = 0;
    using RuntimeVersionFn = cudaError_t (*)(int*);
    const auto runtimeVersion = reinterpret_cast<RuntimeVersionFn>(auxFunction(Family::Runtime, "cudaRuntimeGetVersion"));
    const bool haveRuntime = runtimeVersion && runtimeVersion(&runtime) == cudaSuccess;

    CUcontext current = nullptr;
    CUdevice currentDevice = -1;
    if (ctxGetCurrent && ctxGetCurrent(&current) == CUDA_SUCCESS && current && ctxGetDevice)
        ctxGetDevice(&currentDevice);

    for (int i = 0; i < count; ++i) {
        CUdevice dev = 0;
        if (!getDevice || getDevice(&dev, i) != CUDA_SUCCESS)
            continue;
        report::Device d;
        d.index = i;
        char name[256] = {};
        if (getName && getName(name, sizeof(name) - 1, dev) == CUDA_SUCCESS)
            d.name = name;
        d.uuid = deviceUuid(i);
        size_t total = 0;
        if (totalMem && totalMem(&total, dev) == CUDA_SUCCESS)
            d.totalBytes = total;
        if (haveDriver)
            d.driverVersion = driver;
        if (haveRuntime)
            d.runtimeVersion = runtime;

        if (const uint64_t limit = deviceLimitOf(i))
            d.limitBytes = limit;
        if (!dynamic) {
            devices.push_back(std::move(d));
            continue;
        }
        size_t freeBytes = 0, totalBytes = 0;
        unsigned flags = 0;
        int active = 0;
        const bool stateKnown = primaryState && primaryState(dev, &flags, &active) == CUDA_SUCCESS;
        if (dev == currentDevice || (stateKnown && active))
            d.context = true;
        else if (stateKnown)
            d.context = false;
        if (dev == currentDevice && memGetInfo) {
            if (memGetInfo(&freeBytes, &totalBytes) == CUDA_SUCCESS)
                d.freeBytes = freeBytes;
        } else if (primaryRetain && primaryRelease && ctxPush && ctxPop && memGetInfo) {
            CUcontext ctx = nullptr;
            // Only an active primary context: retaining an inactive one would create it.
            if (stateKnown && active && primaryRetain(&ctx, dev) == CUDA_SUCCESS) {
                if (ctxPush(ctx) == CUDA_SUCCESS) {
                    if (memGetInfo(&freeBytes, &totalBytes) == CUDA_SUCCESS)
                        d.freeBytes = freeBytes;
                    CUcontext popped = nullptr;
                    ctxPop(&popped);
                }
                primaryRelease(dev);
            }
        }
        if (d.context == true && d.freeBytes)
            d.processBytes = processDeviceBytes(d.uuid);
        devices.push_back(std::move(d));
    }
    return devices;
}

std::vector<report::Pool> DriverDeviceProbe::probePools(const std::vector<uint64_t>& explicitPools)
{
    std::vector<report::Pool> pools;
    const auto getCount = driverFn<CUresult (*)(int*)>("cuDeviceGetCount");
    const auto defaultPool = driverFn<CUresult (*)(CUmemoryPool*, CUdevice)>("cuDeviceGetDefaultMemPool");
    const auto currentPool = driverFn<CUresult (*)(CUmemoryPool*, CUdevice)>("cuDeviceGetMemPool");
    const auto getAttribute = driverFn<CUresult (*)(CUmemoryPool, CUmemPool_attribute, void*)>("cuMemPoolGetAttribute");
    const auto primaryState = driverFn<CUresult (*)(CUdevice, unsigned*, int*)>("cuDevicePrimaryCtxGetState");
    const auto ctxGetDevice = driverFn<CUresult (*)(CUdevice*)>("cuCtxGetDevice");
    int count = 0;
    if (!getAttribute || !getCount || getCount(&count) != CUDA_SUCCESS)
        return pools;
    auto add = [&](CUmemoryPool pool, int device, report::PoolRole role) {
        for (const report::Pool& p : pools) {
            if (p.handle == uint64_t(reinterpret_cast<uintptr_t>(pool)))
                return;
        }
        report::Pool p;
        p.device = device;
        p.handle = uint64_t(reinterpret_cast<uintptr_t>(pool));
        p.role = role;
        cuuint64_t v = 0;
        if (getAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &v) != CUDA_SUCCESS)
            return;
        p.reservedBytes = v;
        if (getAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v) == CUDA_SUCCESS)
            p.usedBytes = v;
        if (getAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &v) == CUDA_SUCCESS)
            p.reservedHighBytes = v;
        if (getAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &v) == CUDA_SUCCESS)
            p.usedHighBytes = v;
        if (getAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v) == CUDA_SUCCESS)
            p.releaseThresholdBytes = v;
        pools.push_back(p);
    };
    CUdevice current = -1;
    if (ctxGetDevice && ctxGetDevice(&current) != CUDA_SUCCESS)
        current = -1;
    for (int dev = 0; dev < count; ++dev) {
        unsigned flags = 0;
        int active = 0;
        const bool hasContext =
            dev == current || (primaryState && primaryState(dev, &flags, &active) == CUDA_SUCCESS && active);
        if (!hasContext)
            continue;  // never create a pool (or a context) on an idle device
        CUmemoryPool pool = nullptr;
        if (currentPool && currentPool(&pool, dev) == CUDA_SUCCESS && pool)
            add(pool, dev, report::PoolRole::Current);
        if (defaultPool && defaultPool(&pool, dev) == CUDA_SUCCESS && pool) {
            // The current pool is usually the default one: name it by its role.
            for (report::Pool& p : pools) {
                if (p.handle == uint64_t(reinterpret_cast<uintptr_t>(pool)))
                    p.role = report::PoolRole::Default;
            }
            add(pool, dev, report::PoolRole::Default);
        }
    }
    for (uint64_t handle : explicitPools)
        add(reinterpret_cast<CUmemoryPool>(uintptr_t(handle)), -1, report::PoolRole::Explicit);
    return pools;
}

std::string DriverDeviceProbe::errorName(ApiId api, int error)
{
    const char* name = nullptr;
    if (familyOfApi(api) == Family::Runtime) {
        using Fn = const char* (*)(cudaError_t);
        if (auto fn = reinterpret_cast<Fn>(auxFunction(Family::Runtime, "cudaGetErrorName")))
            name = fn(static_cast<cudaError_t>(error));
    } else {
        using Fn = CUresult (*)(CUresult, const char**);
        if (auto fn = reinterpret_cast<Fn>(auxFunction(Family::Driver, "cuGetErrorName"))) {
            if (fn(static_cast<CUresult>(error), &name) != CUDA_SUCCESS)
                name = nullptr;
        }
    }
    return name ? std::string(name) : std::string();
}

} // namespace oomscope::interpose
