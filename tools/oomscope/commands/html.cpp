// oomscope html REPORT [-o FILE.html]: the report as one self-contained page (charts, flame
// graph, segment map, the tables). oomscope html DIR (or several reports): the job's page
// (every rank's memory over the job's time, the job view's tables). Written atomically;
// prints the path.
#include "command.h"
#include "report_set.h"

#include "report/json_reader.h"
#include "report/render/html.h"
#include "report/render/job_html.h"

#include <CLI/CLI.hpp>

#include <iostream>
#include <vector>

namespace oomscope::cli {
namespace {

class HtmlCommand final : public Command {
public:
    const char* name() const override { return "html"; }
    CLI::App* setup(CLI::App& app) override
    {
        CLI::App* c = app.add_subcommand(name(), "Write a report as one self-contained HTML page: memory over time, a "
                                                 "flame graph of live memory, the segment map, the tables");
        c->add_option("reports", m_reports, "A report written by oomscope; or a directory of them, or several: the "
                                            "job's page")
            ->required()
            ->type_name("REPORT|DIR");
        c->add_option("-o,--output", m_output,
                      "The page to write (default: the report's name with .html; for a directory, "
                      "DIR/oomscope-job.html)")
            ->type_name("FILE");
        c->add_option("--top", m_top, "Allocation sites listed")->check(CLI::Range(1, 100000));
        addHelpFooter(c, "0 (the page's path on stdout), or 2 for a usage error, a report that cannot be read or a "
                         "page that cannot be written.");
        return c;
    }
    int run() override
    {
        if (!isSingleReport(m_reports))
            return runJob();
        const std::string& m_report = m_reports.front();
        report::Report r;
        std::string error;
        if (!report::readReportFile(m_report, &r, &error)) {
            logError("html: " + error);
            return kExitUsage;
        }
        std::string path = m_output;
        if (path.empty()) {
            path = m_report;
            if (path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0)
                path.resize(path.size() - 5);
            path += ".html";
        }
        report::HtmlOptions options;
        const size_t slash = m_report.rfind('/');
        options.fileName = slash == std::string::npos ? m_report : m_report.substr(slash + 1);
        options.source = sourceReader();
        options.topSites = m_top;
        if (!writeTextFileAtomically(path, report::renderHtml(r, options), &error)) {
            logError("html: " + error);
            return kExitUsage;
        }
        std::cout << path << "\n";
        return kExitOk;
    }

private:
    int runJob()
    {
        ReportSet set;
        std::string error;
        if (!loadReportSet(m_reports, &set, &error)) {
            logError("html: " + error);
            return kExitUsage;
        }
        for (const report::SetProblem& p : set.problems)
            logError("html: " + p.path + ": " + p.error + " (left out of the job's page)");
        std::string path = m_output;
        if (path.empty())
            path = (set.fromDirectory && m_reports.size() == 1 ? m_reports.front() : std::string(".")) + "/oomscope-job.html";
        const std::vector<report::JobView> jobs = report::jobViews(set.members);
        const std::string title = jobs.size() == 1 && !jobs.front().jobId.empty() ? "oomscope job " + jobs.front().jobId
                                                                                  : "oomscope job view";
        if (!writeTextFileAtomically(path, report::renderJobHtml(jobs, set.problems, title), &error)) {
            logError("html: " + error);
            return kExitUsage;
        }
        std::cout << path << "\n";
        return kExitOk;
    }

    std::vector<std::string> m_reports;
    std::string m_output;
    size_t m_top = 25;
};

} // namespace

std::unique_ptr<Command> makeHtmlCommand()
{
    return std::make_unique<HtmlCommand>();
}

} // namespace oomscope::cli
