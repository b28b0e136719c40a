// CUDA virtual memory management in every order that matters for accounting, with a report
// (oomscope_dump) at each checkpoint. 2 MiB granules. Then a fabric-handle request (refused,
// not an OOM) and a create larger than the device (an OOM).
#include "driver_common.h"

#include <unistd.h>

namespace {

DriverApi api;
constexpr size_t kGranule = 2 << 20;

CUmemAllocationProp deviceProp(bool fabric = false)
{
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    prop.requestedHandleTypes = fabric ? CU_MEM_HANDLE_TYPE_FABRIC : CU_MEM_HANDLE_TYPE_NONE;
    return prop;
}

__attribute__((noinline)) CUmemGenericAllocationHandle create(size_t granules)
{
    CUmemGenericAllocationHandle h = 0;
    const CUmemAllocationProp prop = deviceProp();
    if (api.memCreate(&h, granules * kGranule, &prop, 0) != CUDA_SUCCESS)
        std::exit(4);
    return h;
}

CUdeviceptr reserve(size_t granules)
{
    CUdeviceptr va = 0;
    if (api.addressReserve(&va, granules * kGranule, 0, 0, 0) != CUDA_SUCCESS)
        std::exit(5);
    return va;
}

void map(CUdeviceptr va, size_t granules, CUmemGenericAllocationHandle h)
{
    if (api.memMap(va, granules * kGranule, 0, h, 0) != CUDA_SUCCESS)
        std::exit(6);
}

// "hold": physical allocations in each live state (mapped; released while mapped; never
// mapped; one that ended and whose place a later one takes), a report, then a wait for SIGKILL.
// Live: 4 + 2 + 1 + 3 granules = 20 MiB in 4 handles.
int hold()
{
    CUdeviceptr va = reserve(16);
    CUmemGenericAllocationHandle a = create(4);
    map(va, 4, a);
    CUmemGenericAllocationHandle b = create(2);
    map(va + 4 * kGranule, 2, b);
    api.memRelease(b);
    create(1);
    CUmemGenericAllocationHandle d = create(1);
    map(va + 6 * kGranule, 1, d);
    api.memUnmap(va + 6 * kGranule, kGranule);
    api.memRelease(d);
    CUmemGenericAllocationHandle e = create(3);
    map(va + 8 * kGranule, 3, e);
    checkpoint("held");
    std::printf("ready\n");
    for (;;)
        pause();
}

} // namespace

int main(int argc, char** argv)
{
    setvbuf(stdout, nullptr, _IOLBF, 0);
    api.load();
    if (argc > 1 && std::strcmp(argv[1], "hold") == 0)
        return hold();
    // A: create, map, unmap, release
    CUmemGenericAllocationHandle a = create(2);
    checkpoint("a1-created");
    CUdeviceptr va = reserve(8);
    map(va, 2, a);
    checkpoint("a2-mapped");
    api.memUnmap(va, 2 * kGranule);
    checkpoint("a3-unmapped");
    api.memRelease(a);
    checkpoint("a4-released");
    // B: create, map, release while mapped, unmap
    CUmemGenericAllocationHandle b = create(2);
    map(va, 2, b);
    api.memRelease(b);
    checkpoint("b1-released-still-mapped");
    api.memUnmap(va, 2 * kGranule);
    checkpoint("b2-unmapped");
    // C: create, release, never mapped
    api.memRelease(create(1));
    checkpoint("c1-released");
    // D: one handle mapped twice
    CUmemGenericAllocationHandle d = create(1);
    map(va, 1, d);
    map(va + 4 * kGranule, 1, d);
    api.memRelease(d);
    checkpoint("d1-released-mapped-twice");
    api.memUnmap(va, kGranule);
    checkpoint("d2-one-unmapped");
    api.memUnmap(va + 4 * kGranule, kGranule);
    checkpoint("d3-both-unmapped");
    api.addressFree(va, 8 * kGranule);
    // E: a refusal that is not out of memory, then out of memory.
    CUmemGenericAllocationHandle e = 0;
    const CUmemAllocationProp fabric = deviceProp(true);
    std::printf("fabric %d\n", int(api.memCreate(&e, kGranule, &fabric, 0)));
    checkpoint("e1-after-fabric");
    size_t freeBytes = 0, total = 0;
    api.memGetInfo(&freeBytes, &total);
    const CUmemAllocationProp prop = deviceProp();
    const size_t tooMuch = (total / kGranule + 1) * kGranule;
    std::printf("oom %d\n", int(api.memCreate(&e, tooMuch, &prop, 0)));
    return 0;
}
