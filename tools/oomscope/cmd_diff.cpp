// oomscope diff A B: what changed between two reports, per device and per site.
#include "commands.h"

#include "report/analysis/check.h"
#include "report/json_reader.h"
#include "report/render/check.h"

#include <iostream>

namespace oomscope::cli {

int diffCommand(const DiffOptions& o)
{
    report::Report a, b;
    std::string error;
    if (!report::readReportFile(o.a, &a, &error) || !report::readReportFile(o.b, &b, &error)) {
        logError("diff: " + error);
        return kExitUsage;
    }
    report::renderDiff(o.a, o.b, report::diffReports(a, b), o.top, std::cout);
    std::cout.flush();
    return std::cout ? kExitOk : kExitUsage;
}

} // namespace oomscope::cli
