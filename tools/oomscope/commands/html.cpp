// oomscope html REPORT [-o FILE.html]: the report as one self-contained page (charts, flame
// graph, segment map, the tables). Written atomically; prints the path.
#include "command.h"

#include "report/json_reader.h"
#include "report/render/html.h"

#include <CLI/CLI.hpp>

#include <iostream>

namespace oomscope::cli {
namespace {

class HtmlCommand final : public Command {
public:
    const char* name() const override { return "html"; }
    CLI::App* setup(CLI::App& app) override
    {
        CLI::App* c = app.add_subcommand(name(), "Write a report as one self-contained HTML page: memory over time, a "
                                                 "flame graph of live memory, the segment map, the tables");
        c->add_option("report", m_report, "A report written by oomscope")->required();
        c->add_option("-o,--output", m_output, "The page to write (default: the report's name with .html)");
        c->add_option("--top", m_top, "Allocation sites listed")->check(CLI::Range(1, 100000));
        return c;
    }
    int run() override
    {
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
    std::string m_report;
    std::string m_output;
    size_t m_top = 25;
};

} // namespace

std::unique_ptr<Command> makeHtmlCommand()
{
    return std::make_unique<HtmlCommand>();
}

} // namespace oomscope::cli
