// oomscope fit [--sizes A,B,C] [--device-limit SIZE] [--verify] [--format json] -- CMD ... {} ...:
// runs CMD at a few sizes (the {} in its arguments, and OOMSCOPE_FIT_SIZE in its environment),
// each under the preload, fits each device's peak by source as a function of the size
// (report/analysis/fit.h) and says the largest size that fits the device (or the limit), with
// its margin and the breakdown there; --verify runs that size and the next one up, then walks to
// the largest size that fits by real runs.
//
// The sizes, by default: 1, 2 and 4 (then 16, 32 and 64 where the peak does not move from 1 to
// 4), then, where they predict 8x the largest run or more, those of an eighth and a quarter of
// that size above it, so that the answer is extrapolated 4x at most (8x from one round: a
// trial's start dominates a short program, GPT-2's 12 to 20 s; a second round below that only
// where the runs are no line, or where PyTorch's traces align in no two of them: then one run
// at four times the largest, for the allocator's replay). The runs of a round go at the same time when
// the device has room for all of them (their peaks bounded from the runs before, with a
// quarter to spare); one that runs out of memory beside others is run again alone.
#include "command.h"
#include "launch.h"

#include "common/device_cards.h"
#include "report/analysis/fit.h"
#include "report/format.h"
#include "report/json_reader.h"
#include "report/model.h"
#include "report/render/fit.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <sys/wait.h>

namespace oomscope::cli {
namespace {

using report::FitTrial;

std::string tail(const std::string& path, size_t lines)
{
    std::ifstream in(path);
    std::vector<std::string> all;
    for (std::string l; std::getline(in, l);)
        all.push_back(l);
    std::string out;
    for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i)
        out += "\n  " + all[i];
    return out;
}

std::string sizeList(const std::vector<FitTrial>& trials)
{
    std::string out;
    for (const FitTrial& t : trials)
        out += (out.empty() ? "" : ", ") + std::to_string(t.size);
    return out;
}

constexpr const char* kTorchTrace = "torch-trace.txt";

class FitCommand final : public Command {
public:
    const char* name() const override { return "fit"; }
    CLI::App* setup(CLI::App& app) override
    {
        CLI::App* c = app.add_subcommand(
            name(), "Will it fit? Run a command at a few small sizes ({} in its arguments, OOMSCOPE_FIT_SIZE in its "
                    "environment) and predict the largest that fits the GPU: oomscope fit [options] -- CMD ... {} ...");
        c->add_option("--sizes", m_sizes, "The sizes to run at, ascending (default: 1, 2 and 4; 16, 32 and 64 where "
                                          "the peak does not move from 1 to 4; then an eighth and a quarter of the size "
                                          "they predict where it is 8x the largest run or more)")
            ->type_name("N,N,...");
        c->add_option("--device-limit", m_limit, "Predict for a smaller card: SIZE or a card's name (as run's "
                                                 "--device-limit; the runs are rehearsed under it)")
            ->type_name("SIZE|CARD");
        c->add_option("--steps", m_steps, "Passed to the command as OOMSCOPE_FIT_STEPS (for programs that read it)");
        c->add_flag("--verify", m_verify, "Then run the predicted size and the next one up, and say whether they fit; "
                                          "then find the largest size that fits by real runs, walking from them (up "
                                          "where both fit, down where the predicted one does not) and bisecting");
        c->add_option("--format", m_format, "text (a table) or json")->check(CLI::IsMember({"text", "json"}));
        c->add_option("-o,--output-dir", m_outputDir, "Folder for the runs' reports and output (default oomscope-fit)")
            ->type_name("DIR");
        addHelpFooter(c, "0 with a prediction (and, with --verify, when the predicted size fits), 1 when --verify "
                         "finds the predicted size does not fit, 2 for a usage error or when it fits at fewer than "
                         "two sizes, 3 when the runs are not explained by the model and no size is given (the peak "
                         "ignores the size, shrinks as it grows, or strays from the model by more than 5 %), the "
                         "program's own status when it fails for another reason than memory.");
        c->prefix_command();
        m_app = c;
        return c;
    }
    int argumentsToParse(int argc, char** argv) override { return splitAtDashes(argc, argv, &m_command); }
    int run() override;

private:
    bool parseOptions();
    Launch prepare(uint64_t size, FitTrial* t) const;
    void collect(const Ran& ran, FitTrial* t) const;
    FitTrial runAt(uint64_t size);
    // Runs sizes at the same time; one that runs out of memory beside others runs again alone.
    std::vector<FitTrial> runTogether(const std::vector<uint64_t>& sizes);
    // false (said, m_status set) when a run failed for another reason than memory.
    bool accept(const std::vector<FitTrial>& ran, std::vector<FitTrial>* trials);
    int predict(const std::vector<FitTrial>& trials);
    // --verify past the predicted size and the next one: the edge by real runs.
    std::optional<uint64_t> verifyEdge(report::FitPrediction& p);
    // The traces of the fitting runs replayed (report::replayPrediction), the answer the replay's where used.
    void replayTraces(const std::vector<const FitTrial*>& fitting, report::FitPrediction* p) const;
    // Whether every run traced PyTorch's allocator (usable traces) and no two of them, from any
    // size up, align: the replay would then answer from a larger run, not from these.
    bool replayWantsLargerRun(const report::FitPrediction& sofar, const std::vector<FitTrial>& trials) const;

