#include "report/render/prometheus.h"

#include "report/analysis/analysis.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <map>

namespace oomscope::report {
namespace {

std::string escapeLabel(const std::string& value)
{
    std::string out;
    for (char c : value) {
        if (c == '\\' || c == '"')
            out += '\\';
        if (c == '\n')
            out += "\\n";
        else
            out += c;
    }
    return out;
}

using Labels = std::vector<std::pair<std::string, std::string>>;

std::string labelText(const Labels& labels)
{
    std::string out;
    for (const auto& [name, value] : labels) {
        if (value.empty())
            continue;  // an empty label is no label
        out += (out.empty() ? "" : ",") + name + "=\"" + escapeLabel(value) + "\"";
    }
    return out.empty() ? "" : "{" + out + "}";
}

std::string number(double v)
{
    char buf[40];
    if (v == double(int64_t(v)) && v < 9.0e15 && v > -9.0e15)
        std::snprintf(buf, sizeof(buf), "%" PRId64, int64_t(v));
    else
        std::snprintf(buf, sizeof(buf), "%.6g", v);
    return buf;
}

// A metric family: its samples by label text, combined when two processes give one label set.
struct Family {
    const char* name;
    const char* type;  // gauge, counter
    const char* help;
    bool keepLarger = false;  // a peak: the larger of two, not their sum
    std::map<std::string, double> samples;

    void add(const Labels& labels, double value)
    {
        auto [it, fresh] = samples.try_emplace(labelText(labels), value);
        if (!fresh)
            it->second = keepLarger ? std::max(it->second, value) : it->second + value;
    }
};

Labels processLabels(const Report& r)
{
    const Process& p = r.process;
    const std::string job = p.runId ? *p.runId : p.slurmJobId.value_or("");
    return {{"host", p.hostname},
            {"job_id", job},
            {"rank", p.rank ? std::to_string(*p.rank) : ""},
            {"local_rank", p.localRank ? std::to_string(*p.localRank) : ""}};
}

Labels deviceLabels(const Report& r, int64_t device)
{
    Labels l = processLabels(r);
    l.emplace_back("device", std::to_string(device));
    const Device* d = r.findDevice(device);
    l.emplace_back("device_uuid", d ? d->uuid : "");
    return l;
}

Labels with(Labels l, const std::string& name, const std::string& value)
{
    l.emplace_back(name, value);
    return l;
}

} // namespace

std::string renderPrometheus(const std::vector<Report>& snapshots, const std::string& version, const SourceLine& source,
                             const std::map<std::string, uint64_t>& unreadable)
{
    Family build{"oomscope_build_info", "gauge", "The oomscope that reads the flight files (its version)."};
    Family processes{"oomscope_process_info", "gauge",
                     "A process running under oomscope: 1 per host, job, rank (processes without a rank add up)."};
    Family memory{"oomscope_device_memory_bytes", "gauge",
                  "Device memory the process holds now, by the library that allocated it (source)."};
    Family peak{"oomscope_device_memory_peak_bytes", "gauge", "The most device memory the process held at once.", true};
    Family total{"oomscope_device_total_bytes", "gauge", "The device's memory (the rehearsed card's with --device-limit).",
                 true};
    Family allocated{"oomscope_torch_allocated_bytes", "gauge",
                     "PyTorch's allocated bytes at the last step sample (memory_allocated())."};
    Family reserved{"oomscope_torch_reserved_bytes", "gauge",
                    "PyTorch's reserved bytes at the last step sample (memory_reserved())."};
    Family steps{"oomscope_steps_total", "counter", "Training steps (optimizer steps, oomscope.step()) so far."};
    Family ooms{"oomscope_oom_episodes_total", "counter", "Out-of-memory episodes so far."};
    Family failed{"oomscope_failed_allocations_total", "counter", "Failed device allocations so far, out of memory or not."};
    Family leaks{"oomscope_leak_growth_bytes_per_step", "gauge",
                 "Growth per step of a leak the leak rules found, by the line that keeps it (site)."};

    Family skipped{"oomscope_flight_files_unreadable", "gauge",
                   "Flight files of processes running here that could not be read, by reason (permission: another "
                   "user's; version: another oomscope's format; damaged): their memory is missing from these metrics."};

    build.add({{"version", version}}, 1);
    for (const auto& [reason, files] : unreadable)
        skipped.add({{"reason", reason}}, double(files));
    for (const Report& r : snapshots) {
        // The framework adapter attached is one of the capture's backends.
        std::string framework;
        for (const std::string& b : r.capture.backends)
            if (b == "torch" || b == "jax" || b == "cupy")
                framework = b;
        processes.add(with(processLabels(r), "framework", framework), 1);
        for (const MemoryRow& row : r.memory) {
            const Labels dev = deviceLabels(r, row.device);
            for (const auto& [s, bytes] : row.bySource) {
                if (s != Source::Untracked)
                    memory.add(with(dev, "source", std::string(enumName(s))), double(bytes));
            }
            peak.add(dev, double(row.peakTrackedBytes));
            if (const Device* d = r.findDevice(row.device); d && (d->limitBytes || d->totalBytes))
                total.add(dev, double(d->limitBytes ? *d->limitBytes : *d->totalBytes));
        }
        uint64_t stepCount = 0;
        for (const Step& s : r.steps)
            if (s.source == StepSource::Step)
                stepCount = std::max(stepCount, s.index);
        steps.add(processLabels(r), double(stepCount));
        if (!r.steps.empty()) {
            for (const StepDevice& d : r.steps.back().devices) {
                if (d.allocatedBytes)
                    allocated.add(deviceLabels(r, d.device), double(*d.allocatedBytes));
                if (d.reservedBytes)
                    reserved.add(deviceLabels(r, d.device), double(*d.reservedBytes));
            }
        }
        ooms.add(processLabels(r), double(r.capture.oomEpisodes));
        failed.add(processLabels(r), double(r.capture.failedAllocations));
        const std::vector<LeakFinding> findings = findLeaks(r);
        if (!findings.empty()) {
            for (const BlamedLeak& b : blameLeaks(r, findings, source)) {
                const std::string site = b.blame.frame ? describeFrame(r, *b.blame.frame) : "";
                leaks.add(with(deviceLabels(r, b.leak.device), "site", site), std::max(0.0, b.leak.bytesPerStep));
            }
        }
    }
    std::string out;
    for (Family* f : {&build, &processes, &memory, &peak, &total, &allocated, &reserved, &steps, &ooms, &failed, &leaks,
                      &skipped}) {
        out += std::string("# HELP ") + f->name + " " + f->help + "\n# TYPE " + f->name + " " + f->type + "\n";
        for (const auto& [labels, value] : f->samples)
            out += std::string(f->name) + labels + " " + number(value) + "\n";
    }
    return out;
}

} // namespace oomscope::report
