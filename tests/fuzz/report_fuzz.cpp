// Fuzz target: a report file as `oomscope report` and `oomscope check` take it. Whatever the
// bytes, reading gives a report or one error line; a report that reads goes through the
// analysis (leaks, diagnosis), every check rule (against itself as the baseline), the diff and
// the renderer. Nothing may crash, hang or fail a sanitizer. Built with libFuzzer by
// `make fuzz`; the corpus (tests/fuzz/corpus and the v1 fixtures) is replayed by `make test`
// through replay_main.cpp.
#include "report/analysis/check.h"
#include "report/analysis/diagnosis.h"
#include "report/json_reader.h"
#include "report/analysis/leaks.h"
#include "report/render/table.h"

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    using namespace oomscope::report;
    Report report;
    std::string error;
    if (!readReport(std::string(reinterpret_cast<const char*>(data), size), &report, &error)) {
        if (error.empty() || error.find('\n') != std::string::npos)
            __builtin_trap();  // the contract: one error line
        return 0;
    }
    const SourceLine noSource = [](const std::string&, uint32_t) { return std::string(); };
    const std::vector<LeakFinding> leaks = findLeaks(report);
    (void)diagnose(report, leaks, noSource);
    CheckOptions options;
    options.failOn = {"leak", "peak", "fragmentation", "growth"};
    options.maxPeak = 1;
    options.maxFragmentationPercent = 0.0;
    options.baseline = &report;
    options.maxGrowth = 0;
    (void)checkReport(report, options, noSource);
    (void)diffReports(report, report);
    std::ostringstream out;
    RenderOptions render;
    render.color = false;
    renderReport(report, render, out);
    return 0;
}
