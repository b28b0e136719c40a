#include "track/live_map.h"

#include <catch2/catch.hpp>

#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

using oomscope::track::LiveAllocation;
using oomscope::track::LiveMap;

namespace {
LiveAllocation entry(uint64_t address, uint64_t size)
{
    LiveAllocation a;
    a.address = address;
    a.size = size;
    a.device = 0;
    return a;
}
} // namespace

TEST_CASE("live map insert, find, erase", "[livemap]")
{
    LiveMap map;
    CHECK(map.insert(entry(0x1000, 10), nullptr) == LiveMap::InsertResult::Inserted);
    CHECK(map.size() == 1);
    REQUIRE(map.find(0x1000));
    CHECK(map.find(0x1000)->size == 10);
    CHECK_FALSE(map.find(0x2000));
    auto erased = map.erase(0x1000);
    REQUIRE(erased);
    CHECK(erased->size == 10);
    CHECK(map.size() == 0);
    CHECK_FALSE(map.erase(0x1000));
}

TEST_CASE("live map refuses address 0 and reports a replaced entry", "[livemap]")
{
    LiveMap map;
    CHECK(map.insert(entry(0, 10), nullptr) == LiveMap::InsertResult::Refused);
    map.insert(entry(0x1000, 10), nullptr);
    LiveAllocation replaced;
    CHECK(map.insert(entry(0x1000, 99), &replaced) == LiveMap::InsertResult::Replaced);
    CHECK(replaced.size == 10);
    CHECK(map.find(0x1000)->size == 99);
    CHECK(map.size() == 1);
}

TEST_CASE("live map agrees with a reference map under random churn", "[livemap]")
{
    LiveMap map;
    std::unordered_map<uint64_t, uint64_t> reference;
    std::mt19937_64 rng(42);
    for (int i = 0; i < 200000; ++i) {
        // Addresses on a 2 MiB grid collide in the low bits, as real device pointers do.
        const uint64_t address = 0x7f0000000000 + (rng() % 5000) * (2 << 20);
        if (rng() % 3 == 0) {
            const bool had = reference.erase(address) == 1;
            REQUIRE(bool(map.erase(address)) == had);
        } else {
            reference[address] = i;
            map.insert(entry(address, uint64_t(i)), nullptr);
        }
    }
    REQUIRE(map.size() == reference.size());
    for (const auto& [address, size] : reference) {
        auto found = map.find(address);
        REQUIRE(found);
        REQUIRE(found->size == size);
    }
    const auto all = map.snapshot();
    CHECK(all.size() == reference.size());
    map.clear();
    CHECK(map.size() == 0);
    CHECK(map.snapshot().empty());
}

TEST_CASE("live map under concurrent threads, frees on other threads", "[livemap]")
{
    LiveMap map;
    constexpr int kThreads = 8;
    constexpr uint64_t kPerThread = 20000;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&map, t] {
            for (uint64_t i = 0; i < kPerThread; ++i)
                map.insert(entry((uint64_t(t) << 40) | ((i + 1) << 8), 1), nullptr);
        });
    }
    for (auto& th : threads)
        th.join();
    REQUIRE(map.size() == kThreads * kPerThread);
    threads.clear();
    // Catch2's assertions are not thread-safe: workers count, the main thread asserts.
    std::vector<uint64_t> missing(kThreads, 0);
    for (int t = 0; t < kThreads; ++t) {
        // Thread t frees what thread (t + 1) allocated.
        const uint64_t owner = uint64_t((t + 1) % kThreads);
        threads.emplace_back([&map, &missing, owner, t] {
            for (uint64_t i = 0; i < kPerThread; ++i)
                missing[size_t(t)] += map.erase((owner << 40) | ((i + 1) << 8)) ? 0 : 1;
        });
    }
    for (auto& th : threads)
        th.join();
    for (uint64_t m : missing)
        CHECK(m == 0);
    CHECK(map.size() == 0);
    CHECK(map.snapshot().empty());
}

TEST_CASE("live map updates and finds an entry another thread inserted", "[livemap]")
{
    LiveMap map;
    std::thread([&map] { map.insert(entry(0x7f0000000000, 4096), nullptr); }).join();
    LiveAllocation changed = entry(0x7f0000000000, 4096);
    changed.stack = 42;
    CHECK(map.update(changed));
    CHECK_FALSE(map.update(entry(0x7f0000100000, 1)));
    REQUIRE(map.size() == 1);  // updated in place, not inserted again in this thread's shard
    const auto found = map.find(0x7f0000000000);
    REQUIRE(found);
    CHECK(found->stack == 42);
    CHECK(map.erase(0x7f0000000000));
    CHECK(map.size() == 0);
}
