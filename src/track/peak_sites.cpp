// The peak's composition (docs/ARCHITECTURE.md, "The peak's composition is taken where the
// memory first shrinks after a new peak"): composed before the first free after a device's peak
// grew by 1 % (Recorder::notePeak, inline, calls in here), or at dump time (snapshot.cpp); the
// peak window that oomscope_peak_reset() restarts.
#include "track/recorder.h"

#include "track/fast_clock.h"
#include "track/flight_writer.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>

namespace oomscope::track {

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
        if (m_flight)
            m_flight->peak(p);
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
    if (m_flight)
        m_flight->clearPeaks();
}

} // namespace oomscope::track
