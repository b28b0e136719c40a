// Live device memory at the trigger as a tree of stacks, root first: the data of a flame
// graph (icicle) and of folded-stack exports. Python frames are a node each; consecutive
// native frames of one library are folded into one node named after it (the symbols kept as
// its detail), as the table view names them. Boxes smaller than a share of the whole are
// merged into one "smaller" node per parent, so that a report of 100 000 allocations gives a
// tree a page can draw. Every node's bytes are the sum of its children's and its own (an
// allocation whose stack ends there). Pure functions.
#pragma once

#include "report/model.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace oomscope::report {

struct LiveNode {
    enum class Kind { Root, Device, Python, Native, NoStack, Smaller };
    Kind kind = Kind::Root;
    std::string name;
    std::vector<std::string> detail;  // native: the symbols folded here; Python: the file's path
    uint64_t bytes = 0;
    std::vector<LiveNode> children;   // largest first
};

struct LiveTreeOptions {
    double minShare = 1.0 / 20000;  // nodes below this share of the root merge into "smaller"
    size_t maxDetail = 16;          // symbols kept per folded node
};

LiveNode liveTree(const Report& report, const LiveTreeOptions& options = {});

// The same tree at each device's peak (memory[].peak: its largest sites, the rest as one
// "other sites" node); none when the report has no peak composition.
std::optional<LiveNode> peakTree(const Report& report, const LiveTreeOptions& options = {});

// One frame as a name in a folded stack: "forward (model.py:12)", "symbol (libfoo.so)",
// "libfoo.so+0x1a2b"; never a ';'.
std::string foldedFrameName(const Report& report, const Frame& frame);

// Device-kind live bytes by stack, root first, frame by frame: Brendan Gregg's folded stacks
// (`frame;frame;frame bytes`), one line per stack and device (a device prefix when there are
// several). The bytes add up to the tracked bytes of every device.
std::vector<std::pair<std::string, uint64_t>> foldedStacks(const Report& report);

} // namespace oomscope::report
