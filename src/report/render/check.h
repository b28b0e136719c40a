// Text and JUnit XML for `oomscope check`, text for `oomscope diff`. Results in, text out.
#pragma once

#include "report/analysis/check.h"

#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace oomscope::report {

struct CheckedReport {
    std::string name;  // the report's path as given
    std::vector<CheckResult> results;
    bool passed() const;
};

// One block per report, then the verdict line.
void renderCheck(const std::vector<CheckedReport>& reports, std::ostream& out);

// The verdicts as JSON: {"passed": bool, "reports": [{"name", "passed", "results": [{"rule",
// "passed", "summary", "details": [...]}]}]}.
std::string checkJson(const std::vector<CheckedReport>& reports);

// A JUnit XML document: one test suite, a test case per report and rule, a failure element
// with the evidence for each failed rule.
std::string junitXml(const std::vector<CheckedReport>& reports);

void renderDiff(const std::string& nameA, const std::string& nameB, const ReportDiff& diff, size_t topSites,
                std::ostream& out);

} // namespace oomscope::report
