// oomscope diff A B: what changed between two reports, per device and per site. Two
// directories (two runs of a job): rank by rank, each rank's shown report (job view) of A
// against B's.
#include "command.h"
#include "report_set.h"

#include "report/analysis/check.h"
#include "report/json_reader.h"
#include "report/render/check.h"

#include <CLI/CLI.hpp>

#include <iostream>
#include <map>

namespace oomscope::cli {
namespace {

class DiffCommand final : public Command {
public:
    const char* name() const override { return "diff"; }
    CLI::App* setup(CLI::App& app) override
    {
        CLI::App* c = app.add_subcommand(name(), "Compare two reports: per-device and per-site deltas");
        c->add_option("a", m_a, "The earlier report (or a directory: a job's reports, compared rank by rank)")
            ->required()
            ->type_name("REPORT|DIR");
        c->add_option("b", m_b, "The later report (or directory)")->required()->type_name("REPORT|DIR");
        c->add_option("--top", m_top, "Sites to show")->check(CLI::Range(1, 1000000));
        addHelpFooter(c, "0, or 2 for a usage error or a report that cannot be read.");
        return c;
    }
    int run() override
    {
        if (!isSingleReport({m_a}) || !isSingleReport({m_b}))
            return diffJobs();
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
    // Rank by rank: the row of each rank in A's job view against the same rank's in B's.
    int diffJobs()
    {
        ReportSet a, b;
        std::string error;
        if (!loadReportSet({m_a}, &a, &error) || !loadReportSet({m_b}, &b, &error)) {
            logError("diff: " + error);
            return kExitUsage;
        }
        const std::vector<report::JobView> jobsA = report::jobViews(a.members);
        const std::vector<report::JobView> jobsB = report::jobViews(b.members);
        std::map<int64_t, const report::RankRow*> rowsB;
        for (const report::JobView& job : jobsB) {
            for (const report::RankRow& row : job.ranks) {
                if (row.rank)
                    rowsB.emplace(*row.rank, &row);
            }
        }
        size_t compared = 0;
        for (const report::JobView& job : jobsA) {
            for (const report::RankRow& row : job.ranks) {
                auto it = row.rank ? rowsB.find(*row.rank) : rowsB.end();
                if (it == rowsB.end()) {
                    std::cout << report::rankName(row) << ": in " << m_a << " only\n\n";
                    continue;
                }
                std::cout << report::rankName(row) << "\n";
                report::renderDiff(row.reports.front()->path, it->second->reports.front()->path,
                                   report::diffReports(*row.shown, *it->second->shown), m_top, std::cout);
                std::cout << "\n";
                rowsB.erase(it);
                ++compared;
            }
        }
        for (const auto& [rank, row] : rowsB)
            std::cout << report::rankName(*row) << ": in " << m_b << " only\n";
        if (compared == 0) {
            logError("diff: no rank is in both " + m_a + " and " + m_b);
            return kExitUsage;
        }
        std::cout.flush();
        return std::cout ? kExitOk : kExitUsage;
    }

    std::string m_a, m_b;
    size_t m_top = 20;
};

} // namespace

std::unique_ptr<Command> makeDiffCommand()
{
    return std::make_unique<DiffCommand>();
}

} // namespace oomscope::cli
