// The CUPTI callback translation: parameter structs as CUPTI hands them over, read at the site
// each kind of call is recorded at.
#include "cupti/calls.h"

#include <cupti.h>

#include <catch2/catch.hpp>

using namespace oomscope::cupti;
using oomscope::interpose::HookId;
using oomscope::track::MemKind;

namespace {

CUpti_CallbackData callback(CUpti_ApiCallbackSite site, const void* params, int* rc)
{
    CUpti_CallbackData data{};
    data.callbackSite = site;
    data.functionParams = params;
    data.functionReturnValue = rc;
    return data;
}

} // namespace

TEST_CASE("only memory callback ids are enabled, each mapped to the hook of its function")
{
    size_t count = 0;
    const CallSpec* calls = memoryCallbacks(&count);
    REQUIRE(count >= 30);
    for (size_t i = 0; i < count; ++i) {
        CHECK((calls[i].domain == CUPTI_CB_DOMAIN_DRIVER_API || calls[i].domain == CUPTI_CB_DOMAIN_RUNTIME_API));
        CHECK(findCall(calls[i].domain, calls[i].cbid) == &calls[i]);
    }
    CHECK(findCall(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel) == nullptr);
    CHECK(findCall(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000) == nullptr);
    const CallSpec* malloc = findCall(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020);
    REQUIRE(malloc);
    CHECK(malloc->hook == HookId::cudaMalloc);
    CHECK(malloc->op == Op::Alloc);
    const CallSpec* host = findCall(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc);
    REQUIRE(host);
    CHECK(host->kind == MemKind::HostPinned);
}

TEST_CASE("an allocation is read at its exit: the pointer written, the size asked")
{
    const CallSpec& spec = *findCall(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2);
    CUdeviceptr out = 0;
    cuMemAlloc_v2_params params{&out, 4096};
    int rc = 0;
    Call call;
    CHECK_FALSE(readCall(spec, callback(CUPTI_API_ENTER, &params, &rc), &call));  // not its site
    out = 0x7f0000001000;
    REQUIRE(readCall(spec, callback(CUPTI_API_EXIT, &params, &rc), &call));
    CHECK(call.spec == &spec);
    CHECK(call.result == 0);
    CHECK(call.address == 0x7f0000001000);
    CHECK(call.size == 4096);
    CHECK(call.requested == 4096);
}

TEST_CASE("a failed allocation keeps the request and its error, no pointer")
{
    const CallSpec& spec = *findCall(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020);
    void* out = reinterpret_cast<void*>(0xdead);  // garbage: the call failed
    cudaMalloc_v3020_params params{&out, size_t(80) << 30};
    int rc = 2;  // cudaErrorMemoryAllocation
    Call call;
    REQUIRE(readCall(spec, callback(CUPTI_API_EXIT, &params, &rc), &call));
    CHECK(call.result == 2);
    CHECK(call.address == 0);
    CHECK(call.requested == (uint64_t(80) << 30));
}

TEST_CASE("pitched allocations count pitch times height")
{
    const CallSpec& spec = *findCall(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMallocPitch_v3020);
    void* out = reinterpret_cast<void*>(0x1000);
    size_t pitch = 512;
    cudaMallocPitch_v3020_params params{&out, &pitch, 300, 10};
    int rc = 0;
    Call call;
    REQUIRE(readCall(spec, callback(CUPTI_API_EXIT, &params, &rc), &call));
    CHECK(call.requested == 3000);
    CHECK(call.size == 5120);
    CHECK(call.address == 0x1000);
}

TEST_CASE("frees and unmaps are read at their entry, before the address can be reused")
{
    const CallSpec& free = *findCall(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync);
    cuMemFreeAsync_params params{CUdeviceptr(0x2000), reinterpret_cast<CUstream>(0x77)};
    int rc = 0;
    Call call;
    CHECK_FALSE(readCall(free, callback(CUPTI_API_EXIT, &params, &rc), &call));
    REQUIRE(readCall(free, callback(CUPTI_API_ENTER, &params, &rc), &call));
    CHECK(call.address == 0x2000);
    CHECK(call.stream == 0x77);

    const CallSpec& unmap = *findCall(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemUnmap);
    cuMemUnmap_params u{CUdeviceptr(0x4000), 2 << 20};
    REQUIRE(readCall(unmap, callback(CUPTI_API_ENTER, &u, &rc), &call));
    CHECK(call.spec->op == Op::VmmUnmap);
    CHECK(call.size == (2u << 20));
}

TEST_CASE("cuMemCreate names its device and hands back the handle")
{
    const CallSpec& spec = *findCall(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemCreate);
    CUmemGenericAllocationHandle handle = 42;
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 3;
    cuMemCreate_params params{&handle, 2 << 20, &prop, 0};
    int rc = 0;
    Call call;
    REQUIRE(readCall(spec, callback(CUPTI_API_EXIT, &params, &rc), &call));
    CHECK(call.spec->op == Op::VmmCreate);
    CHECK(call.address == 42);
    CHECK(call.device == 3);
    CHECK(call.size == (2u << 20));
}

TEST_CASE("stream-ordered allocations from a pool keep the stream and the pool")
{
    const CallSpec& spec = *findCall(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync);
    CUdeviceptr out = 0x9000;
    cuMemAllocFromPoolAsync_params params{&out, 1024, reinterpret_cast<CUmemoryPool>(0x55), reinterpret_cast<CUstream>(0x66)};
    int rc = 0;
    Call call;
    REQUIRE(readCall(spec, callback(CUPTI_API_EXIT, &params, &rc), &call));
    CHECK(call.address == 0x9000);
    CHECK(call.handle == 0x55);
    CHECK(call.stream == 0x66);
}

TEST_CASE("a callback without parameters is not read")
{
    const CallSpec& spec = *findCall(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2);
    int rc = 0;
    Call call;
    CHECK_FALSE(readCall(spec, callback(CUPTI_API_EXIT, nullptr, &rc), &call));
}
