// Pure functions over a Report: no I/O, no formatting. Renderers and commands take what these
// return.
#pragma once

#include "report/analysis/leaks.h"
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
// A file of a framework's own Python package (torch, jax, cupy) rather than the program's.
bool inFrameworkPackage(const std::string& file);
const Frame* programFrame(const Stack& stack, bool* borrowed = nullptr);

// One frame as text: "file.py:12  forward" or "symbol  (module+0x1a2b)".
std::string describeFrame(const Report& report, const Frame& frame);
// PyTorch's memory by pool on one device, from the segments (revision 8: a segment's pool):
// reserved (segment sizes) and allocated (active blocks) per pool, the default pool first.
// Empty when no segment names a pool other than the default.
struct PoolBytes {
    std::vector<int64_t> poolId;  // empty: the default pool
    uint64_t reserved = 0;
    uint64_t allocated = 0;
    uint64_t segments = 0;
};
std::vector<PoolBytes> bytesByPool(const Report& report, int64_t device);

// An NCCL communicator in a line: "communicator 1a2b3c4d (rank 0 of 2) 388.00 MiB: 200.00 MiB at
// init, 188.00 MiB at its first collective".
std::string describeCommunicator(const NcclCommunicator& c);

// A native frame's source line as "file.cu:42" (the file's base name), "" when unknown.
std::string nativeLine(const Frame& frame);

// A stack in one line, as a site is named: its program frame (file:line function), else its
// first frame outside the CUDA libraries and oomscope; "(no stack)" for none.
std::string stackLabel(const Report& report, const Stack* stack);

// The report with its analysis filled in: leaks, diagnosis, and `analysis` naming this oomscope
// (what `oomscope report --format json` writes: the same document type, for dashboards).
Report analyzed(const Report& report, const SourceLine& source);

// True when the report carries block stacks at all (PyTorch's history was on).
bool hasBlockStacks(const Report& report);

} // namespace oomscope::report

namespace oomscope::report {

// Fragmentation of a framework's cache on one device, from its segments and blocks (or the
// memory row's counters where blocks are absent).
struct DeviceFragmentation {
    int64_t device = 0;
    uint64_t reserved = 0;
    uint64_t allocated = 0;
    uint64_t freeInCache = 0;      // reserved − allocated: held by the cache, usable by nothing else
    uint64_t largestFree = 0;      // the largest inactive block
    double external = 0;           // 1 − largestFree / freeInCache (0 when nothing is free)
    uint64_t segments = 0;
    uint64_t splitSegments = 0;    // segments holding both live and free blocks
    uint64_t freeBlocks = 0;
    bool haveBlocks = false;       // false: counters only, largestFree unknown unless the row had it
    std::optional<uint64_t> request;  // the failed request, on the trigger's device
    // The request was below the free bytes in the cache taken together, but above every single
    // free block: fragmentation is why it failed.
    bool requestBlockedByFragmentation = false;
};
std::vector<DeviceFragmentation> fragmentation(const Report& report);

} // namespace oomscope::report
