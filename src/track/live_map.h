// Exact map of live allocations: address → LiveAllocation, independent of the ring. Called from
// any thread on the allocation path. Sharded by thread, not by address: a thread inserts into
// the shard it was given (round-robin on its first call, so the first 64 threads have one
// each) and looks there first on erase; an allocation freed on another thread is found by
// looking through the other shards (empty ones skipped without their lock). Threads that
// allocate and free concurrently then share no cache line, where address-hashed shards had
// every thread touch every shard's lock (docs/BENCHMARKS.md: the 8-thread figure). Frees on
// other threads pay a walk of the shards in use; the allocation path sees cudaMalloc-level
// calls only, where that is rare. Tables grow by doubling with malloc (never throw); an insert
// that cannot grow is refused and counted.
#pragma once

#include "track/event.h"
#include "track/image.h"
#include "track/spin_lock.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

namespace oomscope::track {

class LiveMap {
public:
    LiveMap();
    ~LiveMap();
    LiveMap(const LiveMap&) = delete;
    LiveMap& operator=(const LiveMap&) = delete;

    enum class InsertResult { Inserted, Replaced, Refused };
    // Replaces an entry at the same address in this thread's shard (its free was never seen)
    // and hands it back in *replaced so that the caller can correct its counters. One left in
    // another thread's shard stays there until its address is freed or the map is cleared.
    InsertResult insert(const LiveAllocation& entry, LiveAllocation* replaced) noexcept;
    // Overwrites the entry at entry.address wherever it is; false when there is none.
    bool update(const LiveAllocation& entry) noexcept;
    std::optional<LiveAllocation> erase(uint64_t address) noexcept;
    std::optional<LiveAllocation> find(uint64_t address) const noexcept;

    // Dump time: a copy of every entry (order unspecified).
    std::vector<LiveAllocation> snapshot() const;
    size_t size() const;
    size_t memoryBytes() const;
    uint64_t refused() const { return m_refused.load(std::memory_order_relaxed); }
    void clear() noexcept;

    // Tables from now on come from the flight-recorder file's arena (while it lasts) and are
    // published there. Called before the map is shared.
    void setFlight(class FlightFile* flight) noexcept { m_flight = flight; }

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
        bool inFile = false;              // slots are in the flight file: never freed
    };
    // The calling thread's shard.
    static size_t ownShard() noexcept;
    bool grow(Shard& shard) noexcept;
    static LiveAllocation* findSlot(const Shard& shard, uint64_t address) noexcept;
    static std::optional<LiveAllocation> eraseIn(Shard& shard, uint64_t address) noexcept;
    // fn(shard) on this thread's shard, then on every other one holding entries, until it
    // returns true.
    template <class Fn>
    bool anyShard(Fn&& fn) const noexcept;

    Shard m_shards[kShards];
    std::atomic<uint64_t> m_refused{0};
    class FlightFile* m_flight = nullptr;
};

} // namespace oomscope::track
