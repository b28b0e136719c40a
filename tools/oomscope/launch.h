// Launching a program under oomscope, shared by `run` and `fit` (launch.cpp).
#pragma once

#include "common/paths.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

namespace oomscope::cli {

using common::absolute;
using common::dirName;
using common::isDir;
using common::isFile;
std::string selfDir();
bool makeDirs(const std::string& path);
// The names of the reports (oomscope-*.json) in dir.
std::set<std::string> reportsIn(const std::string& dir);
// liboomscope.so of this install tree (<prefix>/bin/oomscope -> <prefix>/lib/oomscope), or OOMSCOPE_LIB.
std::string preloadLibrary();

// The program's environment: the library preloaded (or injected), the output folder, the
// Python adapter's path, and what --check needs. false (one line said) when it cannot be.
bool prepareEnvironment(const std::string& lib, const std::string& outputDir, const std::string& via, bool check);

struct Ran {
    int status = 0;          // the wait status
    int execErrno = 0;       // exec failed with this, else 0
    bool started = false;    // false: fork or pipe failed (said)
};

// Runs the program, signals forwarded to it, and waits; its output goes to logPath when given.
Ran spawn(const std::vector<std::string>& command, const std::string& logPath = {});

// One of several programs run at once: its command, output file and environment of its own
// (set in the child only, over ours).
struct Launch {
    std::vector<std::string> command;
    std::string logPath;
    std::vector<std::pair<std::string, std::string>> env;
};

// Runs the programs at the same time, signals forwarded to each, and waits for all; one Ran
// per launch, in order.
std::vector<Ran> spawnAll(const std::vector<Launch>& launches);

// "oomscope CMD [options] -- PROGRAM ...": the arguments after the first "--" (from argv[2] on)
// into *after, untouched; returns how many of argv the option parser sees (all without "--").
int splitAtDashes(int argc, char** argv, std::vector<std::string>* after, bool* saw = nullptr);

// The reports in outputDir that are not in before, each said on stderr.
std::vector<std::string> announceReports(const std::string& outputDir, const std::set<std::string>& before);

} // namespace oomscope::cli
