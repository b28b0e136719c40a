// Allocates through one entry-point door, chosen by argv[1], and frees half:
//   procaddr-v2   cuGetProcAddress_v2("cuMemAlloc", 12000)
//   procaddr-v1   cuGetProcAddress (first version), version 3020
//   procaddr-self cuGetProcAddress_v2 obtained through cuGetProcAddress_v2 itself
//   dlsym         dlsym(libcuda handle, "cuMemAlloc_v2")
//   exported      cuMemAlloc_v2 called as a linked symbol (see driver_exported.cpp)
// Prints the number of allocations and frees made.
#include "driver_common.h"

#include <string>

int main(int argc, char** argv)
{
    const std::string door = argc > 1 ? argv[1] : "procaddr-v2";
    DriverApi api;
    api.load();
    decltype(&cuMemAlloc_v2) alloc = nullptr;
    decltype(&cuMemFree_v2) release = nullptr;
    if (door == "procaddr-v2") {
        api.get(alloc, "cuMemAlloc", 12000);
        api.get(release, "cuMemFree", 12000);
    } else if (door == "procaddr-v1") {
        void* a = nullptr;
        void* f = nullptr;
        api.getProcAddressV1("cuMemAlloc", &a, 3020, CU_GET_PROC_ADDRESS_DEFAULT);
        api.getProcAddressV1("cuMemFree", &f, 3020, CU_GET_PROC_ADDRESS_DEFAULT);
        alloc = reinterpret_cast<decltype(alloc)>(a);
        release = reinterpret_cast<decltype(release)>(f);
    } else if (door == "procaddr-self") {
        decltype(&cuGetProcAddress_v2) self = nullptr;
        api.get(self, "cuGetProcAddress", 12000);
        void* a = nullptr;
        void* f = nullptr;
        self("cuMemAlloc", &a, 12000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr);
        self("cuMemFree", &f, 12000, CU_GET_PROC_ADDRESS_DEFAULT, nullptr);
        alloc = reinterpret_cast<decltype(alloc)>(a);
        release = reinterpret_cast<decltype(release)>(f);
    } else if (door == "dlsym") {
        alloc = reinterpret_cast<decltype(alloc)>(dlsym(api.lib, "cuMemAlloc_v2"));
        release = reinterpret_cast<decltype(release)>(dlsym(api.lib, "cuMemFree_v2"));
    }
    if (!alloc || !release) {
        std::fprintf(stderr, "door %s gave nothing\n", door.c_str());
        return 3;
    }
    allocateAndFreeHalf(door.c_str(), alloc, release);
    return 0;
}
