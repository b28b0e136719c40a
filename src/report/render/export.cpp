#include "report/render/export.h"

#include "report/analysis/job.h"
#include "report/analysis/live_tree.h"
#include "report/analysis/memory_over_time.h"
#include "report/format.h"
#include "report/json_out.h"
#include "report/render/pickle_writer.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>

namespace oomscope::report {

bool parseExportFormat(const std::string& name, ExportFormat* out)
{
    if (name == "torch-snapshot")
        *out = ExportFormat::TorchSnapshot;
    else if (name == "chrome-trace")
        *out = ExportFormat::ChromeTrace;
    else if (name == "folded")
        *out = ExportFormat::Folded;
    else
        return false;
    return true;
}

const char* exportFormatNames()
{
    return "torch-snapshot, chrome-trace, folded";
}

std::string exportFolded(const Report& report)
{
    std::string out;
    for (const auto& [stack, bytes] : foldedStacks(report))
        out += stack + " " + std::to_string(bytes) + "\n";
    return out;
}

// ---- chrome-trace

namespace {

// One process's track of a trace: its pid there, its name, and where its events sit on the
// trace's clock (microseconds).
struct Track {
    const Report* r = nullptr;
    int64_t pid = 0;
    std::string name;
    bool alone = true;  // the only process of its trace: its OOM marks the whole trace
    int64_t offsetNs = 0;  // trace time = the process's monotonic time + offsetNs
    uint64_t fromNs = 0, toNs = UINT64_MAX;  // the window, on the process's clock
    double micros(uint64_t monoNs) const
    {
        const int64_t t = int64_t(monoNs) + offsetNs;
        return t > 0 ? double(t) / 1000.0 : 0.0;
    }
    bool inside(uint64_t monoNs) const { return monoNs >= fromNs && monoNs <= toNs; }
};

void traceEvent(JsonOut& w, const char* ph, const std::string& name, double ts, int64_t pid, int64_t tid)
{
    w.beginObject();
    w.key("ph");
    w.value(ph);
    w.key("name");
    w.value(name);
    w.key("ts");
    w.value(ts);
    w.key("pid");
    w.value(pid);
    w.key("tid");
    w.value(tid);
}

void traceMetadata(JsonOut& w, const Track& t, int64_t sortIndex)
{
    const std::tuple<const char*, int64_t, std::string> names[] = {
        {"process_name", 0, t.name}, {"thread_name", 1, "steps"}, {"thread_name", 2, "events"}};
    for (const auto& [kind, tid, name] : names) {
        traceEvent(w, "M", kind, 0, t.pid, tid);
        w.key("args");
        w.beginObject();
        w.key("name");
        w.value(name);
        w.endObject();
        w.endObject();
    }
    traceEvent(w, "M", "process_sort_index", 0, t.pid, 0);
    w.key("args");
    w.beginObject();
    w.key("sort_index");
    w.value(sortIndex);
    w.endObject();
    w.endObject();
}

// One counter track per device with a series per source; a sample where the composition changes.
void traceCounters(JsonOut& w, const Track& t, const std::vector<DeviceOverTime>& devices)
{
    const Report& r = *t.r;
    for (const DeviceOverTime& d : devices) {
        const std::string name = "device " + std::to_string(d.device) + " memory by source";
        for (size_t b = 0; b < d.timeNs.size(); ++b) {
            bool changed = b == 0;
            for (size_t s = 0; s < d.sources.size() && !changed; ++s)
                changed = d.bytes[s][b] != d.bytes[s][b - 1];
            if (!changed)
                continue;
            traceEvent(w, "C", name, t.micros(std::min(d.timeNs[b], d.endNs)), t.pid, 0);
            w.key("args");
            w.beginObject();
            for (size_t s = 0; s < d.sources.size(); ++s) {
                w.key(enumName(d.sources[s]));
                w.value(d.bytes[s][b]);
            }
            w.endObject();
            w.endObject();
        }
        if (d.allocated.empty())
            continue;
        const std::string fw = "device " + std::to_string(d.device) + " " + r.trigger.framework.value_or("framework");
        for (size_t i = 0; i < d.allocated.size(); ++i) {
            traceEvent(w, "C", fw + " allocated/reserved", t.micros(d.allocated[i].first), t.pid, 0);
            w.key("args");
            w.beginObject();
            w.key("allocated");
            w.value(d.allocated[i].second);
            if (i < d.reserved.size()) {
                w.key("reserved");
                w.value(d.reserved[i].second);
            }
            w.endObject();
            w.endObject();
        }
    }
}

void traceSteps(JsonOut& w, const Track& t)
{
    const Report& r = *t.r;
    for (size_t i = 0; i < r.steps.size(); ++i) {
        const Step& s = r.steps[i];
        if (!t.inside(s.timeNs))
            continue;
        const uint64_t end = i + 1 < r.steps.size() ? r.steps[i + 1].timeNs : std::max(r.trigger.timeNs, s.timeNs);
        traceEvent(w, "X", std::string(enumName(s.source)) + " " + std::to_string(s.index), t.micros(s.timeNs), t.pid, 1);
        w.key("dur");
        w.value(double(end - s.timeNs) / 1000.0);
        w.endObject();
    }
}

void traceInstants(JsonOut& w, const Track& t, const std::vector<DeviceOverTime>& devices)
{
    for (const DeviceOverTime& d : devices) {
        for (const TimeMarker& m : d.markers) {
            if (m.kind == TimeMarker::Kind::Step)
                continue;  // slices of their own
            const char* scope = m.kind == TimeMarker::Kind::Oom && t.alone ? "g" : "p";
            const char* name = m.kind == TimeMarker::Kind::Oom       ? "OOM"
                               : m.kind == TimeMarker::Kind::Failure ? "allocation failed"
                                                                     : "label";
            traceEvent(w, "i", name, t.micros(m.timeNs), t.pid, 2);
            w.key("s");
            w.value(scope);
            w.key("args");
            w.beginObject();
            w.key("device");
            w.value(d.device);
            w.key("what");
            w.value(m.label);
            w.endObject();
            w.endObject();
        }
    }
}

// The track's events (its window's counters, steps and instants), counted into the window's kept.
void traceTrack(JsonOut& w, const Track& t, size_t buckets, int64_t sortIndex, const ExportWindow& window)
{
    OverTimeOptions options;
    options.buckets = buckets;
    options.fromNs = t.fromNs;
    options.toNs = t.toNs;
    const std::vector<DeviceOverTime> devices = memoryOverTime(*t.r, options);
    traceMetadata(w, t, sortIndex);
    traceCounters(w, t, devices);
    traceSteps(w, t);
    traceInstants(w, t, devices);
    for (const TimelineRow& row : t.r->timeline.rows)
        (t.inside(row.timeNs) ? window.kept : window.leftOut) += 1;
}

// The window on one process's clock: from/to as given (its own monotonic time), and --last as the
// time of its Nth newest event.
void narrow(Track& t, const ExportWindow& window, int64_t offsetOfWindowNs)
{
    const auto onProcess = [&](uint64_t windowNs, uint64_t none) {
        if (windowNs == none)
            return none;
        const int64_t v = int64_t(windowNs) - offsetOfWindowNs;
        return v < 0 ? uint64_t(0) : uint64_t(v);
    };
    t.fromNs = onProcess(window.fromNs, 0);
    t.toNs = onProcess(window.toNs, UINT64_MAX);
    const std::vector<TimelineRow>& rows = t.r->timeline.rows;
    if (window.last > 0 && rows.size() > window.last)
        t.fromNs = std::max(t.fromNs, rows[rows.size() - window.last].timeNs);
}

std::string cmdlineOf(const Report& r)
{
    std::string cmdline;
    for (const std::string& a : r.process.cmdline)
        cmdline += (cmdline.empty() ? "" : " ") + a;
    return cmdline;
}

void traceHead(JsonOut& w, const std::string& tool, const std::string& what)
{
    w.beginObject();
    w.key("displayTimeUnit");
    w.value("ms");
    w.key("otherData");
    w.beginObject();
    w.key("tool");
    w.value(tool);
    w.key("trigger");
    w.value(what);
    w.endObject();
    w.key("traceEvents");
    w.beginArray();
}

std::string traceTail(JsonOut& w)
{
    w.endArray();
    w.endObject();
    std::string out = std::move(w.buffer());
    out.push_back('\n');
    return out;
}

} // namespace

std::string exportChromeTrace(const Report& report, const ExportWindow& window)
{
    Track t;
    t.r = &report;
    t.pid = report.process.pid;
    t.name = "pid " + std::to_string(report.process.pid) + ": " + truncateMiddle(cmdlineOf(report), 120);
    t.offsetNs = -int64_t(report.process.startNs);  // microseconds since the process started
    narrow(t, window, t.offsetNs);
    JsonOut w;
    traceHead(w, "oomscope " + report.tool.version, report.trigger.message);
    window.kept = window.leftOut = 0;
    traceTrack(w, t, 10000, 0, window);
    return traceTail(w);
}

std::string exportJobChromeTrace(const JobView& job, const ExportWindow& window)
{
    // The job's clock: the wall clock from the first rank's start.
    uint64_t startUnix = UINT64_MAX;
    for (const RankRow& row : job.ranks)
        startUnix = std::min(startUnix, row.shown->process.startUnixNs);
    JsonOut w;
    const Report& first = *job.ranks.front().shown;
    traceHead(w, "oomscope " + first.tool.version,
              job.firstFailure ? rankName(job.ranks[job.firstFailure->row]) + " fails: " + job.firstFailure->what
                               : "no rank ran out of memory");
    window.kept = window.leftOut = 0;
    const size_t buckets = std::clamp<size_t>(200000 / std::max<size_t>(1, job.ranks.size()), 250, 10000);
    for (size_t i = 0; i < job.ranks.size(); ++i) {
        const RankRow& row = job.ranks[i];
        Track t;
        t.r = row.shown;
        t.pid = int64_t(i) + 1;  // by the ranks' order (rank order), not the hosts' pids, which clash
        t.alone = false;
        t.name = rankName(row) + " (" + row.host + ", pid " + std::to_string(row.pid) + ")";
        // monotonic -> wall clock -> the job's clock
        t.offsetNs = int64_t(row.shown->process.startUnixNs - startUnix) - int64_t(row.shown->process.startNs);
        narrow(t, window, t.offsetNs);
        traceTrack(w, t, buckets, int64_t(i), window);
    }
    if (job.firstFailure) {
        traceEvent(w, "i", "first failure: " + rankName(job.ranks[job.firstFailure->row]),
                   double(job.firstFailure->unixNs - startUnix) / 1000.0, int64_t(job.firstFailure->row) + 1, 2);
        w.key("s");
        w.value("g");
        w.key("args");
        w.beginObject();
        w.key("what");
        w.value(job.firstFailure->what);
        w.key("report");
        w.value(job.firstFailure->path);
        w.endObject();
        w.endObject();
    }
    return traceTail(w);
}

} // namespace oomscope::report
