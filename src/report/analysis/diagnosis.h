// The diagnosis playbook (docs/ARCHITECTURE.md): rules over a report, each stating its evidence
// in numbers and a concrete remedy. Pure: source lines come in through the leak analysis.
#pragma once

#include "report/analysis/leaks.h"
#include "report/model.h"

#include <vector>

namespace oomscope::report {

// Codes: fragmentation, request_too_large, activations, optimizer_state, outside_framework,
// growth, cache_churn. Most severe first.
std::vector<Diagnosis> diagnose(const Report& report, const std::vector<LeakFinding>& leaks, const SourceLine& source);

} // namespace oomscope::report
