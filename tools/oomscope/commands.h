// The CLI's commands. main.cpp parses arguments (CLI11) and dispatches; each command lives in
// its own file, reads reports through src/report and writes to stdout. Errors are one line on
// stderr through log(); exit status 2 for usage and input errors.
#pragma once

#include <string>
#include <vector>

namespace oomscope::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFindings = 1;
inline constexpr int kExitUsage = 2;

struct RunOptions {
    std::string outputDir;
    std::vector<std::string> command;
};
int runCommand(const RunOptions& options);

struct ReportOptions {
    std::string file;
    size_t top = 5;
    size_t events = 10;
    size_t frames = 12;
    bool native = false;
    std::string color = "auto";  // auto, always, never
};
int reportCommand(const ReportOptions& options);

// One-line messages on stderr, "oomscope: error: …".
void logError(const std::string& message);
void logInfo(const std::string& message);

} // namespace oomscope::cli
