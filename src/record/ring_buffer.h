// Bounded multi-producer ring of Events that overwrites the oldest. push() is called from any
// thread, is lock-free (a fetch_add and a compare-exchange, no retry loop beyond a lost race)
// and never allocates. snapshot() may run while producers push: it copies the events that are
// stable and counts every other one as dropped, so that recorded + dropped == pushed always
// holds.
#pragma once

#include "record/event.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace oomscope::record {

class RingBuffer {
public:
    // capacity is rounded up to a power of two (at least 16). Memory is reserved with mmap and
    // committed page by page as the ring fills. If the mapping fails the ring holds nothing and
    // every push counts as dropped.
    explicit RingBuffer(size_t capacity);
    ~RingBuffer();
    RingBuffer(const RingBuffer&) = delete;
    RingBuffer& operator=(const RingBuffer&) = delete;

    void push(const Event& event) noexcept;

    struct Snapshot {
        std::vector<Event> events;  // oldest first
        uint64_t pushed = 0;
        uint64_t dropped = 0;       // overwritten, or still being written at the snapshot
    };
    // Copies up to maxEvents of the newest events (all of them by default).
    Snapshot snapshot(size_t maxEvents = SIZE_MAX) const;

    // The same walk without the copy: fn(const Event&) for each stable event, oldest first.
    // Returns {pushed, dropped} as snapshot() counts them.
    template <class Fn>
    std::pair<uint64_t, uint64_t> forEachStable(Fn&& fn, size_t maxEvents = SIZE_MAX) const
    {
        const uint64_t head = m_head.load(std::memory_order_acquire);
        if (!m_slots)
            return {head, head};
        uint64_t begin = head > m_capacity ? head - m_capacity : 0;
        if (head - begin > maxEvents)
            begin = head - maxEvents;
        uint64_t recorded = 0;
        for (uint64_t s = begin; s < head; ++s) {
            Event event;
            if (readStable(s, &event)) {
                fn(event);
                ++recorded;
            }
        }
        return {head, head - recorded};
    }

    size_t capacity() const { return m_capacity; }
    uint64_t pushed() const { return m_head.load(std::memory_order_relaxed); }
    size_t memoryBytes() const;

private:
    static constexpr size_t kWords = sizeof(Event) / sizeof(uint64_t);
    // Event s when its slot holds it whole (not being written, not overwritten by a newer lap).
    bool readStable(uint64_t s, Event* out) const noexcept;
    // One cache line per slot: producers on adjacent slots never share a line. The payload is
    // kept in relaxed atomics so that the seqlock-style reader is race-free by the letter of
    // the memory model (they compile to plain moves on x86-64).
    struct alignas(64) Slot {
        std::atomic<uint64_t> seq;  // 2*s+1 while event s is written, 2*s+2 once it is stable
        std::atomic<uint64_t> words[kWords];
    };

    Slot* m_slots = nullptr;
    size_t m_capacity = 0;
    size_t m_mask = 0;
    alignas(64) std::atomic<uint64_t> m_head{0};
};

} // namespace oomscope::record
