// oomscope export REPORT --format F [-o FILE]: the report in a format another viewer opens
// (PyTorch's memory_viz, Perfetto / chrome://tracing, flame graph tools). Written atomically;
// the default name is the report's with the format's extension. Prints the path.
#include "command.h"

#include "report/json_reader.h"
#include "report/render/export.h"

#include <CLI/CLI.hpp>

#include <iostream>

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
        c->add_option("report", m_report, "A report written by oomscope")->required()->type_name("REPORT");
        c->add_option("--format,-f", m_format, std::string("The format: ") + report::exportFormatNames())
            ->required()
            ->type_name("FORMAT");
        c->add_option("-o,--output", m_output, "The file to write (default: the report's name with the format's extension)")
            ->type_name("FILE");
        c->add_flag("--torch-only", m_torchOnly,
                    "torch-snapshot: only PyTorch's own segments (memory_viz's totals are then PyTorch's reserved "
                    "and allocated bytes)");
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
        report::Report r;
        std::string error;
        if (!report::readReportFile(m_report, &r, &error)) {
            logError("export: " + error);
            return kExitUsage;
        }
        std::string bytes;
        switch (format) {
        case report::ExportFormat::TorchSnapshot: bytes = report::exportTorchSnapshot(r, {m_torchOnly}); break;
        case report::ExportFormat::ChromeTrace: bytes = report::exportChromeTrace(r); break;
        case report::ExportFormat::Folded: bytes = report::exportFolded(r); break;
        }
        const std::string path = m_output.empty() ? defaultOutput(m_report, format) : m_output;
        if (!writeTextFileAtomically(path, bytes, &error)) {
            logError("export: " + error);
            return kExitUsage;
        }
        std::cout << path << "\n";
        return kExitOk;
    }

private:
    std::string m_report;
    std::string m_format;
    std::string m_output;
    bool m_torchOnly = false;
};

} // namespace

std::unique_ptr<Command> makeExportCommand()
{
    return std::make_unique<ExportCommand>();
}

} // namespace oomscope::cli
