// Which library asked for an allocation: the module of the outermost caller into CUDA,
// classified by name (libc10_cuda → torch, libnccl → nccl, …). Pure functions; dump time.
#pragma once

#include <string>

namespace oomscope::track {

// True for modules that only carry a call into CUDA: CUDA itself (libcuda, libcudart),
// oomscope, and foreign-function layers (libffi, ctypes). Frames to look past.
bool isCudaModule(const std::string& path);

// "torch", "nccl", "cublas", "cudnn", "jax", "cupy" or "other", by a shared object's path.
const char* classifySource(const std::string& modulePath);

// The same, by a Python module's __name__ ("torch.cuda.memory" → torch).
const char* classifyPythonModule(const std::string& moduleName);

} // namespace oomscope::track
