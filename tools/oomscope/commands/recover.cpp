// oomscope recover FILE: the flight-recorder file of a process that ended without a report,
// turned into one (written atomically next to the file, or into -o DIR). The file stays.
#include "command.h"
#include "flight_target.h"

#include "interpret/recover.h"

#include <CLI/CLI.hpp>


namespace oomscope::cli {
namespace {

class RecoverCommand final : public Command {
public:
    const char* name() const override { return "recover"; }
    CLI::App* setup(CLI::App& app) override
    {
        CLI::App* c = app.add_subcommand(name(), "Turn the flight-recorder file of a process that died without a "
                                                 "report (SIGKILL, the OOM killer, a crash) into a report");
        c->add_option("file", m_file, "The .flight file (OOMSCOPE_OUTPUT_DIR/oomscope-HOST-PID.flight)")
            ->required()
            ->type_name("FLIGHT");
        c->add_option("-o,--output-dir", m_outputDir, "Where to write the report (default: the file's folder)")
            ->type_name("DIR");
        addHelpFooter(c, "0 (the report's path on stdout), or 2 for a usage error, a file that is not a flight file "
                         "of this version, or a report that cannot be written.");
        return c;
    }
    int run() override
    {
        report::Report r;
        std::string error;
        if (!interpret::recoverReport(m_file, &r, &error)) {
            logError("recover: " + error);
            return kExitUsage;
        }
        return writeReportBeside(r, m_file, m_outputDir, "recover");
    }

private:
    std::string m_file;
    std::string m_outputDir;  // default: the flight file's folder (the file itself is left as it is)
};

} // namespace

std::unique_ptr<Command> makeRecoverCommand()
{
    return std::make_unique<RecoverCommand>();
}

} // namespace oomscope::cli
