#include "track/stack_table.h"

#include <catch2/catch.hpp>

#include <set>
#include <thread>
#include <vector>

using oomscope::StackId;
using oomscope::track::StackTable;

TEST_CASE("stack table deduplicates identical stacks", "[stacks]")
{
    StackTable table;
    const uint64_t a[] = {1, 2, 3};
    const uint64_t b[] = {1, 2, 4};
    const uint64_t prefix[] = {1, 2};
    const StackId ia = table.intern(a, 3);
    CHECK(ia);
    CHECK(table.intern(a, 3) == ia);
    CHECK(table.intern(b, 3) != ia);
    CHECK(table.intern(prefix, 2) != ia);
    CHECK(table.size() == 3);
    CHECK(table.frames(ia) == std::vector<uint64_t>{1, 2, 3});
    CHECK_FALSE(table.intern(a, 0));
    CHECK(table.frames(StackId()).empty());
    CHECK(table.frames(StackId(999999)).empty());
}

TEST_CASE("stack table: many stacks keep distinct ids and their frames", "[stacks]")
{
    StackTable table;
    std::vector<StackId> ids;
    for (uint64_t i = 0; i < 20000; ++i) {
        const uint64_t frames[] = {0x400000 + i, 0x500000, 0x600000 + i % 7};
        ids.push_back(table.intern(frames, 3));
    }
    CHECK(std::set<StackId>(ids.begin(), ids.end()).size() == ids.size());
    for (uint64_t i = 0; i < 20000; i += 997)
        CHECK(table.frames(ids[i]) == std::vector<uint64_t>{0x400000 + i, 0x500000, 0x600000 + i % 7});
}

TEST_CASE("stack table: threads interning the same stacks agree on ids", "[stacks]")
{
    StackTable table;
    constexpr int kThreads = 8;
    constexpr uint64_t kStacks = 2000;
    std::vector<std::vector<StackId>> seen(kThreads, std::vector<StackId>(kStacks));
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            for (int round = 0; round < 3; ++round) {
                for (uint64_t i = 0; i < kStacks; ++i) {
                    const uint64_t s = (i * 7 + uint64_t(t)) % kStacks;  // different orders per thread
                    const uint64_t frames[] = {s, s + 1, 42};
                    const StackId id = table.intern(frames, 3);
                    if (round == 2)
                        seen[size_t(t)][s] = id;
                }
            }
        });
    }
    for (auto& th : threads)
        th.join();
    CHECK(table.size() == kStacks);
    for (int t = 1; t < kThreads; ++t)
        CHECK(seen[size_t(t)] == seen[0]);
    CHECK(std::set<StackId>(seen[0].begin(), seen[0].end()).size() == kStacks);
}

TEST_CASE("stack table: a repeated stack is answered by the thread's cache", "[stacks]")
{
    StackTable table;
    const uint64_t frames[] = {7, 8, 9};
    const StackId first = table.intern(frames, 3);
    const uint64_t hits = table.cacheHits();
    CHECK(table.intern(frames, 3) == first);
    CHECK(table.cacheHits() == hits + 1);
}
