// oomscope report FILE: the report as tables on stdout. oomscope report DIR, or several FILEs:
// the job view (every rank side by side, the first failure, the ranks that stand out).
#include "command.h"
#include "report_set.h"

#include "report/analysis/analysis.h"
#include "report/json_reader.h"
#include "report/json_writer.h"
#include "report/render/job_table.h"
#include "report/render/table.h"

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <iostream>
#include <vector>
#include <unistd.h>

namespace oomscope::cli {
namespace {

class ReportCommand final : public Command {
public:
    const char* name() const override { return "report"; }
    CLI::App* setup(CLI::App& app) override
    {
        CLI::App* c = app.add_subcommand(name(), "Render a report as tables; a directory or several reports as the "
                                                 "job view (every rank of a torchrun/Slurm job side by side)");
        c->add_option("files", m_files,
                      "A report written by oomscope (oomscope-*.json); or a directory of them, or several: the job view")
            ->required()
            ->type_name("REPORT|DIR");
        c->add_option("--top", m_render.topSites, "Allocation sites to show")->check(CLI::Range(0, 1000000));
        c->add_option("--events", m_render.events, "Last events to show")->check(CLI::Range(0, 100000000));
        c->add_option("--frames", m_render.stackFrames, "Frames to show per stack")->check(CLI::Range(1, 10000));
        c->add_flag("--native", m_render.nativeFrames, "Show every native frame of stacks that have Python frames");
        c->add_option("--color", m_color, "Colour: auto (on a terminal), always or never")
            ->check(CLI::IsMember({"auto", "always", "never"}));
        c->add_option("--format", m_format,
                      "text (tables), or json: the report with its analysis filled in (leaks, diagnosis), "
                      "valid against the report schema")
            ->check(CLI::IsMember({"text", "json"}));
        addHelpFooter(c, "0, or 2 for a usage error or a report that cannot be read (for a set of reports, the rest "
                         "is shown and each unreadable one named).");
        return c;
    }
    int run() override
    {
        m_render.source = sourceReader();
        m_render.color = m_color == "always" || (m_color == "auto" && isatty(STDOUT_FILENO) && !std::getenv("NO_COLOR"));
        std::string error;
        if (isSingleReport(m_files)) {
            report::Report r;
            if (!report::readReportFile(m_files.front(), &r, &error)) {
                logError(error);
                return kExitUsage;
            }
            if (m_format == "json")
                std::cout << report::reportToJson(report::analyzed(r, m_render.source)) << "\n";
            else
                report::renderReport(r, m_render, std::cout);
        } else if (m_format == "json") {
            logError("report: --format json takes one report (the job view is text, or html)");
            return kExitUsage;
        } else {
            ReportSet set;
            if (!loadReportSet(m_files, &set, &error)) {
                logError("report: " + error);
                return kExitUsage;
            }
            for (const report::SetProblem& p : set.problems)
                logError("report: " + p.path + ": " + p.error + " (left out of the job view)");
            report::renderJobs(report::jobViews(set.members), set.problems, m_render, std::cout);
        }
        std::cout.flush();
        return std::cout ? kExitOk : kExitUsage;
    }

private:
    std::vector<std::string> m_files;
    std::string m_color = "auto";
    std::string m_format = "text";
    report::RenderOptions m_render;
};

} // namespace

std::unique_ptr<Command> makeReportCommand()
{
    return std::make_unique<ReportCommand>();
}

} // namespace oomscope::cli
