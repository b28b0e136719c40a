#include "track/stack_table.h"

#include "track/flight_writer.h"
#include "track/hash.h"

#include <cstdlib>
#include <cstring>
#include <pthread.h>

namespace oomscope::track {
namespace {

// Direct-mapped per-thread cache: hash → id. A hit trusts the 64-bit hash of the frames (a
// false hit needs two distinct stacks of one thread to collide in 64 bits); the table itself
// always compares frames.
struct CacheLine {
    uint64_t hash;
    uint32_t id;
    uint32_t pad;
};
constexpr size_t kCacheLines = 256;

void freeCache(void* cache)
{
    std::free(cache);
}

} // namespace

StackTable::StackTable()
{
    m_haveCacheKey = pthread_key_create(&m_cacheKey, freeCache) == 0;
}

StackTable::~StackTable()
{
    if (m_haveCacheKey)
        pthread_key_delete(m_cacheKey);
}

StackId StackTable::intern(const uint64_t* frames, uint32_t count) noexcept
{
    if (count == 0)
        return StackId();
    const uint64_t hash = hashWords(frames, count);
    CacheLine* cache = nullptr;
    if (m_haveCacheKey) {
        cache = static_cast<CacheLine*>(pthread_getspecific(m_cacheKey));
        if (!cache) {
            cache = static_cast<CacheLine*>(std::calloc(kCacheLines, sizeof(CacheLine)));
            if (cache && pthread_setspecific(m_cacheKey, cache) != 0) {
                std::free(cache);
                cache = nullptr;
            }
        }
    }
    CacheLine* line = cache ? &cache[hash & (kCacheLines - 1)] : nullptr;
    if (line && line->id != 0 && line->hash == hash) {
        m_cacheHits.fetch_add(1, std::memory_order_relaxed);
        return StackId(line->id);
    }
    const StackId id = internSlow(hash, frames, count);
    if (line && id) {
        line->hash = hash;
        line->id = id.value();
    }
    return id;
}

StackId StackTable::internSlow(uint64_t hash, const uint64_t* frames, uint32_t count) noexcept
{
    const uint32_t shardIndex = uint32_t(hash) & (kShards - 1);
    Shard& shard = m_shards[shardIndex];
    std::lock_guard<std::mutex> lock(shard.mutex);
    try {
        auto makeId = [&](uint32_t local) { return StackId(((local << kShardBits) | shardIndex) + 1); };
        size_t mask = shard.index.size() - 1;
        if (!shard.index.empty()) {
            for (size_t i = (hash >> kShardBits) & mask;; i = (i + 1) & mask) {
                const uint32_t e = shard.index[i];
                if (e == UINT32_MAX)
                    break;
                const Entry& entry = shard.entries[e];
                if (entry.hash == hash && entry.count == count &&
                    std::memcmp(&shard.frames[entry.offset], frames, count * sizeof(uint64_t)) == 0)
                    return makeId(e);
            }
        }
        if (shard.entries.size() >= (UINT32_MAX >> kShardBits) - 1 ||
            shard.frames.size() + count >= UINT32_MAX)
            return StackId();
        if ((shard.entries.size() + 1) * 2 > shard.index.size()) {
            const size_t newSize = shard.index.empty() ? 256 : shard.index.size() * 2;
            std::vector<uint32_t> index(newSize, UINT32_MAX);
            for (uint32_t e = 0; e < shard.entries.size(); ++e) {
                size_t i = (shard.entries[e].hash >> kShardBits) & (newSize - 1);
                while (index[i] != UINT32_MAX)
                    i = (i + 1) & (newSize - 1);
                index[i] = e;
            }
            shard.index.swap(index);
            mask = newSize - 1;
        }
        const uint32_t local = uint32_t(shard.entries.size());
        shard.entries.push_back(Entry{hash, uint32_t(shard.frames.size()), count});
        shard.frames.insert(shard.frames.end(), frames, frames + count);
        size_t i = (hash >> kShardBits) & mask;
        while (shard.index[i] != UINT32_MAX)
            i = (i + 1) & mask;
        shard.index[i] = local;
        m_size.fetch_add(1, std::memory_order_relaxed);
        if (m_flight)
            m_flight->stack(makeId(local).value(), frames, count);
        return makeId(local);
    } catch (...) {
        return StackId();
    }
}

std::vector<uint64_t> StackTable::frames(StackId id) const
{
    if (!id)
        return {};
    const uint32_t raw = id.value() - 1;
    const Shard& shard = m_shards[raw & (kShards - 1)];
    const uint32_t local = raw >> kShardBits;
    std::lock_guard<std::mutex> lock(shard.mutex);
    if (local >= shard.entries.size())
        return {};
    const Entry& entry = shard.entries[local];
    return std::vector<uint64_t>(shard.frames.begin() + entry.offset, shard.frames.begin() + entry.offset + entry.count);
}

std::unordered_map<uint32_t, std::vector<uint64_t>> StackTable::all() const
{
    std::unordered_map<uint32_t, std::vector<uint64_t>> out;
    out.reserve(size());
    for (uint32_t s = 0; s < kShards; ++s) {
        const Shard& shard = m_shards[s];
        std::lock_guard<std::mutex> lock(shard.mutex);
        for (uint32_t local = 0; local < shard.entries.size(); ++local) {
            const Entry& e = shard.entries[local];
            const uint32_t id = (local << kShardBits | s) + 1;
            out.emplace(id, std::vector<uint64_t>(shard.frames.begin() + e.offset, shard.frames.begin() + e.offset + e.count));
        }
    }
    return out;
}

size_t StackTable::memoryBytes() const
{
    size_t bytes = sizeof(*this);
    for (const Shard& shard : m_shards) {
        std::lock_guard<std::mutex> lock(shard.mutex);
        bytes += shard.index.capacity() * sizeof(uint32_t) + shard.entries.capacity() * sizeof(Entry) +
                 shard.frames.capacity() * sizeof(uint64_t);
    }
    return bytes;
}

void StackTable::lockAll() noexcept
{
    for (Shard& shard : m_shards)
        shard.mutex.lock();
}

void StackTable::unlockAll() noexcept
{
    for (Shard& shard : m_shards)
        shard.mutex.unlock();
}

} // namespace oomscope::track
