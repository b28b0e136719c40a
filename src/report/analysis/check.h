// `oomscope check` and `oomscope diff` as pure functions over reports: rules evaluated to
// pass/fail verdicts with their evidence, and per-device and per-site deltas between two
// reports. Rendering (text, JUnit XML) is in render/check.h; file I/O in the CLI.
#pragma once

#include "report/analysis/leaks.h"
#include "report/model.h"

#include <optional>
#include <set>
#include <string>
#include <vector>

namespace oomscope::report {

struct CheckOptions {
    // leak, peak, fragmentation, growth; job: the rules of a job's set of reports (checkJob)
    std::set<std::string> failOn = {"leak", "job"};
    std::optional<uint64_t> maxPeak;
    std::optional<double> maxFragmentationPercent;
    const Report* baseline = nullptr;
    std::optional<uint64_t> maxGrowth;
    LeakOptions leaks;
};

// The check command's option strings as given (--fail-on, --max-peak, --max-fragmentation,
// --max-growth, whether --baseline was given), turned into CheckOptions (baseline not set).
// false with *error (one line, naming the option) on anything it cannot take.
struct CheckArguments {
    std::string failOn;            // comma-separated; empty: leak, plus the rules whose limits are given
    // As given (unset: not given; an empty string given is refused).
    std::optional<std::string> maxPeak;           // a size (common/size.h): "24GiB", "512MiB", "1.5g", "4096"
    std::optional<std::string> maxFragmentation;  // "30", "30%"
    std::optional<std::string> maxGrowth;
    bool haveBaseline = false;
};
bool parseCheckArguments(const CheckArguments& args, CheckOptions* out, std::string* error);

struct CheckResult {
    std::string rule;
    bool passed = true;
    std::string summary;               // one line
    std::vector<std::string> details;  // evidence and remedy, one per line
    // What was measured against what limit (peak and growth, in bytes), for scripts.
    std::optional<int64_t> measuredBytes;
    std::optional<uint64_t> limitBytes;
};

// The rules of options.failOn, in the order leak, peak, fragmentation, growth.
std::vector<CheckResult> checkReport(const Report& report, const CheckOptions& options, const SourceLine& source);

// The most memory held at any sample of the report (tracked peak, reserved, step samples),
// on its busiest device.
struct Peak {
    int64_t device = 0;
    uint64_t bytes = 0;
};
Peak peakOf(const Report& report);

// The largest share of reserved memory in split, unused blocks, over the trigger and the steps
// (percent; 0 without a framework's counters).
double fragmentationPercent(const Report& report, int64_t* device = nullptr, uint64_t* bytes = nullptr);

// ---- diff

struct DeviceDelta {
    int64_t device = 0;
    uint64_t trackedA = 0, trackedB = 0;
    uint64_t peakA = 0, peakB = 0;
    std::optional<uint64_t> allocatedA, allocatedB;
    std::optional<uint64_t> reservedA, reservedB;
};

struct SiteDelta {
    std::string label;  // the site's program line or first frame
    int64_t device = 0;
    uint64_t bytesA = 0, bytesB = 0;
    int64_t delta() const { return int64_t(bytesB) - int64_t(bytesA); }
};

struct ReportDiff {
    std::vector<DeviceDelta> devices;
    std::vector<SiteDelta> sites;  // by growth, largest first; unchanged sites left out
};

// Sites are matched by their frames as text (Python file:line function, native symbol and
// library), so that two runs of one program line up although their stack ids differ; A's Python
// paths are first put in B's terms (two checkouts or virtualenvs of one program: the folders in
// front of the files' longest common path suffixes); and by device, unless byDevice is false
// (two ranks of a job, each on its own device: a site's device is then -1). Sites that render
// as the same line are one row.
ReportDiff diffReports(const Report& a, const Report& b, bool byDevice = true);

} // namespace oomscope::report
