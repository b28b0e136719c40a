// The diagnosis playbook (docs/ARCHITECTURE.md): rules over a report, each stating its evidence
// in numbers and a concrete remedy. Pure: source lines come in through the leak analysis.
#pragma once

#include "report/analysis/leaks.h"
#include "report/model.h"

#include <optional>
#include <vector>

namespace oomscope::report {

// Codes: wrong_device, fragmentation, request_too_large, activations, optimizer_state,
// outside_framework, growth, cache_churn. Most severe first.
std::vector<Diagnosis> diagnose(const Report& report, const std::vector<LeakFinding>& leaks, const SourceLine& source);

// A rank with a context on, or memory on, a device other than its LOCAL_RANK's (the missing
// torch.cuda.set_device(local_rank)); nothing where the local rank names no device (each rank
// sees only its own GPU, or ranks share GPUs by design).
std::optional<Diagnosis> wrongDevice(const Report& report);

} // namespace oomscope::report
