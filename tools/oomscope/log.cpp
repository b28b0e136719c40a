// The CLI's logging: spdlog to stderr, one line per message, no timestamps (a CLI, not a
// daemon). Only the CLI uses spdlog; the preload writes its few notices with dprintf.
#include "command.h"

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace oomscope::cli {
namespace {

spdlog::logger& logger()
{
    static std::shared_ptr<spdlog::logger> log = [] {
        auto l = std::make_shared<spdlog::logger>("oomscope", std::make_shared<spdlog::sinks::stderr_sink_st>());
        l->set_pattern("oomscope: %v");
        l->set_level(spdlog::level::info);
        return l;
    }();
    return *log;
}

} // namespace

void addHelpFooter(CLI::App* command, const std::string& exitStatus)
{
    command->footer("Exit status: " + exitStatus + "\nReference: docs/commands/" + command->get_name() +
                    ".md (installed: share/doc/oomscope/commands/" + command->get_name() + ".md)");
}

void logError(const std::string& message)
{
    logger().error("error: {}", message);
    logger().flush();
}

void logInfo(const std::string& message)
{
    logger().info("{}", message);
    logger().flush();
}

} // namespace oomscope::cli
