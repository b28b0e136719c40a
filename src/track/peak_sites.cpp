// The peak's composition (docs/ARCHITECTURE.md, "The peak's composition is taken where the
// memory first shrinks after a new peak"): composed before the first free after a device's peak
// grew by 1 % (Recorder::notePeak, inline, calls in here), or at dump time (snapshot.cpp); the
// peak window that oomscope_peak_reset() restarts.
#include "track/recorder.h"

#include "track/fast_clock.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>

namespace oomscope::track {

PeakSites composePeak(int device, const std::vector<LiveAllocation>& live, const LiveAllocation* ending)
{
    PeakSites p;
    p.device = device;
    std::unordered_map<uint32_t, uint64_t> byStack;
    const auto add = [&](const LiveAllocation& a) {
        if (a.device != device || a.memKind != MemKind::Device)
            return;
        p.bytes += a.size;
        byStack[a.stack] += a.size;
    };
    for (const LiveAllocation& a : live)
        add(a);
    if (ending)
        add(*ending);
    p.stacks.assign(byStack.begin(), byStack.end());
    const auto larger = [](const auto& a, const auto& b) { return a.second != b.second ? a.second > b.second : a.first < b.first; };
    const size_t kept = std::min(p.stacks.size(), PeakSites::kStacks);
    std::partial_sort(p.stacks.begin(), p.stacks.begin() + ptrdiff_t(kept), p.stacks.end(), larger);
    for (size_t i = kept; i < p.stacks.size(); ++i)
        p.otherBytes += p.stacks[i].second;
    p.stacks.resize(kept);
    return p;
}

// Cold: once per local maximum of a device's memory that is 1 % (at least 4 MiB) above the
// last composition, each a copy of the live tables.
__attribute__((noinline, cold)) void Recorder::takePeakSites(const LiveAllocation& ending) noexcept
{
    const int device = ending.device;
    std::unique_lock<SpinLock> lock(m_peakLock, std::try_to_lock);
    if (!lock.owns_lock())
        return;  // another thread is taking one: the next free on this device takes it
    const uint64_t peak = m_counters.windowPeak(device);
    if (peak < m_peakNext[device].load(std::memory_order_relaxed))
        return;
    m_peakNext[device].store(peak + std::max(peak / 100, kPeakStep), std::memory_order_relaxed);
    try {
        PeakSites p = composePeak(device, liveAllocations(), &ending);
        p.timeNs = eventNs();
        if (m_peakSites.size() <= size_t(device))
            m_peakSites.resize(size_t(device) + 1);
        m_peakSites[size_t(device)] = std::move(p);
    } catch (...) {
    }
}

void Recorder::resetPeakWindow() noexcept
{
    std::lock_guard<SpinLock> lock(m_peakLock);
    for (int d = 0; d < LiveCounters::kMaxDevices; ++d) {
        m_counters.resetWindow(d);
        m_peakNext[d].store(0, std::memory_order_relaxed);
    }
    m_peakSites.clear();
}

} // namespace oomscope::track
