#include "report/render/export.h"

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

double micros(const Report& r, uint64_t timeNs)
{
    const uint64_t start = r.process.startNs;
    return timeNs >= start ? double(timeNs - start) / 1000.0 : 0.0;
}

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

void traceMetadata(JsonOut& w, const Report& r)
{
    std::string cmdline;
    for (const std::string& a : r.process.cmdline)
        cmdline += (cmdline.empty() ? "" : " ") + a;
    const int64_t pid = r.process.pid;
    const std::tuple<const char*, int64_t, std::string> names[] = {
        {"process_name", 0, "pid " + std::to_string(pid) + ": " + truncateMiddle(cmdline, 120)},
        {"thread_name", 1, "steps"},
        {"thread_name", 2, "events"}};
    for (const auto& [kind, tid, name] : names) {
        traceEvent(w, "M", kind, 0, pid, tid);
        w.key("args");
        w.beginObject();
        w.key("name");
        w.value(name);
        w.endObject();
        w.endObject();
    }
}

// One counter track per device with a series per source; a sample where the composition changes.
void traceCounters(JsonOut& w, const Report& r, const std::vector<DeviceOverTime>& devices)
{
    for (const DeviceOverTime& d : devices) {
        const std::string name = "device " + std::to_string(d.device) + " memory by source";
        for (size_t b = 0; b < d.timeNs.size(); ++b) {
            bool changed = b == 0;
            for (size_t s = 0; s < d.sources.size() && !changed; ++s)
                changed = d.bytes[s][b] != d.bytes[s][b - 1];
            if (!changed)
                continue;
            traceEvent(w, "C", name, micros(r, std::min(d.timeNs[b], d.endNs)), r.process.pid, 0);
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
            traceEvent(w, "C", fw + " allocated/reserved", micros(r, d.allocated[i].first), r.process.pid, 0);
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

void traceSteps(JsonOut& w, const Report& r)
{
    for (size_t i = 0; i < r.steps.size(); ++i) {
        const Step& s = r.steps[i];
        const uint64_t end = i + 1 < r.steps.size() ? r.steps[i + 1].timeNs : std::max(r.trigger.timeNs, s.timeNs);
        traceEvent(w, "X", std::string(enumName(s.source)) + " " + std::to_string(s.index), micros(r, s.timeNs),
                   r.process.pid, 1);
        w.key("dur");
        w.value(double(end - s.timeNs) / 1000.0);
        w.endObject();
    }
}

void traceInstants(JsonOut& w, const Report& r, const std::vector<DeviceOverTime>& devices)
{
    for (const DeviceOverTime& d : devices) {
        for (const TimeMarker& m : d.markers) {
            if (m.kind == TimeMarker::Kind::Step)
                continue;  // slices of their own
            const char* scope = m.kind == TimeMarker::Kind::Oom ? "g" : "p";
            const char* name = m.kind == TimeMarker::Kind::Oom       ? "OOM"
                               : m.kind == TimeMarker::Kind::Failure ? "allocation failed"
                                                                     : "label";
            traceEvent(w, "i", name, micros(r, m.timeNs), r.process.pid, 2);
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

} // namespace

std::string exportChromeTrace(const Report& report)
{
    OverTimeOptions options;
    options.buckets = 20000;
    const std::vector<DeviceOverTime> devices = memoryOverTime(report, options);
    JsonOut w;
    w.beginObject();
    w.key("displayTimeUnit");
    w.value("ms");
    w.key("otherData");
    w.beginObject();
    w.key("tool");
    w.value("oomscope " + report.tool.version);
    w.key("trigger");
    w.value(report.trigger.message);
    w.endObject();
    w.key("traceEvents");
    w.beginArray();
    traceMetadata(w, report);
    traceCounters(w, report, devices);
    traceSteps(w, report);
    traceInstants(w, report, devices);
    w.endArray();
    w.endObject();
    std::string out = std::move(w.buffer());
    out.push_back('\n');
    return out;
}

} // namespace oomscope::report
