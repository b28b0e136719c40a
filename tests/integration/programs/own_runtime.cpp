// A program that brings its own C++ runtime, fmt and spdlog (shared libraries) and throws
// exceptions across them, with the preload loaded: nothing of ours may take over.
#include <cuda_runtime_api.h>
#include <spdlog/spdlog.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace {
void mayThrow(int i)
{
    if (i % 2)
        throw std::runtime_error("odd " + std::to_string(i));
}
} // namespace

int main()
{
    int caught = 0;
    std::vector<void*> buffers;
    for (int i = 0; i < 10; ++i) {
        void* p = nullptr;
        if (cudaMalloc(&p, 1 << 20) == cudaSuccess)
            buffers.push_back(p);
        try {
            mayThrow(i);
        } catch (const std::exception& e) {
            ++caught;
            spdlog::info("caught: {}", e.what());
        }
    }
    spdlog::info("buffers {} caught {}", buffers.size(), caught);
    for (void* p : buffers)
        cudaFree(p);
    return caught == 5 ? 0 : 1;
}
