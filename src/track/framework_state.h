// What a framework adapter tells the recorder about its own allocator (PyTorch's caching
// allocator: allocated vs reserved, segments and their blocks), as a small line protocol so
// that the preload needs no JSON parser:
//   device <index> allocated <bytes> reserved <bytes> [active <bytes>] [inactive_split <bytes>] [segments <n>]
//          [largest_free <bytes>] [allocated_peak <bytes>] [expandable 0|1]
//          [parameters <bytes> gradients <bytes> optimizer_state <bytes>]   (roles, measured from
//                                          the objects: all three or none)
//   segment <device> <address> <size> <stream> <kind> [pool <a> <b>]
//                                          (pool: PyTorch's segment_pool_id, absent: the default)
//   block <offset> <size> <state>[\t<file>\t<line>\t<function>…]
//                                          (belongs to the segment above; the Python stack
//                                          of the tensor in it, from PyTorch's history)
//   frames <address> <file>\t<line>\t<function>[\t<file>\t<line>\t<function>…]
//                                          (the Python stack that allocated the memory at
//                                          <address>, innermost first: PyTorch's history)
//   tensors <device> <bytes>\t<file>\t<line>\t<function>[…]
//                                          (live blocks grouped by the Python stack of their
//                                          allocation, at a step: PyTorch's history)
//   oom_pool <a> <b>                       (the out-of-memory request was made inside
//                                          torch.cuda.use_mem_pool of this pool)
//   graphs captures <n> aborted <n> live <n>
//                                          (CUDA graphs' captures since the adapter attached:
//                                          begun, failed at capture_end, graphs holding a pool)
//   graph_pool <a> <b> <graphs>            (a pool captures used, and the graphs holding it now)
//   census <device>                        (a census of what keeps tensors alive was taken)
//   retainer <device> <bytes> <tensors>\t<kind>\t<container>\t<name>[\t<file>\t<line>\t<function>…]
//                                          (one thing that keeps tensors alive at that census;
//                                          the frames: the allocation of one of its tensors)
// Unknown keys and lines are ignored (counted), so adapters and preload can evolve apart.
#pragma once

#include "report/model.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace oomscope::track {

struct FrameworkDevice {
    int64_t device = 0;
    uint64_t allocated = 0;
    uint64_t reserved = 0;
    std::optional<uint64_t> active;
    std::optional<uint64_t> inactiveSplit;
    std::optional<uint64_t> segmentCount;
    std::optional<uint64_t> largestFree;  // given directly when segments are not sent
    std::optional<uint64_t> allocatedPeak;
    std::optional<bool> expandable;
    std::optional<uint64_t> parameters, gradients, optimizerState;

    // The memory by role at timeNs, when the adapter measured the roles: activations are the
    // rest of allocated (never below 0), the cache reserved − allocated.
    std::optional<report::RoleBytes> roles(uint64_t timeNs) const
    {
        if (!parameters || !gradients || !optimizerState)
            return std::nullopt;
        report::RoleBytes r;
        r.timeNs = timeNs;
        r.parameters = *parameters;
        r.gradients = *gradients;
        r.optimizerState = *optimizerState;
        const uint64_t named = r.parameters + r.gradients + r.optimizerState;
        r.activations = allocated > named ? allocated - named : 0;
        r.cache = reserved > allocated ? reserved - allocated : 0;
        return r;
    }
};


struct PythonFrameText {
    std::string file;
    uint32_t line = 0;
    std::string function;
};

struct TensorGroup {
    int64_t device = 0;
    uint64_t bytes = 0;
    std::vector<PythonFrameText> frames;
};

struct RetainerText {
    report::Retainer retainer;  // its stack not yet interned
    std::vector<PythonFrameText> frames;
};

struct FrameworkState {
    std::string name;  // "torch"
    bool census = false;  // a census of retainers was taken (retainers may still be none)
    std::vector<RetainerText> retainers;
    std::vector<FrameworkDevice> devices;
    std::vector<report::Segment> segments;
    std::vector<std::pair<uint64_t, std::vector<PythonFrameText>>> allocationFrames;
    // [segment][block]: the Python stack of each block, empty when not given.
    std::vector<std::vector<std::vector<PythonFrameText>>> blockFrames;
    std::vector<TensorGroup> tensorGroups;
    std::vector<int64_t> oomPool;  // the pool the failed request was made in; empty: the default
    std::optional<report::CudaGraphs> graphs;  // given once a capture was made
    size_t ignoredLines = 0;

    const FrameworkDevice* device(int64_t index) const
    {
        for (const FrameworkDevice& d : devices) {
            if (d.device == index)
                return &d;
        }
        return nullptr;
    }
    // The largest inactive block of a device's segments, when segments were given.
    std::optional<uint64_t> largestFreeBlock(int64_t device) const
    {
        if (const FrameworkDevice* d = this->device(device); d && d->largestFree && segments.empty())
            return d->largestFree;
        std::optional<uint64_t> largest;
        for (const report::Segment& s : segments) {
            if (s.device != device)
                continue;
            largest = largest.value_or(0);
            for (const report::Block& b : s.blocks) {
                if (b.state == report::BlockState::Inactive && b.size > *largest)
                    largest = b.size;
            }
        }
        return largest;
    }
};

FrameworkState parseFrameworkState(const char* name, const char* text);

} // namespace oomscope::track
