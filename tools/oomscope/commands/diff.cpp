// oomscope diff A B: what changed between two reports, per device and per site.
#include "command.h"

#include "report/analysis/check.h"
#include "report/json_reader.h"
#include "report/render/check.h"

#include <CLI/CLI.hpp>

#include <iostream>

namespace oomscope::cli {
namespace {

class DiffCommand final : public Command {
public:
    const char* name() const override { return "diff"; }
    CLI::App* setup(CLI::App& app) override
    {
        CLI::App* c = app.add_subcommand(name(), "Compare two reports: per-device and per-site deltas");
        c->add_option("a", m_a, "The earlier report")->required();
        c->add_option("b", m_b, "The later report")->required();
        c->add_option("--top", m_top, "Sites to show")->check(CLI::Range(1, 1000000));
        return c;
    }
    int run() override
    {
        report::Report a, b;
        std::string error;
        if (!report::readReportFile(m_a, &a, &error) || !report::readReportFile(m_b, &b, &error)) {
            logError("diff: " + error);
            return kExitUsage;
        }
        report::renderDiff(m_a, m_b, report::diffReports(a, b), m_top, std::cout);
        std::cout.flush();
        return std::cout ? kExitOk : kExitUsage;
    }

private:
    std::string m_a, m_b;
    size_t m_top = 20;
};

} // namespace

std::unique_ptr<Command> makeDiffCommand()
{
    return std::make_unique<DiffCommand>();
}

} // namespace oomscope::cli
