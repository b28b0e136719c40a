// `oomscope fit`'s answer, as text (a table of the runs, the model, the largest size and its
// margin, the verification) or JSON (the same, for scripts; docs/commands/fit.md). Pure: the
// command runs the program and gathers a FitOutcome.
#pragma once

#include "report/analysis/fit.h"

#include <cstdint>
#include <ostream>
#include <vector>

namespace oomscope::report {

struct FitOutcome {
    std::vector<FitTrial> trials;  // by size
    size_t fitted = 0;             // how many of them fit (and were measured)
    FitPrediction prediction;
    std::vector<std::vector<uint64_t>> rounds;  // the sizes run, by round (together where there was room)
    std::vector<uint64_t> reruns;               // sizes run again alone
    double seconds = 0, verifySeconds = 0;
    bool deviceLimit = false;  // --device-limit given: the capacity is the limit's
    std::vector<FitResidual> residuals;  // the model at each run it was fitted to
    std::vector<FitResidual> verified;   // --verify: the model at the answer and the next size
    std::vector<std::string> refused;    // why the runs do not explain themselves: no answer
};

void renderFitText(const FitOutcome& outcome, std::ostream& out);
void renderFitJson(const FitOutcome& outcome, std::ostream& out);

} // namespace oomscope::report
