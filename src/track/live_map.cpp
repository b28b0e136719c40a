#include "track/live_map.h"

#include "track/flight_writer.h"
#include "track/hash.h"

#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace oomscope::track {
namespace {

// An entry written where a reader in another process may be looking (the flight file's copy of
// the tables: oomscope snapshot reads them while the program runs): a slot's address is
// cleared before its other fields change and written after them, so that a slot with an
// address always holds that allocation's whole entry (a writer preempted in the middle leaves
// a slot that reads as empty, not one with the last occupant's size). x86-64 keeps stores in
// order; the fences keep the compiler (and other CPUs) from moving them.
void writeEntry(LiveAllocation* slot, const LiveAllocation& entry) noexcept
{
    static_assert(offsetof(LiveAllocation, address) == 0);
    if (slot->address != entry.address && slot->address != 0) {
        __atomic_store_n(&slot->address, uint64_t(0), __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_RELEASE);
    }
    std::memcpy(reinterpret_cast<char*>(slot) + sizeof(uint64_t), reinterpret_cast<const char*>(&entry) + sizeof(uint64_t),
                sizeof(LiveAllocation) - sizeof(uint64_t));
    __atomic_store_n(&slot->address, entry.address, __ATOMIC_RELEASE);
}

// An emptied slot: its address alone says so (the other fields are left as they were; nothing
// reads them in a slot without an address).
void clearEntry(LiveAllocation* slot) noexcept
{
    __atomic_store_n(&slot->address, uint64_t(0), __ATOMIC_RELEASE);
}

} // namespace


LiveMap::LiveMap() = default;

LiveMap::~LiveMap()
{
    for (Shard& shard : m_shards) {
        if (!shard.inFile)
            std::free(shard.slots);
    }
}

namespace {
std::atomic<unsigned> g_nextShard{0};
thread_local int t_shard __attribute__((tls_model("initial-exec"))) = -1;
} // namespace

size_t LiveMap::ownShard() noexcept
{
    if (__builtin_expect(t_shard < 0, 0))
        t_shard = int(g_nextShard.fetch_add(1, std::memory_order_relaxed) & (kShards - 1));
    return size_t(t_shard);
}

template <class Fn>
bool LiveMap::anyShard(Fn&& fn) const noexcept
{
    const size_t own = ownShard();
    if (fn(const_cast<Shard&>(m_shards[own])))
        return true;
    for (size_t s = 0; s < kShards; ++s) {
        // An entry another thread inserted before this one could know its address is
        // counted by then: a shard that counts none holds none of interest.
        if (s == own || m_shards[s].used.load(std::memory_order_relaxed) == 0)
            continue;
        if (fn(const_cast<Shard&>(m_shards[s])))
            return true;
    }
    return false;
}

LiveAllocation* LiveMap::findSlot(const Shard& shard, uint64_t address) noexcept
{
    if (shard.capacity == 0)
        return nullptr;
    const size_t mask = shard.capacity - 1;
    for (size_t i = (mix64(address) >> 6) & mask;; i = (i + 1) & mask) {
        LiveAllocation* slot = &shard.slots[i];
        if (slot->address == address)
            return slot;
        if (slot->address == 0)
            return nullptr;
    }
}

bool LiveMap::grow(Shard& shard) noexcept
{
    const size_t newCapacity = shard.capacity ? shard.capacity * 2 : 64;
    void* fromFile = m_flight ? m_flight->allocLive(newCapacity * sizeof(LiveAllocation)) : nullptr;
    auto* slots = static_cast<LiveAllocation*>(fromFile ? fromFile : std::calloc(newCapacity, sizeof(LiveAllocation)));
    if (!slots)
        return false;
    const size_t mask = newCapacity - 1;
    for (size_t i = 0; i < shard.capacity; ++i) {
        const LiveAllocation& old = shard.slots[i];
        if (old.address == 0)
            continue;
        size_t j = (mix64(old.address) >> 6) & mask;
        while (slots[j].address != 0)
            j = (j + 1) & mask;
        slots[j] = old;
    }
    // The old table stays whole until the file names the new one (a process killed in between
    // leaves the old one, which still holds every entry but the one being inserted).
    if (m_flight)
        m_flight->publishShard(size_t(&shard - m_shards), fromFile, newCapacity);
    if (!shard.inFile)
        std::free(shard.slots);
    shard.slots = slots;
    shard.capacity = newCapacity;
    shard.inFile = fromFile != nullptr;
    return true;
}

