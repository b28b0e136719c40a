// `oomscope top`'s view of one process: a block of plain lines (no escape codes; the command
// places them on the screen) from a snapshot report: the process, each device's tracked memory
// by source and its peak, PyTorch's allocated/reserved at the last step sample, steps per
// second and the growth per step over the last steps, the top sites by live bytes with their
// program lines, and the leak verdict as soon as the leak rules can tell. Model in, text out.
#pragma once

#include "report/analysis/leaks.h"
#include "report/model.h"

#include <optional>
#include <string>
#include <vector>

namespace oomscope::report {

struct TopOptions {
    size_t sites = 5;
    size_t growthSteps = 10;  // the window of "growth per step" and "steps per second"
    SourceLine source;        // for the leak verdict's line; may be empty
};

// The block's lines, each at most `width` characters (0: no limit).
std::vector<std::string> topBlock(const Report& snapshot, const TopOptions& options, size_t width);

// Over the last `window` step samples: steps per second and the growth per step of the
// framework's allocated bytes (where the samples have them) else the tracked bytes, all devices
// together. nullopt with fewer than two samples.
struct StepRate {
    double stepsPerSecond = 0;
    double bytesPerStep = 0;
    size_t steps = 0;  // samples in the window
    bool allocated = false;  // growth of the framework's allocated bytes (else tracked)
};
std::optional<StepRate> stepRate(const std::vector<Step>& steps, size_t window);

} // namespace oomscope::report
