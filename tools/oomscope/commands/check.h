// `oomscope check`'s options and its gate, shared with `oomscope run --check`.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace oomscope::cli {

struct CheckOptions {
    std::vector<std::string> reports;
    std::string failOn;  // comma-separated; empty: leak, plus the rules whose limits are given
    std::optional<std::string> maxPeak;  // as given: an empty value given is refused
    std::optional<std::string> maxFragmentation;
    std::string baseline;
    std::optional<std::string> maxGrowth;
    std::string junit;
    std::string format = "text";  // text or json (the verdicts on stdout)
};

// The options that `run --check` takes too (limits and the JUnit file).
void addCheckLimits(CLI::App& command, CheckOptions& options);

// The gate: 0 clean, 1 with findings, 2 for usage or input errors; the verdict on stdout.
int checkReports(const CheckOptions& options);

} // namespace oomscope::cli
