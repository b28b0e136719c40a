#include "track/live_counters.h"

#include <algorithm>
#include <new>

namespace oomscope::track {
namespace {

std::atomic<uint64_t> g_nextId{1};

} // namespace

LiveCounters::LiveCounters(int64_t* peaks)
    : m_id(g_nextId.fetch_add(1, std::memory_order_relaxed)),
      m_peak(peaks ? reinterpret_cast<std::atomic<int64_t>*>(peaks) : m_ownPeaks)
{
}

LiveCounters::~LiveCounters()
{
    for (Cell* c = m_cells.load(std::memory_order_acquire); c;) {
        Cell* next = c->next;
        delete c;
        c = next;
    }
}

LiveCounters::Cell* LiveCounters::newCell() noexcept
{
    Cell* cell = new (std::nothrow) Cell();
    if (!cell)
        return &m_shared;
    Cell* head = m_cells.load(std::memory_order_relaxed);
    do {
        cell->next = head;
    } while (!m_cells.compare_exchange_weak(head, cell, std::memory_order_release, std::memory_order_relaxed));
    return cell;
}

void LiveCounters::adopt(ThreadLive& t) noexcept
{
    t = ThreadLive{};
    t.owner = m_id;
    t.cell = newCell();
}

void LiveCounters::addToPeak(int s, int64_t delta) noexcept
{
    const int64_t now = m_batched[s].fetch_add(delta, std::memory_order_relaxed) + delta;
    int64_t peak = m_peak[s].load(std::memory_order_relaxed);
    while (now > peak && !m_peak[s].compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
    int64_t window = m_windowPeaks[s].load(std::memory_order_relaxed);
    while (now > window && !m_windowPeaks[s].compare_exchange_weak(window, now, std::memory_order_relaxed)) {
    }
}

uint64_t LiveCounters::windowPeak(int device) const noexcept
{
    const int64_t p = m_windowPeaks[slot(device)].load(std::memory_order_relaxed);
    return p > 0 ? uint64_t(p) : 0;
}

void LiveCounters::resetWindow(int device) noexcept
{
    const int s = slot(device);
    m_windowPeaks[s].store(m_batched[s].load(std::memory_order_relaxed), std::memory_order_relaxed);
}

int64_t LiveCounters::sum(int s, MemKind kind) const noexcept
{
    int64_t total = m_shared.bytes[s][size_t(kind)].load(std::memory_order_relaxed);
    for (const Cell* c = m_cells.load(std::memory_order_acquire); c; c = c->next)
        total += c->bytes[s][size_t(kind)].load(std::memory_order_relaxed);
    return total;
}

uint64_t LiveCounters::live(int device, MemKind kind) const noexcept
{
    const int64_t v = sum(slot(device), kind);
    return v > 0 ? uint64_t(v) : 0;
}

uint64_t LiveCounters::peak(int device) const noexcept
{
    const int64_t p = m_peak[slot(device)].load(std::memory_order_relaxed);
    return p > 0 ? uint64_t(p) : 0;
}

std::vector<DeviceCounters> LiveCounters::snapshot() const
{
    std::vector<DeviceCounters> out;
    // Devices 0 to kMaxDevices - 1; the shared slot of other device numbers is counted but not
    // shown as a device.
    for (int s = 1; s <= kMaxDevices; ++s) {
        DeviceCounters d;
        d.device = s - 1;
        bool any = m_peak[s].load(std::memory_order_relaxed) > 0;
        for (size_t k = 0; k < size_t(MemKind::Count); ++k) {
            const int64_t v = sum(s, MemKind(k));
            d.bytes[k] = v > 0 ? uint64_t(v) : 0;
            any = any || v != 0;
        }
        if (!any)
            continue;
        const int64_t p = m_peak[s].load(std::memory_order_relaxed);
        d.peakDeviceBytes = std::max<uint64_t>(p > 0 ? uint64_t(p) : 0, d.tracked());
        out.push_back(d);
    }
    return out;
}

} // namespace oomscope::track
