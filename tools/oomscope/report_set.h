// The reports a command was given as a set: `oomscope report|check|html DIR` or several FILEs.
// A directory gives its reports (oomscope-*.json) and, for each process that left none, its
// flight file (oomscope-*.flight) recovered in memory, so that a rank torchrun killed before it
// wrote a report still has its row. A file that cannot be read is named, the rest kept.
#pragma once

#include "report/analysis/job.h"
#include "report/render/job_table.h"

#include <memory>
#include <string>
#include <vector>

namespace oomscope::cli {

struct ReportSet {
    std::vector<std::unique_ptr<report::Report>> reports;
    std::vector<report::JobMember> members;  // one per report, in path order
    std::vector<report::SetProblem> problems;
    bool fromDirectory = false;  // a directory was among the arguments
    size_t recovered = 0;        // members made from flight files
};

// false with *error (one line) when an argument does not exist, or nothing in the set could be
// read as a report.
bool loadReportSet(const std::vector<std::string>& arguments, ReportSet* out, std::string* error);

// Whether the arguments name one report file (not a directory, not several): the single
// report's views, not the job's.
bool isSingleReport(const std::vector<std::string>& arguments);

} // namespace oomscope::cli
