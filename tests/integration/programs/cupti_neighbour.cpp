// A program that shares CUPTI with oomscope: allocates through the runtime (seen by the
// hooks), through a door the hooks never see (the fake driver's direct entry: CUPTI alone sees
// it), and, by mode, subscribes to CUPTI itself as a profiler does.
//   missed  runtime, direct, runtime allocations; no subscription of its own
//   yield   one allocation, then subscribes (oomscope must step aside), then allocates again
//   first   subscribes before any CUDA call (oomscope must not take the slot), then allocates
//   static  a statically linked runtime's cudaMalloc/cudaFree: CUPTI reports them in its runtime
//           domain, the hooks see only their driver calls inside (not missed, not twice)
// Prints what the program's own subscription saw: its callbacks must all arrive.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h>

#include <atomic>
#include <cstdio>
#include <cstring>

extern "C" CUresult fakecuda_direct_cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes);
extern "C" cudaError_t fakecuda_static_cudaMalloc(void** devPtr, size_t size);
extern "C" cudaError_t fakecuda_static_cudaFree(void* devPtr);

namespace {

std::atomic<int> g_callbacks{0};

void CUPTIAPI onCallback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*)
{
    g_callbacks.fetch_add(1);
}

bool subscribe(bool v2)
{
    CUpti_SubscriberHandle subscriber = nullptr;
    CUptiResult rc;
    if (v2) {
        CUpti_SubscriberParams params{};
        params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
        params.subscriberName = "test-profiler";
        rc = cuptiSubscribe_v2(&subscriber, onCallback, nullptr, &params);
    } else {
        rc = cuptiSubscribe(&subscriber, onCallback, nullptr);
    }
    std::printf("subscribe %d\n", int(rc));
    if (rc != CUPTI_SUCCESS)
        return false;
    return cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2) ==
           CUPTI_SUCCESS;
}

} // namespace

int main(int argc, char** argv)
{
    const char* mode = argc > 1 ? argv[1] : "missed";
    void* a = nullptr;
    void* b = nullptr;
    CUdeviceptr direct = 0;
    if (std::strcmp(mode, "first") == 0 && !subscribe(true))
        return 1;
    if (cudaMalloc(&a, 1 << 20) != cudaSuccess)
        return 1;
    if (std::strcmp(mode, "missed") == 0 && fakecuda_direct_cuMemAlloc_v2(&direct, 3 << 20) != CUDA_SUCCESS)
        return 1;
    if (std::strcmp(mode, "yield") == 0 && !subscribe(false))
        return 1;
    if (std::strcmp(mode, "static") == 0) {
        void* s1 = nullptr;
        void* s2 = nullptr;
        if (fakecuda_static_cudaMalloc(&s1, 4 << 20) != cudaSuccess || fakecuda_static_cudaMalloc(&s2, 5 << 20) != cudaSuccess ||
            fakecuda_static_cudaFree(s1) != cudaSuccess)
            return 1;
    }
    if (cudaMalloc(&b, 2 << 20) != cudaSuccess)
        return 1;
    std::printf("program callbacks %d\n", g_callbacks.load());
    return 0;
}
