// Test-program helper: the driver functions a program gets without linking libcuda, the way
// a statically linked runtime does: dlopen("libcuda.so.1"), dlsym("cuGetProcAddress_v2") (or
// the first version), then everything else through it.
#pragma once

#include "interpose/cuda_extra.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>

struct DriverApi {
    decltype(&cuGetProcAddress_v2) getProcAddress = nullptr;
    decltype(&cuGetProcAddress) getProcAddressV1 = nullptr;
    decltype(&cuInit) init = nullptr;
    decltype(&cuDevicePrimaryCtxRetain) retain = nullptr;
    decltype(&cuCtxSetCurrent) setCurrent = nullptr;
    decltype(&cuMemAlloc_v2) memAlloc = nullptr;
    decltype(&cuMemFree_v2) memFree = nullptr;
    decltype(&cuMemCreate) memCreate = nullptr;
    decltype(&cuMemRelease) memRelease = nullptr;
    decltype(&cuMemMap) memMap = nullptr;
    decltype(&cuMemUnmap) memUnmap = nullptr;
    decltype(&cuMemAddressReserve) addressReserve = nullptr;
    decltype(&cuMemAddressFree) addressFree = nullptr;
    decltype(&cuMemSetAccess) setAccess = nullptr;
    decltype(&cuMemGetInfo_v2) memGetInfo = nullptr;
    void* lib = nullptr;

    template <class Fn>
    void get(Fn& slot, const char* name, int version = CUDA_VERSION)
    {
        void* p = nullptr;
        if (getProcAddress(name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, nullptr) != CUDA_SUCCESS || !p) {
            std::fprintf(stderr, "cuGetProcAddress(%s) failed\n", name);
            std::exit(3);
        }
        slot = reinterpret_cast<Fn>(p);
    }

    void load()
    {
        lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            std::fprintf(stderr, "no libcuda.so.1: %s\n", dlerror());
            std::exit(3);
        }
        getProcAddress = reinterpret_cast<decltype(getProcAddress)>(dlsym(lib, "cuGetProcAddress_v2"));
        getProcAddressV1 = reinterpret_cast<decltype(getProcAddressV1)>(dlsym(lib, "cuGetProcAddress"));
        get(init, "cuInit");
        get(retain, "cuDevicePrimaryCtxRetain");
        get(setCurrent, "cuCtxSetCurrent");
        get(memAlloc, "cuMemAlloc");
        get(memFree, "cuMemFree");
        get(memCreate, "cuMemCreate");
        get(memRelease, "cuMemRelease");
        get(memMap, "cuMemMap");
        get(memUnmap, "cuMemUnmap");
        get(addressReserve, "cuMemAddressReserve");
        get(addressFree, "cuMemAddressFree");
        get(setAccess, "cuMemSetAccess");
        get(memGetInfo, "cuMemGetInfo");
        CUcontext ctx = nullptr;
        if (init(0) != CUDA_SUCCESS || retain(&ctx, 0) != CUDA_SUCCESS || setCurrent(ctx) != CUDA_SUCCESS) {
            std::fprintf(stderr, "no context\n");
            std::exit(3);
        }
    }
};

// Six allocations of 1..6 MiB through alloc, then frees of the 1st, 3rd and 5th; prints
// "door <name> allocs <n> frees <m>".
template <class Alloc, class Free>
void allocateAndFreeHalf(const char* door, Alloc alloc, Free release)
{
    CUdeviceptr ptrs[6] = {};
    int allocs = 0, frees = 0;
    for (int i = 0; i < 6; ++i)
        allocs += alloc(&ptrs[i], size_t(i + 1) << 20) == CUDA_SUCCESS;
    for (int i = 0; i < 6; i += 2)
        frees += release(ptrs[i]) == CUDA_SUCCESS;
    std::printf("door %s allocs %d frees %d\n", door, allocs, frees);
}

// oomscope_dump when the preload is there, found the way a program without a build
// dependency on oomscope would find it.
inline void checkpoint(const char* label)
{
    using Dump = const char* (*)(const char*);
    if (auto dump = reinterpret_cast<Dump>(dlsym(RTLD_DEFAULT, "oomscope_dump")))
        std::printf("checkpoint %s %s\n", label, dump(label));
}
