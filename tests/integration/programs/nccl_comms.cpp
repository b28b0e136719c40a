// NCCL as a training job uses it, against the fake NCCL (tests/fakecuda/fake_nccl.cpp): a world
// communicator and its first all-reduce, a communicator split from it whose first collective
// runs inside ncclGroupStart/End, symmetric memory from ncclMemAlloc, one communicator made and
// destroyed, a buffer of the program's own; then a report (oomscope_dump) and the exit report.
// Usage: nccl_comms [destroy-world]
#include "interpose/nccl_api.h"

#include <cstdio>
#include <cstring>
#include <dlfcn.h>

extern "C" ncclResult_t ncclGetUniqueId(ncclUniqueId* id);

int main(int argc, char** argv)
{
    ncclUniqueId id;
    ncclGetUniqueId(&id);
    ncclComm_t world = nullptr, split = nullptr, gone = nullptr, none = nullptr;
    if (ncclCommInitRank(&world, 1, id, 0) != ncclSuccess)
        return 1;
    void* buf = nullptr;
    cudaMalloc(&buf, 8 << 20);  // the program's own
    ncclAllReduce(buf, buf, 1024, 7, 0, world, nullptr);  // the first: NCCL connects its buffers
    ncclAllReduce(buf, buf, 1024, 7, 0, world, nullptr);  // later ones take nothing
    if (ncclCommSplit(world, 0, 0, &split, nullptr) != ncclSuccess)
        return 2;
    ncclCommSplit(world, -1, 0, &none, nullptr);  // NCCL_SPLIT_NOCOLOR: no communicator
    ncclGroupStart();
    ncclAllReduce(buf, buf, 1024, 7, 0, split, nullptr);  // connected at the group's end
    ncclGroupEnd();
    ncclGetUniqueId(&id);
    ncclCommInitRankConfig(&gone, 1, id, 0, nullptr);
    ncclCommDestroy(gone);
    void* symmetric = nullptr;
    if (ncclMemAlloc(&symmetric, 64 << 20) != ncclSuccess)
        return 3;
    void* freed = nullptr;
    ncclMemAlloc(&freed, 32 << 20);
    ncclMemFree(freed);
    using Dump = const char* (*)(const char*);
    auto dump = reinterpret_cast<Dump>(dlsym(RTLD_DEFAULT, "oomscope_dump"));
    std::printf("world %p split %p none %p\n", static_cast<void*>(world), static_cast<void*>(split),
                static_cast<void*>(none));
    std::printf("dump %s\n", dump ? dump("nccl") : "");
    if (argc > 1 && std::strcmp(argv[1], "destroy-world") == 0)
        ncclCommDestroy(world);
    return 0;
}
