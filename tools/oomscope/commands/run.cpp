// oomscope run [--output-dir D] [--via=preload|inject] -- CMD...: runs CMD with liboomscope.so
// preloaded, or injected through CUDA_INJECTION64_PATH (found in this install tree:
// <prefix>/bin/oomscope → <prefix>/lib/liboomscope.so), waits, lists the reports that appeared
// and exits as CMD did (the same status, or the same signal).
#include "command.h"
#include "commands/check.h"
#include "report/analysis/check.h"
#include "track/device_cards.h"

#include <CLI/CLI.hpp>

#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <set>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace oomscope::cli {
namespace {

std::string dirName(const std::string& path)
{
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string selfDir()
{
    char buf[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n <= 0)
        return ".";
    return dirName(std::string(buf, size_t(n)));
}

bool isFile(const std::string& path)
{
    struct stat st {};
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool isDir(const std::string& path)
{
    struct stat st {};
    return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string absolute(const std::string& path)
{
    if (!path.empty() && path[0] == '/')
        return path;
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof(cwd)))
        return path;
    return path.empty() || path == "." ? std::string(cwd) : std::string(cwd) + "/" + path;
}

bool makeDirs(const std::string& path)
{
    if (isDir(path))
        return true;
    const std::string parent = dirName(path);
    if (parent != path && !parent.empty() && parent != "/" && !makeDirs(parent))
        return false;
    return mkdir(path.c_str(), 0755) == 0 || errno == EEXIST;
}

std::set<std::string> reportsIn(const std::string& dir)
{
    std::set<std::string> names;
    if (DIR* d = opendir(dir.c_str())) {
        while (dirent* e = readdir(d)) {
            const std::string name = e->d_name;
            if (name.rfind("oomscope-", 0) == 0 && name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0)
                names.insert(name);
        }
        closedir(d);
    }
    return names;
}

void prependEnv(const char* name, const std::string& value, char separator)
{
    const char* old = std::getenv(name);
    std::string v = value;
    if (old && *old)
        v += separator + std::string(old);
    setenv(name, v.c_str(), 1);
}

// A sanitizer's runtime (ASan, TSan, MSan, HWASan, UBSan, LSan; gcc's lib*san or clang's
// libclang_rt.*) that the user preloads must stay first in LD_PRELOAD: ASan refuses to run
// otherwise, and TSan has to see the program's first calls. Ours goes right after them.
bool isSanitizerRuntime(const std::string& path)
{
    const size_t slash = path.rfind('/');
    const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
    if (base.rfind("libclang_rt.", 0) == 0)
        return true;
    for (const char* name : {"libasan.", "libtsan.", "libmsan.", "libhwasan.", "libubsan.", "liblsan."})
        if (base.rfind(name, 0) == 0)
            return true;
    return false;
}

void addPreload(const std::string& lib)
{
    const char* old = std::getenv("LD_PRELOAD");
    std::string first, rest = old ? old : "";
    // The loader separates entries by colons or spaces.
    while (!rest.empty()) {
        const size_t end = rest.find_first_of(": ");
        const std::string entry = rest.substr(0, end);
        if (!entry.empty() && !isSanitizerRuntime(entry))
            break;
        if (!entry.empty())
            first += entry + ':';
        rest = end == std::string::npos ? "" : rest.substr(end + 1);
    }
    std::string value = first + lib;
    if (!rest.empty())
        value += ':' + rest;
    setenv("LD_PRELOAD", value.c_str(), 1);
}

// SIGTERM and SIGHUP sent to us go on to the program. A SIGINT from the terminal already
// reaches the whole process group; one sent with kill() to us alone is forwarded. The signals
// are taken synchronously (blocked, then sigwaitinfo with SIGCHLD), not by a handler: nothing
// runs in signal context, and a restarted waitpid can never sit on a signal that a runtime
// (a sanitizer's, which defers handlers to its next safe point) has not handed on yet.
// Returns the child's wait status.
int waitForwarding(pid_t child, const sigset_t& signals)
{
    for (;;) {
        int status = 0;
        const pid_t done = waitpid(child, &status, WNOHANG);
        if (done == child || (done < 0 && errno != EINTR))
            return status;
        siginfo_t info{};
        const int sig = sigwaitinfo(&signals, &info);
        if (sig <= 0 || sig == SIGCHLD)
            continue;
        if (sig != SIGINT || info.si_code == SI_USER)
            kill(child, sig);
    }
}

// The program's environment: the library preloaded (or injected), the output folder, the
// Python adapter's path, and what --check needs. false (one line said) when it cannot be.
bool prepareEnvironment(const std::string& lib, const std::string& outputDir, const std::string& via, bool check)
{
    if (check && !std::getenv("OOMSCOPE_TORCH_HISTORY")) {
        // Leaks are named by the Python line of the tensors that stay alive: PyTorch's history
        // gives each live block its line (one trace entry kept: the blocks carry the stacks).
        setenv("OOMSCOPE_TORCH_HISTORY", "1", 1);
    }
    if (check && !std::getenv("OOMSCOPE_SAMPLE_MS")) {
        // Programs without step events are followed by periodic samples (each takes a copy of
        // the live allocations, inside an allocation: off in plain runs).
        setenv("OOMSCOPE_SAMPLE_MS", "1000", 1);
    }
    if (via == "inject") {
        // The driver opens the library in cuInit and calls InitializeInjection: CUPTI's
        // callbacks are the capture. One injection library per process: never replace another's.
        if (const char* other = std::getenv("CUDA_INJECTION64_PATH"); other && *other) {
            logError(std::string("run: CUDA_INJECTION64_PATH is already set (") + other +
                     "): another tool injects into CUDA; use --via=preload");
            return false;
        }
        setenv("CUDA_INJECTION64_PATH", absolute(lib).c_str(), 1);
    } else {
        addPreload(lib);
    }
    setenv("OOMSCOPE_OUTPUT_DIR", outputDir.c_str(), 1);
    const std::string python = dirName(dirName(lib)) + "/share/oomscope/python";
    if (isDir(python)) {
        prependEnv("PYTHONPATH", python, ':');
        // pytest loads the GPU-budget markers' plugin by itself (oomscope.pytest_plugin).
        prependEnv("PYTEST_PLUGINS", "oomscope.pytest_plugin", ',');
    }
    return true;
}

struct Ran {
    int status = 0;          // the wait status
    int execErrno = 0;       // exec failed with this, else 0
    bool started = false;    // false: fork or pipe failed (said)
};

// Runs the program with SIGCHLD at its default (not ignored: the child must stay to be waited
// for) and every signal waitForwarding takes blocked from before the fork on.
Ran spawn(const std::vector<std::string>& command)
{
    Ran ran;
    signal(SIGCHLD, SIG_DFL);
    sigset_t forwarded, previousMask;
    sigemptyset(&forwarded);
    for (int sig : {SIGTERM, SIGHUP, SIGINT, SIGCHLD})
        sigaddset(&forwarded, sig);
    sigprocmask(SIG_BLOCK, &forwarded, &previousMask);
    std::vector<char*> argv;
    for (const std::string& a : command)
        argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    int errorPipe[2];
    const pid_t child = pipe2(errorPipe, O_CLOEXEC) == 0 ? fork() : -2;
    if (child < 0) {
        logError(std::string(child == -2 ? "run: pipe: " : "run: fork: ") + std::strerror(errno));
        sigprocmask(SIG_SETMASK, &previousMask, nullptr);
        return ran;
    }
    if (child == 0) {
        sigprocmask(SIG_SETMASK, &previousMask, nullptr);  // the program gets the mask we were given
        close(errorPipe[0]);
        execvp(argv[0], argv.data());
        const int err = errno;
        (void)!write(errorPipe[1], &err, sizeof(err));
        _exit(127);
    }
    close(errorPipe[1]);
    if (read(errorPipe[0], &ran.execErrno, sizeof(ran.execErrno)) != sizeof(ran.execErrno))
        ran.execErrno = 0;
    close(errorPipe[0]);
    ran.status = waitForwarding(child, forwarded);
    sigprocmask(SIG_SETMASK, &previousMask, nullptr);
    ran.started = true;
    return ran;
}

std::vector<std::string> announceReports(const std::string& outputDir, const std::set<std::string>& before)
{
    std::vector<std::string> fresh;
    for (const std::string& name : reportsIn(outputDir)) {
        if (!before.count(name))
            fresh.push_back(outputDir + "/" + name);
    }
    if (fresh.empty()) {
        logInfo("no report was written (the program made no CUDA allocation, or OOMSCOPE_DISABLE is set)");
    } else {
        logInfo(std::to_string(fresh.size()) + (fresh.size() == 1 ? " report" : " reports") + " written:");
        for (const std::string& path : fresh)
            logInfo("  " + path);
    }
    return fresh;
}

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
        c->add_option("--output-dir,-o", m_outputDir, "Folder for the reports (default: the working directory)");
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
                      "(OOMSCOPE_DEVICE_LIMIT)");
        c->add_option("--via", m_via,
                      "How the library enters the program: preload (LD_PRELOAD, the default) or inject "
                      "(CUDA_INJECTION64_PATH: CUPTI callbacks alone, for static runtimes and where LD_PRELOAD "
                      "is unwelcome)")
            ->check(CLI::IsMember({"preload", "inject"}));
        // Everything from the first argument that is not one of run's options on is the command,
        // passed through untouched (its own options included); a leading "--" is optional.
        c->prefix_command();
        m_app = c;
        return c;
    }
    // "oomscope run [options] -- CMD ...": everything after the first "--" is the command,
    // untouched; the option parser sees only what comes before it.
    int argumentsToParse(int argc, char** argv) override
    {
        for (int i = 2; i < argc; ++i) {
            if (std::strcmp(argv[i], "--") == 0) {
                m_afterDashes.assign(argv + i + 1, argv + argc);
                m_sawDashes = true;
                return i;
            }
        }
        return argc;
    }
    int run() override;

