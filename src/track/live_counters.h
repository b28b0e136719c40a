// Live bytes per device and memory kind, and each device's peak, kept so that threads
// allocating at once write no common cache line. add() is called from any thread on the
// allocation path: a load and a store on the calling thread's own cell (no locked
// instruction); a thread whose cell cannot be allocated uses a shared one (atomic adds).
// live() and snapshot() sum the cells: exact, at any time. The peak follows a device total
// that each thread updates in batches of kPeakBatch bytes (or at once for a larger
// allocation): exact for allocations of kPeakBatch or more, otherwise low by less than
// kPeakBatch per allocating thread.
#pragma once

#include "track/event.h"
#include "track/image.h"

#include <atomic>
#include <cstdint>
#include <vector>

namespace oomscope::track {

static_assert(sizeof(std::atomic<int64_t>) == sizeof(int64_t) && std::atomic<int64_t>::is_always_lock_free,
              "peaks are kept as plain words in the flight file");

namespace live_counters_detail {
// A thread's cell and its device-memory deltas not yet added to the batched totals (the first
// kBatchedSlots device slots; others go straight through). Plain data, constant initialisation:
// no destructor, no TLS wrapper call on access.
inline constexpr int kBatchedSlots = 8;
struct ThreadLive {
    uint64_t owner = 0;
    void* cell = nullptr;
    int64_t pending[kBatchedSlots] = {};
};
inline thread_local ThreadLive t_live __attribute__((tls_model("initial-exec")));
} // namespace live_counters_detail

class LiveCounters {
public:
    static constexpr int kMaxDevices = 64;
    static constexpr int64_t kPeakBatch = int64_t(4) << 20;

    // peaks: kMaxDevices + 1 zeroed words where the peaks are kept (the flight file's counters
    // region, so that a recovered report has them), or nullptr for memory of its own.
    explicit LiveCounters(int64_t* peaks = nullptr);
    ~LiveCounters();
    LiveCounters(const LiveCounters&) = delete;
    LiveCounters& operator=(const LiveCounters&) = delete;

    // delta > 0: memory became live; < 0: it was freed. Devices outside [0, kMaxDevices) share
    // one slot, which snapshot() leaves out. Inline: on every allocation and free.
    void add(int device, MemKind kind, int64_t delta) noexcept
    {
        const int s = slot(device);
        ThreadLive& t = live_counters_detail::t_live;
        if (__builtin_expect(t.owner != m_id, 0))
            adopt(t);
        auto* cell = static_cast<Cell*>(t.cell);
        std::atomic<int64_t>& bytes = cell->bytes[s][size_t(kind)];
        if (__builtin_expect(cell == &m_shared, 0))
            bytes.fetch_add(delta, std::memory_order_relaxed);
        else
            bytes.store(bytes.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
        if (kind != MemKind::Device)
            return;
        int64_t flush = delta;
        if (s < kBatchedSlots) {
            t.pending[s] += delta;
            if (t.pending[s] < kPeakBatch && t.pending[s] > -kPeakBatch)
                return;
            flush = t.pending[s];
            t.pending[s] = 0;
        }
        addToPeak(s, flush);
    }

    uint64_t live(int device, MemKind kind) const noexcept;
    uint64_t peak(int device) const noexcept;
    // The peak since the last resetWindow() (the pytest plugin's per-test peak; the peak's
    // composition follows it): the same as peak() until a reset.
    uint64_t windowPeak(int device) const noexcept;
    void resetWindow(int device) noexcept;
    // Every device (of 0 to kMaxDevices - 1) that holds memory or ever held device memory.
    std::vector<DeviceCounters> snapshot() const;

private:
    using ThreadLive = live_counters_detail::ThreadLive;
    static constexpr int kBatchedSlots = live_counters_detail::kBatchedSlots;

    void adopt(ThreadLive& t) noexcept;  // the thread's first add to these counters
    void addToPeak(int slot, int64_t delta) noexcept;
    static int slot(int device) { return device >= 0 && device < kMaxDevices ? device + 1 : 0; }
    struct alignas(64) Cell {
        std::atomic<int64_t> bytes[kMaxDevices + 1][size_t(MemKind::Count)] = {};
        Cell* next = nullptr;
    };
    Cell* newCell() noexcept;
    int64_t sum(int slot, MemKind kind) const noexcept;

    uint64_t m_id = 0;  // tells a thread's cell and batch for these counters from an older one's
    std::atomic<Cell*> m_cells{nullptr};
    Cell m_shared;
    std::atomic<int64_t> m_batched[kMaxDevices + 1] = {};
    std::atomic<int64_t> m_ownPeaks[kMaxDevices + 1] = {};
    std::atomic<int64_t> m_windowPeaks[kMaxDevices + 1] = {};
    std::atomic<int64_t>* const m_peak;
};

} // namespace oomscope::track
