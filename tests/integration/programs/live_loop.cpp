// A process to look at while it runs (oomscope snapshot, oomscope top), on the fake device.
// Runs until its stdin closes or a line arrives on it, then prints what it did and exits 0.
//   live_loop churn THREADS: THREADS threads allocate and free at full speed, each keeping a
//     window of 64 buffers live (so that the live tables change all the time). Prints
//     "ready" once every thread has allocated; at the end "ops N seconds S". A line "count"
//     does not stop it: it prints "count N seconds S cpu C" (the pairs so far, the time since
//     the start and the process's CPU seconds; a benchmark compares windows of one process,
//     bench/live_bench.sh).
//   live_loop leak: a training-style loop, oomscope_step() after each step; each step's work
//     buffer is freed, and one 1 MiB buffer a step is kept by keep_history() (the leak `top`
//     must name). Prints "ready" after the first step. Paced at about 200 steps a second (the
//     workload, not a synchronisation), at most 12000 steps (a minute: longer than any test looks, so that
//     a slow, sanitized run still sees it running; 12 GiB on the 16 GiB fake device, unbacked).
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <poll.h>
#include <string>
#include <thread>
#include <time.h>
#include <unistd.h>
#include <vector>

namespace {

std::atomic<bool> g_stop{false};
std::vector<void*> g_history;

// Each churn thread's pairs so far, on a cache line of its own.
struct alignas(64) Counter {
    std::atomic<long> done{0};
};

// Until a line other than "count" (or the end of stdin): each "count" prints the pairs so far.
void serveCounts(const std::vector<Counter>& counters, std::chrono::steady_clock::time_point begin)
{
    std::string line;
    char c;
    for (;;) {
        const ssize_t n = ::read(0, &c, 1);
        if (n < 0)
            continue;
        if (n == 0)
            break;
        if (c != '\n') {
            line += c;
            continue;
        }
        if (line != "count")
            break;
        line.clear();
        long total = 0;
        for (const Counter& k : counters)
            total += k.done.load(std::memory_order_relaxed);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
        timespec cpu{};
        ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
        std::printf("count %ld seconds %.6f cpu %.6f\n", total, seconds, double(cpu.tv_sec) + cpu.tv_nsec * 1e-9);
        std::fflush(stdout);
    }
    g_stop = true;
}

bool stdinReady()
{
    pollfd p{0, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
}

__attribute__((noinline)) void keep_history()
{
    void* p = nullptr;
    if (cudaMalloc(&p, 1 << 20) == cudaSuccess)
        g_history.push_back(p);
}

__attribute__((noinline)) void train_step()
{
    void* work = nullptr;
    if (cudaMalloc(&work, 8 << 20) == cudaSuccess)
        cudaFree(work);
}

int churn(int threads)
{
    std::atomic<long> ops{0};
    std::atomic<int> started{0};
    std::vector<Counter> counters(size_t(threads > 0 ? threads : 0));
    std::vector<std::thread> pool;
    const auto begin = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
            void* window[64] = {};
            long done = 0;
            for (unsigned i = 0; !g_stop.load(std::memory_order_relaxed); ++i) {
                void*& slot = window[i % 64];
                if (slot)
                    cudaFree(slot);
                slot = nullptr;
                cudaMalloc(&slot, size_t(4096) << ((i + unsigned(t)) % 6));
                if (i == 64)
                    started.fetch_add(1);
                ++done;
                counters[size_t(t)].done.store(done, std::memory_order_relaxed);
            }
            for (void* p : window) {
                if (p)
                    cudaFree(p);
            }
            ops.fetch_add(done);
        });
    }
    while (started.load() < threads)
        std::this_thread::yield();
    std::printf("ready\n");
    std::fflush(stdout);
    serveCounts(counters, begin);
    for (auto& t : pool)
        t.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    std::printf("ops %ld seconds %.3f\n", ops.load(), seconds);
    return 0;
}

int leak()
{
    auto step = reinterpret_cast<void (*)(const char*)>(dlsym(RTLD_DEFAULT, "oomscope_step"));
    for (int i = 0; i < 12000 && !stdinReady(); ++i) {
        train_step();
        keep_history();
        if (step)
            step(nullptr);
        if (i == 0) {
            std::printf("ready\n");
            std::fflush(stdout);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::printf("steps done, %zu kept\n", g_history.size());
    for (void* p : g_history)
        cudaFree(p);
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    if (argc > 1 && std::strcmp(argv[1], "churn") == 0)
        return churn(argc > 2 ? std::atoi(argv[2]) : 8);
    if (argc > 1 && std::strcmp(argv[1], "leak") == 0)
        return leak();
    std::fprintf(stderr, "usage: live_loop churn THREADS | live_loop leak\n");
    return 2;
}
