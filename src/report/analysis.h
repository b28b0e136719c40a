// Pure functions over a Report: no I/O, no formatting. Renderers and commands take what these
// return.
#pragma once

#include "report/model.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace oomscope::report {

// Live framework blocks (PyTorch's tensors) grouped by the Python stack that allocated them,
// largest first. stack is empty for blocks whose allocation has no Python frames (autograd's
// backward thread, or history not recorded for them).
struct TensorSite {
    std::optional<uint32_t> stack;
    int64_t device = 0;
    uint64_t bytes = 0;
    uint64_t count = 0;
};
std::vector<TensorSite> tensorSites(const Report& report);

// The Python frame a user recognises as "where": the innermost one outside the frameworks'
// own packages (torch, jax, cupy), else the innermost Python frame; nullptr without Python frames. borrowed: the
// frame comes from the main thread's stack, lent to a thread without Python frames (a marker
// frame with file kBorrowedFrameFile precedes it).
inline constexpr const char* kBorrowedFrameFile = "<main thread>";
const Frame* programFrame(const Stack& stack, bool* borrowed = nullptr);

// True when the report carries block stacks at all (PyTorch's history was on).
bool hasBlockStacks(const Report& report);

} // namespace oomscope::report
