// Stress through the preload: THREADS threads each allocate PAIRS buffers with cudaMalloc and
// hand every one to the next thread, which frees it (frees on other threads than their
// allocations). Then the program asks for a report (oomscope_dump through dlsym) and prints
// what it did. Usage: stress THREADS PAIRS [kill]
// kill: instead of freeing what is left and asking for a report, print how many allocations
// and bytes are left live and how many calls were made, then SIGKILL itself (the flight file
// must hold all of it: nothing is in flight).
#include <cuda_runtime_api.h>

#include <atomic>
#include <csignal>
#include <string>
#include <utility>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <dlfcn.h>
#include <mutex>
#include <thread>
#include <vector>

namespace {

struct Mailbox {
    std::mutex mutex;
    std::deque<std::pair<void*, size_t>> items;
};

} // namespace

int main(int argc, char** argv)
{
    const int threads = argc > 1 ? std::atoi(argv[1]) : 16;
    const int pairs = argc > 2 ? std::atoi(argv[2]) : 100000;
    std::vector<Mailbox> boxes(static_cast<size_t>(threads));
    const bool kill = argc > 3 && std::string(argv[3]) == "kill";
    std::atomic<long> failures{0}, freed{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
            Mailbox& mine = boxes[size_t(t)];
            Mailbox& next = boxes[size_t((t + 1) % threads)];
            std::vector<std::pair<void*, size_t>> batch;
            long done = 0;
            for (int i = 0; i < pairs; ++i) {
                void* p = nullptr;
                const size_t size = size_t(4096) << (i % 8);
                if (cudaMalloc(&p, size) != cudaSuccess) {
                    failures.fetch_add(1);
                    continue;
                }
                {
                    std::lock_guard<std::mutex> lock(next.mutex);
                    next.items.emplace_back(p, size);
                }
                if (i % 64 == 63) {  // free what the previous thread handed over
                    {
                        std::lock_guard<std::mutex> lock(mine.mutex);
                        batch.assign(mine.items.begin(), mine.items.end());
                        mine.items.clear();
                    }
                    for (const auto& [q, bytes] : batch)
                        done += cudaFree(q) == cudaSuccess;
                }
            }
            freed.fetch_add(done);
        });
    }
    for (auto& th : pool)
        th.join();
    if (kill) {
        long left = 0, leftBytes = 0;
        for (Mailbox& box : boxes) {
            left += long(box.items.size());
            for (const auto& item : box.items)
                leftBytes += long(item.second);
        }
        const long allocated = long(threads) * pairs - failures.load();
        std::printf("left %ld bytes %ld allocated %ld freed %ld failures %ld\n", left, leftBytes, allocated, freed.load(),
                    failures.load());
        std::fflush(stdout);
        raise(SIGKILL);
    }
    for (Mailbox& box : boxes) {  // what is left, from the main thread
        for (const auto& [q, bytes] : box.items)
            freed.fetch_add(cudaFree(q) == cudaSuccess);
        box.items.clear();
    }
    using Dump = const char* (*)(const char*);
    auto dump = reinterpret_cast<Dump>(dlsym(RTLD_DEFAULT, "oomscope_dump"));
    std::printf("allocated %ld freed %ld failures %ld report %s\n", long(threads) * pairs - failures.load(), freed.load(),
                failures.load(), dump ? dump("stress") : "-");
    return failures.load() == 0 ? 0 : 1;
}
