#include "interpose/nvml_probe.h"

#include "interpose/recording.h"

#include <dlfcn.h>
#include <mutex>
#include <string>
#include <unistd.h>

namespace oomscope::interpose {
namespace {

// The few NVML types asked for (nvml.h's ABI, stable since the _v2 process list).
using NvmlReturn = int;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlInsufficientSize = 7;
using NvmlDevice = void*;
struct NvmlProcessInfo {  // nvmlProcessInfo_t (v2 layout, the _v2 and _v3 lists)
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
};
constexpr unsigned long long kNvmlValueNotAvailable = ~0ull;

struct Nvml {
    NvmlReturn (*byUuid)(const char*, NvmlDevice*) = nullptr;
    NvmlReturn (*processes)(NvmlDevice, unsigned int*, NvmlProcessInfo*) = nullptr;
    bool ready = false;
};

Nvml* openNvml()
{
    auto* n = new Nvml;  // kept: asked again at every report
    // The one beside the driver in use (the driver's package installs both in one folder; a
    // container's runtime mounts them together), else wherever the loader finds it.
    void* lib = nullptr;
    Dl_info info{};
    if (void* fn = auxFunction(Family::Driver, "cuDriverGetVersion"); fn && dladdr(fn, &info) && info.dli_fname) {
        std::string path(info.dli_fname);
        if (const size_t slash = path.rfind('/'); slash != std::string::npos)
            lib = dlopen((path.substr(0, slash + 1) + "libnvidia-ml.so.1").c_str(), RTLD_NOW | RTLD_LOCAL);
    }
    if (!lib)
        lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return n;
    auto init = reinterpret_cast<NvmlReturn (*)()>(dlsym(lib, "nvmlInit_v2"));
    n->byUuid = reinterpret_cast<decltype(n->byUuid)>(dlsym(lib, "nvmlDeviceGetHandleByUUID"));
    n->processes = reinterpret_cast<decltype(n->processes)>(dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3"));
    if (!n->processes)
        n->processes = reinterpret_cast<decltype(n->processes)>(dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v2"));
    n->ready = init && n->byUuid && n->processes && init() == kNvmlSuccess;
    return n;
}

} // namespace

std::optional<uint64_t> processDeviceBytes(const std::string& uuid) noexcept
{
    if (uuid.rfind("GPU-", 0) != 0)
        return std::nullopt;
    static std::mutex lock;
    std::lock_guard<std::mutex> hold(lock);
    static Nvml* nvml = openNvml();
    if (!nvml->ready)
        return std::nullopt;
    NvmlDevice device = nullptr;
    if (nvml->byUuid(uuid.c_str(), &device) != kNvmlSuccess)
        return std::nullopt;
    NvmlProcessInfo infos[64];
    unsigned int count = 64;
    const NvmlReturn r = nvml->processes(device, &count, infos);
    if (r != kNvmlSuccess && r != kNvmlInsufficientSize)
        return std::nullopt;
    if (count > 64)
        count = 64;  // a card with more processes: ours is among the first 64 or unknown
    const unsigned int self = unsigned(getpid());
    for (unsigned int i = 0; i < count; ++i)
        if (infos[i].pid == self && infos[i].usedGpuMemory != kNvmlValueNotAvailable)
            return uint64_t(infos[i].usedGpuMemory);
    return std::nullopt;
}

} // namespace oomscope::interpose
