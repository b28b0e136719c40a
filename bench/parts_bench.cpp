// Where the hot path's time goes: each part of an allocation + free pair on its own, one
// thread, median of rounds. The parts are those Recorder::recordAlloc / recordFree call: the
// event clock, the thread id, the ring (the default 1 Mi slots = 64 MiB, larger than any
// cache, and a small one that stays in cache), the live map, and the whole recorder pair on
// each ring size. Run on the machine whose hook figure is in question (bench/run_cpu.sh does).
//
//   bench_parts [pairs-per-round] [rounds]
#include "track/event.h"
#include "track/fast_clock.h"
#include "track/live_map.h"
#include "track/process_info.h"
#include "track/recorder.h"
#include "track/ring_buffer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>
#include <x86intrin.h>

using namespace oomscope::track;
using oomscope::ApiId;

namespace {

double nowNs()
{
    return double(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

struct Part {
    std::string name;
    std::function<void(int)> run;  // `pairs` pairs' worth of the part
    std::vector<double> perPair;
};

// Keeps a value alive without a store the compiler could drop.
template <class T>
void keep(const T& value)
{
    asm volatile("" : : "r"(&value) : "memory");
}

} // namespace

int main(int argc, char** argv)
{
    const int pairs = argc > 1 ? std::atoi(argv[1]) : 20000;
    const int rounds = argc > 2 ? std::atoi(argv[2]) : 51;
    setenv("OOMSCOPE_EXIT_REPORT", "0", 1);
    setenv("OOMSCOPE_FLIGHT", "0", 1);  // the recorders here are not the preload's

    constexpr size_t kBig = size_t(1) << 20, kSmall = size_t(1) << 16;
    RingBuffer bigRing(kBig), smallRing(kSmall);
    LiveMap live;
    setenv("OOMSCOPE_RING_EVENTS", std::to_string(kBig).c_str(), 1);
    Recorder bigRecorder;
    setenv("OOMSCOPE_RING_EVENTS", std::to_string(kSmall).c_str(), 1);
    Recorder smallRecorder;
    const ApiId allocApi = bigRecorder.registerApi("cuMemAlloc_v2");
    const ApiId freeApi = bigRecorder.registerApi("cuMemFree_v2");
    smallRecorder.registerApi("cuMemAlloc_v2");
    smallRecorder.registerApi("cuMemFree_v2");

    Event event;
    event.kind = EventKind::Alloc;
    event.size = 4096;
    auto recorderPairs = [&](Recorder& r) {
        return [&r, allocApi, freeApi](int n) {
            Allocation rec;
            rec.api = allocApi;
            rec.device = 0;
            rec.size = 4096;
            for (int i = 0; i < n; ++i) {
                rec.address = (uint64_t(1) << 40) + uint64_t(i % 64) * 4096;
                r.recordAlloc(rec);
                r.recordFree(freeApi, rec.address, 0);
            }
        };
    };
    std::vector<Part> parts;
    parts.push_back({"event clock, 2 reads", [](int n) {
                         for (int i = 0; i < n; ++i) {
                             keep(eventNs());
                             keep(eventNs());
                         }
                     }, {}});
    // The machine's primitives, for comparing machines: a locked read-modify-write (each
    // lock, compare-exchange and fetch_add of the hot path is one) and the time-stamp counter.
    std::atomic<uint64_t> counter{0};
    parts.push_back({"locked add x2 (a machine primitive)", [&](int n) {
                         for (int i = 0; i < n; ++i) {
                             counter.fetch_add(1, std::memory_order_relaxed);
                             counter.fetch_add(1, std::memory_order_relaxed);
                         }
                     }, {}});
    parts.push_back({"rdtsc x2 (a machine primitive)", [](int n) {
                         for (int i = 0; i < n; ++i) {
                             keep(__rdtsc());
                             keep(__rdtsc());
                         }
                     }, {}});
    parts.push_back({"thread id, 2 reads", [](int n) {
                         for (int i = 0; i < n; ++i) {
                             keep(currentThreadId());
                             keep(currentThreadId());
                         }
                     }, {}});
    parts.push_back({"ring push x2, 1 Mi slots (64 MiB)", [&](int n) {
                         for (int i = 0; i < n; ++i) {
                             event.address = uint64_t(i);
                             bigRing.push(event);
                             bigRing.push(event);
                         }
                     }, {}});
    parts.push_back({"ring push x2, 64 Ki slots (4 MiB)", [&](int n) {
                         for (int i = 0; i < n; ++i) {
                             event.address = uint64_t(i);
                             smallRing.push(event);
                             smallRing.push(event);
                         }
                     }, {}});
    parts.push_back({"live map insert + erase", [&](int n) {
                         LiveAllocation entry;
                         entry.size = 4096;
                         LiveAllocation replaced;
                         for (int i = 0; i < n; ++i) {
                             entry.address = (uint64_t(1) << 40) + uint64_t(i % 64) * 4096;
                             live.insert(entry, &replaced);
                             keep(live.erase(entry.address));
                         }
                     }, {}});
    parts.push_back({"recorder pair, 1 Mi ring", recorderPairs(bigRecorder), {}});
    parts.push_back({"recorder pair, 64 Ki ring", recorderPairs(smallRecorder), {}});

    // Warm-up: a lap of every ring, so that no page is touched for the first time below.
    for (Part& p : parts)
        p.run(int(kBig / 2 + 1024));
    for (int round = 0; round < rounds; ++round) {
        for (Part& p : parts) {  // interleaved: a slow moment of the machine hits every part
            const double start = nowNs();
            p.run(pairs);
            p.perPair.push_back((nowNs() - start) / pairs);
        }
    }
    std::printf("parts of an allocation + free pair (median of %d rounds of %d pairs, one thread):\n", rounds, pairs);
    for (Part& p : parts) {
        std::sort(p.perPair.begin(), p.perPair.end());
        std::printf("  %-36s %7.1f ns\n", p.name.c_str(), p.perPair[p.perPair.size() / 2]);
    }
    return 0;
}
