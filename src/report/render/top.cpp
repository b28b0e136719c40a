#include "report/render/top.h"

#include "report/analysis/analysis.h"
#include "report/format.h"

#include <algorithm>
#include <cstdio>
#include <optional>

namespace oomscope::report {
namespace {

std::string cut(std::string line, size_t width)
{
    if (width > 0 && line.size() > width)
        line.resize(width);
    return line;
}

uint64_t stepBytes(const Step& s, bool allocated)
{
    uint64_t bytes = 0;
    for (const StepDevice& d : s.devices)
        bytes += allocated ? d.allocatedBytes.value_or(0) : d.trackedBytes;
    return bytes;
}

std::string rate(double perSecond)
{
    char buf[32];
    std::snprintf(buf, sizeof(buf), perSecond >= 10 ? "%.0f" : "%.2f", perSecond);
    return buf;
}

} // namespace

std::optional<StepRate> stepRate(const std::vector<Step>& steps, size_t window)
{
    if (steps.size() < 2 || window < 2)
        return std::nullopt;
    const size_t n = std::min(window, steps.size());
    const Step& first = steps[steps.size() - n];
    const Step& last = steps.back();
    StepRate r;
    r.steps = n;
    r.allocated = std::all_of(steps.end() - ptrdiff_t(n), steps.end(), [](const Step& s) {
        return !s.devices.empty() && std::all_of(s.devices.begin(), s.devices.end(),
                                                 [](const StepDevice& d) { return d.allocatedBytes.has_value(); });
    });
    const double indexes = double(last.index - first.index);
    if (indexes <= 0)
        return std::nullopt;
    if (last.timeNs > first.timeNs)
        r.stepsPerSecond = indexes / (double(last.timeNs - first.timeNs) / 1e9);
    r.bytesPerStep = (double(stepBytes(last, r.allocated)) - double(stepBytes(first, r.allocated))) / indexes;
    return r;
}

std::vector<std::string> topBlock(const Report& r, const TopOptions& options, size_t width)
{
    std::vector<std::string> lines;
    const auto add = [&](const std::string& line) { lines.push_back(cut(line, width)); };
    const Process& p = r.process;
    std::string head = "pid " + std::to_string(p.pid);
    if (p.rank)
        head += "  rank " + std::to_string(*p.rank) + (p.worldSize ? "/" + std::to_string(*p.worldSize) : "");
    if (!p.hostname.empty())
        head += "  " + p.hostname;
    std::string cmdline;
    for (const std::string& arg : p.cmdline)
        cmdline += (cmdline.empty() ? "" : " ") + arg;
    if (!cmdline.empty())
        head += "  " + cmdline;
    if (r.trigger.timeNs > p.startNs && p.startNs > 0)
        head += "  up " + formatSeconds(r.trigger.timeNs - p.startNs);
    add(head);

    for (const MemoryRow& row : r.memory) {
        std::string name = "device " + std::to_string(row.device);
        const auto dev = std::find_if(r.devices.begin(), r.devices.end(), [&](const Device& d) { return d.index == row.device; });
        if (dev != r.devices.end() && !dev->name.empty())
            name += " " + dev->name + (dev->totalBytes ? " (" + formatBytes(*dev->totalBytes) + ")" : "");
        std::string line = "  " + name + ": tracked " + formatBytes(row.trackedBytes) + ", peak " +
                           formatBytes(row.peakTrackedBytes);
        std::string sources;
        for (const auto& [source, bytes] : row.bySource) {
            if (bytes > 0 && source != Source::Untracked)
                sources += std::string(sources.empty() ? "" : ", ") + enumName(source) + " " + formatBytes(bytes);
        }
        if (!sources.empty())
            line += "  [" + sources + "]";
        add(line);
    }
    if (r.memory.empty())
        add("  no device memory held");

    if (!r.steps.empty()) {
        const Step& last = r.steps.back();
        std::string line = "  " + std::string(last.source == StepSource::Sample ? "sample " : "step ") +
                           std::to_string(last.index);
        for (const StepDevice& d : last.devices) {
            if (d.allocatedBytes || d.reservedBytes)
                line += "  cuda:" + std::to_string(d.device) + " allocated " + formatBytes(d.allocatedBytes.value_or(0)) +
                        ", reserved " + formatBytes(d.reservedBytes.value_or(0));
        }
        if (const auto sr = stepRate(r.steps, options.growthSteps)) {
            if (sr->stepsPerSecond > 0)
                line += "  " + rate(sr->stepsPerSecond) + " steps/s";
            line += "  growth " + formatSignedBytes(int64_t(sr->bytesPerStep)) + "/step (" +
                    (sr->allocated ? "allocated" : "tracked") + ", last " + std::to_string(sr->steps) + " steps)";
        }
        add(line);
    } else {
        add("  no step samples yet (oomscope.step(), an optimizer step, or OOMSCOPE_SAMPLE_MS)");
    }

    add("  top sites by live bytes:");
    size_t shown = 0;
    for (const Site& s : r.sites) {
        if (shown == options.sites)
            break;
        ++shown;
        char bytes[32];
        std::snprintf(bytes, sizeof(bytes), "%12s", formatBytes(s.bytes).c_str());
        add("    " + std::string(bytes) + "  " + std::to_string(s.count) + "x  " + stackLabel(r, r.findStack(s.stack)));
    }
    if (shown == 0)
        add("    (none live)");

    const std::vector<LeakFinding> findings = findLeaks(r);
    if (findings.empty()) {
        add("  leak: none seen" + std::string(r.steps.size() < 8 ? " (too few steps to tell yet)" : ""));
    } else {
        const std::vector<BlamedLeak> blamed = blameLeaks(r, findings, options.source);
        for (size_t i = 0; i < std::min<size_t>(blamed.size(), 2); ++i) {
            const BlamedLeak& b = blamed[i];
            std::string where = b.blame.frame ? describeFrame(r, *b.blame.frame) : "device " + std::to_string(b.leak.device);
            add("  LEAK " + where + ": " + describeGrowth(b));
            if (!b.blame.text.empty())
                add("       " + b.blame.text);
        }
    }
    return lines;
}

} // namespace oomscope::report
