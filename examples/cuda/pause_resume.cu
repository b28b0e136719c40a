// Pause and resume GPU memory as torch_memory_saver and vLLM's sleep mode do: regions made of
// CUDA virtual memory (an address range reserved, physical memory created and mapped into it);
// a pause unmaps and releases the physical memory but keeps the address range, so that the
// pointers the program holds stay valid; a resume creates physical memory again and maps it at
// the same addresses. Under oomscope, a report taken while paused shows the regions as paused:
// not in use, not leaked.
//
//   pause_resume [REGIONS [MIB]]      default 4 regions of 256 MiB
//
// It asks for a report (oomscope_dump, when the preload is there) while running, paused and
// resumed, then pauses again and exits (the exit report is taken paused). Exit status 0, or the
// number of the step that failed.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <vector>

#define NOINLINE __attribute__((noinline))

namespace {

struct Region {
    CUdeviceptr address = 0;
    CUmemGenericAllocationHandle handle = 0;
};

size_t g_bytes = 0;

// A report now, when the program runs under oomscope (the preload exports oomscope_dump).
void report(const char* why)
{
    using Dump = const char* (*)(const char*);
    if (auto dump = reinterpret_cast<Dump>(dlsym(RTLD_DEFAULT, "oomscope_dump"))) {
        const char* path = dump(why);
        std::printf("%s: report %s\n", why, path ? path : "(none)");
    }
}

void freeMemory(const char* when)
{
    size_t free = 0, total = 0;
    cuMemGetInfo(&free, &total);
    std::printf("%s: free %zu\n", when, free);
}

NOINLINE void mapPhysical(Region& r)
{
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    if (cuMemCreate(&r.handle, g_bytes, &prop, 0) != CUDA_SUCCESS)
        std::exit(3);
    if (cuMemMap(r.address, g_bytes, 0, r.handle, 0) != CUDA_SUCCESS)
        std::exit(4);
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (cuMemSetAccess(r.address, g_bytes, &access, 1) != CUDA_SUCCESS)
        std::exit(5);
}

NOINLINE Region allocateRegion()
{
    Region r;
    if (cuMemAddressReserve(&r.address, g_bytes, 0, 0, 0) != CUDA_SUCCESS)
        std::exit(2);
    mapPhysical(r);
    cuMemsetD8(r.address, 0x5a, g_bytes);
    return r;
}

NOINLINE void pause(Region& r)
{
    if (cuMemUnmap(r.address, g_bytes) != CUDA_SUCCESS || cuMemRelease(r.handle) != CUDA_SUCCESS)
        std::exit(6);
    r.handle = 0;
}

NOINLINE void resume(Region& r)
{
    mapPhysical(r);  // the same addresses: the program's pointers stay valid
}

} // namespace

int main(int argc, char** argv)
{
    const int regions = argc > 1 ? std::atoi(argv[1]) : 4;
    const size_t mib = argc > 2 ? size_t(std::atoll(argv[2])) : 256;
    g_bytes = mib << 20;  // a multiple of the 2 MiB granularity
    if (cudaFree(nullptr) != cudaSuccess)  // the primary context, through the runtime
        return 1;
    std::vector<Region> all;
    for (int i = 0; i < regions; ++i)
        all.push_back(allocateRegion());
    freeMemory("running");
    report("running");
    for (Region& r : all)
        pause(r);
    freeMemory("paused");
    report("paused");
    for (Region& r : all)
        resume(r);
    freeMemory("resumed");
    report("resumed");
    for (Region& r : all)
        pause(r);
    std::printf("regions %d of %zu bytes: paused at exit\n", regions, g_bytes);
    return 0;
}
