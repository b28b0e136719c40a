// Renders a report as text tables for a terminal: the trigger, memory per device, the top
// allocation sites with their stacks, the last events before the trigger. Model in, text out;
// no I/O besides the stream.
#pragma once

#include "report/analysis/analysis.h"
#include "report/analysis/leaks.h"
#include "report/model.h"

#include <cstddef>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace oomscope::report {

struct RenderOptions {
    size_t topSites = 5;
    size_t events = 10;
    size_t stackFrames = 12;  // frames shown per stack
    // Stacks with Python frames show those, and the native frames in front of them as one line
    // naming their libraries; true shows every native frame too.
    bool nativeFrames = false;
    // The source text of a Python line, for the diagnosis of leaks; empty: not shown.
    SourceLine source;
    bool color = false;
    // The playbook's findings where the caller has them already (the HTML page, which shows
    // them too): not computed again. Null: the report's own, else computed here.
    const std::vector<Diagnosis>* diagnosis = nullptr;
};

void renderReport(const Report& report, const RenderOptions& options, std::ostream& out);

// The report's first lines: what happened (title: "OUT OF MEMORY", then the rest of the line)
// and the facts under it (request, error, process, when), as every view shows them.
struct Headline {
    bool alert = false;  // an OOM: shown in red
    std::string title;
    std::string rest;
    std::vector<std::pair<std::string, std::string>> facts;
};
Headline headline(const Report& report);


} // namespace oomscope::report
