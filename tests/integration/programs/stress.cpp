// Stress through the preload: THREADS threads each allocate PAIRS buffers with cudaMalloc and
// hand every one to the next thread, which frees it (frees on other threads than their
// allocations). Then the program asks for a report (oomscope_dump through dlsym) and prints
// what it did. Usage: stress THREADS PAIRS
#include <cuda_runtime_api.h>

#include <atomic>
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
    std::deque<void*> items;
};

} // namespace

int main(int argc, char** argv)
{
    const int threads = argc > 1 ? std::atoi(argv[1]) : 16;
    const int pairs = argc > 2 ? std::atoi(argv[2]) : 100000;
    std::vector<Mailbox> boxes(static_cast<size_t>(threads));
    std::atomic<long> failures{0}, freed{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
            Mailbox& mine = boxes[size_t(t)];
            Mailbox& next = boxes[size_t((t + 1) % threads)];
            std::vector<void*> batch;
            long done = 0;
            for (int i = 0; i < pairs; ++i) {
                void* p = nullptr;
                if (cudaMalloc(&p, size_t(4096) << (i % 8)) != cudaSuccess) {
                    failures.fetch_add(1);
                    continue;
                }
                {
                    std::lock_guard<std::mutex> lock(next.mutex);
                    next.items.push_back(p);
                }
                if (i % 64 == 63) {  // free what the previous thread handed over
                    {
                        std::lock_guard<std::mutex> lock(mine.mutex);
                        batch.assign(mine.items.begin(), mine.items.end());
                        mine.items.clear();
                    }
                    for (void* q : batch)
                        done += cudaFree(q) == cudaSuccess;
                }
            }
            freed.fetch_add(done);
        });
    }
    for (auto& th : pool)
        th.join();
    for (Mailbox& box : boxes) {  // what is left, from the main thread
        for (void* q : box.items)
            freed.fetch_add(cudaFree(q) == cudaSuccess);
        box.items.clear();
    }
    using Dump = const char* (*)(const char*);
    auto dump = reinterpret_cast<Dump>(dlsym(RTLD_DEFAULT, "oomscope_dump"));
    std::printf("allocated %ld freed %ld failures %ld report %s\n", long(threads) * pairs - failures.load(), freed.load(),
                failures.load(), dump ? dump("stress") : "-");
    return failures.load() == 0 ? 0 : 1;
}
