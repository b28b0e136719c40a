// Rehearsal on a smaller GPU (OOMSCOPE_DEVICE_LIMIT, `oomscope run --device-limit`): every door
// that allocates device memory refuses, with its own out-of-memory error, an allocation that
// would take the process past the limit on that device, and the memory query answers as that
// card would. "The process" is what it holds as the driver counts it: the tracked device
// bytes plus the context's own (measured at the first allocation on the device: the driver's
// used bytes then, before any tracked memory, which counts other processes on the device
// too; and again before each allocation within 256 MiB of the limit, where the driver lists
// the process's own memory: the context grows after the first allocation, kernels loaded
// lazily). Pinned host and managed memory never count and are never refused.
//
// Threading: any thread; the check is not a reservation (two threads racing for the last
// bytes may both pass, as both would on the real card).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace oomscope::interpose {

// Parses "24GiB", "24GiB,40GiB" (per device, in order) or a card's name (l4, a100-40gb, …)
// into limits[0..max); one value is every device's. false on anything else.
bool parseDeviceLimits(const char* text, uint64_t* limits, int max) noexcept;

// True while OOMSCOPE_DEVICE_LIMIT is set (read once), whatever the device.
bool deviceLimitOn() noexcept;

namespace detail {
extern std::atomic<int8_t> g_limitOn;  // deviceLimitOn() once read: 0 or 1; -1 before
void limitOpBegin() noexcept;
void limitOpEnd() noexcept;
} // namespace detail

// deviceLimitOn() for the hooks' path: one load once it has been read.
inline bool deviceLimitOnFast() noexcept
{
    const int8_t on = detail::g_limitOn.load(std::memory_order_relaxed);
    return on >= 0 ? on != 0 : deviceLimitOn();
}

// Whether an allocation of `request` bytes on `device` must fail (the limit would be passed).
bool deviceLimitRefuses(int device, uint64_t request) noexcept;

// The memory query's answer under the limit: total is the limit, free what is left under it
// (never more than the driver's own free). Unchanged for a device without a limit.
void deviceLimitAdjust(int device, size_t* free, size_t* total) noexcept;

// The limit of device, 0 for none (the report says the run was rehearsed).
uint64_t deviceLimitOf(int device) noexcept;

// Held by a hook across an allocation's or a free's real call and its record, under a limit:
// while one is, the driver's count of the process's memory and the tracked bytes disagree by
// it, and the context is not measured again (a refusal the real card would not make).
class LimitOpScope {
public:
    LimitOpScope() noexcept : m_on(deviceLimitOnFast())
    {
        if (__builtin_expect(m_on, 0))
            detail::limitOpBegin();
    }
    ~LimitOpScope()
    {
        if (__builtin_expect(m_on, 0))
            detail::limitOpEnd();
    }
    LimitOpScope(const LimitOpScope&) = delete;
    LimitOpScope& operator=(const LimitOpScope&) = delete;

private:
    bool m_on;
};

} // namespace oomscope::interpose
