// The job view as one self-contained HTML page (`oomscope html DIR`): the ranks' memory over
// the job's wall-clock time in one chart (drawn here as SVG, each rank a line, the first
// failure marked), the tables of `oomscope report DIR` and the job's diagnosis. No script:
// everything is computed and drawn in C++ (analysis/job.h, memory_over_time.h).
#pragma once

#include "report/analysis/job.h"
#include "report/render/job_table.h"

#include <string>
#include <vector>

namespace oomscope::report {

std::string renderJobHtml(const std::vector<JobView>& jobs, const std::vector<SetProblem>& problems,
                          const std::string& title);

} // namespace oomscope::report
