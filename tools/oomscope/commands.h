// The CLI's commands. main.cpp parses arguments (CLI11) and dispatches; each command lives in
// its own file, reads reports through src/report and writes to stdout. Errors are one line on
// stderr through log(); exit status 2 for usage and input errors.
#pragma once

#include "report/analysis/leaks.h"

#include <string>
#include <vector>

namespace oomscope::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFindings = 1;
inline constexpr int kExitUsage = 2;

struct CheckOptions {
    std::vector<std::string> reports;
    std::string failOn;  // comma-separated; empty: leak, plus the rules whose limits are given
    std::string maxPeak;
    std::string maxFragmentation;
    std::string baseline;
    std::string maxGrowth;
    std::string junit;
};
int checkCommand(const CheckOptions& options);

struct RunOptions {
    std::string outputDir;
    std::vector<std::string> command;
    std::string check;  // --check[=RULES]: empty when not asked
    std::string via = "preload";  // preload (LD_PRELOAD) | inject (CUDA_INJECTION64_PATH, CUPTI alone)
    CheckOptions checkOptions;
};
int runCommand(const RunOptions& options);

struct DiffOptions {
    std::string a, b;
    size_t top = 20;
};
int diffCommand(const DiffOptions& options);

struct ReportOptions {
    std::string file;
    size_t top = 5;
    size_t events = 10;
    size_t frames = 12;
    bool native = false;
    std::string color = "auto";  // auto, always, never
};
int reportCommand(const ReportOptions& options);

struct RecoverOptions {
    std::string file;
    std::string outputDir;  // default: the flight file's folder (the file itself is left as it is)
};
int recoverCommand(const RecoverOptions& options);

// The text of file:line where the file is readable here (cached per file), for leak verdicts.
report::SourceLine sourceReader();

// One-line messages on stderr, "oomscope: error: …".
void logError(const std::string& message);
void logInfo(const std::string& message);

} // namespace oomscope::cli
