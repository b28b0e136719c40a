// oomscope check REPORT...: the CI gate. Exit 0 clean, 1 with findings, 2 for usage or input
// errors; the verdict on stdout, JUnit XML on request.
#include "commands.h"

#include "report/check.h"
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

// "2GiB", "2G", "2GB" (binary units throughout), "512MiB", "1.5g", "4096".
bool parseSize(const std::string& text, uint64_t* out)
{
    char* end = nullptr;
    errno = 0;
    const double value = std::strtod(text.c_str(), &end);
    if (end == text.c_str() || errno != 0 || !(value >= 0) || !std::isfinite(value))
        return false;
    std::string unit(end);
    for (char& c : unit)
        c = char(std::tolower(static_cast<unsigned char>(c)));
    static const std::map<std::string, double> kUnits = {
        {"", 1.0},         {"b", 1.0},
        {"k", 1024.0},     {"kb", 1024.0},     {"kib", 1024.0},
        {"m", 1048576.0},  {"mb", 1048576.0},  {"mib", 1048576.0},
        {"g", 1073741824.0}, {"gb", 1073741824.0}, {"gib", 1073741824.0},
        {"t", 1099511627776.0}, {"tb", 1099511627776.0}, {"tib", 1099511627776.0}};
    const auto it = kUnits.find(unit);
    if (it == kUnits.end())
        return false;
    const double bytes = value * it->second;
    if (bytes > 1.8e19)
        return false;
    *out = uint64_t(bytes);
    return true;
}

bool parsePercent(std::string text, double* out)
{
    if (!text.empty() && text.back() == '%')
        text.pop_back();
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (end == text.c_str() || *end != '\0' || !(value >= 0) || value > 100)
        return false;
    *out = value;
    return true;
}

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
    if (!o.maxPeak.empty()) {
        uint64_t v = 0;
        if (!parseSize(o.maxPeak, &v)) {
            logError("check: --max-peak wants a size such as 24GiB or 512MiB, got \"" + o.maxPeak + "\"");
            return kExitUsage;
        }
        options.maxPeak = v;
    }
    if (!o.maxFragmentation.empty()) {
        double v = 0;
        if (!parsePercent(o.maxFragmentation, &v)) {
            logError("check: --max-fragmentation wants a percentage from 0 to 100, got \"" + o.maxFragmentation + "\"");
            return kExitUsage;
        }
        options.maxFragmentationPercent = v;
    }
    if (!o.maxGrowth.empty()) {
        uint64_t v = 0;
        if (!parseSize(o.maxGrowth, &v)) {
            logError("check: --max-growth wants a size such as 1GiB, got \"" + o.maxGrowth + "\"");
            return kExitUsage;
        }
        options.maxGrowth = v;
    }
    if (o.baseline.empty() != o.maxGrowth.empty()) {
        logError("check: --baseline and --max-growth go together");
        return kExitUsage;
    }
    // The rules: as asked, or leak plus those whose limits were given.
    options.failOn.clear();
    if (o.failOn.empty()) {
        options.failOn.insert("leak");
        if (options.maxPeak)
            options.failOn.insert("peak");
        if (options.maxFragmentationPercent)
            options.failOn.insert("fragmentation");
        if (options.maxGrowth)
            options.failOn.insert("growth");
    } else {
        std::stringstream list(o.failOn);
        std::string rule;
        while (std::getline(list, rule, ',')) {
            if (rule.empty())
                continue;
            if (rule != "leak" && rule != "peak" && rule != "fragmentation" && rule != "growth") {
                logError("check: unknown rule \"" + rule + "\" in --fail-on (leak, peak, fragmentation, growth)");
                return kExitUsage;
            }
            options.failOn.insert(rule);
        }
        if (options.failOn.count("peak") && !options.maxPeak) {
            logError("check: --fail-on peak needs --max-peak SIZE");
            return kExitUsage;
        }
        if (options.failOn.count("growth") && !options.maxGrowth) {
            logError("check: --fail-on growth needs --baseline REPORT --max-growth SIZE");
            return kExitUsage;
        }
        if (options.failOn.count("fragmentation") && !options.maxFragmentationPercent)
            options.maxFragmentationPercent = 30.0;
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
