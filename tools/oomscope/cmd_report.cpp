// oomscope report FILE: the report as tables on stdout.
#include "commands.h"

#include "report/json_reader.h"
#include "report/render/table.h"

#include <cstdlib>
#include <iostream>
#include <unistd.h>

namespace oomscope::cli {

int reportCommand(const ReportOptions& options)
{
    report::Report r;
    std::string error;
    if (!report::readReportFile(options.file, &r, &error)) {
        logError(error);
        return kExitUsage;
    }
    report::RenderOptions render;
    render.topSites = options.top;
    render.events = options.events;
    render.stackFrames = options.frames;
    render.nativeFrames = options.native;
    render.source = sourceReader();
    render.color = options.color == "always" ||
                   (options.color == "auto" && isatty(STDOUT_FILENO) && !std::getenv("NO_COLOR"));
    report::renderReport(r, render, std::cout);
    std::cout.flush();
    return std::cout ? kExitOk : kExitUsage;
}

} // namespace oomscope::cli
