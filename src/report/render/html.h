// A report as one self-contained HTML page (oomscope html): memory over time per device by
// source, a flame graph of the live bytes at the trigger, PyTorch's segments as a segment map,
// and the header, memory table, sites, leaks and diagnosis of `oomscope report`. Everything the
// page shows is computed here (src/report/analysis) and embedded as JSON; the page's own
// script (src/report/render/html/page.js, inlined with its stylesheet) only draws it. Nothing
// is fetched when the page is viewed: it opens from file:// and as a CI artifact.
#pragma once

#include "report/analysis/leaks.h"
#include "report/model.h"

#include <string>

namespace oomscope::report {

struct HtmlOptions {
    std::string fileName;    // shown in the page's title
    SourceLine source;       // source lines for the leak verdicts; empty: not shown
    size_t topSites = 25;
};

std::string renderHtml(const Report& report, const HtmlOptions& options);

// Text for HTML: & < > " escaped.
std::string escapeHtml(const std::string& text);

// The data the page draws, as JSON (what renderHtml embeds): for tests and other front ends.
std::string htmlData(const Report& report, const HtmlOptions& options);

} // namespace oomscope::report
