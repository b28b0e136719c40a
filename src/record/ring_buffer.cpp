#include "record/ring_buffer.h"

#include <algorithm>
#include <cstring>
#include <sys/mman.h>

namespace oomscope::record {

RingBuffer::RingBuffer(size_t capacity)
{
    size_t cap = 16;
    while (cap < capacity && cap < (size_t(1) << 40))
        cap <<= 1;
    void* mem = mmap(nullptr, cap * sizeof(Slot), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED)
        return;
    // Anonymous memory is zero: seq 0 never equals a stable 2*s+2, so unwritten slots read as
    // absent without any initialisation pass over the whole ring.
    m_slots = static_cast<Slot*>(mem);
    m_capacity = cap;
    m_mask = cap - 1;
}

RingBuffer::~RingBuffer()
{
    if (m_slots)
        munmap(m_slots, m_capacity * sizeof(Slot));
}

size_t RingBuffer::memoryBytes() const
{
    return m_capacity * sizeof(Slot);
}

void RingBuffer::push(const Event& event) noexcept
{
    const uint64_t s = m_head.fetch_add(1, std::memory_order_relaxed);
    if (!m_slots)
        return;
    Slot& slot = m_slots[s & m_mask];
    // Claim the slot: only from a stable (even) state of an older lap. A producer a whole lap
    // behind, or one that finds the slot being written, gives its event up rather than write
    // beside another producer: the reader never sees a payload of two events, and the event
    // given up is counted as dropped (pushed − recorded).
    uint64_t current = slot.seq.load(std::memory_order_relaxed);
    do {
        if ((current & 1) != 0 || current >= 2 * s + 1)
            return;
    } while (!slot.seq.compare_exchange_weak(current, 2 * s + 1, std::memory_order_relaxed));
    std::atomic_thread_fence(std::memory_order_release);
    uint64_t words[kWords];
    std::memcpy(words, &event, sizeof(Event));
    for (size_t i = 0; i < kWords; ++i)
        slot.words[i].store(words[i], std::memory_order_relaxed);
    slot.seq.store(2 * s + 2, std::memory_order_release);
}

bool RingBuffer::readStable(uint64_t s, Event* out) const noexcept
{
    const Slot& slot = m_slots[s & m_mask];
    const uint64_t before = slot.seq.load(std::memory_order_acquire);
    if (before != 2 * s + 2)
        return false;  // still being written, or already overwritten by a newer lap
    uint64_t words[kWords];
    for (size_t i = 0; i < kWords; ++i)
        words[i] = slot.words[i].load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (slot.seq.load(std::memory_order_relaxed) != before)
        return false;
    std::memcpy(out, words, sizeof(Event));
    return true;
}

RingBuffer::Snapshot RingBuffer::snapshot(size_t maxEvents) const
{
    Snapshot out;
    const uint64_t head = m_head.load(std::memory_order_acquire);
    out.events.reserve(std::min<uint64_t>(std::min<uint64_t>(head, m_capacity), maxEvents));
    const auto [pushed, dropped] = forEachStable([&](const Event& e) { out.events.push_back(e); }, maxEvents);
    out.pushed = pushed;
    out.dropped = dropped;
    return out;
}

} // namespace oomscope::record
