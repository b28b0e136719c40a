// oomscope report FILE: the report as tables on stdout.
#include "command.h"

#include "report/json_reader.h"
#include "report/render/table.h"

#include <CLI/CLI.hpp>

#include <cstdlib>
#include <iostream>
#include <unistd.h>

namespace oomscope::cli {
namespace {

class ReportCommand final : public Command {
public:
    const char* name() const override { return "report"; }
    CLI::App* setup(CLI::App& app) override
    {
        CLI::App* c = app.add_subcommand(name(), "Render a report as tables");
        c->add_option("file", m_file, "A report written by oomscope (oomscope-*.json)")->required();
        c->add_option("--top", m_render.topSites, "Allocation sites to show")->check(CLI::Range(0, 1000000));
        c->add_option("--events", m_render.events, "Last events to show")->check(CLI::Range(0, 100000000));
        c->add_option("--frames", m_render.stackFrames, "Frames to show per stack")->check(CLI::Range(1, 10000));
        c->add_flag("--native", m_render.nativeFrames, "Show every native frame of stacks that have Python frames");
        c->add_option("--color", m_color, "Colour: auto (on a terminal), always or never")
            ->check(CLI::IsMember({"auto", "always", "never"}));
        return c;
    }
    int run() override
    {
        report::Report r;
        std::string error;
        if (!report::readReportFile(m_file, &r, &error)) {
            logError(error);
            return kExitUsage;
        }
        m_render.source = sourceReader();
        m_render.color = m_color == "always" || (m_color == "auto" && isatty(STDOUT_FILENO) && !std::getenv("NO_COLOR"));
        report::renderReport(r, m_render, std::cout);
        std::cout.flush();
        return std::cout ? kExitOk : kExitUsage;
    }

private:
    std::string m_file;
    std::string m_color = "auto";
    report::RenderOptions m_render;
};

} // namespace

std::unique_ptr<Command> makeReportCommand()
{
    return std::make_unique<ReportCommand>();
}

} // namespace oomscope::cli
