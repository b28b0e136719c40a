// oomscope fit [--sizes A,B,C] [--device-limit SIZE] [--verify] [--format json] -- CMD ... {} ...:
// runs CMD at a few sizes (the {} in its arguments, and OOMSCOPE_FIT_SIZE in its environment),
// each under the preload, fits each device's peak by source as a function of the size
// (report/analysis/fit.h) and says the largest size that fits the device (or the limit), with
// its margin and the breakdown there; --verify runs that size and the next one up.
//
// The sizes, by default: 1, 2 and 4, then those of an eighth and a quarter of the size they
// predict that are above 4, so that the answer is extrapolated 4x at most (one round where it
// is 16 or less: a trial's start dominates a short program, GPT-2's 20 s). The runs of a round go at the same time when
// the device has room for all of them (their peaks bounded from the runs before, with a
// quarter to spare); one that runs out of memory beside others is run again alone.
#include "command.h"
#include "launch.h"

#include "report/analysis/check.h"
#include "report/analysis/fit.h"
#include "report/analysis/memory_over_time.h"
#include "report/format.h"
#include "report/json_out.h"
#include "report/json_reader.h"
#include "report/model.h"
#include "common/device_cards.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <chrono>
#include <map>
#include <sstream>
#include <sys/wait.h>

namespace oomscope::cli {
namespace {

using report::Source;

// One run of the command at one size.
struct Trial {
    uint64_t size = 0;
    // Whether it fits is the program's own verdict: it exited 0. A run that fits may still
    // have had out-of-memory episodes it recovered from (PyTorch's cuDNN convolutions catch the
    // OOM of a workspace and take an algorithm that needs less: ResNet-50 at the edge of the
    // H200's 24 GiB rehearsal wrote 8 OOM reports and trained its steps); said, not a failure.
    bool fits = false;
    uint64_t oomReports = 0;  // OOM reports it wrote
    bool outOfMemory() const { return !fits && oomReports > 0; }
    int status = 0;          // the wait status
    std::string log;         // the program's output
    std::map<int64_t, report::FitPoint> peaks;  // by device (fitting runs)
    std::map<int64_t, uint64_t> context;        // by device: what the process held outside tracked memory
    std::map<int64_t, uint64_t> others;         // by device: what other processes held at exit (where the
                                                // driver listed this one: devices[].process_bytes)
    std::map<int64_t, uint64_t> capacity;       // by device: the limit, else the device's memory
    std::map<int64_t, uint64_t> room;           // by device: free at exit + what the run held there
    std::map<int64_t, uint64_t> largestSegment; // by device: the largest a caching allocator asked for
    std::map<int64_t, uint64_t> tracked;        // by device: the tracked peak (what the run held at most)
    bool torchAllocated = false;                // torch's peak is PyTorch's allocated peak (step samples)
};

// Per device, the largest device memory a caching allocator (PyTorch's, CuPy's: the ones that
// strand free memory in their segments) asked for in the run.
std::map<int64_t, uint64_t> largestCachingSegments(const report::Report& r)
{
    std::map<int64_t, uint64_t> out;
    const report::Timeline& tl = r.timeline;
    const report::Timeline::Flags isAlloc = tl.flags("alloc"), deviceApi = tl.flags(report::deviceMemoryApi);
    std::map<uint32_t, bool> caching;  // by stack
    for (const report::TimelineRow& row : tl.rows) {
        if (row.device < 0 || !isAlloc(row.kind) || !deviceApi(row.api) || row.size <= out[row.device])
            continue;
        auto [it, fresh] = caching.try_emplace(row.stack, false);
        if (fresh) {
            const Source s = report::stackSource(r, row.stack);
            it->second = s == Source::Torch || s == Source::Cupy;
        }
        if (it->second)
            out[row.device] = row.size;
    }
    return out;
}

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

std::vector<uint64_t> ranSizes(const std::vector<Trial>& trials)
{
    std::vector<uint64_t> sizes;
    for (const Trial& t : trials)
        sizes.push_back(t.size);
    return sizes;
}

std::string sizeList(const std::vector<uint64_t>& sizes)
{
    std::string out;
    for (uint64_t s : sizes)
        out += (out.empty() ? "" : ", ") + std::to_string(s);
    return out;
}

std::string recovered(const Trial& t)
{
    return " (after " + std::to_string(t.oomReports) + " out-of-memory episode" + (t.oomReports == 1 ? "" : "s") +
           " it recovered from: " + dirName(t.log) + ")";
}

uint64_t largestMeasured(const std::vector<Trial>& trials)
{
    uint64_t most = 1;
    for (const Trial& t : trials)
        if (t.fits)
            most = std::max(most, t.size);
    return most;
}

uint64_t peakOn(const Trial& t, int64_t device)
{
    uint64_t total = 0;
    if (auto it = t.peaks.find(device); it != t.peaks.end())
        for (const auto& [s, b] : it->second.bytes)
            total += b;
    return total;
}

// Whether the first device's peak moves with the size (by 1 MiB and 0.5 % at least); said
// (one line) when not and `say`.
bool changesWithSize(const std::vector<const Trial*>& fitting, bool say)
{
    const int64_t firstDevice = fitting.front()->peaks.begin()->first;
    const uint64_t low = peakOn(*fitting.front(), firstDevice), high = peakOn(*fitting.back(), firstDevice);
    if (high > low + std::max<uint64_t>(uint64_t(1) << 20, low / 200))
        return true;
    if (say)
        logError("fit: the peak does not change with the size (" + report::formatBytes(low) + " at size " +
                 std::to_string(fitting.front()->size) + ", " + report::formatBytes(high) + " at size " +
                 std::to_string(fitting.back()->size) + "): does the command use {} or read OOMSCOPE_FIT_SIZE?");
    return false;
}

class FitCommand final : public Command {
public:
    const char* name() const override { return "fit"; }
    CLI::App* setup(CLI::App& app) override
    {
        CLI::App* c = app.add_subcommand(
            name(), "Will it fit? Run a command at a few small sizes ({} in its arguments, OOMSCOPE_FIT_SIZE in its "
                    "environment) and predict the largest that fits the GPU: oomscope fit [options] -- CMD ... {} ...");
        c->add_option("--sizes", m_sizes, "The sizes to run at, ascending (default: 1 and 2, then an eighth and a "
                                          "quarter of the size they predict)");
        c->add_option("--device-limit", m_limit, "Predict for a smaller card: SIZE or a card's name (as run's "
                                                 "--device-limit; the runs are rehearsed under it)");
        c->add_option("--steps", m_steps, "Passed to the command as OOMSCOPE_FIT_STEPS (for programs that read it)");
        c->add_flag("--verify", m_verify, "Then run the predicted size and the next one up, and say whether they fit");
        c->add_option("--format", m_format, "text (a table) or json")->check(CLI::IsMember({"text", "json"}));
        c->add_option("-o,--output-dir", m_outputDir, "Folder for the runs' reports and output (default oomscope-fit)");
        c->prefix_command();
        m_app = c;
        return c;
    }
    int argumentsToParse(int argc, char** argv) override { return splitAtDashes(argc, argv, &m_command); }
    int run() override;

private:
    // The binding device's model and prediction.
    struct Prediction {
        int64_t device = 0;
        report::FitModel model;
        report::SourceModel largestSegment;  // the largest caching-allocator segment by size
        uint64_t context = 0, capacity = 0, largest = 0, predicted = 0, headroom = 0;
        uint64_t others = 0;  // what other processes held on the device through every run
        // The same from the tracked peaks (PyTorch's reserved memory, its cache with it): the
        // model before session 10's allocated peaks, said in the JSON to compare the two.
        uint64_t largestByTracked = 0;
        std::map<Source, uint64_t> at;  // by source at the largest size
        std::vector<Trial> verified;    // --verify: the largest size and the next one
    };
    bool parseOptions();
    Launch prepare(uint64_t size, Trial* t) const;
    void collect(const Ran& ran, Trial* t) const;
    Trial runAt(uint64_t size);
    // Runs sizes at the same time; one that runs out of memory beside others runs again alone.
    std::vector<Trial> runTogether(const std::vector<uint64_t>& sizes);
    // Whether the device has room for all of sizes at once, by the runs so far.
    bool roomFor(const std::vector<uint64_t>& sizes, const std::vector<Trial>& trials) const;
    // false (said, m_status set) when a run failed for another reason than memory.
    bool accept(const std::vector<Trial>& ran, std::vector<Trial>* trials);
    Prediction binding(const std::vector<const Trial*>& fitting) const;
    int predict(const std::vector<Trial>& trials);
    void printJson(const std::vector<Trial>& trials, const Prediction& p) const;
    void printText(const std::vector<Trial>& trials, size_t fitted, const Prediction& p) const;

