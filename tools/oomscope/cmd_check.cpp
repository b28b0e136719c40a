// oomscope check REPORT...: the CI gate. Exit 0 clean, 1 with findings, 2 for usage or input
// errors; the verdict on stdout, JUnit XML on request.
#include "commands.h"

#include "report/analysis/check.h"
#include "report/json_reader.h"
#include "report/render/check.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <unistd.h>

namespace oomscope::cli {
namespace {

// A file the user named (--junit): written to a temporary file beside it, then renamed over
// the name, so that a reader never sees half of it; a symlink at the name is replaced, not
// followed.
bool writeTextFile(const std::string& path, const std::string& text, std::string* error)
{
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
    std::string temp = dir + "/.oomscope-junit-XXXXXX";
    const int fd = mkstemp(temp.data());
    if (fd < 0) {
        *error = "cannot write in " + dir + ": " + std::strerror(errno);
        return false;
    }
    size_t done = 0;
    while (done < text.size()) {
        const ssize_t n = write(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            *error = "cannot write " + temp + ": " + std::strerror(errno);
            close(fd);
            unlink(temp.c_str());
            return false;
        }
        done += size_t(n);
    }
    if (close(fd) != 0 || rename(temp.c_str(), path.c_str()) != 0) {
        *error = "cannot write " + path + ": " + std::strerror(errno);
        unlink(temp.c_str());
        return false;
    }
    return true;
}

} // namespace

int checkCommand(const CheckOptions& o)
{
    report::CheckOptions options;
    report::CheckArguments args;
    args.failOn = o.failOn;
    args.maxPeak = o.maxPeak;
    args.maxFragmentation = o.maxFragmentation;
    args.maxGrowth = o.maxGrowth;
    args.haveBaseline = !o.baseline.empty();
    std::string optionError;
    if (!report::parseCheckArguments(args, &options, &optionError)) {
        logError("check: " + optionError);
        return kExitUsage;
    }
    if (o.reports.empty()) {
        logError("check: no report given");
        return kExitUsage;
    }
    report::Report baseline;
    std::string error;
    if (!o.baseline.empty()) {
        if (!report::readReportFile(o.baseline, &baseline, &error)) {
            logError("check: baseline: " + error);
            return kExitUsage;
        }
        options.baseline = &baseline;
    }
    const report::SourceLine source = sourceReader();
    std::vector<report::CheckedReport> checked;
    for (const std::string& path : o.reports) {
        report::Report r;
        if (!report::readReportFile(path, &r, &error)) {
            logError("check: " + error);
            return kExitUsage;
        }
        checked.push_back(report::CheckedReport{path, report::checkReport(r, options, source)});
    }
    report::renderCheck(checked, std::cout);
    std::cout.flush();
    if (!o.junit.empty()) {
        std::string writeError;
        if (!writeTextFile(o.junit, report::junitXml(checked), &writeError)) {
            logError("check: --junit: " + writeError);
            return kExitUsage;
        }
    }
    for (const report::CheckedReport& c : checked) {
        if (!c.passed())
            return kExitFindings;
    }
    return kExitOk;
}

} // namespace oomscope::cli
