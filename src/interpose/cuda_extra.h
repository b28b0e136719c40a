// Declarations the CUDA headers leave out: the per-thread-default-stream (_ptsz) exports that
// <cuda_runtime_api.h> and <cuda.h> only reach through macros when a program is compiled with
// --default-stream per-thread, and the first versions of cuGetProcAddress and cuDeviceGetUuid,
// which <cuda.h> maps to their _v2. Their signatures are those of the CUDA 13.0 headers. Shared by the
// interposer and the fake CUDA of the tests; both always name versioned functions explicitly.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti_callbacks.h>

#undef cuGetProcAddress
#undef cuDeviceGetUuid

extern "C" {
cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t stream);
cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream);
cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** funcPtr, unsigned long long flags,
                                         cudaDriverEntryPointQueryResult* driverStatus);
cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                                                  unsigned long long flags,
                                                  cudaDriverEntryPointQueryResult* driverStatus);

CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream);
CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags);
CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev);
}