    CLI::App* m_app = nullptr;
    std::string m_sizes;  // empty: chosen as the runs go
    std::string m_limit;
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
    if (!m_limit.empty()) {
        uint64_t limits[64];
        if (!common::parseDeviceLimitList(m_limit.c_str(), limits, 64)) {
            logError("fit: --device-limit " + m_limit + ": not " + common::kDeviceLimitGrammar);
            return false;
        }
        setenv("OOMSCOPE_DEVICE_LIMIT", m_limit.c_str(), 1);
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

Launch FitCommand::prepare(uint64_t size, Trial* t) const
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
    l.env = {{"OOMSCOPE_OUTPUT_DIR", dir}, {"OOMSCOPE_FIT_SIZE", std::to_string(size)}, {"OOMSCOPE_QUIET", "1"}};
    if (m_steps)
        l.env.emplace_back("OOMSCOPE_FIT_STEPS", std::to_string(m_steps));
    t->log = l.logPath = dir + "/output.log";
    return l;
}

void FitCommand::collect(const Ran& ran, Trial* t) const
{
    t->status = ran.execErrno ? (127 << 8) : ran.status;
    const std::string dir = dirName(t->log);
    for (const std::string& name : reportsIn(dir)) {
        report::Report r;
        std::string error;
        if (!report::readReportFile(dir + "/" + name, &r, &error))
            continue;
        if (r.trigger.kind == report::TriggerKind::Oom)
            ++t->oomReports;
        if (r.trigger.kind != report::TriggerKind::Exit)
            continue;
        // PyTorch's need is the most it had allocated at once, not the most it reserved: a
        // roomy run keeps freed blocks cached (ResNet-50: 15 % of its reserved peak) that the
        // allocator gives back and reuses when the device is full. The step samples carry it.
        std::map<int64_t, uint64_t> torchAllocated;
        for (const report::Step& step : r.steps)
            for (const report::StepDevice& d : step.devices)
                if (d.peakAllocatedBytes)
                    torchAllocated[d.device] = std::max(torchAllocated[d.device], *d.peakAllocatedBytes);
        for (const report::MemoryRow& m : r.memory) {
            report::FitPoint p{t->size, {}};
            t->tracked[m.device] = m.peakTrackedBytes;
            if (m.peak)
                p.bytes = m.peak->bySource;
            else
                p.bytes[Source::Other] = m.peakTrackedBytes;
            if (auto it = torchAllocated.find(m.device); it != torchAllocated.end() && p.bytes.count(Source::Torch)) {
                p.bytes[Source::Torch] = it->second;
                t->torchAllocated = true;
            }
            t->peaks[m.device] = p;
            t->context[m.device] = m.untrackedBytes.value_or(0);
            const report::Device* d = r.findDevice(m.device);
            t->capacity[m.device] = d && d->limitBytes ? *d->limitBytes : d && d->totalBytes ? *d->totalBytes : 0;
            if (d && d->freeBytes)
                t->room[m.device] = *d->freeBytes + m.trackedBytes + m.untrackedBytes.value_or(0);
            if (d && d->freeBytes && d->totalBytes && d->processBytes && *d->totalBytes >= *d->freeBytes + *d->processBytes)
                t->others[m.device] = *d->totalBytes - *d->freeBytes - *d->processBytes;
        }
        t->largestSegment = largestCachingSegments(r);
    }
    t->fits = ran.started && !ran.execErrno && WIFEXITED(ran.status) && WEXITSTATUS(ran.status) == 0;
}

Trial FitCommand::runAt(uint64_t size)
{
    return runTogether({size}).front();
}

std::vector<Trial> FitCommand::runTogether(const std::vector<uint64_t>& sizes)
{
    std::vector<Trial> trials(sizes.size());
    std::vector<Launch> launches;
    for (size_t i = 0; i < sizes.size(); ++i)
        launches.push_back(prepare(sizes[i], &trials[i]));
    const std::vector<Ran> ran = spawnAll(launches);
    for (size_t i = 0; i < sizes.size(); ++i)
        collect(ran[i], &trials[i]);
    m_rounds.push_back(sizes);
    if (sizes.size() > 1)
        for (Trial& t : trials)
            if (t.outOfMemory()) {  // perhaps only beside the others: alone, as the program will run
                m_reruns.push_back(t.size);
                Trial alone{};
                const Launch l = prepare(t.size, &alone);
                collect(spawnAll({l}).front(), &alone);
                t = alone;
            }
    return trials;
}

bool FitCommand::roomFor(const std::vector<uint64_t>& sizes, const std::vector<Trial>& trials) const
{
    std::vector<const Trial*> fitting;
    for (const Trial& t : trials)
        if (t.fits && !t.peaks.empty())
            fitting.push_back(&t);
    if (fitting.empty() || sizes.size() < 2)
        return sizes.size() < 2;
    const Trial& last = *fitting.back();
    for (const auto& [device, held] : last.tracked) {
        auto room = last.room.find(device);
        if (room == last.room.end())
            return false;
        std::vector<report::FitPoint> points;  // what the runs held (the cache too), not what they needed
        for (const Trial* t : fitting)
            if (auto it = t->tracked.find(device); it != t->tracked.end())
                points.push_back({t->size, {{Source::Other, it->second}}});
        const report::FitModel model = report::fitPeaks(points);
        uint64_t need = 0;
        for (uint64_t n : sizes) {
            // One run: its peak scaled from the largest run (a + b·n grows no faster than n);
            // two or more: the line through them.
            const uint64_t peak = points.size() >= 2 ? report::predictPeak(model, n) : held / last.size * n;
            need += peak + peak / 4 + last.context.at(device);
        }
        if (need > room->second)
            return false;
    }
    return true;
}

bool FitCommand::accept(const std::vector<Trial>& ran, std::vector<Trial>* trials)
{
    for (const Trial& t : ran) {
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
    std::vector<Trial> trials;
    const bool chosen = m_sizeList.empty();
    const std::vector<uint64_t> first = chosen ? std::vector<uint64_t>{1, 2, 4}
                                               : std::vector<uint64_t>(m_sizeList.begin(), m_sizeList.begin() + 2);
    if (!accept(runTogether(first), &trials))
        return m_status;
    auto oomSeen = [&] { return std::any_of(trials.begin(), trials.end(), [](const Trial& t) { return t.outOfMemory(); }); };
    std::vector<uint64_t> rest;
    if (!chosen) {
        rest.assign(m_sizeList.begin() + 2, m_sizeList.end());
    } else if (!oomSeen()) {
        // An eighth and a quarter of what the small runs predict, those above the largest run:
        // the answer is then extrapolated 4x at most, and a wrong guess of the line costs one
        // round, not the fit.
        std::vector<const Trial*> fitting;
        for (const Trial& t : trials)
            fitting.push_back(&t);
        const bool measured = std::all_of(trials.begin(), trials.end(), [](const Trial& t) { return !t.peaks.empty(); });
        if (measured && changesWithSize(fitting, false)) {
            const uint64_t largest = binding(fitting).largest, ran = first.back();
            for (uint64_t n : {largest / 8, largest / 4})
                if (n > ran && n < largest && (rest.empty() || n > rest.back()))
                    rest.push_back(n);
        }
    }
    if (!rest.empty() && !oomSeen()) {
        if (roomFor(rest, trials)) {
            if (!accept(runTogether(rest), &trials))
                return m_status;
        } else {
            for (uint64_t n : rest) {
                if (!accept({runAt(n)}, &trials))
                    return m_status;
                if (trials.back().outOfMemory())
                    break;  // larger sizes do not fit either
            }
        }
    }
    m_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::sort(trials.begin(), trials.end(), [](const Trial& a, const Trial& b) { return a.size < b.size; });
    return predict(trials);
}

FitCommand::Prediction FitCommand::binding(const std::vector<const Trial*>& fitting) const
{
    // Per device: the model, and the largest size within its capacity; the smallest wins.
    Prediction p;
    bool any = false;
    for (const auto& [device, first] : fitting.front()->peaks) {
        std::vector<report::FitPoint> points;
        for (const Trial* t : fitting)
            if (auto it = t->peaks.find(device); it != t->peaks.end())
                points.push_back(it->second);
        Prediction d;
        d.device = device;
        d.model = report::fitPeaks(points);
        std::vector<report::FitPoint> segments;
        for (const Trial* t : fitting)
            if (auto it = t->largestSegment.find(device); it != t->largestSegment.end())
                segments.push_back({t->size, {{Source::Other, it->second}}});
        if (const report::FitModel m = report::fitPeaks(segments); m.count(Source::Other))
            d.largestSegment = m.at(Source::Other);
        // What the process holds outside its tracked memory (the context): its own memory as
        // the driver lists it (NVML) less the tracked. Where the driver does not list it (a PID
        // namespace), the device's used memory less the tracked, which counts a run beside it
        // too: the least any run saw (the last of a round to exit saw itself alone, unless the
        // runs ended together: GPT-2 on the H200 read 4.65 GiB for 0.65).
        d.context = UINT64_MAX;
        for (const Trial* t : fitting)
            if (auto it = t->context.find(device); it != t->context.end())
                d.context = std::min(d.context, it->second);
        if (d.context == UINT64_MAX)
            d.context = 0;
        // Other processes on the device through every run (not fit's own runs: one of them
        // saw none): the answer is for the card without them, said.
        d.others = UINT64_MAX;
        for (const Trial* t : fitting) {
            auto it = t->others.find(device);
            d.others = it == t->others.end() ? 0 : std::min(d.others, it->second);
        }
        if (d.others == UINT64_MAX)
            d.others = 0;
        d.capacity = fitting.back()->capacity.at(device);
        d.largest = report::largestFitting(d.model, d.context, d.capacity, &d.largestSegment);
        std::vector<report::FitPoint> tracked;
        for (const Trial* t : fitting)
            if (auto it = t->tracked.find(device); it != t->tracked.end())
                tracked.push_back({t->size, {{Source::Other, it->second}}});
        d.largestByTracked = report::largestFitting(report::fitPeaks(tracked), d.context, d.capacity, &d.largestSegment);
        if (!any || d.largest < p.largest)
            p = d;
        any = true;
    }
    return p;
}

int FitCommand::predict(const std::vector<Trial>& trials)
{
    std::vector<const Trial*> fitting;
    for (const Trial& t : trials)
        if (t.fits && !t.peaks.empty())
            fitting.push_back(&t);
    if (fitting.size() < 2) {
        const Trial* oom = nullptr;
        for (const Trial& t : trials)
            if (t.outOfMemory() && !oom)
                oom = &t;
        logError("fit: the command fits at " + std::to_string(fitting.size()) + " of the sizes " + sizeList(ranSizes(trials)) +
                 " (" + (oom ? "out of memory at size " + std::to_string(oom->size) : "no report") +
                 "): give smaller --sizes");
        return kExitUsage;
    }
    // A command whose peak does not move with the size does not use it.
    if (!changesWithSize(fitting, true))
        return kExitUsage;
    Prediction p = binding(fitting);
    p.predicted = report::predictPeak(p.model, p.largest, &p.at) + p.context;
    p.headroom = report::headroomAt(p.largestSegment, p.largest);
    if (m_verify && p.largest > 0) {
        const auto start = std::chrono::steady_clock::now();
        const size_t measuring = m_rounds.size();  // the rounds said are the measuring ones
        for (uint64_t n : {p.largest, p.largest + 1})
            p.verified.push_back(runAt(n));
        m_rounds.resize(measuring);
        m_verifySeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    if (m_format == "json")
        printJson(trials, p);
    else
        printText(trials, fitting.size(), p);
    // The prediction holds when its size fits: the next one up fitting too makes it
    // conservative (said), not wrong.
    const bool holds = p.verified.empty() || p.verified[0].fits;
    return holds ? kExitOk : kExitFindings;
}

void FitCommand::printJson(const std::vector<Trial>& trials, const Prediction& p) const
{
    report::JsonOut w;
    w.beginObject();
    w.key("sizes");
    w.beginArray();
    for (const Trial& t : trials) {
        w.beginObject();
        w.key("size"), w.value(t.size);
        w.key("fits"), w.value(t.fits);
        w.key("oom_reports"), w.value(t.oomReports);
        w.key("peak_bytes"), w.value(peakOn(t, p.device));
        w.endObject();
    }
    w.endArray();
    w.key("rounds");
    w.beginArray();
    for (const std::vector<uint64_t>& round : m_rounds) {
        w.beginArray();
        for (uint64_t n : round)
            w.value(n);
        w.endArray();
    }
    w.endArray();
    w.key("torch_need");
    w.value(std::any_of(trials.begin(), trials.end(), [](const Trial& t) { return t.torchAllocated; }) ? "allocated_peak"
                                                                                                      : "reserved_peak");
    w.key("rerun_alone");
    w.beginArray();
    for (uint64_t n : m_reruns)
        w.value(n);
    w.endArray();
    w.key("seconds"), w.value(m_seconds);
    w.key("device"), w.value(p.device);
    w.key("capacity_bytes"), w.value(p.capacity);
    w.key("context_bytes"), w.value(p.context);
    w.key("other_processes_bytes"), w.value(p.others);
    w.key("model");
    w.beginObject();
    for (const auto& [s, m] : p.model) {
        w.key(std::string(report::enumName(s)).c_str());
        w.beginObject();
        w.key("a"), w.value(m.a);
        w.key("b"), w.value(m.b);
        w.key("c"), w.value(m.c);
        w.endObject();
    }
    w.endObject();
    w.key("largest_size"), w.value(p.largest);
    w.key("largest_measured_size"), w.value(largestMeasured(trials));
    w.key("largest_size_by_tracked_peak"), w.value(p.largestByTracked);
    w.key("predicted_bytes"), w.value(p.predicted);
    w.key("headroom_bytes"), w.value(p.headroom);
    w.key("margin_bytes"), w.value(p.capacity > p.predicted + p.headroom ? p.capacity - p.predicted - p.headroom : 0);
    w.key("by_source");
    w.beginObject();
    for (const auto& [s, b] : p.at)
        w.key(std::string(report::enumName(s)).c_str()), w.value(b);
    w.endObject();
    if (!p.verified.empty()) {
        w.key("verify");
        w.beginArray();
        for (const Trial& t : p.verified) {
            w.beginObject();
            w.key("size"), w.value(t.size);
            w.key("fits"), w.value(t.fits);
            w.key("oom_reports"), w.value(t.oomReports);
            w.endObject();
        }
        w.endArray();
        w.key("verify_seconds"), w.value(m_verifySeconds);
    }
    w.endObject();
    std::cout << w.buffer() << "\n";
}

void FitCommand::printText(const std::vector<Trial>& trials, size_t fitted, const Prediction& p) const
{
    std::string rounds;
    for (const std::vector<uint64_t>& round : m_rounds) {
        rounds += rounds.empty() ? "" : ", then ";
        for (size_t i = 0; i < round.size(); ++i)
            rounds += (i ? "+" : "") + std::to_string(round[i]);
    }
    std::cout << "oomscope fit: " << fitted << " runs that fit (sizes " << rounds << "; " << std::fixed
              << std::setprecision(1) << m_seconds << " s" << (m_reruns.empty() ? "" : "; rerun alone: " + sizeList(m_reruns))
              << ")";
    std::cout.unsetf(std::ios::floatfield);
    if (trials.back().outOfMemory())
        std::cout << "; out of memory at size " << trials.back().size;
    std::cout << "\n\n  size  peak on device " << p.device << "\n";
    for (const Trial& t : trials)
        std::cout << "  " << t.size << "     " << (t.fits ? report::formatBytes(peakOn(t, p.device)) : "out of memory")
                  << "\n";
    if (std::any_of(trials.begin(), trials.end(), [](const Trial& t) { return t.torchAllocated; }))
        std::cout << "  (torch: the most PyTorch allocated at once; its cache is given back when the device is full)\n";
    std::cout << "\n  model, per source:";
    for (const auto& [s, m] : p.model)
        std::cout << "  " << report::enumName(s) << " " << report::formatBytes(uint64_t(std::max(0.0, m.a))) << " + "
                  << report::formatBytes(uint64_t(std::max(0.0, m.b))) << "·size"
                  << (m.quadratic ? " + " + report::formatBytes(uint64_t(m.c)) + "·size²" : "");
    std::cout << "\n\nLargest size that fits device " << p.device << " (" << report::formatBytes(p.capacity)
              << (m_limit.empty() ? "" : ", --device-limit") << "): " << p.largest << "\n";
    if (p.largest > 0) {
        std::cout << "  predicted peak " << report::formatBytes(p.predicted) << " (context "
                  << report::formatBytes(p.context) << ")";
        if (p.headroom)
            std::cout << ", headroom " << report::formatBytes(p.headroom) << " (half the largest segment PyTorch's "
                      << "allocator asks for there)";
        std::cout << ", margin "
                  << report::formatBytes(p.capacity > p.predicted + p.headroom ? p.capacity - p.predicted - p.headroom : 0)
                  << "\n  at size "
                  << p.largest << ":";
        for (const auto& [s, b] : p.at)
            std::cout << "  " << report::enumName(s) << " " << report::formatBytes(b);
        std::cout << "\n";
    }
    if (m_limit.empty() && p.others > std::max<uint64_t>(1ull << 30, p.capacity / 20))
        std::cout << "  (other processes held " << report::formatBytes(p.others) << " of device " << p.device
                  << " through every run: the answer is for the device without them; --device-limit for what is "
                  << "left beside them)\n";
    // Far beyond the measured sizes, a term the small runs could not show (a cache that
    // grows in steps, a workspace picked by size) can move the answer: said, with the remedy.
    const uint64_t measured = largestMeasured(trials);
    if (p.largest > 8 * measured && p.verified.empty())
        std::cout << "  (" << p.largest / measured << "x the largest size measured: --verify runs it, or measure "
                  << "closer with --sizes)\n";
    for (const Trial& t : p.verified)
        std::cout << "verify: size " << t.size << (t.fits ? " fits" : t.outOfMemory() ? " runs out of memory" : " fails")
                  << (t.fits && t.oomReports ? recovered(t) : "") << "\n";
    if (!p.verified.empty())
        std::cout << (!p.verified[0].fits   ? "verify: the prediction does NOT hold\n"
                      : p.verified[1].fits ? "verify: the prediction holds, conservatively (the next size fits too)\n"
                                           : "verify: the prediction holds\n");
}

} // namespace

std::unique_ptr<Command> makeFitCommand()
{
    return std::make_unique<FitCommand>();
}

} // namespace oomscope::cli
