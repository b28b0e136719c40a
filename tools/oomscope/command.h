// A CLI command (memray's commands/): each one in its own file under commands/ owns its
// options, its help and its run; main.cpp only lists them and dispatches. Commands read
// reports through src/report and src/interpret and write to stdout; errors are one line on
// stderr through logError(); exit status 2 for usage and input errors.
#pragma once

#include "report/analysis/leaks.h"

#include <memory>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace oomscope::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFindings = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitUnexplained = 3;  // fit: the runs do not explain themselves, no answer

class Command {
public:
    virtual ~Command() = default;
    virtual const char* name() const = 0;
    // Adds the subcommand, its options and its help to app.
    virtual CLI::App* setup(CLI::App& app) = 0;
    // How many of argv the option parser sees (run keeps what follows "--" for the program).
    virtual int argumentsToParse(int argc, char** argv) { return (void)argv, argc; }
    // After parsing: the exit status.
    virtual int run() = 0;
};

std::unique_ptr<Command> makeRunCommand();
std::unique_ptr<Command> makeReportCommand();
std::unique_ptr<Command> makeCheckCommand();
std::unique_ptr<Command> makeDiffCommand();
std::unique_ptr<Command> makeRecoverCommand();
std::unique_ptr<Command> makeExportCommand();
std::unique_ptr<Command> makeHtmlCommand();
std::unique_ptr<Command> makeFitCommand();
std::unique_ptr<Command> makeSnapshotCommand();
std::unique_ptr<Command> makeTopCommand();
std::unique_ptr<Command> makeMetricsCommand();

// The end of a command's --help, the same shape for every command: its exit status, and the
// page of its reference (docs/commands/NAME.md, which holds this help verbatim: a test compares
// them; installed as <prefix>/share/doc/oomscope/commands/NAME.md).
void addHelpFooter(CLI::App* command, const std::string& exitStatus);

// The text of file:line where the file is readable here (cached per file), for leak verdicts.
report::SourceLine sourceReader();

// A file the user named (--junit, -o): written to a temporary file beside it, then renamed over
// the name, so that a reader never sees half of it and a symlink at the name is replaced, not
// followed. false with *error (one line).
bool writeTextFileAtomically(const std::string& path, const std::string& text, std::string* error);

// One-line messages on stderr, "oomscope: error: …".
void logError(const std::string& message);
void logInfo(const std::string& message);

} // namespace oomscope::cli
