// Exact map of live allocations: address → LiveAllocation, independent of the ring. Called from
// any thread on the allocation path; sharded by address with one spin lock per shard and no
// counter shared between shards, so threads working on different allocations rarely meet. Tables grow by doubling with malloc (never
// throw); an insert that cannot grow is refused and counted.
#pragma once

#include "record/event.h"
#include "record/spin_lock.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

namespace oomscope::record {

struct LiveAllocation {
    uint64_t address = 0;
    uint64_t size = 0;
    uint64_t timeNs = 0;
    uint64_t stream = 0;
    uint32_t stack = 0;
    uint16_t api = 0;
    int8_t device = -1;
    MemKind memKind = MemKind::Device;
};

class LiveMap {
public:
    LiveMap();
    ~LiveMap();
    LiveMap(const LiveMap&) = delete;
    LiveMap& operator=(const LiveMap&) = delete;

    enum class InsertResult { Inserted, Replaced, Refused };
    // Replaces an entry at the same address (its free was never seen) and hands it back in
    // *replaced so that the caller can correct its counters.
    InsertResult insert(const LiveAllocation& entry, LiveAllocation* replaced) noexcept;
    std::optional<LiveAllocation> erase(uint64_t address) noexcept;
    std::optional<LiveAllocation> find(uint64_t address) const noexcept;

    // Dump time: a copy of every entry (order unspecified).
    std::vector<LiveAllocation> snapshot() const;
    size_t size() const;
    size_t memoryBytes() const;
    uint64_t refused() const { return m_refused.load(std::memory_order_relaxed); }
    void clear() noexcept;

    // Around fork(): the child must not inherit a shard locked by a thread that does not
    // exist there.
    void lockAll() noexcept;
    void unlockAll() noexcept;

private:
    static constexpr size_t kShards = 64;
    struct alignas(64) Shard {
        mutable SpinLock mutex;
        LiveAllocation* slots = nullptr;  // address 0 = empty
        size_t capacity = 0;              // power of two
        std::atomic<size_t> used{0};      // written under the lock, read without it by size()
    };
    static size_t shardOf(uint64_t address);
    static bool grow(Shard& shard) noexcept;
    static LiveAllocation* findSlot(const Shard& shard, uint64_t address) noexcept;

    Shard m_shards[kShards];
    std::atomic<uint64_t> m_refused{0};
};

} // namespace oomscope::record
