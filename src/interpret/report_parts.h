// Pieces of a report built from what the recorder holds, shared by the dump (recorder.cpp) and
// by `oomscope recover` (recover.cpp), which has the same data read back from a flight file.
// Dump time only: allocates freely.
#pragma once

#include "track/live_map.h"
#include "track/python_frames.h"
#include "interpret/symbolize.h"
#include "report/model.h"

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace oomscope::track {

using PythonResolver = std::function<PythonFrames::Resolved(uint64_t)>;

// The library that made the outermost call into CUDA: the first frame that is neither CUDA,
// oomscope nor a binding layer; native frames by their module (pathOf: "" when unknown),
// Python frames by their module's package (ctypes calls from a Python allocator end up there).
std::string sourceOfFrames(const std::vector<uint64_t>& frames, const std::function<std::string(uint64_t)>& pathOf,
                           const PythonResolver& python);

// Live allocations grouped by stack, device and kind, largest first.
std::vector<report::Site> liveSites(const std::vector<LiveAllocation>& live);

// The referenced stacks, symbolized, into r.stacks and r.modules; returns each one's source.
std::unordered_map<uint32_t, std::string> addStacks(report::Report& r, const std::set<uint32_t>& referenced,
                                                    const std::function<std::vector<uint64_t>(uint32_t)>& framesOf,
                                                    const PythonResolver& python, Symbolizer& symbolizer);

// by_source of each memory row: device memory only, so that it adds up to tracked bytes; the
// untracked residue (CUDA context, what capture could not see) completes the driver's view.
void attributeBySource(report::Report& r, const std::vector<LiveAllocation>& live,
                       const std::unordered_map<uint32_t, std::string>& sourceOfStack);

} // namespace oomscope::track
