// A libnvidia-ml.so.1 stand-in: the four functions oomscope asks (src/interpose/nvml_probe.cpp),
// with NVML's signatures and return codes, answered from the fake driver's devices: this
// process (once it has a context there) and, where FAKECUDA_OTHER_PROCESS_BYTES is set,
// another process holding that much. FAKECUDA_NVML=0: no NVML (nvmlInit fails, as without a
// loaded driver); FAKECUDA_NVML=hidden: the list leaves this process out, as a PID namespace
// does (a container's pid is not the driver's).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

extern "C" bool fakecuda_process_bytes(int dev, uint64_t* own, uint64_t* other);
extern "C" int cuDeviceGetCount(int* count);

namespace {

constexpr int kSuccess = 0, kUninitialized = 1, kInvalidArgument = 2, kNotFound = 6, kInsufficientSize = 7,
              kDriverNotLoaded = 9;
constexpr unsigned kOtherPid = 0x7ffffffe;

struct ProcessInfo {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
};

bool g_initialized = false;
int g_devices[8] = {0, 1, 2, 3, 4, 5, 6, 7};  // the handles: pointers to the device ordinals

const char* mode()
{
    const char* v = std::getenv("FAKECUDA_NVML");
    return v ? v : "";
}

} // namespace

FAKE_EXPORT int nvmlInit_v2()
{
    if (std::strcmp(mode(), "0") == 0)
        return kDriverNotLoaded;
    g_initialized = true;
    return kSuccess;
}

FAKE_EXPORT int nvmlShutdown()
{
    g_initialized = false;
    return kSuccess;
}

FAKE_EXPORT int nvmlDeviceGetHandleByUUID(const char* uuid, void** device)
{
    if (!g_initialized)
        return kUninitialized;
    if (!uuid || !device)
        return kInvalidArgument;
    // The fake driver's UUIDs: GPU-fafafafa-fafa-fafa-fafa-fafafafafaXX, XX = 0xfa + ordinal.
    int count = 0;
    cuDeviceGetCount(&count);
    for (int i = 0; i < count && i < 8; ++i) {
        char name[64];
        std::snprintf(name, sizeof(name), "GPU-fafafafa-fafa-fafa-fafa-fafafafafa%02x", unsigned(0xfa + i) & 0xff);
        if (std::strcmp(uuid, name) == 0) {
            *device = &g_devices[i];
            return kSuccess;
        }
    }
    return kNotFound;
}

FAKE_EXPORT int nvmlDeviceGetComputeRunningProcesses_v3(void* device, unsigned int* count, ProcessInfo* infos)
{
    if (!g_initialized)
        return kUninitialized;
    if (!device || !count)
        return kInvalidArgument;
    const int ordinal = *static_cast<int*>(device);
    uint64_t own = 0, other = 0;
    const bool listed = fakecuda_process_bytes(ordinal, &own, &other) && std::strcmp(mode(), "hidden") != 0;
    ProcessInfo list[2];
    unsigned n = 0;
    if (listed)
        list[n++] = {unsigned(getpid()), own, ~0u, ~0u};
    if (other)
        list[n++] = {kOtherPid, other, ~0u, ~0u};
    const unsigned room = *count;
    *count = n;
    if (room < n)
        return kInsufficientSize;
    if (n && !infos)
        return kInvalidArgument;
    for (unsigned i = 0; i < n; ++i)
        infos[i] = list[i];
    return kSuccess;
}
