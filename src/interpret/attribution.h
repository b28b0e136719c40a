// Which library made the outermost call into CUDA, from a stack's frame words (native return
// addresses and Python frame tokens, track/frame_word.h): the report builder's and the OOM
// episodes' question. The names of libraries are classified by report/sources.h.
#pragma once

#include "report/sources.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace oomscope::interpret {

// The library that made the outermost call into CUDA: the first frame that is neither CUDA,
// oomscope nor a binding layer; native frames by their module's path (pathOf: "" when
// unknown), Python frames by their module (pythonModuleOf).
report::Source sourceOfFrames(const std::vector<uint64_t>& frames, const std::function<std::string(uint64_t)>& pathOf,
                      const std::function<std::string(uint64_t)>& pythonModuleOf);

} // namespace oomscope::interpret
