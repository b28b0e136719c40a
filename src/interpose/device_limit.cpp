#include "interpose/device_limit.h"

#include "common/bytes.h"
#include "common/device_cards.h"

#include "interpose/device_probe.h"
#include "interpose/hooks.h"
#include "interpose/nvml_probe.h"
#include "interpose/recording.h"
#include "track/config.h"
#include "track/live_counters.h"
#include "track/recorder.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace oomscope::interpose {
namespace {

constexpr int kDevices = track::LiveCounters::kMaxDevices;

struct Limits {
    uint64_t bytes[kDevices] = {};
    bool on = false;
};

const Limits& limits()
{
    static const Limits* l = [] {
        auto* out = new Limits;  // never destroyed: hooks may run during static destruction
        const char* text = std::getenv("OOMSCOPE_DEVICE_LIMIT");
        if (text && *text && std::strcmp(text, "0") != 0) {
            if (parseDeviceLimits(text, out->bytes, kDevices))
                out->on = true;
            else
                std::fprintf(stderr, "oomscope: OOMSCOPE_DEVICE_LIMIT=%s is not %s: running unlimited\n", text,
                             common::kDeviceLimitGrammar);
        }
        return out;
    }();
    return *l;
}

// Per device: the context's bytes (what the process holds beyond its tracked memory: measured
// at the first allocation, and again near the limit), and whether the limit is in force (a
// limit above the device's memory is said once and dropped).
std::atomic<int64_t> g_residue[kDevices];       // the context's bytes, once measured
std::atomic<int64_t> g_firstResidue[kDevices];  // as measured at the first allocation
std::atomic<uint8_t> g_state[kDevices];    // 0 unmeasured, 1 in force, 2 dropped
std::atomic<int64_t> g_opsInFlight{0};     // LimitOpScope: allocations and frees not yet recorded
std::atomic<uint64_t> g_opsBegun{0};

bool driverInfo(size_t* free, size_t* total)
{
    const auto fn = realFn<HookId::cuMemGetInfo_v2>();
    return fn && fn(free, total) == CUDA_SUCCESS;
}

uint64_t tracked(int device)
{
    track::Recorder* r = recorder();
    return r ? r->liveBytes(device, track::MemKind::Device) : 0;
}

// 1 when the device's limit is in force; measures the context's bytes the first time.
bool inForce(int device)
{
    if (device < 0 || device >= kDevices || !limits().on || limits().bytes[device] == 0)
        return false;
    uint8_t state = g_state[device].load(std::memory_order_acquire);
    if (state == 0) {
        size_t free = 0, total = 0;
        if (!driverInfo(&free, &total))
            return false;  // not measurable now (no context yet): asked again next time
        // The process's own memory where the driver lists it: the device's used memory counts
        // every other process on it (a run of `oomscope fit` beside another, starting too).
        const std::optional<uint64_t> own = processDeviceBytes(deviceUuid(device));
        const uint64_t used = own ? *own : total - free, held = tracked(device);
        g_residue[device].store(int64_t(used > held ? used - held : 0), std::memory_order_relaxed);
        g_firstResidue[device].store(g_residue[device].load(std::memory_order_relaxed), std::memory_order_relaxed);
        uint8_t expected = 0;
        const uint8_t next = limits().bytes[device] > total ? 2 : 1;
        if (g_state[device].compare_exchange_strong(expected, next) && next == 2)
            std::fprintf(stderr, "oomscope: the device limit of %s is more than device %d has (%s): "
                                 "running unlimited there\n", common::formatBytes(limits().bytes[device]).c_str(), device,
                         common::formatBytes(total).c_str());
        state = g_state[device].load(std::memory_order_acquire);
    }
    return state == 1;
}

uint64_t used(int device)
{
    return tracked(device) + uint64_t(g_residue[device].load(std::memory_order_relaxed));
}

// Within this much of the limit, the context is measured again before each answer: it grows
// after the first allocation (kernels loaded lazily, cuBLAS's and cuDNN's handles: 42 to 112
// MiB by the end of a PyTorch run on the H100), and a card of the limit's size holds that too.
constexpr uint64_t kRemeasureWithin = uint64_t(256) << 20;

// Near the limit: the context again, where the driver lists the process's own memory (the
// device's used memory would count other processes that came since). Never less than the
// first measure: the context does not shrink.
void remeasureNear(int device, uint64_t request)
{
    const uint64_t limit = limits().bytes[device];
    if (used(device) + request + kRemeasureWithin <= limit)
        return;
    // Only where no allocation or free of another thread is between the driver and the record,
    // from before the driver's count to after the tracked bytes are read.
    const uint64_t begun = g_opsBegun.load(std::memory_order_acquire);
    if (g_opsInFlight.load(std::memory_order_acquire) != 0)
        return;
    const std::optional<uint64_t> own = processDeviceBytes(deviceUuid(device));
    if (!own)
        return;
    const uint64_t held = tracked(device);
    if (g_opsInFlight.load(std::memory_order_acquire) != 0 || g_opsBegun.load(std::memory_order_acquire) != begun)
        return;
    const int64_t residue = int64_t(*own > held ? *own - held : 0);
    g_residue[device].store(std::max(residue, g_firstResidue[device].load(std::memory_order_relaxed)),
                            std::memory_order_relaxed);
}

} // namespace

bool parseDeviceLimits(const char* text, uint64_t* out, int max) noexcept
{
    return common::parseDeviceLimitList(text, out, max);
}

bool deviceLimitOn() noexcept
{
    const bool on = limits().on;
    detail::g_limitOn.store(on ? 1 : 0, std::memory_order_relaxed);
    return on;
}

bool deviceLimitRefuses(int device, uint64_t request) noexcept
{
    if (!inForce(device))
        return false;
    remeasureNear(device, request);
    return used(device) + request > limits().bytes[device];
}

void deviceLimitAdjust(int device, size_t* free, size_t* total) noexcept
{
    if (!free || !total || !inForce(device))
        return;
    remeasureNear(device, 0);
    const uint64_t limit = limits().bytes[device], now = used(device);
    const uint64_t left = now < limit ? limit - now : 0;
    *total = size_t(limit);
    *free = size_t(left < *free ? left : *free);
}

namespace detail {

std::atomic<int8_t> g_limitOn{-1};

void limitOpBegin() noexcept
{
    g_opsBegun.fetch_add(1, std::memory_order_acq_rel);
    g_opsInFlight.fetch_add(1, std::memory_order_acq_rel);
}

void limitOpEnd() noexcept
{
    g_opsInFlight.fetch_sub(1, std::memory_order_acq_rel);
}

} // namespace detail

uint64_t deviceLimitOf(int device) noexcept
{
    return device >= 0 && device < kDevices && g_state[device].load(std::memory_order_acquire) != 2 && limits().on
               ? limits().bytes[device]
               : 0;
}

} // namespace oomscope::interpose
