// Launching a program under oomscope, shared by `run` and `fit`: the preload library of this
// install tree, the program's environment (preload or injection, output folder, the Python
// adapter), starting it with signals forwarded, and the reports it left.
#include "launch.h"

#include "command.h"
#include "common/dump_signal.h"
#include "common/paths.h"

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

// SIGTERM and SIGHUP sent to us go on to the programs. A SIGINT from the terminal already
// reaches the whole process group; one sent with kill() to us alone is forwarded. The signals
// are taken synchronously (blocked, then sigwaitinfo with SIGCHLD), not by a handler: nothing
// runs in signal context, and a restarted waitpid can never sit on a signal that a runtime
// (a sanitizer's, which defers handlers to its next safe point) has not handed on yet.
// Fills each child's wait status.
void waitForwarding(const std::vector<pid_t>& children, std::vector<Ran>* ran, const sigset_t& signals)
{
    std::vector<bool> done(children.size(), false);
    for (;;) {
        size_t left = 0;
        for (size_t i = 0; i < children.size(); ++i) {
            if (done[i] || children[i] <= 0)
                continue;
            int status = 0;
            const pid_t r = waitpid(children[i], &status, WNOHANG);
            if (r == children[i] || (r < 0 && errno != EINTR)) {
                done[i] = true;
                (*ran)[i].status = status;
            } else {
                ++left;
            }
        }
        if (left == 0)
            return;
        siginfo_t info{};
        const int sig = sigwaitinfo(&signals, &info);
        if (sig <= 0 || sig == SIGCHLD)
            continue;
        if (sig != SIGINT || info.si_code == SI_USER)
            for (size_t i = 0; i < children.size(); ++i)
                if (!done[i] && children[i] > 0)
                    kill(children[i], sig);
    }
}

} // namespace

std::string selfDir()
{
    char buf[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n <= 0)
        return ".";
    return dirName(std::string(buf, size_t(n)));
}

bool makeDirs(const std::string& path)
{
    return common::makeFolders(path);  // 0700 unless OOMSCOPE_REPORT_MODE shares the reports
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

std::string preloadLibrary()
{
    const char* override = std::getenv("OOMSCOPE_LIB");
    return override && *override ? override : dirName(selfDir()) + "/" + common::kPreloadFromPrefix;
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
    const std::string python = dirName(lib) + common::kPrefixFromPreloadDir + "/" + common::kPythonFromPrefix;
    if (isDir(python)) {
        prependEnv("PYTHONPATH", python, ':');
        // pytest loads the GPU-budget markers' plugin by itself (oomscope.pytest_plugin).
        prependEnv("PYTEST_PLUGINS", "oomscope.pytest_plugin", ',');
    }
    return true;
}

// Runs the program with SIGCHLD at its default (not ignored: the child must stay to be waited
// for) and every signal waitForwarding takes blocked from before the fork on.
Ran spawn(const std::vector<std::string>& command, const std::string& logPath)
{
    return spawnAll({Launch{command, logPath, {}}}).front();
}

std::vector<Ran> spawnAll(const std::vector<Launch>& launches)
{
    std::vector<Ran> ran(launches.size());
    signal(SIGCHLD, SIG_DFL);
    sigset_t forwarded, previousMask;
    sigemptyset(&forwarded);
    for (int sig : {SIGTERM, SIGHUP, SIGINT, SIGCHLD})
        sigaddset(&forwarded, sig);
    // `kill -USR2` to oomscope run asks the program for a report, as sent to the program itself.
    if (const int dump = common::parseDumpSignal(std::getenv("OOMSCOPE_DUMP_SIGNAL")))
        sigaddset(&forwarded, dump);
    sigprocmask(SIG_BLOCK, &forwarded, &previousMask);
    std::vector<pid_t> children(launches.size(), -1);
    for (size_t i = 0; i < launches.size(); ++i) {
        const Launch& l = launches[i];
        std::vector<char*> argv;
        for (const std::string& a : l.command)
            argv.push_back(const_cast<char*>(a.c_str()));
        argv.push_back(nullptr);
        int errorPipe[2];
        const pid_t child = pipe2(errorPipe, O_CLOEXEC) == 0 ? fork() : -2;
        if (child < 0) {
            logError(std::string(child == -2 ? "run: pipe: " : "run: fork: ") + std::strerror(errno));
            continue;
        }
        if (child == 0) {
            sigprocmask(SIG_SETMASK, &previousMask, nullptr);  // the program gets the mask we were given
            close(errorPipe[0]);
            for (const auto& [name, value] : l.env)
                setenv(name.c_str(), value.c_str(), 1);
            if (!l.logPath.empty()) {  // the program's output to a file (fit's runs), not the terminal
                const int log = open(l.logPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
                if (log >= 0) {
                    dup2(log, 1);
                    dup2(log, 2);
                }
            }
            execvp(argv[0], argv.data());
            const int err = errno;
            (void)!write(errorPipe[1], &err, sizeof(err));
            _exit(127);
        }
        close(errorPipe[1]);
        if (read(errorPipe[0], &ran[i].execErrno, sizeof(ran[i].execErrno)) != sizeof(ran[i].execErrno))
            ran[i].execErrno = 0;
        close(errorPipe[0]);
        children[i] = child;
        ran[i].started = true;
    }
    waitForwarding(children, &ran, forwarded);
    sigprocmask(SIG_SETMASK, &previousMask, nullptr);
    return ran;
}

int splitAtDashes(int argc, char** argv, std::vector<std::string>* after, bool* saw)
{
    for (int i = 2; i < argc; ++i) {
        if (std::strcmp(argv[i], "--") == 0) {
            after->assign(argv + i + 1, argv + argc);
            if (saw)
                *saw = true;
            return i;
        }
    }
    return argc;
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

} // namespace oomscope::cli
