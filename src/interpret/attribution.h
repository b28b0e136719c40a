// Which library asked for an allocation: the module of the outermost caller into CUDA,
// classified by its name (libc10_cuda → torch, libnccl → nccl, …), or the package of the first
// Python frame (a ctypes call from a Python allocator). Pure functions, used by the report
// builder and, through the preload's writer, by the tracker's OOM episodes.
#pragma once

#include "report/enums.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace oomscope::interpret {

using report::Source;

// True for modules that only carry a call into CUDA: CUDA itself (libcuda, libcudart),
// oomscope, and foreign-function layers (libffi, ctypes). Frames to look past.
bool isCudaModule(const std::string& path);

// torch, nccl, cublas, cudnn, jax, cupy or other, by a shared object's path.
Source classifySource(const std::string& modulePath);

// The same, by a Python module's __name__ ("torch.cuda.memory" → torch).
Source classifyPythonModule(const std::string& moduleName);

// The library that made the outermost call into CUDA: the first frame that is neither CUDA,
// oomscope nor a binding layer; native frames by their module's path (pathOf: "" when
// unknown), Python frames by their module (pythonModuleOf).
Source sourceOfFrames(const std::vector<uint64_t>& frames, const std::function<std::string(uint64_t)>& pathOf,
                      const std::function<std::string(uint64_t)>& pythonModuleOf);

} // namespace oomscope::interpret
