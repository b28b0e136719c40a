#include "track/ring_buffer.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <map>
#include <thread>
#include <vector>

using oomscope::track::Event;
using oomscope::track::RingBuffer;

namespace {
Event makeEvent(uint32_t thread, uint64_t seq)
{
    Event e;
    e.thread = thread;
    e.address = seq;
    e.size = seq * 3 + thread;  // a checksum the reader can verify
    return e;
}
} // namespace

TEST_CASE("ring rounds capacity up to a power of two", "[ring]")
{
    CHECK(RingBuffer(1000).capacity() == 1024);
    CHECK(RingBuffer(1).capacity() == 16);
    CHECK(RingBuffer(4096).capacity() == 4096);
}

TEST_CASE("ring keeps everything below capacity, oldest first", "[ring]")
{
    RingBuffer ring(64);
    for (uint64_t i = 0; i < 50; ++i)
        ring.push(makeEvent(1, i));
    const auto snap = ring.snapshot();
    REQUIRE(snap.events.size() == 50);
    CHECK(snap.pushed == 50);
    CHECK(snap.dropped == 0);
    for (uint64_t i = 0; i < 50; ++i)
        CHECK(snap.events[i].address == i);
}

TEST_CASE("ring overwrites the oldest and counts what it dropped", "[ring]")
{
    RingBuffer ring(16);
    for (uint64_t i = 0; i < 100; ++i)
        ring.push(makeEvent(1, i));
    const auto snap = ring.snapshot();
    REQUIRE(snap.events.size() == 16);
    CHECK(snap.pushed == 100);
    CHECK(snap.dropped == 84);
    CHECK(snap.events.front().address == 84);
    CHECK(snap.events.back().address == 99);
}

TEST_CASE("ring snapshot can be limited to the newest events", "[ring]")
{
    RingBuffer ring(64);
    for (uint64_t i = 0; i < 40; ++i)
        ring.push(makeEvent(1, i));
    const auto snap = ring.snapshot(10);
    REQUIRE(snap.events.size() == 10);
    CHECK(snap.events.front().address == 30);
    CHECK(snap.events.size() + snap.dropped == snap.pushed);
}

TEST_CASE("concurrent producers: recorded + dropped == pushed, events intact", "[ring]")
{
    const size_t capacity = GENERATE(size_t(1) << 10, size_t(1) << 16);
    RingBuffer ring(capacity);
    constexpr int kThreads = 8;
    constexpr uint64_t kPerThread = 20000;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&ring, t] {
            for (uint64_t i = 0; i < kPerThread; ++i)
                ring.push(makeEvent(uint32_t(t), i));
        });
    }
    // A reader racing with the producers: its counts must add up too.
    const auto during = ring.snapshot();
    CHECK(during.events.size() + during.dropped == during.pushed);
    for (auto& th : threads)
        th.join();

    const auto snap = ring.snapshot();
    CHECK(snap.pushed == kThreads * kPerThread);
    CHECK(snap.events.size() + snap.dropped == snap.pushed);
    // All of the last lap survives but for the rare producer that lost its slot to a race with
    // a producer a whole lap ahead (it gives its event up rather than tear another).
    CHECK(snap.events.size() <= ring.capacity());
    const size_t slack = kThreads * RingBuffer::kBlock;  // the unfilled rest of each last block
    CHECK(snap.events.size() >= (ring.capacity() > slack ? ring.capacity() - slack : 0));
    // Every event is whole (no torn writes) and each thread's events stay in order.
    std::map<uint32_t, uint64_t> last;
    for (const Event& e : snap.events) {
        REQUIRE(e.size == e.address * 3 + e.thread);
        auto it = last.find(e.thread);
        if (it != last.end())
            REQUIRE(e.address > it->second);
        last[e.thread] = e.address;
    }
}

TEST_CASE("a slot holds every kind of event whole, in six words", "[ring]")
{
    using namespace oomscope;
    using namespace oomscope::track;
    Allocation a;
    a.api = ApiId(65535);
    a.kind = MemKind::HostPinned;
    a.device = 126;
    a.address = ~uint64_t(0) - 4095;  // a free of a garbage pointer keeps all its bits
    a.size = uint64_t(1) << 63;       // a request of a negative size, as the program made it
    a.stream = 0x7f00deadbeef;
    a.stack = StackId(0xfffffffeu);
    Allocation vmm = a;
    vmm.address = 0;
    vmm.stream = 0;
    vmm.handle = 0x5555aaaa5555aaaaull;
    std::vector<Event> events = {Event::alloc(a), Event::free(a), Event::failure(a, 2), Event::alloc(vmm), Event::free(vmm),
                                 Event::segmentMap(7, 3, 0x9000000, 20 << 20, 0x51),
                                 Event::segmentUnmap(7, 3, 0x9000000, 20 << 20, 0x51), Event::poolTrim(8, 0, 0x1234, 99),
                                 Event::addressRange(9, -1, 0x1000, 0x2000), Event::label(10), Event::step(11)};
    uint32_t thread = 0xffffffffu;
    for (Event& e : events) {
        e.timeNs = ~uint64_t(0) - thread;
        e.thread = thread--;
        uint64_t words[slot::kWords];
        slot::pack(e, words);
        CHECK(slot::stateOf(words[0]) == 0);  // the state's bits are the ring's
        words[0] |= slot::stableState(12345);
        const Event back = slot::unpack(words);
        INFO(eventKindName(e.kind));
        CHECK(std::memcmp(&back, &e, sizeof(Event)) == 0);
    }
    static_assert(RingBuffer::kSlotBytes == 48);
}

TEST_CASE("a slot's 32-bit state tells its laps apart across the wrap", "[ring]")
{
    using namespace oomscope::track;
    const uint64_t cap = uint64_t(1) << 18;
    for (const uint64_t s : {uint64_t(5), (uint64_t(1) << 31) - 3, (uint64_t(1) << 31) + 7, (uint64_t(1) << 32) + 11,
                             (uint64_t(1) << 40) + 13}) {
        INFO(s);
        CHECK(slot::claimable(0, s % cap));                          // fresh, first lap
        CHECK(slot::claimable(slot::stableState(s), s + cap));       // the next lap may overwrite it
        CHECK_FALSE(slot::claimable(slot::stableState(s + cap), s));  // a producer a lap behind may not
        CHECK_FALSE(slot::claimable(slot::writingState(s), s + cap)); // nor anyone while it is written
        CHECK_FALSE(slot::claimable(slot::stableState(s), s));        // nor the same index twice
    }
}
