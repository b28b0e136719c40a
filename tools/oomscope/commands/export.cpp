// oomscope export REPORT|DIR --format F [-o FILE] [--from S] [--to S] [--last N]: the report in
// a format another viewer opens (PyTorch's memory_viz, Perfetto / chrome://tracing, flame graph
// tools); a folder of a job's reports as one trace (chrome-trace). Written atomically; the
// default name is the report's (the folder's oomscope-job) with the format's extension. Prints
// the path; what the window or the default cap left out is said on stderr.
#include "command.h"
#include "report_set.h"

#include "common/paths.h"
#include "report/analysis/job.h"
#include "report/json_reader.h"
#include "report/render/export.h"

#include <CLI/CLI.hpp>

#include <cmath>
#include <iostream>
#include <optional>

namespace oomscope::cli {
namespace {

const char* extensionOf(report::ExportFormat format)
{
    switch (format) {
    case report::ExportFormat::TorchSnapshot: return ".pickle";
    case report::ExportFormat::ChromeTrace: return ".trace.json";
    case report::ExportFormat::Folded: return ".folded";
    }
    return ".out";
}

// The report's path without ".json", and the format's extension.
std::string defaultOutput(const std::string& report, report::ExportFormat format)
{
    std::string stem = report;
    if (stem.size() > 5 && stem.compare(stem.size() - 5, 5, ".json") == 0)
        stem.resize(stem.size() - 5);
    return stem + extensionOf(format);
}

class ExportCommand final : public Command {
public:
    const char* name() const override { return "export"; }
    CLI::App* setup(CLI::App& app) override
    {
        CLI::App* c = app.add_subcommand(
            name(), "Write a report in a format other viewers open: torch-snapshot (PyTorch's memory_viz), "
                    "chrome-trace (Perfetto, chrome://tracing), folded (flame graph tools)");
        c->add_option("report", m_report,
                      "A report written by oomscope; or a folder of a job's reports (chrome-trace: every rank a "
                      "process of one trace, on the job's clock)")
            ->required()
            ->type_name("REPORT|DIR");
        c->add_option("--format,-f", m_format, std::string("The format: ") + report::exportFormatNames())
            ->required()
            ->type_name("FORMAT");
        c->add_option("-o,--output", m_output, "The file to write (default: the report's name with the format's extension)")
            ->type_name("FILE");
        c->add_flag("--torch-only", m_torchOnly,
                    "torch-snapshot: only PyTorch's own segments (memory_viz's totals are then PyTorch's reserved "
                    "and allocated bytes)");
        c->add_option("--from", m_from, "Only from this many seconds after the process started (a job: after its first "
                                        "rank started)")
            ->check(CLI::Range(0.0, 1e9))
            ->type_name("SECONDS");
        c->add_option("--to", m_to, "Only up to this many seconds after the start (chrome-trace: a torch-snapshot's "
                                    "trace is replayed back from the trigger)")
            ->check(CLI::Range(0.0, 1e9))
            ->type_name("SECONDS");
        c->add_option("--last", m_last,
                      "Only the newest N events (0: all). torch-snapshot: 300000 by default, as many as PyTorch's "
                      "memory_viz shows (it hides a trace past about 600 000 entries)")
            ->type_name("N");
        addHelpFooter(c, "0, or 2 for a usage error, a report that cannot be read or a file that cannot be "
                         "written.");
        return c;
    }
    int run() override
    {
        report::ExportFormat format;
        if (!report::parseExportFormat(m_format, &format)) {
            logError("export: unknown format \"" + m_format + "\" (formats: " + report::exportFormatNames() + ")");
            return kExitUsage;
        }
        if (m_to && format == report::ExportFormat::TorchSnapshot) {
            logError("export: --to goes with chrome-trace: memory_viz replays a torch-snapshot's trace back from the "
                     "segments at the trigger, so its window ends there");
            return kExitUsage;
        }
        if ((m_from || m_to || m_last) && format == report::ExportFormat::Folded) {
            logError("export: folded stacks are the live memory at the trigger: no window (--from, --to, --last)");
            return kExitUsage;
        }
        if (m_from && m_to && *m_to <= *m_from) {
            logError("export: --to must be after --from");
            return kExitUsage;
        }
        report::ExportWindow window;
        window.fromNs = m_from ? uint64_t(std::llround(*m_from * 1e9)) : 0;
        window.toNs = m_to ? uint64_t(std::llround(*m_to * 1e9)) : UINT64_MAX;
        window.last = m_last ? *m_last : format == report::ExportFormat::TorchSnapshot ? report::kTorchSnapshotLast : 0;
        std::string bytes, error, path = m_output;
        if (common::isDir(m_report)) {
            if (format != report::ExportFormat::ChromeTrace) {
                logError("export: a folder (a job) is one trace: --format chrome-trace; other formats take one report");
                return kExitUsage;
            }
            ReportSet set;
            if (!loadReportSet({m_report}, &set, &error)) {
                logError("export: " + error);
                return kExitUsage;
            }
            for (const report::SetProblem& p : set.problems)
                logError("export: " + p.path + ": " + p.error + " (left out of the trace)");
            const std::vector<report::JobView> jobs = report::jobViews(set.members);
            if (jobs.size() != 1) {
                logError("export: " + m_report + " holds the reports of " + std::to_string(jobs.size()) +
                         " jobs: one trace is one job (a folder per job)");
                return kExitUsage;
            }
            bytes = report::exportJobChromeTrace(jobs.front(), window);
            if (path.empty())
                path = m_report + "/oomscope-job" + extensionOf(format);
        } else {
            report::Report r;
            if (!report::readReportFile(m_report, &r, &error)) {
                logError("export: " + error);
                return kExitUsage;
            }
            // The window on the process's clock (the timeline's times).
            if (m_from)
                window.fromNs += r.process.startNs;
            if (m_to)
                window.toNs += r.process.startNs;
            switch (format) {
            case report::ExportFormat::TorchSnapshot: {
                report::TorchSnapshotOptions options;
                options.torchOnly = m_torchOnly;
                options.window = window;
                bytes = report::exportTorchSnapshot(r, options);
                window.kept = options.window.kept;
                window.leftOut = options.window.leftOut;
                break;
            }
            case report::ExportFormat::ChromeTrace: bytes = report::exportChromeTrace(r, window); break;
            case report::ExportFormat::Folded: bytes = report::exportFolded(r); break;
            }
            if (path.empty())
                path = defaultOutput(m_report, format);
        }
        if (!writeTextFileAtomically(path, bytes, &error)) {
            logError("export: " + error);
            return kExitUsage;
        }
        if (window.leftOut > 0)
            logInfo("export: " + std::to_string(window.kept) + " of " + std::to_string(window.kept + window.leftOut) +
                    " events kept (" + (m_from || m_to ? "--from/--to" : "") + (m_last ? (m_from || m_to ? ", " : "") + std::string("--last") : "") +
                    (!m_from && !m_to && !m_last ? "the default --last " + std::to_string(window.last) + "; --last 0 keeps all" : "") +
                    ")");
        std::cout << path << "\n";
        return kExitOk;
    }

private:
    std::string m_report;
    std::string m_format;
    std::string m_output;
    bool m_torchOnly = false;
    std::optional<double> m_from, m_to;
    std::optional<size_t> m_last;
};

} // namespace

std::unique_ptr<Command> makeExportCommand()
{
    return std::make_unique<ExportCommand>();
}

} // namespace oomscope::cli
