// oomscope run [--output-dir D] [--via=preload|inject] -- CMD...: runs CMD with liboomscope.so
// preloaded, or injected through CUDA_INJECTION64_PATH (found in this install tree:
// <prefix>/bin/oomscope → <prefix>/lib/oomscope/liboomscope.so), waits, lists the reports that appeared
// and exits as CMD did (the same status, or the same signal).
#include "command.h"
#include "launch.h"
#include "commands/check.h"
#include "report/analysis/check.h"
#include "common/device_cards.h"

#include <CLI/CLI.hpp>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace oomscope::cli {
namespace {

// Dies of the program's signal, without leaving a core of our own.
int dieLike(int sig)
{
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigaction(sig, &dfl, nullptr);
    signal(SIGABRT, SIG_DFL);
    kill(getpid(), sig);
    return 128 + sig;
}

class RunCommand final : public Command {
public:
    const char* name() const override { return "run"; }
    CLI::App* setup(CLI::App& app) override
    {
        CLI::App* c = app.add_subcommand(name(), "Run a program with oomscope preloaded: oomscope run [-o DIR] -- CMD ...");
        c->add_option("--output-dir,-o", m_outputDir, "Folder for the reports (default: the working directory)")
            ->type_name("DIR");
        c->add_flag("--check{leak}", m_check,
                    "After the run, check its reports (oomscope check); --check=RULES picks the rules. The "
                    "program's failure wins, else the check's status");
        addCheckLimits(*c, m_checkOptions);
        c->add_option("--error-exitcode", m_errorExitcode,
                      "With --check: exit with N when the check finds something, whatever the program's own "
                      "status (as compute-sanitizer and valgrind do): findings told apart from the program's failure")
            ->check(CLI::Range(1, 255));
        c->add_option("--device-limit", m_deviceLimit,
                      "Rehearse on a smaller GPU: SIZE (every device), SIZE,SIZE,... (per device) or a card "
                      "(t4, l4, a10g, rtx4090, a100-40gb, a100-80gb, h100-80gb, h200). Allocations past it fail "
                      "with the API's own out-of-memory error; the memory query answers as that card "
                      "(OOMSCOPE_DEVICE_LIMIT)")
            ->type_name("SIZE|CARD");
        c->add_option("--via", m_via,
                      "How the library enters the program: preload (LD_PRELOAD, the default) or inject "
                      "(CUDA_INJECTION64_PATH: CUPTI callbacks alone, for static runtimes and where LD_PRELOAD "
                      "is unwelcome)")
            ->check(CLI::IsMember({"preload", "inject"}));
        // Everything from the first argument that is not one of run's options on is the command,
        // passed through untouched (its own options included); a leading "--" is optional.
        c->prefix_command();
        addHelpFooter(c, "the program's own (or 128+N when a signal N ended it: oomscope dies of the same signal); "
                         "with --check, 1 when the check finds something and the program succeeded (N with "
                         "--error-exitcode N); 2 for a usage error; 127 when the program cannot be run.");
        m_app = c;
        return c;
    }
    // "oomscope run [options] -- CMD ...": everything after the first "--" is the command,
    // untouched; the option parser sees only what comes before it.
    int argumentsToParse(int argc, char** argv) override
    {
        return splitAtDashes(argc, argv, &m_afterDashes, &m_sawDashes);
    }
    int run() override;

private:
    bool takeCommand();

    CLI::App* m_app = nullptr;
    std::string m_outputDir;
    std::string m_check;  // --check[=RULES]: empty when not asked
    std::string m_via = "preload";
    std::optional<std::string> m_deviceLimit;  // as given: an empty value is refused
    int m_errorExitcode = 0;  // 0: not asked
    CheckOptions m_checkOptions;
    std::vector<std::string> m_command;
    std::vector<std::string> m_afterDashes;
    bool m_sawDashes = false;
};

// The program's command line: what the parser left, then what followed "--".
bool RunCommand::takeCommand()
{
    m_command = m_app->remaining();
    if (!m_command.empty() && m_command.front().size() > 1 && m_command.front()[0] == '-') {
        logError("run: unknown option " + m_command.front() + " (see oomscope --help)");
        return false;
    }
    if (m_sawDashes) {
        if (!m_command.empty())
            m_command.push_back("--");  // a "--" after the command started belongs to the command
        m_command.insert(m_command.end(), m_afterDashes.begin(), m_afterDashes.end());
    }
    if (m_command.empty()) {
        logError("run: no command given (oomscope run -- CMD ...)");
        return false;
    }
    return true;
}

int RunCommand::run()
{
    if (!takeCommand())
        return kExitUsage;
    if (m_errorExitcode && m_check.empty()) {
        logError("run: --error-exitcode goes with --check");
        return kExitUsage;
    }
    const std::string lib = preloadLibrary();
    if (!isFile(lib)) {
        logError("run: cannot find the preload library " + lib + " (set OOMSCOPE_LIB)");
        return kExitUsage;
    }
    const std::string outputDir = absolute(m_outputDir.empty() ? "." : m_outputDir);
    if (!makeDirs(outputDir)) {
        logError("run: cannot create the output folder " + outputDir + ": " + std::strerror(errno));
        return kExitUsage;
    }
    if (const std::string unsafe = common::unsafeFolder(outputDir); !unsafe.empty()) {
        logError("run: " + unsafe);
        return kExitUsage;
    }
    if (m_deviceLimit) {
        uint64_t limits[64];
        if (!common::parseDeviceLimitList(m_deviceLimit->c_str(), limits, 64)) {
            logError("run: --device-limit \"" + *m_deviceLimit + "\": not " + common::kDeviceLimitGrammar);
            return kExitUsage;
        }
        setenv("OOMSCOPE_DEVICE_LIMIT", m_deviceLimit->c_str(), 1);
    }
    const std::set<std::string> before = reportsIn(outputDir);
    if (!prepareEnvironment(lib, outputDir, m_via, !m_check.empty()))
        return kExitUsage;
    const Ran ran = spawn(m_command);
    if (!ran.started)
        return kExitUsage;
    if (ran.execErrno) {
        logError("run: cannot run " + m_command.front() + ": " + std::strerror(ran.execErrno));
        return 127;
    }
    const std::vector<std::string> fresh = announceReports(outputDir, before);
    int checkStatus = kExitOk;
    if (!m_check.empty() && !WIFSIGNALED(ran.status)) {
        CheckOptions check = m_checkOptions;
        // --check alone (its value is "leak"): leak, plus the rules whose limits are given.
        check.failOn = m_check == "leak" ? std::string() : m_check;
        check.reports = fresh;
        if (fresh.empty())
            logInfo("check: no report to check");
        else
            checkStatus = checkReports(check);
    }
    if (WIFSIGNALED(ran.status))
        return dieLike(WTERMSIG(ran.status));
    if (m_errorExitcode && checkStatus == kExitFindings)
        return m_errorExitcode;
    const int programStatus = WIFEXITED(ran.status) ? WEXITSTATUS(ran.status) : 1;
    return programStatus != 0 ? programStatus : checkStatus;
}

} // namespace

std::unique_ptr<Command> makeRunCommand()
{
    return std::make_unique<RunCommand>();
}

} // namespace oomscope::cli
