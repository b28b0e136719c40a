// Interns call stacks into dense StackIds so that events and live allocations carry 32 bits
// instead of a frame array. A frame is one 64-bit word: a native return address, or a Python
// frame token (bit 63 set, see python_frames.h). intern() is called from any thread on the
// allocation path: a per-thread cache answers a repeated stack without taking a lock; a miss
// takes one shard mutex. Stacks are never removed: memory grows with distinct stacks only.
#pragma once

#include "track/ids.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace oomscope::track {

class StackTable {
public:
    StackTable();
    ~StackTable();
    StackTable(const StackTable&) = delete;
    StackTable& operator=(const StackTable&) = delete;

    // Returns StackId() (none) for an empty stack or when memory runs out.
    StackId intern(const uint64_t* frames, uint32_t count) noexcept;

    // Dump time. Empty for an unknown id.
    std::vector<uint64_t> frames(StackId id) const;
    // Dump time: every stack, by StackId value.
    std::unordered_map<uint32_t, std::vector<uint64_t>> all() const;
    size_t size() const { return m_size.load(std::memory_order_relaxed); }
    size_t memoryBytes() const;
    uint64_t cacheHits() const { return m_cacheHits.load(std::memory_order_relaxed); }

    // New stacks are journaled to the flight-recorder file. Called before the table is shared.
    void setFlight(class FlightFile* flight) noexcept { m_flight = flight; }

    void lockAll() noexcept;
    void unlockAll() noexcept;

private:
    static constexpr uint32_t kShardBits = 4;
    static constexpr uint32_t kShards = 1u << kShardBits;
    struct Entry {
        uint64_t hash;
        uint32_t offset;  // into Shard::frames
        uint32_t count;
    };
    struct alignas(64) Shard {
        mutable std::mutex mutex;
        std::vector<uint32_t> index;  // open addressing over entries, UINT32_MAX = empty
        std::vector<Entry> entries;
        std::vector<uint64_t> frames;
    };
    StackId internSlow(uint64_t hash, const uint64_t* frames, uint32_t count) noexcept;

    Shard m_shards[kShards];
    std::atomic<size_t> m_size{0};
    std::atomic<uint64_t> m_cacheHits{0};
    class FlightFile* m_flight = nullptr;
    unsigned m_cacheKey = 0;
    bool m_haveCacheKey = false;
};

} // namespace oomscope::track