private:
    bool takeCommand();

    CLI::App* m_app = nullptr;
    std::string m_outputDir;
    std::string m_check;  // --check[=RULES]: empty when not asked
    std::string m_via = "preload";
    std::string m_deviceLimit;
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
    const char* override = std::getenv("OOMSCOPE_LIB");
    const std::string lib = override && *override ? override : dirName(selfDir()) + "/lib/liboomscope.so";
    if (!isFile(lib)) {
        logError("run: cannot find the preload library " + lib + " (set OOMSCOPE_LIB)");
        return kExitUsage;
    }
    const std::string outputDir = absolute(m_outputDir.empty() ? "." : m_outputDir);
    if (!makeDirs(outputDir)) {
        logError("run: cannot create the output folder " + outputDir + ": " + std::strerror(errno));
        return kExitUsage;
    }
    if (!m_deviceLimit.empty()) {
        uint64_t limits[64];
        auto size = [](const char* text, uint64_t* out) { return oomscope::report::parseSizeArgument(text, out); };
        if (!oomscope::track::parseDeviceLimitList(m_deviceLimit.c_str(), limits, 64, size)) {
            logError("run: --device-limit " + m_deviceLimit + ": not a size (24GiB), a list of sizes (24GiB,40GiB) "
                     "or a card (t4, l4, a10g, rtx4090, a100-40gb, a100-80gb, h100-80gb, h200)");
            return kExitUsage;
        }
        setenv("OOMSCOPE_DEVICE_LIMIT", m_deviceLimit.c_str(), 1);
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
