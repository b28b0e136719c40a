// The recorder's hot path alone (no CUDA, no hooks): recordAlloc + recordFree pairs with a
// stack id already in the table, from 1 thread and from N threads at once. Shows whether the
// hot path scales (no global lock), apart from any runtime's own locking.
//
//   bench_record [threads] [pairs-per-thread]
#include "record/recorder.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

using namespace oomscope::record;
using oomscope::ApiId;

namespace {

double nowNs()
{
    return double(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

// Events per second with n threads, each allocating and freeing its own addresses.
double rate(Recorder& r, ApiId alloc, ApiId freeApi, int n, int pairs)
{
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> pool;
    for (int t = 0; t < n; ++t) {
        pool.emplace_back([&, t] {
            AllocRecord rec;
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
    Recorder r;
    const ApiId alloc = r.registerApi("cuMemAlloc_v2");
    const ApiId freeApi = r.registerApi("cuMemFree_v2");
    rate(r, alloc, freeApi, 1, 600000);  // warm-up: every ring page touched once
    std::vector<double> one, many;
    for (int round = 0; round < 5; ++round) {
        one.push_back(rate(r, alloc, freeApi, 1, pairs));
        many.push_back(rate(r, alloc, freeApi, threads, pairs));
    }
    std::sort(one.begin(), one.end());
    std::sort(many.begin(), many.end());
    const double r1 = one[one.size() / 2], rn = many[many.size() / 2];
    std::printf("recorder: 1 thread %.2f M events/s (%.1f ns per alloc+free pair), %d threads %.2f M events/s "
                "(%.1fx the single thread; median of 5)\n",
                r1 / 1e6, 2e9 / r1, threads, rn / 1e6, rn / r1);
    return 0;
}
