// oomscope: run a program under the preload, read the reports it leaves. This file only lists
// the commands (commands/, each with its options and help) and dispatches to the one given.
#include "command.h"

#include <CLI/CLI.hpp>

#include <cstring>

#ifndef OOMSCOPE_VERSION
#define OOMSCOPE_VERSION "0.0.0"
#endif

using namespace oomscope::cli;

int main(int argc, char** argv)
{
    CLI::App app{"oomscope: GPU memory profiler and OOM forensics", "oomscope"};  // named so in every --help
    app.footer("Each command's --help says its options; docs/commands/ has a page per command (installed: "
               "share/doc/oomscope/commands/).");
    app.set_version_flag("--version", OOMSCOPE_VERSION);
    app.require_subcommand(1);
    std::unique_ptr<Command> commands[] = {makeRunCommand(), makeReportCommand(), makeCheckCommand(),
                                           makeDiffCommand(), makeRecoverCommand(), makeHtmlCommand(), makeFitCommand(),
                                           makeExportCommand(), makeSnapshotCommand(), makeTopCommand(), makeMetricsCommand()};
    std::vector<std::pair<CLI::App*, Command*>> parsers;
    int parsedArgc = argc;
    for (auto& command : commands) {
        parsers.emplace_back(command->setup(app), command.get());
        if (argc > 1 && std::strcmp(argv[1], command->name()) == 0)
            parsedArgc = command->argumentsToParse(argc, argv);
    }
    try {
        app.parse(parsedArgc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        logError(std::string(e.what()) + " (see oomscope --help)");
        return kExitUsage;
    }
    try {
        for (const auto& [parser, command] : parsers) {
            if (parser->parsed())
                return command->run();
        }
    } catch (const std::exception& e) {
        logError(e.what());
        return kExitUsage;
    }
    return kExitUsage;
}
