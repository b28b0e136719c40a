// Which library asked for an allocation: the module of the outermost caller into CUDA,
// classified by its name (libc10_cuda → torch, libnccl → nccl, …), or the package of the first
// Python frame (a ctypes call from a Python allocator). Pure functions, used by the report
// builder (interpret), the tracker's OOM episodes (through the preload's writer) and the views
// of reports whose stacks carry no source yet.
#pragma once

#include "report/enums.h"

#include <string>

namespace oomscope::report {

// True for modules that only carry a call into CUDA: CUDA itself (libcuda, libcudart),
// oomscope, and foreign-function layers (libffi, ctypes). Frames to look past.
bool isCudaModule(const std::string& path);
// oomscope's own preload (liboomscope.so): its frames are no frame of the program.
bool isOwnModule(const std::string& path);

// torch, nccl, cublas, cudnn, jax, cupy or other, by a shared object's path.
Source classifySource(const std::string& modulePath);

// The same, by a Python module's __name__ ("torch.cuda.memory" → torch).
Source classifyPythonModule(const std::string& moduleName);

// The same, by a Python source file's path (".../site-packages/torch/nn/module.py" → torch):
// for reports, whose frames name files, not modules.
Source classifyPythonFile(const std::string& path);


} // namespace oomscope::report
