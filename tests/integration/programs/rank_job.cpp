// One rank of a fake multi-GPU job, for the job view (tests/integration/test_job.py's launcher
// sets RANK, LOCAL_RANK, WORLD_SIZE … as torchrun does):
//   rank_job SHARE_MIB EXTRA_MIB REQUEST_MIB [device0]
// Sets its device from LOCAL_RANK (with "device0": device 0, the missing set_device), holds its
// share of the model and EXTRA_MIB more in buffers of its own, says "ready", then waits for a
// line from the launcher: "go" makes its last request of REQUEST_MIB (which may fail: it then
// exits 1, as a rank that runs out of memory does); end of input ends it cleanly. The launcher
// ends the others with SIGTERM, as torchrun does.
#include <cuda_runtime_api.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <poll.h>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

std::vector<void*> g_held;

__attribute__((noinline)) void hold_model_share(size_t bytes)
{
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) == cudaSuccess)
        g_held.push_back(p);
}

__attribute__((noinline)) void hold_rank_buffers(size_t bytes)
{
    void* p = nullptr;
    if (bytes && cudaMalloc(&p, bytes) == cudaSuccess)
        g_held.push_back(p);
}

__attribute__((noinline)) cudaError_t last_request(size_t bytes)
{
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaSuccess)
        g_held.push_back(p);
    return e;
}

// One line from stdin, each byte awaited in poll(2): under TSan a signal that arrives in a
// blocking call is handled at once only when TSan treats the call as blocking, which it does
// for poll and not for read (nor for stdio's read inside libc), so the launcher's SIGTERM would
// otherwise wait for input that never comes.
bool read_line(std::string& line)
{
    for (;;) {
        pollfd in{0, POLLIN, 0};
        if (poll(&in, 1, -1) < 0) {
            if (errno == EINTR)
                continue;
            return false;
        }
        char c = 0;
        const ssize_t n = read(0, &c, 1);
        if (n != 1)
            return !line.empty();
        if (c == '\n')
            return true;
        line += c;
    }
}

} // namespace

int main(int argc, char** argv)
{
    if (argc < 4) {
        std::fprintf(stderr, "usage: rank_job SHARE_MIB EXTRA_MIB REQUEST_MIB [device0]\n");
        return 2;
    }
    const size_t mib = 1 << 20;
    const size_t share = std::strtoull(argv[1], nullptr, 10) * mib;
    const size_t extra = std::strtoull(argv[2], nullptr, 10) * mib;
    const size_t request = std::strtoull(argv[3], nullptr, 10) * mib;
    const bool wrong = argc > 4 && std::strcmp(argv[4], "device0") == 0;
    const char* local = std::getenv("LOCAL_RANK");
    const int device = wrong || !local ? 0 : std::atoi(local);
    if (cudaSetDevice(device) != cudaSuccess) {
        std::fprintf(stderr, "cudaSetDevice(%d) failed\n", device);
        return 2;
    }
    hold_model_share(share);
    hold_rank_buffers(extra);
    std::printf("ready\n");
    std::fflush(stdout);
    std::string line;
    if (!read_line(line) || line != "go")
        return 0;
    if (last_request(request) != cudaSuccess) {
        std::printf("out of memory\n");
        std::fflush(stdout);
        return 1;
    }
    std::printf("done\n");
    return 0;
}
