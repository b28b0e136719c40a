// fork() while another thread is inside the hooks: a worker allocates and frees without pause
// while the main thread forks FORKS children; each child allocates once (its own CUDA use)
// and exits normally. A child that inherited a lock held by the worker would hang here.
// Usage: fork_in_hook FORKS
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

int main(int argc, char** argv)
{
    const int forks = argc > 1 ? std::atoi(argv[1]) : 20;
    std::atomic<bool> stop{false};
    std::atomic<long> pairs{0};
    std::thread worker([&] {
        while (!stop.load(std::memory_order_relaxed)) {
            void* p = nullptr;
            if (cudaMalloc(&p, 1 << 20) == cudaSuccess && cudaFree(p) == cudaSuccess)
                pairs.fetch_add(1, std::memory_order_relaxed);
        }
    });
    while (pairs.load() < 1000)  // the worker is in its loop
        std::this_thread::yield();
    int ok = 0;
    for (int i = 0; i < forks; ++i) {
        const pid_t pid = fork();
        if (pid == 0) {
            void* p = nullptr;
            const bool fine = cudaMalloc(&p, 2 << 20) == cudaSuccess && cudaFree(p) == cudaSuccess;
            std::exit(fine ? 0 : 3);  // exit(), not _exit(): the child's own exit report
        }
        int status = 0;
        if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0)
            ++ok;
    }
    stop.store(true);
    worker.join();
    std::printf("forks %d ok %d\n", forks, ok);
    return ok == forks ? 0 : 1;
}
