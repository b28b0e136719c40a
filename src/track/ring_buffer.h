// Bounded multi-producer ring of Events that overwrites the oldest. push() is called from any
// thread and is lock-free: a thread claims a block of kBlock slots with one fetch_add on the
// shared head and fills it alone (a compare-exchange per slot, against a producer a lap
// behind), so that threads meet on the head once every kBlock events, not on every one; each
// thread counts its own pushes in a cell of its own. A thread's first push allocates its cell
// (once per thread and ring). Events are in slot order, which is time order per thread, not
// across threads: readers that need one order sort by time (eventsInTimeOrder). snapshot() may
// run while producers push: it copies the events that are stable and counts every other one
// as dropped, so that recorded + dropped == pushed always holds.
#pragma once

#include "track/event.h"
#include "track/event_slot.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace oomscope::track {

class RingBuffer {
public:
    // capacity is rounded up to a power of two (at least 16). Memory is reserved with mmap and
    // committed page by page as the ring fills. If the mapping fails the ring holds nothing and
    // every push counts as dropped.
    // memory: capacity() slots of kSlotBytes, zeroed, owned by the caller (the flight-recorder
    // file); nullptr: the ring maps its own. capacity must then be roundCapacity's. head: where
    // the count of claimed slots lives (the flight file's header, so that a reader of the file
    // knows it), zero; nullptr: in the ring.
    explicit RingBuffer(size_t capacity, void* memory = nullptr, std::atomic<uint64_t>* head = nullptr);
    // A power of two, 16 to slot::kMaxCapacity.
    static size_t roundCapacity(size_t capacity);
    static constexpr size_t kSlotBytes = slot::kBytes;
    ~RingBuffer();
    RingBuffer(const RingBuffer&) = delete;
    RingBuffer& operator=(const RingBuffer&) = delete;

    static constexpr uint64_t kBlock = slot::kBlock;

    void push(const Event& event) noexcept;

    struct Snapshot {
        std::vector<Event> events;  // oldest first (by time)
        uint64_t pushed = 0;
        uint64_t dropped = 0;       // overwritten, or still being written at the snapshot
    };
    // Copies up to maxEvents of the newest events (all of them by default), in time order.
    Snapshot snapshot(size_t maxEvents = SIZE_MAX) const;

    // The same walk without the copy: fn(const Event&) for each stable event, in slot order
    // (time order per thread). Returns {pushed, dropped} as snapshot() counts them.
    template <class Fn>
    std::pair<uint64_t, uint64_t> forEachStable(Fn&& fn) const
    {
        const uint64_t head = m_headWord->load(std::memory_order_acquire);
        uint64_t recorded = 0;
        if (m_slots) {
            // The head runs ahead of the last event by the unfilled rest of each thread's
            // block: the walk goes back that much further. An index and the one a lap later
            // share a slot, and a slot is stable under one index only: nothing is read twice.
            const uint64_t width = m_capacity + kBlock * m_cellCount.load(std::memory_order_acquire);
            const uint64_t begin = head > width ? head - width : 0;
            for (uint64_t s = begin; s < head; ++s) {
                Event event;
                if (readStable(s, &event)) {
                    fn(event);
                    ++recorded;
                }
            }
        }
        // Counted after the walk: every event it read was counted by its producer before it
        // was published, so recorded <= pushed.
        const uint64_t all = pushed();
        return {all, all > recorded ? all - recorded : 0};
    }

    size_t capacity() const { return m_capacity; }
    uint64_t pushed() const;
    size_t memoryBytes() const;

private:
    // Event s when its slot holds it whole (not being written, not overwritten by a newer lap).
    bool readStable(uint64_t s, Event* out) const noexcept;
    // An event packed as event_slot.h says, word 0 (its state) written last. A thread fills
    // kBlock slots in a row, so producers share a cache line only where their blocks meet. The
    // words are relaxed atomics so that the seqlock-style reader is race-free by the letter of
    // the memory model (they compile to plain moves on x86-64).
    struct Slot {
        std::atomic<uint64_t> words[slot::kWords];
    };

    // A producer thread's count of its pushes; one writer, summed by pushed().
    struct alignas(64) Cell {
        std::atomic<uint64_t> pushed{0};
        Cell* next = nullptr;
    };
    Cell* newCell() noexcept;
    bool write(uint64_t s, const Event& event) noexcept;

    static_assert(sizeof(Slot) == kSlotBytes);
    Slot* m_slots = nullptr;
    bool m_ownsSlots = false;
    size_t m_capacity = 0;
    size_t m_mask = 0;
    // m_head, or the flight file's word; read on every push: kept off m_head's cache line.
    std::atomic<uint64_t>* m_headWord = &m_head;
    const uint64_t m_id;              // tells a thread's block of this ring from one of an older ring
    std::atomic<Cell*> m_cells{nullptr};
    std::atomic<uint64_t> m_cellCount{1};  // the shared cell too
    Cell m_sharedCell;                // for a thread whose own cell could not be allocated
    alignas(64) std::atomic<uint64_t> m_head{0};
};

} // namespace oomscope::track
