// oomscope: run a program under the preload, read the reports it leaves.
#include "commands.h"

#include <CLI/CLI.hpp>

#include <cstring>
#include <iostream>

#ifndef OOMSCOPE_VERSION
#define OOMSCOPE_VERSION "0.0.0"
#endif

using namespace oomscope::cli;

int main(int argc, char** argv)
{
    CLI::App app{"oomscope: GPU memory profiler and OOM forensics"};
    app.set_version_flag("--version", OOMSCOPE_VERSION);
    app.require_subcommand(1);

    RunOptions run;
    CLI::App* runCmd = app.add_subcommand("run", "Run a program with oomscope preloaded: oomscope run [-o DIR] -- CMD ...");
    runCmd->add_option("--output-dir,-o", run.outputDir, "Folder for the reports (default: the working directory)");
    runCmd->add_flag("--check{leak}", run.check,
                     "After the run, check its reports (oomscope check); --check=RULES picks the rules. The "
                     "program's failure wins, else the check's status");
    runCmd->add_option("--max-peak", run.checkOptions.maxPeak, "With --check: the peak limit (e.g. 24GiB)");
    runCmd->add_option("--max-fragmentation", run.checkOptions.maxFragmentation,
                       "With --check: the fragmentation limit in percent");
    runCmd->add_option("--junit", run.checkOptions.junit, "With --check: write the verdict as JUnit XML to FILE");
    runCmd->add_option("--via", run.via,
                       "How the library enters the program: preload (LD_PRELOAD, the default) or inject "
                       "(CUDA_INJECTION64_PATH: CUPTI callbacks alone, for static runtimes and where LD_PRELOAD "
                       "is unwelcome)")
        ->check(CLI::IsMember({"preload", "inject"}));
    // Everything from the first argument that is not one of run's options on is the command,
    // passed through untouched (its own options included); a leading "--" is optional.
    runCmd->prefix_command();

    ReportOptions report;
    CLI::App* reportCmd = app.add_subcommand("report", "Render a report as tables");
    reportCmd->add_option("file", report.file, "A report written by oomscope (oomscope-*.json)")->required();
    reportCmd->add_option("--top", report.top, "Allocation sites to show")->check(CLI::Range(0, 1000000));
    reportCmd->add_option("--events", report.events, "Last events to show")->check(CLI::Range(0, 100000000));
    reportCmd->add_option("--frames", report.frames, "Frames to show per stack")->check(CLI::Range(1, 10000));
    reportCmd->add_flag("--native", report.native, "Show every native frame of stacks that have Python frames");
    reportCmd->add_option("--color", report.color, "Colour: auto (on a terminal), always or never")
        ->check(CLI::IsMember({"auto", "always", "never"}));

    CheckOptions check;
    CLI::App* checkCmd = app.add_subcommand(
        "check", "Fail (exit 1) on leak patterns, peaks or fragmentation in reports: the CI gate");
    checkCmd->add_option("reports", check.reports, "Reports to check")->required();
    checkCmd->add_option("--fail-on", check.failOn,
                         "Rules, comma-separated: leak, peak, fragmentation, growth (default: leak, and each rule "
                         "whose limit is given)");
    checkCmd->add_option("--max-peak", check.maxPeak, "Peak memory limit on any device (e.g. 24GiB, 512MiB)");
    checkCmd->add_option("--max-fragmentation", check.maxFragmentation,
                         "Limit on the share of reserved memory in split free blocks, percent (default 30 with "
                         "--fail-on fragmentation)");
    checkCmd->add_option("--baseline", check.baseline, "A report to compare the peak with (with --max-growth)");
    checkCmd->add_option("--max-growth", check.maxGrowth, "Allowed peak growth over the baseline (e.g. 1GiB)");
    checkCmd->add_option("--junit", check.junit, "Also write the verdict as JUnit XML to FILE");

    DiffOptions diff;
    CLI::App* diffCmd = app.add_subcommand("diff", "Compare two reports: per-device and per-site deltas");
    diffCmd->add_option("a", diff.a, "The earlier report")->required();
    diffCmd->add_option("b", diff.b, "The later report")->required();
    diffCmd->add_option("--top", diff.top, "Sites to show")->check(CLI::Range(1, 1000000));

    RecoverOptions recover;
    CLI::App* recoverCmd = app.add_subcommand(
        "recover", "Turn the flight-recorder file of a process that died without a report (SIGKILL, the OOM killer, "
                   "a crash) into a report");
    recoverCmd->add_option("file", recover.file, "The .flight file (OOMSCOPE_OUTPUT_DIR/oomscope-HOST-PID.flight)")
        ->required();
    recoverCmd->add_option("-o,--output-dir", recover.outputDir, "Where to write the report (default: the file's folder)");

    // "oomscope run [options] -- CMD ...": everything after the first "--" is the command,
    // untouched; CLI11 sees only what comes before it.
    std::vector<std::string> afterDashes;
    int parsedArgc = argc;
    if (argc > 1 && std::strcmp(argv[1], "run") == 0) {
        for (int i = 2; i < argc; ++i) {
            if (std::strcmp(argv[i], "--") == 0) {
                afterDashes.assign(argv + i + 1, argv + argc);
                parsedArgc = i;
                break;
            }
        }
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
        if (runCmd->parsed()) {
            run.command = runCmd->remaining();
            if (!run.command.empty() && run.command.front().size() > 1 && run.command.front()[0] == '-') {
                logError("run: unknown option " + run.command.front() + " (see oomscope --help)");
                return kExitUsage;
            }
            if (parsedArgc != argc) {
                // A "--" after the command started belongs to the command.
                if (!run.command.empty())
                    run.command.push_back("--");
                run.command.insert(run.command.end(), afterDashes.begin(), afterDashes.end());
            }
            if (run.command.empty()) {
                logError("run: no command given (oomscope run -- CMD ...)");
                return kExitUsage;
            }
            return runCommand(run);
        }
        if (reportCmd->parsed())
            return reportCommand(report);
        if (recoverCmd->parsed())
            return recoverCommand(recover);
        if (checkCmd->parsed())
            return checkCommand(check);
        if (diffCmd->parsed())
            return diffCommand(diff);
    } catch (const std::exception& e) {
        logError(e.what());
        return kExitUsage;
    }
    return kExitUsage;
}
