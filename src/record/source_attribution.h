// Which library asked for an allocation: the module of the outermost caller into CUDA,
// classified by name (libc10_cuda → torch, libnccl → nccl, …). Pure functions; dump time.
#pragma once

#include <string>

namespace oomscope::record {

// True for modules that are CUDA itself (libcuda, libcudart): frames to look past.
bool isCudaModule(const std::string& path);

// "torch", "nccl", "cublas", "cudnn", "jax", "cupy" or "other".
const char* classifySource(const std::string& modulePath);

} // namespace oomscope::record
