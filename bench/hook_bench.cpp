// Hook cost per allocation + free pair against the fake CUDA, in one process: the driver's
// cuMemAlloc_v2 / cuMemFree_v2 through the hooked symbols (liboomscope.so when preloaded)
// against the same functions under the fake's second names (fakecuda_direct_*), which nothing
// interposes. The driver, not the
// runtime: the runtime reaches the driver through cuGetProcAddress, which the preload hooks by
// design, so a "direct" runtime call would be measured with the hook inside it.
// Run with FAKECUDA_UNBACKED=1 (no mmap per allocation). Median of many interleaved rounds;
// and the event rate of 1 thread against N threads.
//
//   bench_hooks [pairs-per-round] [rounds] [threads]
//   LD_PRELOAD=…/liboomscope.so OOMSCOPE_STACK_DEPTH=0 bench_hooks    (no stacks)
//   LD_PRELOAD=…/liboomscope.so bench_hooks                           (32-frame stacks)
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <thread>
#include <vector>

namespace {

using Malloc = CUresult (*)(CUdeviceptr*, size_t);
using Free = CUresult (*)(CUdeviceptr);

double nowNs()
{
    return double(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

// A call path of a fixed depth, so that captured stacks have ~32 frames and repeat (their id
// is already in the table after the first pair).
template <int Depth>
__attribute__((noinline)) double pairsAtDepth(Malloc m, Free f, int pairs)
{
    if constexpr (Depth > 0) {
        const double r = pairsAtDepth<Depth - 1>(m, f, pairs);
        asm volatile("" ::: "memory");  // not a tail call: keeps the frame
        return r;
    } else {
        const double start = nowNs();
        for (int i = 0; i < pairs; ++i) {
            CUdeviceptr p = 0;
            m(&p, 4096);
            f(p);
        }
        return (nowNs() - start) / pairs;
    }
}

double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

} // namespace

int main(int argc, char** argv)
{
    const int pairs = argc > 1 ? std::atoi(argv[1]) : 20000;
    const int rounds = argc > 2 ? std::atoi(argv[2]) : 51;
    const int threads = argc > 3 ? std::atoi(argv[3]) : 8;
    CUdevice device = 0;
    CUcontext context = nullptr;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&device, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&context, device) != CUDA_SUCCESS || cuCtxSetCurrent(context) != CUDA_SUCCESS) {
        std::fprintf(stderr, "bench_hooks: no CUDA context\n");
        return 2;
    }
    Malloc direct = reinterpret_cast<Malloc>(dlsym(RTLD_DEFAULT, "fakecuda_direct_cuMemAlloc_v2"));
    Free directFree = reinterpret_cast<Free>(dlsym(RTLD_DEFAULT, "fakecuda_direct_cuMemFree_v2"));
    if (!direct || !directFree) {
        std::fprintf(stderr, "bench_hooks: the driver's own cuMemAlloc_v2 was not found\n");
        return 2;
    }
    Malloc hooked = &cuMemAlloc_v2;
    Free hookedFree = &cuMemFree_v2;
    if (direct == hooked) {
        std::fprintf(stderr, "bench_hooks: the direct function is the hooked one\n");
        return 2;
    }
    const bool preloaded = dlsym(RTLD_DEFAULT, "oomscope_version") != nullptr;

    // Warm-up: more events than the ring holds (1 Mi by default), so that its pages are touched
    // once (a one-time cost of about 64 MiB of first touches) and the rounds measure the steady
    // state of a long-running job.
    for (int i = 0; i < 12; ++i)
        pairsAtDepth<24>(hooked, hookedFree, 50000);

    // Interleaved rounds: direct and hooked see the same machine state.
    std::vector<double> d, h;
    for (int r = 0; r < rounds; ++r) {
        d.push_back(pairsAtDepth<24>(direct, directFree, pairs));
        h.push_back(pairsAtDepth<24>(hooked, hookedFree, pairs));
    }
    const double dm = median(d), hm = median(h);
    std::printf("preload %s, stack depth %s: direct %.1f ns/pair, hooked %.1f ns/pair, added %.1f ns/pair "
                "(median of %d rounds of %d pairs)\n",
                preloaded ? "on" : "off", std::getenv("OOMSCOPE_STACK_DEPTH") ? std::getenv("OOMSCOPE_STACK_DEPTH") : "default",
                dm, hm, hm - dm, rounds, pairs);

    // Contention: events per second with 1 thread, then with `threads` threads at once (the
    // fake driver's own mutex is part of both figures: see bench_record for the recorder alone).
    auto rate = [&](int n) {
        std::atomic<int> ready{0};
        std::atomic<bool> go{false};
        std::vector<std::thread> pool;
        std::vector<double> perPair(size_t(n), 0);
        for (int t = 0; t < n; ++t) {
            pool.emplace_back([&, t] {
                cuCtxSetCurrent(context);
                ready.fetch_add(1);
                while (!go.load())
                    std::this_thread::yield();
                perPair[size_t(t)] = pairsAtDepth<24>(hooked, hookedFree, pairs * 5);
            });
        }
        while (ready.load() < n)
            std::this_thread::yield();
        const double start = nowNs();
        go.store(true);
        for (auto& th : pool)
            th.join();
        const double seconds = (nowNs() - start) / 1e9;
        return 2.0 * pairs * 5 * n / seconds;  // events (alloc + free) per second
    };
    std::vector<double> one, many;
    for (int r = 0; r < 5; ++r) {
        one.push_back(rate(1));
        many.push_back(rate(threads));
    }
    const double r1 = median(one), rn = median(many);
    std::printf("contention: 1 thread %.2f M events/s, %d threads %.2f M events/s (%.1fx)\n", r1 / 1e6, threads,
                rn / 1e6, rn / r1);
    return 0;
}
