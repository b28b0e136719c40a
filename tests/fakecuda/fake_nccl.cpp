// libnccl.so.2 of the tests: communicators that take device memory where NCCL takes it, on
// the threads NCCL takes it from (src/interpose/nccl_api.h has the signatures, nccl.h's):
//   - init and split: from a job thread the call starts and joins (NCCL's ncclAsyncJobMain),
//     FAKE_NCCL_INIT_BYTES (default 12 MiB) in 4 MiB buffers;
//   - the first collective: from a proxy thread the call waits on (buffers connected at first
//     use, NCCL_RUNTIME_CONNECT), FAKE_NCCL_CONNECT_BYTES (default 24 MiB); inside
//     ncclGroupStart/End, at the outermost ncclGroupEnd;
//   - ncclMemAlloc: CUDA VMM (cuMemCreate, cuMemAddressReserve, cuMemMap), as NCCL's symmetric
//     memory; ncclMemFree gives it back.
// Every buffer through the fake CUDA, so the preload sees NCCL's allocations as it sees the
// real ones: made by libnccl.so.2.
#include "interpose/nccl_api.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

struct ncclComm {
    int rank = 0;
    int nranks = 1;
    int device = 0;
    bool connected = false;
    std::vector<void*> buffers;
};

namespace {

constexpr size_t kBuffer = 4u << 20;

size_t envBytes(const char* name, size_t fallback)
{
    const char* v = std::getenv(name);
    return v && *v ? size_t(std::strtoull(v, nullptr, 10)) : fallback;
}

// Buffers of `bytes` in all, allocated on another thread that the caller waits for.
ncclResult_t allocateOnThread(ncclComm* comm, size_t bytes)
{
    ncclResult_t rc = ncclSuccess;
    std::thread worker([&] {
        for (size_t done = 0; done < bytes; done += kBuffer) {
            void* p = nullptr;
            if (cudaMalloc(&p, bytes - done < kBuffer ? bytes - done : kBuffer) != cudaSuccess) {
                rc = ncclUnhandledCudaError;
                return;
            }
            comm->buffers.push_back(p);
        }
    });
    worker.join();
    return rc;
}

ncclResult_t init(ncclComm_t* out, int nranks, int rank)
{
    if (!out || nranks < 1 || rank < 0 || rank >= nranks)
        return ncclInvalidArgument;
    auto* comm = new ncclComm;
    comm->rank = rank;
    comm->nranks = nranks;
    cudaGetDevice(&comm->device);
    const ncclResult_t rc = allocateOnThread(comm, envBytes("FAKE_NCCL_INIT_BYTES", 12u << 20));
    if (rc != ncclSuccess) {
        for (void* p : comm->buffers)
            cudaFree(p);
        delete comm;
        *out = nullptr;
        return rc;
    }
    *out = comm;
    return ncclSuccess;
}

thread_local int t_groupDepth = 0;
thread_local std::vector<ncclComm*> t_groupComms;

ncclResult_t connect(ncclComm* comm)
{
    if (comm->connected)
        return ncclSuccess;
    comm->connected = true;
    return allocateOnThread(comm, envBytes("FAKE_NCCL_CONNECT_BYTES", 24u << 20));
}

ncclResult_t collective(ncclComm_t comm)
{
    if (!comm)
        return ncclInvalidArgument;
    if (t_groupDepth > 0) {
        t_groupComms.push_back(comm);
        return ncclSuccess;
    }
    return connect(comm);
}

std::mutex g_symmetricMutex;
struct Symmetric {
    CUmemGenericAllocationHandle handle;
    size_t size;
};
std::map<CUdeviceptr, Symmetric> g_symmetric;

} // namespace

FAKE_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* id)
{
    std::random_device random;
    for (char& c : id->internal)
        c = char(random());
    return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId, int rank)
{
    return init(comm, nranks, rank);
}

FAKE_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId, int rank, ncclConfig_t*)
{
    return init(comm, nranks, rank);
}

FAKE_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t*)
{
    if (!comm || !newcomm)
        return ncclInvalidArgument;
    if (color < 0) {  // NCCL_SPLIT_NOCOLOR: not a member
        *newcomm = nullptr;
        return ncclSuccess;
    }
    (void)key;
    return init(newcomm, 1, 0);  // one process: a communicator of itself
}

FAKE_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    if (!comm)
        return ncclInvalidArgument;
    for (void* p : comm->buffers)
        cudaFree(p);
    delete comm;
    return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    return ncclCommDestroy(comm);
}

FAKE_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank)
{
    *rank = comm->rank;
    return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int* count)
{
    *count = comm->nranks;
    return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclGroupStart()
{
    ++t_groupDepth;
    return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclGroupEnd()
{
    if (t_groupDepth == 0)
        return ncclInvalidUsage;
    if (--t_groupDepth > 0)
        return ncclSuccess;
    ncclResult_t rc = ncclSuccess;
    for (ncclComm* comm : t_groupComms)
        if (connect(comm) != ncclSuccess)
            rc = ncclUnhandledCudaError;
    t_groupComms.clear();
    return rc;
}

FAKE_EXPORT ncclResult_t ncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t comm,
                                       cudaStream_t)
{
    return collective(comm);
}

FAKE_EXPORT ncclResult_t ncclAllGather(const void*, void*, size_t, ncclDataType_t, ncclComm_t comm, cudaStream_t)
{
    return collective(comm);
}

FAKE_EXPORT ncclResult_t ncclMemAlloc(void** ptr, size_t size)
{
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle handle = 0;
    CUdeviceptr base = 0;
    if (cuMemCreate(&handle, size, &prop, 0) != CUDA_SUCCESS)
        return ncclUnhandledCudaError;
    if (cuMemAddressReserve(&base, size, 0, 0, 0) != CUDA_SUCCESS || cuMemMap(base, size, 0, handle, 0) != CUDA_SUCCESS) {
        cuMemRelease(handle);
        return ncclUnhandledCudaError;
    }
    {
        std::lock_guard<std::mutex> lock(g_symmetricMutex);
        g_symmetric[base] = {handle, size};
    }
    *ptr = reinterpret_cast<void*>(base);
    return ncclSuccess;
}

FAKE_EXPORT ncclResult_t ncclMemFree(void* ptr)
{
    Symmetric s{};
    const CUdeviceptr base = CUdeviceptr(reinterpret_cast<uintptr_t>(ptr));
    {
        std::lock_guard<std::mutex> lock(g_symmetricMutex);
        auto it = g_symmetric.find(base);
        if (it == g_symmetric.end())
            return ncclInvalidArgument;
        s = it->second;
        g_symmetric.erase(it);
    }
    cuMemUnmap(base, s.size);
    cuMemRelease(s.handle);
    cuMemAddressFree(base, s.size);
    return ncclSuccess;
}