LiveMap::InsertResult LiveMap::insert(const LiveAllocation& entry, LiveAllocation* replaced) noexcept
{
    if (entry.address == 0)
        return InsertResult::Refused;
    Shard& shard = m_shards[ownShard()];
    std::lock_guard<SpinLock> lock(shard.mutex);
    if (LiveAllocation* slot = findSlot(shard, entry.address)) {
        if (replaced)
            *replaced = *slot;
        writeEntry(slot, entry);
        return InsertResult::Replaced;
    }
    // Keep the load factor under 1/2: linear probing stays short.
    const size_t used = shard.used.load(std::memory_order_relaxed);
    if ((used + 1) * 2 > shard.capacity && !grow(shard)) {
        m_refused.fetch_add(1, std::memory_order_relaxed);
        return InsertResult::Refused;
    }
    const size_t mask = shard.capacity - 1;
    size_t i = (mix64(entry.address) >> 6) & mask;
    while (shard.slots[i].address != 0)
        i = (i + 1) & mask;
    writeEntry(&shard.slots[i], entry);
    shard.used.store(used + 1, std::memory_order_relaxed);
    return InsertResult::Inserted;
}

bool LiveMap::update(const LiveAllocation& entry) noexcept
{
    if (entry.address == 0)
        return false;
    return anyShard([&](Shard& shard) {
        std::lock_guard<SpinLock> lock(shard.mutex);
        LiveAllocation* slot = findSlot(shard, entry.address);
        if (slot)
            writeEntry(slot, entry);
        return slot != nullptr;
    });
}

std::optional<LiveAllocation> LiveMap::eraseIn(Shard& shard, uint64_t address) noexcept
{
    std::lock_guard<SpinLock> lock(shard.mutex);
    LiveAllocation* slot = findSlot(shard, address);
    if (!slot)
        return std::nullopt;
    const LiveAllocation found = *slot;
    // Backward-shift deletion: no tombstones, so lookups never slow down with churn.
    const size_t mask = shard.capacity - 1;
    size_t hole = size_t(slot - shard.slots);
    for (size_t j = (hole + 1) & mask; shard.slots[j].address != 0; j = (j + 1) & mask) {
        const size_t home = (mix64(shard.slots[j].address) >> 6) & mask;
        // Move j into the hole if its home position is not in the cyclic range (hole, j].
        const bool homeInRange = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (!homeInRange) {
            writeEntry(&shard.slots[hole], shard.slots[j]);
            hole = j;
        }
    }
    clearEntry(&shard.slots[hole]);
    shard.used.store(shard.used.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
    return found;
}

std::optional<LiveAllocation> LiveMap::erase(uint64_t address) noexcept
{
    if (address == 0)
        return std::nullopt;
    std::optional<LiveAllocation> found;
    anyShard([&](Shard& shard) {
        found = eraseIn(shard, address);
        return found.has_value();
    });
    return found;
}

std::optional<LiveAllocation> LiveMap::find(uint64_t address) const noexcept
{
    std::optional<LiveAllocation> found;
    if (address == 0)
        return found;
    anyShard([&](Shard& shard) {
        std::lock_guard<SpinLock> lock(shard.mutex);
        if (const LiveAllocation* slot = findSlot(shard, address))
            found = *slot;
        return found.has_value();
    });
    return found;
}

std::vector<LiveAllocation> LiveMap::snapshot() const
{
    std::vector<LiveAllocation> out;
    out.reserve(size());
    for (const Shard& shard : m_shards) {
        std::lock_guard<SpinLock> lock(shard.mutex);
        for (size_t i = 0; i < shard.capacity; ++i) {
            if (shard.slots[i].address != 0)
                out.push_back(shard.slots[i]);
        }
    }
    return out;
}

size_t LiveMap::size() const
{
    size_t n = 0;
    for (const Shard& shard : m_shards)
        n += shard.used.load(std::memory_order_relaxed);
    return n;
}

size_t LiveMap::memoryBytes() const
{
    size_t bytes = sizeof(*this);
    for (const Shard& shard : m_shards) {
        std::lock_guard<SpinLock> lock(shard.mutex);
        bytes += shard.capacity * sizeof(LiveAllocation);
    }
    return bytes;
}

void LiveMap::clear() noexcept
{
    for (Shard& shard : m_shards) {
        std::lock_guard<SpinLock> lock(shard.mutex);
        for (size_t i = 0; i < shard.capacity; ++i)
            shard.slots[i] = LiveAllocation{};
        shard.used.store(0, std::memory_order_relaxed);
    }
}

void LiveMap::lockAll() noexcept
{
    for (Shard& shard : m_shards)
        shard.mutex.lock();
}

void LiveMap::unlockAll() noexcept
{
    for (Shard& shard : m_shards)
        shard.mutex.unlock();
}

} // namespace oomscope::track
