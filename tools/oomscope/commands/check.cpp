// oomscope check REPORT...: the CI gate. Exit 0 clean, 1 with findings, 2 for usage or input
// errors; the verdict on stdout, JUnit XML on request.
#include "commands/check.h"

#include "command.h"
#include "report/analysis/check.h"
#include "report/json_reader.h"
#include "report/render/check.h"
#include "report_set.h"

#include <CLI/CLI.hpp>

#include <iostream>

namespace oomscope::cli {

void addCheckLimits(CLI::App& command, CheckOptions& options)
{
    command.add_option("--max-peak", options.maxPeak, "Peak memory limit on any device (e.g. 24GiB, 512MiB)")
        ->type_name("SIZE");
    command.add_option("--max-fragmentation", options.maxFragmentation,
                       "Limit on the share of reserved memory in split free blocks, percent (default 30 with "
                       "--fail-on fragmentation)")
        ->type_name("PERCENT");
    command.add_option("--junit", options.junit, "Also write the verdict as JUnit XML to FILE")->type_name("FILE");
}

int checkReports(const CheckOptions& o)
{
    report::CheckOptions options;
    report::CheckArguments args;
    args.failOn = o.failOn;
    args.maxPeak = o.maxPeak;
    args.maxFragmentation = o.maxFragmentation;
    args.maxGrowth = o.maxGrowth;
    args.haveBaseline = !o.baseline.empty();
    std::string error;
    if (!report::parseCheckArguments(args, &options, &error)) {
        logError("check: " + error);
        return kExitUsage;
    }
    if (o.reports.empty()) {
        logError("check: no report given");
        return kExitUsage;
    }
    report::Report baseline;
    if (!o.baseline.empty()) {
        if (!report::readReportFile(o.baseline, &baseline, &error)) {
            logError("check: baseline: " + error);
            return kExitUsage;
        }
        options.baseline = &baseline;
    }
    const report::SourceLine source = sourceReader();
    std::vector<report::CheckedReport> checked;
    ReportSet set;
    if (!loadReportSet(o.reports, &set, &error)) {
        logError("check: " + error);
        return kExitUsage;
    }
    if (!set.problems.empty()) {
        // A gate does not pass over what it could not read.
        logError("check: " + set.problems.front().path + ": " + set.problems.front().error);
        return kExitUsage;
    }
    for (const report::JobMember& m : set.members)
        checked.push_back(report::CheckedReport{m.path, report::checkReport(*m.report, options, source)});
    // A set of several processes (a directory, or the reports of a job's ranks): the job's rules.
    if (options.failOn.count("job")) {
        for (const report::JobView& job : report::jobViews(set.members)) {
            if (job.ranks.size() < 2)
                continue;
            checked.push_back(report::CheckedReport{"job " + (job.jobId.empty() ? std::string("(no job id)") : job.jobId) +
                                                        " (" + std::to_string(job.ranks.size()) + " processes)",
                                                    report::checkJob(job)});
        }
    }
    if (o.format == "json")
        std::cout << report::checkJson(checked);
    else
        report::renderCheck(checked, std::cout);
    std::cout.flush();
    if (!o.junit.empty() && !writeTextFileAtomically(o.junit, report::junitXml(checked), &error)) {
        logError("check: --junit: " + error);
        return kExitUsage;
    }
    for (const report::CheckedReport& c : checked) {
        if (!c.passed())
            return kExitFindings;
    }
    return kExitOk;
}

namespace {

class CheckCommand final : public Command {
public:
    const char* name() const override { return "check"; }
    CLI::App* setup(CLI::App& app) override
    {
        CLI::App* c =
            app.add_subcommand(name(), "Fail (exit 1) on leak patterns, peaks or fragmentation in reports: the CI gate");
        c->add_option("reports", m_options.reports, "Reports to check, or directories of them (a job's ranks)")
            ->required()
            ->type_name("REPORT|DIR");
        c->add_option("--fail-on", m_options.failOn,
                      "Rules, comma-separated: leak, peak, fragmentation, growth, job (default: leak, job, and "
                      "each rule whose limit is given; job: over the reports of several processes, a rank that ran "
                      "out of memory, wrong_device, rank_imbalance)")
            ->type_name("RULES");
        addCheckLimits(*c, m_options);
        c->add_option("--baseline", m_options.baseline, "A report to compare the peak with (with --max-growth)")
            ->type_name("REPORT");
        c->add_option("--max-growth", m_options.maxGrowth, "Allowed peak growth over the baseline (e.g. 1GiB)")
            ->type_name("SIZE");
        c->add_option("--format", m_options.format, "text, or json: the verdicts as one JSON document")
            ->check(CLI::IsMember({"text", "json"}));
        addHelpFooter(c, "0 when every rule passes, 1 when one finds something (a leak, a peak or growth over "
                         "its limit, fragmentation, a job's failure), 2 for a usage error or a report that "
                         "cannot be read.");
        return c;
    }
    int run() override { return checkReports(m_options); }

private:
    CheckOptions m_options;
};

} // namespace

std::unique_ptr<Command> makeCheckCommand()
{
    return std::make_unique<CheckCommand>();
}

} // namespace oomscope::cli
