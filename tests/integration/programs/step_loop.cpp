// A training-style loop on the fake device: each step allocates a working buffer and frees it;
// "leaky" also keeps one history buffer per step (the leak the check must name); "steady"
// keeps a fixed set of buffers made at the first step (optimizer-state style), which is not.
// Steps are marked through the C API, resolved with dlsym as the header advises.
// "unmarked": the leaky loop without any step event, 40 iterations at least 3 ms apart
// (memory samples, OOMSCOPE_SAMPLE_MS, follow it instead).
#include <cuda_runtime_api.h>

#include <chrono>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <vector>

namespace {

std::vector<void*> g_history;
std::vector<void*> g_state;

__attribute__((noinline)) void keep_step_history(size_t bytes)
{
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) == cudaSuccess)
        g_history.push_back(p);
}

__attribute__((noinline)) void make_optimizer_state(size_t bytes)
{
    for (int i = 0; i < 4; ++i) {
        void* p = nullptr;
        if (cudaMalloc(&p, bytes) == cudaSuccess)
            g_state.push_back(p);
    }
}

__attribute__((noinline)) void train_step(size_t bytes)
{
    void* work = nullptr;
    if (cudaMalloc(&work, bytes) == cudaSuccess)
        cudaFree(work);
}

} // namespace

int main(int argc, char** argv)
{
    if (argc > 1 && std::strcmp(argv[1], "load-then-steps") == 0) {
        // A "model load" of 30 ms without steps (periodic samples are taken), then 10 steps.
        const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(30);
        while (std::chrono::steady_clock::now() < end)
            train_step(1 << 20);
        auto step = reinterpret_cast<void (*)(const char*)>(dlsym(RTLD_DEFAULT, "oomscope_step"));
        for (int i = 0; i < 10; ++i) {
            train_step(32 << 20);
            if (step)
                step(nullptr);
        }
        std::printf("done load-then-steps\n");
        return 0;
    }
    if (argc > 1 && std::strcmp(argv[1], "unmarked") == 0) {
        // 40 iterations, each at least 3 ms after the last (a sleep, so that OOMSCOPE_SAMPLE_MS=2
        // has passed at every allocation whatever the machine's load: a sample per iteration, not
        // as many as a time budget covers), 2.5 MiB kept in all (above the leak rules' 1 MiB).
        int iterations = 0;
        for (; iterations < 40; ++iterations) {
            train_step(32 << 20);
            keep_step_history(64 << 10);
            std::this_thread::sleep_for(std::chrono::milliseconds(3));
        }
        std::printf("done unmarked %d iterations\n", iterations);
        return 0;
    }
    const bool leaky = argc > 1 && std::strcmp(argv[1], "leaky") == 0;
    const int steps = argc > 2 ? std::atoi(argv[2]) : 40;
    auto step = reinterpret_cast<void (*)(const char*)>(dlsym(RTLD_DEFAULT, "oomscope_step"));
    for (int i = 0; i < steps; ++i) {
        if (i == 0)
            make_optimizer_state(8 << 20);
        train_step(32 << 20);
        if (leaky)
            keep_step_history(2 << 20);
        if (step)
            step(nullptr);
    }
    // Clean shutdown: a program that frees what it made leaves nothing at exit.
    for (void* p : g_state)
        cudaFree(p);
    if (!leaky) {
        for (void* p : g_history)
            cudaFree(p);
    }
    std::printf("done %s %d steps\n", leaky ? "leaky" : "steady", steps);
    return 0;
}
