// Fuzz target: `oomscope check`'s option strings. The input is split at newlines into --fail-on,
// --max-peak, --max-fragmentation, --max-growth and whether --baseline was given (a fifth
// line "1"). Whatever the strings: either options that hold together, or one error line.
#include "report/analysis/check.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    using namespace oomscope::report;
    const std::string text(reinterpret_cast<const char*>(data), size);
    std::vector<std::string> lines;
    size_t start = 0;
    while (lines.size() < 5) {
        const size_t end = text.find('\n', start);
        lines.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
        if (end == std::string::npos)
            break;
        start = end + 1;
    }
    lines.resize(5);
    CheckArguments args;
    args.failOn = lines[0];
    // An empty line: the option not given.
    const auto given = [](const std::string& s) { return s.empty() ? std::nullopt : std::optional<std::string>(s); };
    args.maxPeak = given(lines[1]);
    args.maxFragmentation = given(lines[2]);
    args.maxGrowth = given(lines[3]);
    args.haveBaseline = lines[4] == "1";
    CheckOptions options;
    std::string error;
    if (!parseCheckArguments(args, &options, &error)) {
        if (error.empty() || error.find('\n') != std::string::npos)
            __builtin_trap();  // the contract: one error line
        return 0;
    }
    for (const std::string& rule : options.failOn) {
        if (rule != "leak" && rule != "peak" && rule != "fragmentation" && rule != "growth" && rule != "job")
            __builtin_trap();
    }
    if ((options.failOn.count("peak") && !options.maxPeak) || (options.failOn.count("growth") && !options.maxGrowth) ||
        (options.failOn.count("fragmentation") && !options.maxFragmentationPercent))
        __builtin_trap();  // a rule without its limit
    if (options.maxFragmentationPercent && !(*options.maxFragmentationPercent >= 0 && *options.maxFragmentationPercent <= 100))
        __builtin_trap();
    return 0;
}
