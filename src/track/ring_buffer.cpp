#include "track/ring_buffer.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <sys/mman.h>

namespace oomscope::track {
namespace {

std::atomic<uint64_t> g_nextRingId{1};

// The block a thread fills, of the ring with id `ring`. Plain data: no destructor runs at
// thread exit (a hook may push from a thread_local destructor of the program).
struct ThreadBlock {
    uint64_t ring = 0;
    uint64_t next = 0;
    uint64_t end = 0;
    void* cell = nullptr;
};
thread_local ThreadBlock t_block __attribute__((tls_model("initial-exec")));

} // namespace

size_t RingBuffer::roundCapacity(size_t capacity)
{
    size_t cap = 16;
    while (cap < capacity && cap < slot::kMaxCapacity)
        cap <<= 1;
    return cap;
}

RingBuffer::RingBuffer(size_t capacity, void* memory, std::atomic<uint64_t>* head)
    : m_id(g_nextRingId.fetch_add(1, std::memory_order_relaxed))
{
    if (head)
        m_headWord = head;
    const size_t cap = roundCapacity(capacity);
    void* mem = memory;
    if (!mem) {
        mem = mmap(nullptr, cap * sizeof(Slot), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (mem == MAP_FAILED)
            return;
        m_ownsSlots = true;
    }
    // Fresh memory (anonymous, or a new flight file's reserved blocks) is zero: state 0 never
    // equals a stable 2*s+2 (below 2^31 events, where slots are fresh), so unwritten slots read
    // as absent without any initialisation pass over the whole ring.
    m_slots = static_cast<Slot*>(mem);
    m_capacity = cap;
    m_mask = cap - 1;
}

RingBuffer::~RingBuffer()
{
    if (m_slots && m_ownsSlots)
        munmap(m_slots, m_capacity * sizeof(Slot));
    for (Cell* c = m_cells.load(std::memory_order_acquire); c;) {
        Cell* next = c->next;
        delete c;
        c = next;
    }
}

RingBuffer::Cell* RingBuffer::newCell() noexcept
{
    Cell* cell = new (std::nothrow) Cell();
    if (!cell)
        return &m_sharedCell;
    m_cellCount.fetch_add(1, std::memory_order_release);
    Cell* head = m_cells.load(std::memory_order_relaxed);
    do {
        cell->next = head;
    } while (!m_cells.compare_exchange_weak(head, cell, std::memory_order_release, std::memory_order_relaxed));
    return cell;
}

uint64_t RingBuffer::pushed() const
{
    uint64_t n = m_sharedCell.pushed.load(std::memory_order_relaxed);
    for (const Cell* c = m_cells.load(std::memory_order_acquire); c; c = c->next)
        n += c->pushed.load(std::memory_order_relaxed);
    return n;
}

size_t RingBuffer::memoryBytes() const
{
    return m_capacity * sizeof(Slot);
}

void RingBuffer::push(const Event& event) noexcept
{
    ThreadBlock& b = t_block;
    if (__builtin_expect(b.ring != m_id, 0)) {
        b.ring = m_id;
        b.cell = newCell();
        b.next = b.end = 0;
    }
    Cell* cell = static_cast<Cell*>(b.cell);
    if (cell == &m_sharedCell)
        cell->pushed.fetch_add(1, std::memory_order_relaxed);
    else
        cell->pushed.store(cell->pushed.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    if (!m_slots)
        return;
    for (int attempt = 0; attempt < 2; ++attempt) {
        if (b.next == b.end) {
            b.next = m_headWord->fetch_add(kBlock, std::memory_order_relaxed);
            b.end = b.next + kBlock;
        }
        if (write(b.next++, event))
            return;
        // The rest of this block was lapped while the thread was idle: a fresh block, once.
        b.next = b.end;
    }
}

bool RingBuffer::write(uint64_t s, const Event& event) noexcept
{
    Slot& slot = m_slots[s & m_mask];
    // Claim the slot: only from a stable (even) state of an older lap. A producer a whole lap
    // behind, or one that finds the slot being written, gives its event up rather than write
    // beside another producer: the reader never sees a payload of two events.
    uint64_t current = slot.words[0].load(std::memory_order_relaxed);
    do {
        if (!slot::claimable(slot::stateOf(current), s))
            return false;
    } while (!slot.words[0].compare_exchange_weak(current, slot::writingState(s), std::memory_order_relaxed));
    std::atomic_thread_fence(std::memory_order_release);
    uint64_t words[slot::kWords];
    slot::pack(event, words);
    for (size_t i = 1; i < slot::kWords; ++i)
        slot.words[i].store(words[i], std::memory_order_relaxed);
    slot.words[0].store(words[0] | slot::stableState(s), std::memory_order_release);
    return true;
}

bool RingBuffer::readStable(uint64_t s, Event* out) const noexcept
{
    const Slot& slot = m_slots[s & m_mask];
    uint64_t words[slot::kWords];
    words[0] = slot.words[0].load(std::memory_order_acquire);
    if (slot::stateOf(words[0]) != slot::stableState(s))
        return false;  // still being written, or already overwritten by a newer lap
    for (size_t i = 1; i < slot::kWords; ++i)
        words[i] = slot.words[i].load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (slot.words[0].load(std::memory_order_relaxed) != words[0])
        return false;
    *out = slot::unpack(words);
    return true;
}

RingBuffer::Snapshot RingBuffer::snapshot(size_t maxEvents) const
{
    Snapshot out;
    out.events.reserve(m_capacity);
    const auto [pushed, dropped] = forEachStable([&](const Event& e) { out.events.push_back(e); });
    out.pushed = pushed;
    out.dropped = dropped;
    // Slot order is time order per thread only: one order across threads.
    const auto byTime = [](const Event& a, const Event& b) { return a.timeNs < b.timeNs; };
    if (!std::is_sorted(out.events.begin(), out.events.end(), byTime))
        std::stable_sort(out.events.begin(), out.events.end(), byTime);
    if (out.events.size() > maxEvents) {
        out.dropped += out.events.size() - maxEvents;
        out.events.erase(out.events.begin(), out.events.end() - ptrdiff_t(maxEvents));
    }
    return out;
}

} // namespace oomscope::track