    CLI::App* m_app = nullptr;
    std::string m_sizes;  // empty: chosen as the runs go
    std::optional<std::string> m_limit;  // as given: an empty value is refused
    std::string m_format = "text";
    std::string m_outputDir = "oomscope-fit";
    uint64_t m_steps = 0;
    bool m_verify = false;
    std::vector<std::string> m_command;
    std::vector<uint64_t> m_sizeList;
    std::vector<std::vector<uint64_t>> m_rounds;  // the sizes run, by round (together where there was room)
    std::vector<uint64_t> m_reruns;               // sizes run again alone
    double m_seconds = 0, m_verifySeconds = 0;
    int m_status = 0;
    std::string m_lib;
};

bool FitCommand::parseOptions()
{
    if (m_command.empty())
        m_command = m_app->remaining();
    if (m_command.empty()) {
        logError("fit: no command (oomscope fit [options] -- CMD ... {} ...)");
        return false;
    }
    std::stringstream in(m_sizes);
    for (std::string item; !m_sizes.empty() && std::getline(in, item, ',');) {
        char* end = nullptr;
        const unsigned long long v = std::strtoull(item.c_str(), &end, 10);
        if (item.empty() || *end || v == 0 || (!m_sizeList.empty() && v <= m_sizeList.back())) {
            logError("fit: --sizes " + m_sizes + ": positive whole sizes, ascending (1,2,4,8)");
            return false;
        }
        m_sizeList.push_back(v);
    }
    if (!m_sizes.empty() && m_sizeList.size() < 2) {
        logError("fit: --sizes needs at least two sizes to fit a line");
        return false;
    }
    if (m_limit) {
        uint64_t limits[64];
        if (!common::parseDeviceLimitList(m_limit->c_str(), limits, 64)) {
            logError("fit: --device-limit \"" + *m_limit + "\": not " + common::kDeviceLimitGrammar);
            return false;
        }
        setenv("OOMSCOPE_DEVICE_LIMIT", m_limit->c_str(), 1);
    }
    m_lib = preloadLibrary();
    if (!isFile(m_lib)) {
        logError("fit: cannot find the preload library " + m_lib + " (set OOMSCOPE_LIB)");
        return false;
    }
    m_outputDir = absolute(m_outputDir);
    if (!makeDirs(m_outputDir) || !prepareEnvironment(m_lib, m_outputDir, "preload", false)) {
        logError("fit: cannot create the output folder " + m_outputDir);
        return false;
    }
    return true;
}

Launch FitCommand::prepare(uint64_t size, FitTrial* t) const
{
    t->size = size;
    const std::string dir = m_outputDir + "/size-" + std::to_string(size);
    makeDirs(dir);
    for (const std::string& name : reportsIn(dir))
        std::remove((dir + "/" + name).c_str());
    Launch l;
    for (std::string arg : m_command) {
        for (size_t at; (at = arg.find("{}")) != std::string::npos;)
            arg.replace(at, 2, std::to_string(size));
        l.command.push_back(arg);
    }
    // PyTorch's allocator traces itself into the run's folder (the Python adapter): the replay's input.
    const std::string trace = dir + "/" + kTorchTrace;
    std::remove(trace.c_str());
    l.env = {{"OOMSCOPE_OUTPUT_DIR", dir}, {"OOMSCOPE_FIT_SIZE", std::to_string(size)}, {"OOMSCOPE_QUIET", "1"},
             {"OOMSCOPE_FIT_TRACE", trace}};
    if (m_steps)
        l.env.emplace_back("OOMSCOPE_FIT_STEPS", std::to_string(m_steps));
    t->log = l.logPath = dir + "/output.log";
    return l;
}

void FitCommand::collect(const Ran& ran, FitTrial* t) const
{
    t->status = ran.execErrno ? (127 << 8) : ran.status;
    const std::string dir = dirName(t->log);
    for (const std::string& name : reportsIn(dir)) {
        report::Report r;
        std::string error;
        if (report::readReportFile(dir + "/" + name, &r, &error))
            report::addTrialReport(r, t);
    }
    t->fits = ran.started && !ran.execErrno && WIFEXITED(ran.status) && WEXITSTATUS(ran.status) == 0;
    if (const std::string trace = dir + "/" + kTorchTrace; access(trace.c_str(), R_OK) == 0)
        t->torchTrace = trace;
}

FitTrial FitCommand::runAt(uint64_t size)
{
    return runTogether({size}).front();
}

std::vector<FitTrial> FitCommand::runTogether(const std::vector<uint64_t>& sizes)
{
    std::vector<FitTrial> trials(sizes.size());
    std::vector<Launch> launches;
    for (size_t i = 0; i < sizes.size(); ++i)
        launches.push_back(prepare(sizes[i], &trials[i]));
    const std::vector<Ran> ran = spawnAll(launches);
    for (size_t i = 0; i < sizes.size(); ++i)
        collect(ran[i], &trials[i]);
    m_rounds.push_back(sizes);
    if (sizes.size() > 1)
        for (FitTrial& t : trials)
            if (t.outOfMemory()) {  // perhaps only beside the others: alone, as the program will run
                m_reruns.push_back(t.size);
                FitTrial alone{};
                const Launch l = prepare(t.size, &alone);
                collect(spawnAll({l}).front(), &alone);
                t = alone;
            }
    return trials;
}

bool FitCommand::accept(const std::vector<FitTrial>& ran, std::vector<FitTrial>* trials)
{
    for (const FitTrial& t : ran) {
        trials->push_back(t);
        if (t.status == (127 << 8)) {
            logError("fit: cannot run " + m_command.front());
            m_status = 127;
            return false;
        }
        if (!t.fits && !t.oomReports) {
            logError("fit: the command failed at size " + std::to_string(t.size) + " for another reason than memory (" +
                     (WIFEXITED(t.status) ? "exit status " + std::to_string(WEXITSTATUS(t.status))
                                          : "signal " + std::to_string(WTERMSIG(t.status))) +
                     "); no prediction. Its output, " + t.log + ":" + tail(t.log, 8));
            m_status = WIFEXITED(t.status) ? WEXITSTATUS(t.status) : 1;
            return false;
        }
    }
    return true;
}

int FitCommand::run()
{
    if (!parseOptions())
        return kExitUsage;
    const auto start = std::chrono::steady_clock::now();
    std::vector<FitTrial> trials;
    const bool chosen = m_sizeList.empty();
    const std::vector<uint64_t> first = chosen ? std::vector<uint64_t>{1, 2, 4}
                                               : std::vector<uint64_t>(m_sizeList.begin(), m_sizeList.begin() + 2);
    if (!accept(runTogether(first), &trials))
        return m_status;
    auto oomSeen = [&] { return std::any_of(trials.begin(), trials.end(), [](const FitTrial& t) { return t.outOfMemory(); }); };
    // A round of sizes: together where the device has room for them all, else one by one up to
    // the first that runs out of memory (larger sizes do not fit either).
    auto runRound = [&](const std::vector<uint64_t>& sizes) {
        if (report::roomForTogether(sizes, trials))
            return accept(runTogether(sizes), &trials);
        for (uint64_t n : sizes) {
            if (!accept({runAt(n)}, &trials))
                return false;
            if (trials.back().outOfMemory())
                break;
        }
        return true;
    };
    auto fitting = [&] {
        std::vector<const FitTrial*> out;
        for (const FitTrial& t : trials)
            out.push_back(&t);
        return out;
    };
    auto measured = [&] { return std::all_of(trials.begin(), trials.end(), [](const FitTrial& t) { return !t.peaks.empty(); }); };
    std::vector<uint64_t> rest;
    if (!chosen) {
        rest.assign(m_sizeList.begin() + 2, m_sizeList.end());
    } else if (!oomSeen() && measured()) {
        // A peak that does not move from 1 to 4 may be set there by what does not grow with the
        // size (an LSTM's weights, gradients and Adam's state up to batch 8): 16, 32 and 64 are
        // run before the answer is refused, three on the line beyond such a kink.
        if (!report::peakChangesWithSize(fitting())) {
            if (!runRound({16, 32, 64}))
                return m_status;
        }
        // An eighth and a quarter of what the runs so far predict, those above the largest run:
        // the answer is then extrapolated 4x at most, and a wrong guess of the line costs one
        // round, not the fit. Only where that at least halves the extrapolation (the answer is
        // 8x the largest run or more): a round costs what a run of the program costs, and a
        // run at 5 or 6 beside 4 tells the line nothing new (GPT-2 under 40 GiB on an H100: the
        // same answer without its run at 6, in half the time; docs/GPU-RESULTS.md).
        // Below that, a second round still where the runs are no line (one strays from the line
        // through them all by more than 2 %): twice and four times the largest run tell a kink
        // (a leading size left out, report/analysis/fit.h) from a curve (GPT-2 with activation
        // checkpointing: size 1 above the line of 2 and 4, its answer near 29).
        if (!oomSeen() && measured() && report::peakChangesWithSize(fitting())) {
            uint64_t ran = 0;
            for (const FitTrial& t : trials)
                ran = std::max(ran, t.size);
            const report::FitPrediction sofar = report::bindingPrediction(fitting());
            const std::vector<report::FitResidual> residuals = report::fitResiduals(sofar, fitting());
            const bool line = std::all_of(residuals.begin(), residuals.end(), [&](const report::FitResidual& r) {
                return std::abs(r.relative) <= report::kHingeShare ||
                       std::count(sofar.leftOut.begin(), sofar.leftOut.end(), r.size) > 0;
            });
            const uint64_t largest = sofar.largest;
            std::vector<uint64_t> next;
            if (largest / 4 >= 2 * ran)
                next = {largest / 8, largest / 4};
            else if (!line)
                next = {2 * ran, 4 * ran};
            else if (replayWantsLargerRun(sofar, trials)) {
                // A line, but PyTorch's traces align in no two runs: the smallest sizes take
                // paths of their own (GPT-2 to batch 2, 2048 token ids: the embedding's backward
                // sorts none up to 3072; at 1 its shifted labels need no copy), so one run at
                // four times the largest, or twice where that is past the answer, for the
                // replay to scale from.
                for (const uint64_t n : {4 * ran, 2 * ran})
                    if (n < largest) {
                        next = {n};
                        break;
                    }
            }
            for (uint64_t n : next)
                if (n > ran && n < largest && (rest.empty() || n > rest.back()))
                    rest.push_back(n);
        }
    }
    if (!rest.empty() && !oomSeen() && !runRound(rest))
        return m_status;
    m_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::sort(trials.begin(), trials.end(), [](const FitTrial& a, const FitTrial& b) { return a.size < b.size; });
    return predict(trials);
}

// From the predicted size and the next one (already run): where both fit, up 2, 4, 8, ... from
// the next one until a run runs out of memory; where the predicted one does not, down 1, 2, 4,
// ... from it until one fits; then bisection. --verify so ends with the largest size seen to fit
// beside the next one seen to run out of memory: what a binary search with real runs answers,
// from the prediction's side. Only past out-of-memory failures (another failure is the
// program's: the edge is then not said), and never past twice the predicted size (a model that
// far off is said as it is).
std::optional<uint64_t> FitCommand::verifyEdge(report::FitPrediction& p)
{
    uint64_t good = 0, bad = 0;
    if (p.verified[0].fits) {
        good = p.largest;
        if (!p.verified[1].fits) {
            if (!p.verified[1].outOfMemory())
                return std::nullopt;
            return good;
        }
        good = p.largest + 1;
        for (uint64_t step = 2; !bad; step *= 2) {
            if (good + step > 2 * p.largest)
                return std::nullopt;
            p.verified.push_back(runAt(good + step));
            const FitTrial& t = p.verified.back();
            if (!t.fits && !t.outOfMemory())
                return std::nullopt;
            (t.fits ? good : bad) = t.size;
        }
    } else {
        if (!p.verified[0].outOfMemory())
            return std::nullopt;
        bad = p.largest;
        for (uint64_t step = 1; !good && bad > 1; step *= 2) {
            p.verified.push_back(runAt(bad > step ? bad - step : 1));
            const FitTrial& t = p.verified.back();
            if (!t.fits && !t.outOfMemory())
                return std::nullopt;
            (t.fits ? good : bad) = t.size;
        }
        if (!good)
            return 0;  // size 1 runs out of memory: none fits
    }
    while (bad - good > 1) {
        p.verified.push_back(runAt(good + (bad - good) / 2));
        const FitTrial& t = p.verified.back();
        if (!t.fits && !t.outOfMemory())
            return std::nullopt;
        (t.fits ? good : bad) = t.size;
    }
    return good;
}

bool FitCommand::replayWantsLargerRun(const report::FitPrediction& sofar, const std::vector<FitTrial>& trials) const
{
    std::vector<std::pair<uint64_t, report::TorchTrace>> traced;
    for (const FitTrial& t : trials) {
        if (!t.fits || std::count(sofar.leftOut.begin(), sofar.leftOut.end(), t.size))
            continue;
        report::TorchTrace trace;
        std::string error;
        if (t.torchTrace.empty() || !report::readTorchTrace(t.torchTrace, sofar.device, &trace, &error) ||
            !trace.unusable.empty())
            return false;  // no replay whatever runs: not worth a round
        traced.emplace_back(t.size, std::move(trace));
    }
    if (traced.size() < 2)
        return false;
    std::sort(traced.begin(), traced.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<std::pair<uint64_t, const report::TorchTrace*>> runs;
    for (const auto& [n, trace] : traced)
        runs.emplace_back(n, &trace);
    report::ScaledTrace scaled;
    std::string why;
    return report::alignFromSmallest(runs, &scaled, &why) == runs.size();
}

// Where PyTorch traced its allocator, the answer is the replay's: the memory its segments
// strand is in it, not in any peak (allocator_replay.h). The peak model stays beside it, and
// where the replay is not used the text says why.
void FitCommand::replayTraces(const std::vector<const FitTrial*>& fitting, report::FitPrediction* prediction) const
{
    report::FitPrediction& p = *prediction;
    std::vector<std::pair<const FitTrial*, report::TorchTrace>> traced;
    std::string unreadable;
    for (const FitTrial* t : fitting) {
        if (t->torchTrace.empty() || std::count(p.leftOut.begin(), p.leftOut.end(), t->size))
            continue;
        report::TorchTrace trace;
        std::string error;
        if (report::readTorchTrace(t->torchTrace, p.device, &trace, &error))
            traced.emplace_back(t, std::move(trace));
        else
            unreadable = error;
    }
    const bool torch = std::any_of(fitting.begin(), fitting.end(), [](const FitTrial* t) { return t->torchAllocated; });
    if (!traced.empty()) {
        p.replay = report::replayPrediction(p, traced);
        if (p.replay.used)
            p.largest = p.replay.largest;
    } else if (!unreadable.empty()) {
        p.replay.why = unreadable;
    } else if (torch) {  // PyTorch ran but wrote no trace: its output says why
        p.replay.why = "PyTorch's allocator wrote no trace in the runs (their output.log says why)";
    }
}

int FitCommand::predict(const std::vector<FitTrial>& trials)
{
    std::vector<const FitTrial*> fitting;
    for (const FitTrial& t : trials)
        if (t.fits && !t.peaks.empty())
            fitting.push_back(&t);
    if (fitting.size() < 2) {
        const FitTrial* oom = nullptr;
        for (const FitTrial& t : trials)
            if (t.outOfMemory() && !oom)
                oom = &t;
        logError("fit: the command fits at " + std::to_string(fitting.size()) + " of the sizes " + sizeList(trials) +
                 " (" + (oom ? "out of memory at size " + std::to_string(oom->size) : "no report") +
                 "): give smaller --sizes");
        return kExitUsage;
    }
    report::FitOutcome outcome;
    report::FitPrediction& p = outcome.prediction;
    p = report::bindingPrediction(fitting);
    p.largestByModel = p.largest;
    replayTraces(fitting, &p);
    const uint64_t peak = report::predictPeak(p.model, p.largest, &p.at);
    p.predicted = peak + p.context;
    if (!p.replay.used) {
        p.headroom = report::headroomAt(p.largestSegment, p.largest, peak);
        p.headroomWhole = report::strandsWhole(p.largestSegment, p.largest, peak);
    }
    // Fail closed: no size from runs the model does not explain (a peak that does not follow
    // the size, shrinks with it, or strays from the model by more than the error the answer is
    // held to).
    outcome.residuals = report::fitResiduals(p, fitting);
    report::addReplayedPeaks(p.replay, &outcome.residuals);
    outcome.refused = report::unexplainedRuns(fitting, outcome.residuals, p);
    if (m_verify && p.largest > 0 && outcome.refused.empty()) {
        const auto start = std::chrono::steady_clock::now();
        const size_t measuring = m_rounds.size();  // the rounds said are the measuring ones
        for (uint64_t n : {p.largest, p.largest + 1})
            p.verified.push_back(runAt(n));
        p.verifiedLargest = verifyEdge(p);
        m_rounds.resize(measuring);
        m_verifySeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::vector<const FitTrial*> verified;
        for (const FitTrial& t : p.verified)
            if (t.fits && !t.peaks.empty())
                verified.push_back(&t);
        outcome.verified = report::fitResiduals(p, verified);
        report::addReplayedPeaks(p.replay, &outcome.verified);
    }
    outcome.trials = trials;
    outcome.fitted = fitting.size();
    outcome.rounds = m_rounds;
    outcome.reruns = m_reruns;
    outcome.seconds = m_seconds;
    outcome.verifySeconds = m_verifySeconds;
    outcome.deviceLimit = m_limit.has_value();
    if (m_format == "json")
        report::renderFitJson(outcome, std::cout);
    else
        report::renderFitText(outcome, std::cout);
    if (!outcome.refused.empty()) {
        logError("fit: no answer: " + outcome.refused.front() +
                 (outcome.refused.size() > 1 ? " (and " + std::to_string(outcome.refused.size() - 1) + " more above)" : ""));
        return kExitUnexplained;
    }
    // The prediction holds when its size fits: the next one up fitting too makes it
    // conservative (said), not wrong.
    const bool holds = p.verified.empty() || p.verified[0].fits;
    return holds ? kExitOk : kExitFindings;
}

} // namespace

std::unique_ptr<Command> makeFitCommand()
{
    return std::make_unique<FitCommand>();
}

} // namespace oomscope::cli
