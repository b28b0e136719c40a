// The job view as text: `oomscope report DIR` (or several reports). Model in (analysis/job.h),
// text out.
#pragma once

#include "report/analysis/job.h"
#include "report/render/table.h"

#include <ostream>
#include <string>
#include <vector>

namespace oomscope::report {

// A file of the set that could not be read, named in the view (the rest is still shown).
struct SetProblem {
    std::string path;
    std::string error;
};

void renderJobs(const std::vector<JobView>& jobs, const std::vector<SetProblem>& problems, const RenderOptions& options,
                std::ostream& out);

// The Ranks table: a header row, then one row per rank (text and HTML show the same cells;
// the first six columns are text, the rest figures).
std::vector<std::vector<std::string>> rankTableCells(const JobView& job);

// "12:00:01.234 UTC" (the date too when asked): a wall-clock time of the job.
std::string formatWallClock(uint64_t unixNs, bool withDate);

} // namespace oomscope::report
