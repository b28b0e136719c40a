// oomscope snapshot PID|FILE: a report of a running process, read from its flight-recorder
// file without stopping, signalling or slowing it (trigger kind `snapshot`), written atomically
// next to the file or into -o DIR; its path on stdout.
#include "command.h"
#include "flight_target.h"

#include "interpret/recover.h"

#include <CLI/CLI.hpp>


namespace oomscope::cli {
namespace {

class SnapshotCommand final : public Command {
public:
    const char* name() const override { return "snapshot"; }
    CLI::App* setup(CLI::App& app) override
    {
        CLI::App* c = app.add_subcommand(name(), "A report of a running process now, read from its flight-recorder "
                                                 "file: the process is not stopped, signalled or slowed");
        c->add_option("target", m_target, "The process's PID, or its .flight file")->required()->type_name("PID|FLIGHT");
        c->add_option("-o,--output-dir", m_outputDir, "Where to write the report (default: the flight file's folder)")
            ->type_name("DIR");
        c->add_option("--events", m_events,
                      "Keep only the newest N events in the timeline (default: all the ring holds, 256 Ki at the "
                      "defaults; 0: none, the ring is not read): periodic snapshots stay small")
            ->check(CLI::Range(size_t(0), size_t(1) << 40));
        addHelpFooter(c, "0 (the report's path on stdout), or 2 for a usage error, a process or file without a "
                         "flight file of this version, or a report that cannot be written.");
        return c;
    }
    int run() override
    {
        std::string file, error;
        if (!flightFileOf(m_target, &file, &error)) {
            logError("snapshot: " + error);
            return kExitUsage;
        }
        report::Report r;
        if (!interpret::snapshotReport(file, &r, &error, m_events)) {
            logError("snapshot: " + error);
            return kExitUsage;
        }
        return writeReportBeside(r, file, m_outputDir, "snapshot");
    }

private:
    std::string m_target;
    std::string m_outputDir;
    size_t m_events = interpret::kAllEvents;
};

} // namespace

std::unique_ptr<Command> makeSnapshotCommand()
{
    return std::make_unique<SnapshotCommand>();
}

} // namespace oomscope::cli
