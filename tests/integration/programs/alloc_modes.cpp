// Test program for the integration tests: allocates through named helpers, then, depending on
// its first argument:
//   exit     returns from main (exit report)
//   wait     prints "ready" and waits for a signal (SIGTERM/SIGINT report)
//   wait-threads  the same with three more threads waiting too (a process-directed signal may
//            be handled on any of them)
//   handler  installs its own SIGINT handler before any CUDA call, prints "ready", waits; the
//            handler prints "handled" and the program exits 0
//   dump     calls oomscope_dump("checkpoint") through dlsym and prints the path
//   fork     forks a child that makes no CUDA call and exits normally
//   abort    calls abort() (SIGABRT: a report, then the program dies of it as without us)
//   segv     writes through a null pointer (SIGSEGV: no report; the flight file stays)
//   fork-wait forks a child that makes no CUDA call and exits normally, then prints "ready" and
//            waits (the parent's flight file must survive the child's exit)
//   retry    fails out of memory, succeeds with small requests, fails again (an allocator's
//            retry after flushing its cache)
//   binsearch  a batch-size finder: tries a binary search of request sizes from 64 MiB to
//            4 GiB on the 1 GiB fake device, catching each out-of-memory error, 50 tries,
//            then holds the largest that fitted; prints it
// Output is line-buffered so that a test can wait for "ready" instead of sleeping.
#include "oomscope/oomscope.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <sched.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

namespace {

volatile sig_atomic_t g_handled = 0;

void onSigint(int)
{
    g_handled = 1;
}

NOINLINE void* allocate_model(size_t bytes)
{
    void* p = nullptr;
    return cudaMalloc(&p, bytes) == cudaSuccess ? p : nullptr;
}

NOINLINE void* allocate_pinned(size_t bytes)
{
    void* p = nullptr;
    return cudaMallocHost(&p, bytes) == cudaSuccess ? p : nullptr;
}

NOINLINE void* allocate_managed(size_t bytes)
{
    void* p = nullptr;
    return cudaMallocManaged(&p, bytes, cudaMemAttachGlobal) == cudaSuccess ? p : nullptr;
}

} // namespace

int main(int argc, char** argv)
{
    const char* mode = argc > 1 ? argv[1] : "exit";
    setvbuf(stdout, nullptr, _IOLBF, 0);
    // handler: the program's own SIGINT handler, installed before the preload's (at the first
    // CUDA call); usr2-handler: its own SIGUSR2 handler, before; usr2-handler-late: after.
    const auto handle = [](int sig) {
        struct sigaction sa {};
        sa.sa_handler = onSigint;
        sigemptyset(&sa.sa_mask);
        sigaction(sig, &sa, nullptr);
    };
    if (std::strcmp(mode, "handler") == 0)
        handle(SIGINT);
    if (std::strcmp(mode, "usr2-handler") == 0)
        handle(SIGUSR2);
    volatile int count = 4;  // not unrolled: one call site, one stack
    for (int i = 0; i < count; ++i)
        allocate_model(16 << 20);
    void* transient = allocate_model(8 << 20);
    cudaFree(transient);
    allocate_pinned(1 << 20);
    allocate_managed(2 << 20);
    std::printf("allocated\n");

    if (std::strcmp(mode, "wait-threads") == 0) {
        // "ready" once every thread runs its own code: the signal may be taken by any of them.
        static std::atomic<int> running{0};
        for (int i = 0; i < 3; ++i)
            std::thread([] {
                running.fetch_add(1);
                for (;;)
                    pause();
            }).detach();
        while (running.load() < 3)
            sched_yield();
        std::printf("ready\n");
        for (;;)
            pause();
    }
    if (std::strcmp(mode, "usr2-handler-late") == 0)
        handle(SIGUSR2);
    if (std::strcmp(mode, "wait") == 0 || std::strcmp(mode, "handler") == 0 || std::strncmp(mode, "usr2-", 5) == 0) {
        std::printf("ready\n");
        while (!g_handled)
            pause();
        std::printf("handled\n");
        return 0;
    }
    if (std::strcmp(mode, "segv") == 0) {
        std::printf("crashing\n");
        std::fflush(stdout);
        *static_cast<volatile int*>(nullptr) = 1;  // the program's own crash
        return 0;
    }
    if (std::strcmp(mode, "dump") == 0) {
        auto dump = reinterpret_cast<const char* (*)(const char*)>(dlsym(RTLD_DEFAULT, "oomscope_dump"));
        std::printf("dump: %s\n", dump ? dump("checkpoint") : "(no oomscope)");
        return 0;
    }
    if (std::strcmp(mode, "abort") == 0) {
        std::printf("aborting\n");
        std::fflush(stdout);
        std::abort();  // SIGABRT from the program itself: a report, then the same death
    }
    if (std::strcmp(mode, "binsearch") == 0) {
        size_t lo = 64 << 20, hi = size_t(4) << 30, best = 0;
        int failures = 0;
        for (int i = 0; i < 50; ++i) {
            const size_t mid = (lo + hi) / 2;
            void* p = nullptr;
            if (cudaMalloc(&p, mid) == cudaSuccess) {
                best = std::max(best, mid);
                cudaFree(p);
                lo = mid;
            } else {
                ++failures;
                hi = mid;
            }
            if (hi - lo <= (1 << 20)) {  // found: try the two ends again (tries still count)
                lo = 64 << 20;
                hi = size_t(4) << 30;
            }
        }
        void* kept = nullptr;
        cudaMalloc(&kept, best);
        std::printf("failures %d best %zu\n", failures, best);
        return 0;
    }
    if (std::strcmp(mode, "retry") == 0) {
        void* p = nullptr;
        int failures = cudaMalloc(&p, size_t(1) << 50) != cudaSuccess;
        for (int i = 0; i < 3; ++i)
            allocate_model(1 << 20);
        failures += cudaMalloc(&p, size_t(1) << 50) != cudaSuccess;
        std::printf("failures %d\n", failures);
        return 0;
    }
    if (std::strcmp(mode, "fork") == 0 || std::strcmp(mode, "fork-wait") == 0) {
        const pid_t child = fork();
        if (child == 0) {
            std::printf("child %d\n", int(getpid()));
            std::exit(0);  // a normal exit, atexit handlers included
        }
        int status = 0;
        waitpid(child, &status, 0);
        std::printf("child exited %d\n", WEXITSTATUS(status));
        if (std::strcmp(mode, "fork-wait") == 0) {
            std::printf("ready\n");
            while (!g_handled)
                pause();
        }
    }
    return 0;
}
