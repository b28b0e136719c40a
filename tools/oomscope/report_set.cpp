#include "report_set.h"

#include "common/paths.h"
#include "interpret/recover.h"
#include "report/json_reader.h"
#include "report/report_file.h"

#include <algorithm>
#include <cstdlib>
#include <dirent.h>
#include <set>
#include <sys/stat.h>

namespace oomscope::cli {
namespace {

bool endsWith(const std::string& s, const std::string& suffix)
{
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The directory's report and flight files, each list sorted by name.
void listDirectory(const std::string& dir, std::vector<std::string>* reports, std::vector<std::string>* flights)
{
    DIR* d = opendir(dir.c_str());
    if (!d)
        return;
    const std::string prefix = dir.empty() || dir.back() == '/' ? dir : dir + "/";
    while (dirent* e = readdir(d)) {
        const std::string name = e->d_name;
        if (name.rfind("oomscope-", 0) != 0)
            continue;
        if (endsWith(name, ".json"))
            reports->push_back(prefix + name);
        else if (endsWith(name, ".flight"))
            flights->push_back(prefix + name);
    }
    closedir(d);
    std::sort(reports->begin(), reports->end());
    std::sort(flights->begin(), flights->end());
}

void addReport(ReportSet* set, const std::string& path, bool flight)
{
    auto r = std::make_unique<report::Report>();
    std::string error;
    const bool ok = flight ? interpret::recoverReport(path, r.get(), &error) : report::readReportFile(path, r.get(), &error);
    if (!ok) {
        set->problems.push_back({path, error});
        return;
    }
    set->recovered += flight ? 1 : 0;
    set->members.push_back(report::JobMember{path, r.get()});
    set->reports.push_back(std::move(r));
}

} // namespace

bool isSingleReport(const std::vector<std::string>& arguments)
{
    return arguments.size() == 1 && !common::isDir(arguments.front());
}

bool loadReportSet(const std::vector<std::string>& arguments, ReportSet* out, std::string* error)
{
    std::vector<std::string> flights;
    for (const std::string& arg : arguments) {
        if (common::isDir(arg)) {
            out->fromDirectory = true;
            std::vector<std::string> reports;
            listDirectory(arg, &reports, &flights);
            if (reports.empty() && flights.empty()) {
                *error = arg + ": no oomscope reports (oomscope-*.json) or flight files (oomscope-*.flight) in it";
                return false;
            }
            for (const std::string& path : reports)
                addReport(out, path, false);
            continue;
        }
        struct stat st {};
        if (stat(arg.c_str(), &st) != 0) {
            *error = arg + ": no such file or directory";
            return false;
        }
        addReport(out, arg, endsWith(arg, ".flight"));
    }
    // A directory's flight files: only those of processes that left no report (a process that
    // wrote one removes its file when it exits; one still running, or killed, leaves it).
    std::set<std::pair<std::string, int64_t>> reported;
    std::set<std::string> reportedNames;  // "oomscope-HOST-PID.flight" of each process with a report
    for (const report::JobMember& m : out->members) {
        reported.emplace(m.report->process.hostname, m.report->process.pid);
        report::Report named;
        named.process.hostname = m.report->process.hostname;
        named.process.pid = m.report->process.pid;
        named.trigger.kind = report::TriggerKind::Exit;
        const std::string stem = report::reportStem(named);  // oomscope-HOST-PID-exit
        reportedNames.insert(stem.substr(0, stem.size() - 5) + ".flight");
    }
    for (const std::string& path : flights) {
        // A process with a report: its file is not read at all (files of 100 MiB).
        if (reportedNames.count(path.substr(path.rfind('/') + 1)))
            continue;
        const size_t before = out->members.size();
        addReport(out, path, true);
        if (out->members.size() > before) {
            const report::Process& p = out->members.back().report->process;
            if (reported.count({p.hostname, p.pid})) {
                out->members.pop_back();
                out->reports.pop_back();
                --out->recovered;
            }
        }
    }
    if (out->members.empty()) {
        *error = out->problems.empty() ? "no report given"
                                       : out->problems.front().path + ": " + out->problems.front().error +
                                             (out->problems.size() > 1
                                                  ? " (and " + std::to_string(out->problems.size() - 1) + " more unreadable)"
                                                  : "");
        return false;
    }
    return true;
}

} // namespace oomscope::cli
