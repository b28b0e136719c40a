// The recorder's hot path alone (no CUDA, no hooks): recordAlloc + recordFree pairs with a
// stack id already in the table, from 1 thread and from N threads at once. Shows whether the
// hot path scales (no global lock), apart from any runtime's own locking.
//
//   bench_record [threads] [pairs-per-thread]
#include "track/recorder.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

using namespace oomscope::track;
using oomscope::ApiId;

namespace {

double nowNs()
{
    return double(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

// Events per second with n threads, each allocating and freeing its own addresses, in the
// recorder own(t) gives thread t: one shared recorder, or (the machine's ceiling for this
// work) a recorder per thread, so that nothing at all is shared.
template <class Own>
double rate(Own&& own, ApiId alloc, ApiId freeApi, int n, int pairs)
{
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> pool;
    for (int t = 0; t < n; ++t) {
        pool.emplace_back([&, t] {
            Recorder& r = own(t);
            Allocation rec;
            rec.api = alloc;
            rec.device = 0;
            rec.size = 4096;
            rec.stack = r.captureStack();
            const uint64_t base = (uint64_t(t) + 1) << 40;
            ready.fetch_add(1);
            while (!go.load())
                std::this_thread::yield();
            for (int i = 0; i < pairs; ++i) {
                rec.address = base + uint64_t(i % 64) * 4096;  // a few live at a time, as a loop
                r.recordAlloc(rec);
                r.recordFree(freeApi, rec.address, 0);
            }
        });
    }
    while (ready.load() < n)
        std::this_thread::yield();
    const double start = nowNs();
    go.store(true);
    for (auto& th : pool)
        th.join();
    return 2.0 * pairs * n / ((nowNs() - start) / 1e9);
}

} // namespace

int main(int argc, char** argv)
{
    const int threads = argc > 1 ? std::atoi(argv[1]) : 8;
    const int pairs = argc > 2 ? std::atoi(argv[2]) : 200000;
    setenv("OOMSCOPE_EXIT_REPORT", "0", 1);
    // Small rings: the per-thread recorders of the ceiling run fit in memory, and the ring's
    // size does not change the per-event cost (docs/BENCHMARKS.md).
    setenv("OOMSCOPE_RING_EVENTS", "65536", 0);
    std::vector<std::unique_ptr<Recorder>> recorders;
    for (int t = 0; t < threads; ++t)
        recorders.push_back(std::make_unique<Recorder>());
    Recorder& r = *recorders[0];
    const ApiId alloc = r.registerApi("cuMemAlloc_v2");
    const ApiId freeApi = r.registerApi("cuMemFree_v2");
    for (auto& each : recorders) {  // the same ids in every recorder
        each->registerApi("cuMemAlloc_v2");
        each->registerApi("cuMemFree_v2");
    }
    auto shared = [&](int) -> Recorder& { return r; };
    auto own = [&](int t) -> Recorder& { return *recorders[size_t(t)]; };
    // Warm-up: every ring page touched once.
    rate(shared, alloc, freeApi, 1, 600000);
    rate(own, alloc, freeApi, threads, 600000);
    std::vector<double> one, many, apart;
    for (int round = 0; round < 5; ++round) {
        one.push_back(rate(shared, alloc, freeApi, 1, pairs));
        many.push_back(rate(shared, alloc, freeApi, threads, pairs));
        apart.push_back(rate(own, alloc, freeApi, threads, pairs));
    }
    auto median = [](std::vector<double>& v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    const double r1 = median(one), rn = median(many), ra = median(apart);
    std::printf("recorder: 1 thread %.2f M events/s (%.1f ns per alloc+free pair), %d threads %.2f M events/s "
                "(%.1fx the single thread; median of 5)\n",
                r1 / 1e6, 2e9 / r1, threads, rn / 1e6, rn / r1);
    std::printf("recorder: the machine's ceiling, %d threads with a recorder each (nothing shared): %.2f M events/s "
                "(%.1fx the single thread); the shared recorder keeps %.0f %% of it\n",
                threads, ra / 1e6, ra / r1, 100.0 * rn / ra);
    return 0;
}
