#include "report/render/table.h"

#include "report/analysis/diagnosis.h"

#include "report/analysis/analysis.h"
#include "report/format.h"
#include "report/render/style.h"

#include <algorithm>
#include <map>
#include <optional>

namespace oomscope::report {
namespace {

std::string orDash(const std::optional<uint64_t>& v)
{
    return v ? formatBytes(*v) : "-";
}

std::string joinCmdline(const std::vector<std::string>& args)
{
    std::string out;
    for (const std::string& a : args) {
        if (!out.empty())
            out += ' ';
        out += a;
    }
    return truncateMiddle(out, 160);
}

std::string deviceLabel(const Report& r, int64_t index)
{
    const Device* d = r.findDevice(index);
    std::string label = "device " + std::to_string(index);
    if (d && !d->name.empty())
        label += " (" + d->name + ")";
    return label;
}

void renderHeader(const Report& r, const Style& s, std::ostream& out)
{
    const Headline h = headline(r);
    out << (h.alert ? s.red(h.title) : s.bold(h.title)) << h.rest << "\n";
    for (const auto& [label, value] : h.facts)
        out << "  " << label << std::string(label.size() < 10 ? 10 - label.size() : 1, ' ') << value << "\n";
}

std::optional<uint64_t> usedOnDevice(const Report& r, int64_t device)
{
    const Device* d = r.findDevice(device);
    if (!d || !d->freeBytes || !d->totalBytes || *d->freeBytes > *d->totalBytes)
        return std::nullopt;
    return *d->totalBytes - *d->freeBytes;
}

void renderMemory(const Report& r, const Style& s, std::ostream& out)
{
    out << "\n" << s.bold("Memory per device") << "\n";
    if (r.memory.empty()) {
        out << "  no device memory was allocated\n";
        return;
    }
    const bool framework = std::any_of(r.memory.begin(), r.memory.end(), [](const MemoryRow& m) { return m.reservedBytes.has_value(); });
    const std::string fw = r.trigger.framework.value_or("framework");
    std::vector<std::string> header = {"device", "name"};
    if (framework)
        header.insert(header.end(), {"allocated", "reserved", "fragmented", "non-" + fw});
    else
        header.insert(header.end(), {"tracked", "untracked"});
    header.insert(header.end(), {"free", "total", framework ? "tracked" : "peak tracked"});
    TextTable table(header, 2);
    for (const MemoryRow& m : r.memory) {
        const Device* d = r.findDevice(m.device);
        std::vector<std::string> row = {std::to_string(m.device), d ? truncateMiddle(d->name, 40) : "?"};
        if (framework) {
            row.push_back(orDash(m.allocatedBytes));
            row.push_back(orDash(m.reservedBytes));
            row.push_back(orDash(m.fragmentedBytes));
            const std::optional<uint64_t> used = usedOnDevice(r, m.device);
            row.push_back(used && m.reservedBytes && *used >= *m.reservedBytes ? formatBytes(*used - *m.reservedBytes) : "-");
        } else {
            row.push_back(formatBytes(m.trackedBytes));
            row.push_back(orDash(m.untrackedBytes));
        }
        row.push_back(d ? orDash(d->freeBytes) : "-");
        row.push_back(d ? orDash(d->totalBytes) : "-");
        row.push_back(formatBytes(framework ? m.trackedBytes : m.peakTrackedBytes));
        table.addRow(std::move(row));
    }
    out << table.render();
    for (const MemoryRow& m : r.memory) {
        if (m.largestFreeBlockBytes && r.trigger.requestedBytes && r.trigger.device && *r.trigger.device == m.device) {
            out << "  device " << m.device << ": largest free block " << formatBytes(*m.largestFreeBlockBytes)
                << " inside reserved memory, for a request of " << formatBytes(*r.trigger.requestedBytes)
                << (*m.largestFreeBlockBytes >= *r.trigger.requestedBytes ? " (it fits)" : " (it does not fit)") << "\n";
        }
        std::string kinds;
        for (const auto& [kind, bytes] : byName(m.byKind)) {
            if (bytes > 0 && kind != "device")
                kinds += "  " + kind + " " + formatBytes(bytes);
        }
        std::string sources;
        for (const auto& [source, bytes] : byName(m.bySource)) {
            if (bytes > 0)
                sources += "  " + source + " " + formatBytes(bytes);
        }
        if (const Device* d = r.findDevice(m.device); d && d->limitBytes)
            out << "  device " << m.device << ": rehearsed as a card of " << formatBytes(*d->limitBytes)
                << " (--device-limit): allocations past it were refused with the API's out-of-memory error\n";
        if (!sources.empty())
            out << "  device " << m.device << " by source:" << sources << "\n";
        if (r.nccl)
            for (const NcclCommunicator& c : r.nccl->communicators)
                if (c.device == m.device && (c.bytes() || !c.destroyedNs))
                    out << "  device " << m.device << " NCCL " << describeCommunicator(c) << "\n";
        if (m.byRole) {
            const RoleBytes& b = *m.byRole;
            const bool now = b.timeNs == r.trigger.timeNs;
            out << "  device " << m.device << " by role" << (now ? "" : " (at the last step sample)")
                << ":  parameters " << formatBytes(b.parameters) << "  gradients " << formatBytes(b.gradients)
                << "  optimizer state " << formatBytes(b.optimizerState) << "  activations " << formatBytes(b.activations)
                << "  cache " << formatBytes(b.cache) << "\n";
        }
        if (!kinds.empty())
            out << "  device " << m.device << " also:" << kinds << "\n";
        std::string pools;
        for (const PoolBytes& p : bytesByPool(r, m.device))
            pools += "  " + poolName(r, p.poolId) + " " + formatBytes(p.reserved) + " (" + formatBytes(p.allocated) +
                     " allocated)";
        if (!pools.empty())
            out << "  device " << m.device << " by pool:" << pools << "\n";
        // Paused ranges, by the stack that reserved them.
        std::map<std::optional<uint32_t>, std::pair<uint64_t, size_t>> paused;
        for (const PausedRange& p : r.paused) {
            if (p.device == m.device) {
                paused[p.stack].first += p.pausedBytes;
                ++paused[p.stack].second;
            }
        }
        for (const auto& [stack, bytes] : paused) {
            out << "  device " << m.device << ": " << formatBytes(bytes.first) << " paused"
                << (bytes.second > 1 ? " in " + std::to_string(bytes.second) + " ranges" : "")
                << " (unmapped with the address ranges kept, to be mapped again; not in use, not leaked)";
            if (stack)
                out << ", reserved by " << stackLabel(r, r.findStack(*stack));
            out << "\n";
        }
    }
    if (r.nccl && (r.nccl->symmetricBytes || r.nccl->sharedBytes || r.nccl->otherBytes)) {
        const NcclMemory& n = *r.nccl;
        out << "  NCCL also:";
        if (n.symmetricBytes)
            out << "  symmetric memory (ncclMemAlloc) " << formatBytes(n.symmetricBytes) << " in "
                << n.symmetricAllocations << (n.symmetricAllocations == 1 ? " allocation" : " allocations");
        if (n.sharedBytes)
            out << "  shared by communicators set up together " << formatBytes(n.sharedBytes);
        if (n.otherBytes)
            out << "  outside its communicators' calls " << formatBytes(n.otherBytes);
        out << "\n";
    }
    if (r.atFirstFailure) {
        for (const MemoryRow& m : *r.atFirstFailure) {
            out << "  at the first failed allocation (before " << fw << " flushed its cache): device " << m.device
                << " tracked " << formatBytes(m.trackedBytes);
            if (m.untrackedBytes)
                out << ", untracked " << formatBytes(*m.untrackedBytes);
            out << "\n";
        }
    }
}

// What held each device's memory at its peak (memory[].peak): when, by source, the largest sites.
void renderPeaks(const Report& r, const RenderOptions& o, const Style& s, std::ostream& out)
{
    const bool any = std::any_of(r.memory.begin(), r.memory.end(), [](const MemoryRow& m) { return m.peak.has_value(); });
    if (!any)
        return;
    out << "\n" << s.bold("At the peak") << "\n";
    for (const MemoryRow& m : r.memory) {
        if (!m.peak)
            continue;
        const PeakComposition& p = *m.peak;
        out << "  device " << m.device << ": " << s.bold(formatBytes(p.bytes)) << " tracked";
        if (r.process.startNs && p.timeNs >= r.process.startNs)
            out << " at " << formatSeconds(p.timeNs - r.process.startNs);
        if (p.allocatedBytes)
            out << " (" << r.trigger.framework.value_or("the framework") << " allocated at most "
                << formatBytes(*p.allocatedBytes) << ")";
        out << "\n";
        std::string sources;
        for (const auto& [source, bytes] : byName(p.bySource)) {
            if (bytes > 0)
                sources += "  " + source + " " + formatBytes(bytes) + " (" +
                           std::to_string(int(double(bytes) * 100.0 / double(p.bytes) + 0.5)) + "%)";
        }
        if (!sources.empty())
            out << "    by source:" << sources << "\n";
        const size_t n = std::min(o.topSites, p.sites.size());
        for (size_t i = 0; i < n; ++i)
            out << "    #" << (i + 1) << "  " << formatBytes(p.sites[i].bytes) << "  "
                << stackLabel(r, r.findStack(p.sites[i].stack)) << "\n";
    }
}

void renderStack(const Report& r, uint32_t id, size_t maxFrames, bool nativeFrames, const std::string& indent,
                 const Style& s, std::ostream& out)
{
    const Stack* stack = r.findStack(id);
    if (!stack || stack->frames.empty()) {
        out << indent << s.dim("(no stack)") << "\n";
        return;
    }
    size_t from = 0;
    const auto firstPython = std::find_if(stack->frames.begin(), stack->frames.end(),
                                          [](const Frame& f) { return f.kind == Frame::Kind::Python; });
    if (!nativeFrames && firstPython != stack->frames.end() && firstPython != stack->frames.begin()) {
        // A Python user reads the Python frames; the native ones in front of them (the
        // allocator, the framework's kernels) are named by library, in call order outwards.
        from = size_t(firstPython - stack->frames.begin());
        std::vector<std::string> libraries;
        for (size_t i = 0; i < from; ++i) {
            const Frame& f = stack->frames[i];
            const Module* m = f.module ? r.findModule(*f.module) : nullptr;
            const std::string name = m ? baseName(m->path) : "?";
            if (std::find(libraries.begin(), libraries.end(), name) == libraries.end())
                libraries.push_back(name);
        }
        std::string line = std::to_string(from) + (from == 1 ? " native frame" : " native frames") + " in ";
        for (size_t i = 0; i < libraries.size() && i < 6; ++i)
            line += (i ? ", " : "") + libraries[i];
        if (libraries.size() > 6)
            line += ", ...";
        out << indent << s.dim("[" + line + "]") << "\n";
    }
    size_t shown = 0;
    for (size_t i = from; i < stack->frames.size(); ++i) {
        if (shown == maxFrames) {
            out << indent << s.dim("... " + std::to_string(stack->frames.size() - i) + " more frames") << "\n";
            break;
        }
        out << indent << describeFrame(r, stack->frames[i]) << "\n";
        ++shown;
    }
}

void renderSites(const Report& r, const RenderOptions& o, const Style& s, std::ostream& out)
{
    out << "\n" << s.bold("Top allocation sites by live bytes") << "\n";
    if (r.sites.empty()) {
        out << "  no live allocations\n";
        return;
    }
    const size_t n = std::min(o.topSites, r.sites.size());
    for (size_t i = 0; i < n; ++i) {
        const Site& site = r.sites[i];
        out << "  #" << (i + 1) << "  " << s.bold(formatBytes(site.bytes)) << " in " << site.count
            << (site.count == 1 ? " allocation" : " allocations") << " (device " << site.device << ", " << enumName(site.kind)
            << ")";
        // The program's own line first: what a Python user recognises.
        if (const Stack* stack = r.findStack(site.stack)) {
            bool borrowed = false;
            if (const Frame* f = programFrame(*stack, &borrowed)) {
                out << "  " << s.bold(f->file + ":" + std::to_string(f->line) + " " + f->function);
                if (borrowed)
                    out << s.dim(" (main thread)");
            }
        }
        out << "\n";
        renderStack(r, site.stack, o.stackFrames, o.nativeFrames, "        ", s, out);
    }
    if (r.sites.size() > n)
        out << "  ... " << (r.sites.size() - n) << " more sites\n";
}

// PyTorch's live tensors by the Python line that allocated them (blocks carry stacks when
// PyTorch recorded its history): who holds the allocated memory, where sites say who reserved it.
void renderTensors(const Report& r, const RenderOptions& o, const Style& s, std::ostream& out)
{
    if (!hasBlockStacks(r))
        return;
    const std::vector<TensorSite> sites = tensorSites(r);
    out << "\n" << s.bold("Top live tensors by Python line") << "\n";
    const size_t n = std::min(o.topSites, sites.size());
    for (size_t i = 0; i < n; ++i) {
        const TensorSite& site = sites[i];
        out << "  #" << (i + 1) << "  " << s.bold(formatBytes(site.bytes)) << " in " << site.count
            << (site.count == 1 ? " tensor" : " tensors") << " (device " << site.device << ")";
        if (!site.stack) {
            out << "  " << s.dim("no Python frames: allocated by autograd's backward or another thread without Python")
                << "\n";
            continue;
        }
        out << "\n";
        renderStack(r, *site.stack, std::min<size_t>(o.stackFrames, 6), o.nativeFrames, "        ", s, out);
    }
    if (sites.size() > n)
        out << "  ... " << (sites.size() - n) << " more\n";
}

// PyTorch's cache per device: what it holds beyond the live tensors, and in how many pieces.
void renderFragmentation(const Report& r, const Style& s, std::ostream& out)
{
    const std::vector<DeviceFragmentation> devices = fragmentation(r);
    if (devices.empty())
        return;
    out << "\n" << s.bold("Fragmentation of the framework's cache") << "\n";
    TextTable table({"device", "reserved", "allocated", "free in cache", "largest free", "external", "segments",
                     "split"},
                    1);
    for (const DeviceFragmentation& f : devices) {
        const bool blocks = f.haveBlocks;
        table.addRow({std::to_string(f.device), formatBytes(f.reserved), formatBytes(f.allocated),
                      formatBytes(f.freeInCache), blocks || f.largestFree ? formatBytes(f.largestFree) : "-",
                      blocks ? std::to_string(int(f.external * 100 + 0.5)) + "%" : "-",
                      blocks ? std::to_string(f.segments) : "-", blocks ? std::to_string(f.splitSegments) : "-"});
    }
    out << table.render();
    for (const DeviceFragmentation& f : devices) {
        if (!f.request)
            continue;
        out << "  device " << f.device << ": the request of " << formatBytes(*f.request)
            << (*f.request <= f.largestFree ? " fits in the largest free block"
                : f.requestBlockedByFragmentation
                    ? " fits in the free bytes together but in no single free block: fragmentation"
                    : " exceeds the free bytes in the cache together")
            << "\n";
    }
}

// The playbook's findings: what went wrong, in numbers, and what to change.
void renderDiagnosis(const Report& r, const RenderOptions& o, const Style& s, std::ostream& out)
{
    std::vector<Diagnosis> found = r.diagnosis;
    if (found.empty())
        found = o.diagnosis ? *o.diagnosis : diagnose(r, findLeaks(r), o.source);
    out << "\n" << s.bold("Diagnosis") << "\n";
    if (found.empty()) {
        out << "  nothing found by the playbook's rules\n";
        return;
    }
    for (const Diagnosis& d : found) {
        std::string label = enumName(d.severity);
        std::transform(label.begin(), label.end(), label.begin(), [](unsigned char c) { return char(std::toupper(c)); });
        out << "  " << s.bold(label) << "  " << d.code << ": " << d.message << "\n";
        out << "      -> " << d.suggestion << "\n";
    }
}

void renderEvents(const Report& r, const RenderOptions& o, const Style& s, std::ostream& out)
{
    const Timeline& tl = r.timeline;
    out << "\n" << s.bold("Last events before the trigger") << "\n";
    // The last o.events rows at or before the trigger, found from the end (a million rows are
    // not copied to show twenty).
    std::vector<const TimelineRow*> rows;
    for (auto it = tl.rows.rbegin(); it != tl.rows.rend() && rows.size() < o.events; ++it)
        if (it->timeNs <= r.trigger.timeNs)
            rows.push_back(&*it);
    std::reverse(rows.begin(), rows.end());
    if (rows.empty()) {
        out << "  none recorded\n";
    } else {
        TextTable table({"time", "event", "api", "device", "size", "address", "stack", "error"}, 3);
        for (const TimelineRow* at : rows) {
            const TimelineRow& row = *at;
            const uint64_t t = r.process.startNs && row.timeNs >= r.process.startNs ? row.timeNs - r.process.startNs : row.timeNs;
            table.addRow({formatSeconds(t), tl.name(row.kind), tl.name(row.api), std::to_string(row.device),
                          formatBytes(row.size), row.address ? formatHex(row.address) : "-",
                          row.stack ? "#" + std::to_string(row.stack) : "-", row.error ? std::to_string(row.error) : ""});
        }
        out << table.render();
    }
    out << "  " << tl.pushed << " events recorded, " << tl.rows.size() << " in the report";
    if (tl.dropped)
        out << ", " << tl.dropped << " overwritten (ring of " << tl.capacity << ")";
    out << "\n";
}

// CUPTI's cross-check: a warning when it saw allocations no hook recorded, one dim line
// otherwise. Loaded through CUDA_INJECTION64_PATH alone, CUPTI is the capture: no warning.
void renderCoverage(const Report& r, const RenderOptions& o, const Style& s, std::ostream& out)
{
    if (!r.capture.coverage)
        return;
    const Coverage& c = *r.capture.coverage;
    const bool interposed =
        std::find(r.capture.backends.begin(), r.capture.backends.end(), "interpose") != r.capture.backends.end();
    const std::string counts = std::to_string(c.confirmed + c.missed) + " allocations";
    if (!interposed) {
        out << s.dim("capture through CUPTI callbacks (" + c.cupti + "): " + counts) << "\n";
        return;
    }
    if (c.missed > 0) {
        out << s.red("warning:") << " CUPTI saw " << c.missed << (c.missed == 1 ? " allocation" : " allocations") << " ("
            << formatBytes(c.missedBytes) << ") that no hook recorded; recorded from CUPTI instead:\n";
        const size_t shown = std::min<size_t>(c.missedAllocations.size(), 5);
        for (size_t i = 0; i < shown; ++i) {
            const MissedAllocation& m = c.missedAllocations[i];
            out << "  " << m.api << " " << formatBytes(m.size) << " on device " << m.device << "\n";
            renderStack(r, m.stack, std::min<size_t>(o.stackFrames, 4), o.nativeFrames, "      ", s, out);
        }
        if (c.missed > shown)
            out << "  " << s.dim("... " + std::to_string(c.missed - shown) + " more") << "\n";
        return;
    }
    if (c.cupti == "active")
        out << s.dim("CUPTI cross-check: " + counts + ", every one recorded by a hook") << "\n";
    else if (c.cupti == "yielded")
        out << s.dim("CUPTI cross-check: " + counts + ", every one recorded by a hook, until the program's "
                     "profiler took the CUPTI slot") << "\n";
    else
        out << s.dim("CUPTI cross-check off (" + c.cupti + ")") << "\n";
}

} // namespace

namespace {

// "42 more out-of-memory errors after the first 8 reports …": a program that catches its OOMs.
std::string skippedText(const Report& r)
{
    const SkippedOoms& s = *r.skippedOoms;
    std::string text = std::to_string(s.count) + " more out-of-memory " + (s.count == 1 ? "error" : "errors") +
                       " after the first " + std::to_string(s.maxReports) + " reports (OOMSCOPE_MAX_OOM_REPORTS)";
    uint64_t lo = UINT64_MAX, hi = 0;
    for (const SkippedOom& e : s.episodes) {
        lo = std::min(lo, e.requestedBytes.value_or(lo));
        hi = std::max(hi, e.requestedBytes.value_or(0));
    }
    if (hi > 0)
        text += ": requests of " + formatBytes(lo) + (lo == hi ? "" : " to " + formatBytes(hi));
    if (!s.episodes.empty() && r.process.startNs > 0 && s.episodes.front().timeNs >= r.process.startNs)
        text += ", from " + formatSeconds(s.episodes.front().timeNs - r.process.startNs);
    if (s.largestSuccessAfterBytes)
        text += "; the largest allocation that succeeded after them: " + formatBytes(*s.largestSuccessAfterBytes);
    return text;
}

} // namespace

Headline headline(const Report& r)
{
    Headline h;
    const Trigger& t = r.trigger;
    switch (t.kind) {
    case TriggerKind::Oom: {
        h.alert = true;
        h.title = "OUT OF MEMORY";
        h.rest = " on " + deviceLabel(r, t.device.value_or(-1));
        std::string request = t.api.empty() ? "allocation" : t.api;
        if (t.requestedBytes)
            request += " of " + formatBytes(*t.requestedBytes);
        if (t.framework)
            request += " (raised by " + *t.framework + ")";
        h.facts.emplace_back("request", request);
        if (t.error)
            h.facts.emplace_back("error", (t.errorName.empty() ? "error" : t.errorName) + " (" + std::to_string(*t.error) + ")");
        break;
    }
    case TriggerKind::Exit: h.title = "EXIT REPORT", h.rest = ": memory still held when the process exited"; break;
    case TriggerKind::Signal: h.title = "SIGNAL REPORT", h.rest = ": " + t.message; break;
    case TriggerKind::Recovered: h.title = "RECOVERED REPORT", h.rest = ": " + t.message; break;
    case TriggerKind::Snapshot: h.title = "SNAPSHOT", h.rest = ": " + t.message; break;
    default: h.title = "REQUESTED REPORT", h.rest = ": " + t.message; break;
    }
    const Process& p = r.process;
    std::string process = "pid " + std::to_string(p.pid);
    if (!p.hostname.empty())
        process += " on " + p.hostname;
    if (p.rank)
        process += ", rank " + std::to_string(*p.rank) + (p.worldSize ? "/" + std::to_string(*p.worldSize) : "");
    h.facts.emplace_back("process", process + ": " + joinCmdline(p.cmdline));
    if (p.startNs > 0 && t.timeNs >= p.startNs)
        h.facts.emplace_back("when", formatSeconds(t.timeNs - p.startNs) + " after the process started");
    if (r.skippedOoms)
        h.facts.emplace_back("skipped", skippedText(r));
    return h;
}

void renderReport(const Report& r, const RenderOptions& o, std::ostream& out)
{
    const Style s{o.color};
    renderHeader(r, s, out);
    renderMemory(r, s, out);
    renderPeaks(r, o, s, out);
    renderFragmentation(r, s, out);
    renderDiagnosis(r, o, s, out);
    renderSites(r, o, s, out);
    renderTensors(r, o, s, out);
    if (r.trigger.kind == TriggerKind::Oom && r.trigger.stack) {
        out << "\n" << s.bold("Stack of the failed request") << "\n";
        renderStack(r, *r.trigger.stack, o.stackFrames, o.nativeFrames, "        ", s, out);
    }
    renderEvents(r, o, s, out);
    const Capture& c = r.capture;
    out << "\n" << s.dim("capture: " + std::to_string(c.liveAllocations) + " live allocations, " +
                         std::to_string(c.distinctStacks) + " distinct stacks, unwinder " + c.unwinder)
        << "\n";
    for (const std::string& note : c.notes)
        out << "  note: " << note << "\n";
    renderCoverage(r, o, s, out);
}

} // namespace oomscope::report
