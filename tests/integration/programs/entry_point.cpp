// Driver functions through the runtime's doors: cudaGetDriverEntryPointByVersion (as PyTorch
// does for cuMemCreate & co.) or cudaGetDriverEntryPoint, chosen by argv[1].
#include "driver_common.h"

#include <string>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

int main(int argc, char** argv)
{
    const std::string door = argc > 1 ? argv[1] : "by-version";
    cudaFree(nullptr);  // a context
    void* a = nullptr;
    void* f = nullptr;
    cudaDriverEntryPointQueryResult status{};
    if (door == "by-version") {
        cudaGetDriverEntryPointByVersion("cuMemAlloc", &a, 12000, cudaEnableDefault, &status);
        cudaGetDriverEntryPointByVersion("cuMemFree", &f, 12000, cudaEnableDefault, &status);
    } else {
        cudaGetDriverEntryPoint("cuMemAlloc", &a, cudaEnableDefault, &status);
        cudaGetDriverEntryPoint("cuMemFree", &f, cudaEnableDefault, &status);
    }
    auto alloc = reinterpret_cast<decltype(&cuMemAlloc_v2)>(a);
    auto release = reinterpret_cast<decltype(&cuMemFree_v2)>(f);
    if (!alloc || !release)
        return 3;
    allocateAndFreeHalf(door.c_str(), alloc, release);
    return 0;
}
