#include "interpret/report_builder.h"

#include "interpret/attribution.h"
#include "interpret/symbolize.h"
#include "report/huge_pages.h"
#include "track/frame_word.h"
#include "track/framework_state.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#ifndef OOMSCOPE_VERSION
#define OOMSCOPE_VERSION "0.0.0"
#endif

namespace oomscope::interpret {
namespace {

using report::MemKind;
using report::Source;
using track::Allocation;
using track::Event;
using track::EventKind;
using track::LiveAllocation;
using track::TrackImage;
using track::TriggerInfo;

std::string messageBytes(uint64_t bytes)
{
    char buf[64];
    if (bytes >= (uint64_t(1) << 30))
        std::snprintf(buf, sizeof(buf), "%.2f GiB", double(bytes) / double(uint64_t(1) << 30));
    else if (bytes >= (uint64_t(1) << 20))
        std::snprintf(buf, sizeof(buf), "%.2f MiB", double(bytes) / double(uint64_t(1) << 20));
    else
        std::snprintf(buf, sizeof(buf), "%" PRIu64 " bytes", bytes);
    return buf;
}

class Builder {
public:
    Builder(const TrackImage& image, const TriggerInfo& trigger, TriggerFacts facts)
        : m_image(image), m_trigger(trigger), m_facts(std::move(facts))
    {
        for (const track::PythonCode& c : image.pythonCodes)
            m_codes[c.index] = &c;
        for (const auto& [id, frames] : image.stacks)
            m_nextTextStack = std::max(m_nextTextStack, id + 1);
    }

    report::Report build()
    {
        m_r.tool.version = OOMSCOPE_VERSION;
        m_r.analysis = "not run";  // leaks and diagnosis: filled when the report is read
        m_r.tool.options = m_image.options;
        m_r.process = m_image.process;
        m_r.devices = m_facts.devices;
        m_r.pools = m_facts.pools;
        m_r.steps = m_image.steps;
        addTrigger();
        addSkippedOoms();
        addMemory();
        addSegments();
        m_r.sites = liveSites(m_image.live);
        addTimeline();
        addStacks();
        attributeBySource();
        addPaused();
        addNccl();
        addPeaks();
        addCapture();
        return std::move(m_r);
    }

private:
    void addTrigger();
    void addSkippedOoms();
    void addMemory();
    void addSegments();
    void addTimeline();
    void addStacks();
    void attributeBySource();
    void addPaused();
    void addNccl();
    void addPeaks();
    void addCapture();
    std::set<uint32_t> referencedStacks() const;
    uint32_t textStack(const std::vector<track::PythonFrameText>& frames);
    report::Frame pythonFrame(uint64_t word) const;
    std::string pythonModule(uint64_t word) const;

    const TrackImage& m_image;
    const TriggerInfo& m_trigger;
    TriggerFacts m_facts;
    report::Report m_r;
    std::unordered_map<uint32_t, const track::PythonCode*> m_codes;
    // Stacks the builder makes from frames given as text (the framework's block history): ids
    // after the image's own.
    std::map<uint32_t, std::vector<track::PythonFrameText>> m_textStacks;
    std::map<std::vector<std::tuple<std::string, uint32_t, std::string>>, uint32_t> m_textStackIds;
    uint32_t m_nextTextStack = 1;
    std::set<uint32_t> m_timelineStacks;
    std::unordered_map<uint32_t, Source> m_sourceOfStack;
    size_t m_missingStacks = 0;
};

// The OOM episodes without a report of their own, and the largest allocation that succeeded
// after the first of them (what the program settled on: a batch-size finder's answer).
void Builder::addSkippedOoms()
{
    if (!m_image.skippedOoms)
        return;
    report::SkippedOoms s = *m_image.skippedOoms;
    const uint64_t since = s.episodes.empty() ? 0 : s.episodes.front().timeNs;
    for (const track::Event& e : m_image.events) {
        if (e.kind == track::EventKind::Alloc && e.timeNs > since && e.memKind == report::MemKind::Device)
            s.largestSuccessAfterBytes = std::max(s.largestSuccessAfterBytes.value_or(0), e.size);
    }
    m_r.skippedOoms = std::move(s);
}

void Builder::addTrigger()
{
    report::Trigger& t = m_r.trigger;
    t.kind = m_trigger.kind;
    t.timeNs = m_image.timeNs;
    const track::FrameworkState* framework = m_trigger.framework;
    if (framework)
        m_r.cudaGraphs = framework->graphs;  // before the message: it names the pools it knows
    if (m_trigger.failed) {
        const Allocation& f = *m_trigger.failed;
        t.device = f.device;
        t.requestedBytes = f.size;
        t.api = m_image.apiName(f.api.value());
        if (m_trigger.error) {
            t.error = *m_trigger.error;
            t.errorName = m_facts.errorName;
        }
        if (const uint32_t stack = m_trigger.stack ? m_trigger.stack : f.stack.value())
            t.stack = stack;
        const std::string what = framework ? framework->name + " could not allocate " : t.api + " of ";
        t.message = what + messageBytes(f.size) + (framework ? " on device " : " failed on device ") + std::to_string(f.device);
        if (m_trigger.error)
            t.message += ": " + (t.errorName.empty() ? "error " + std::to_string(*m_trigger.error) : t.errorName);
        else if (framework)
            t.message += ": its own limit, no CUDA call failed";
        if (framework && !framework->oomPool.empty()) {
            t.poolId = framework->oomPool;
            t.message += " (in " + report::poolName(m_r, t.poolId) + ")";
        }
    } else {
        t.message = m_trigger.reason;
        if (m_trigger.stack)
            t.stack = m_trigger.stack;
    }
    if (framework)
        t.framework = framework->name;
}

void Builder::addMemory()
{
    m_r.memory = memoryRows(m_image.counters, m_facts.devices);
    if (m_trigger.firstFailure)
        m_r.atFirstFailure = memoryRows(m_trigger.firstFailure->counters, m_trigger.firstFailure->devices);
    // By role: measured at the framework's OOM, else the last step sample's.
    for (report::MemoryRow& row : m_r.memory) {
        for (auto step = m_r.steps.rbegin(); step != m_r.steps.rend() && !row.byRole; ++step) {
            for (const report::StepDevice& d : step->devices) {
                if (d.device == row.device && d.byRole)
                    row.byRole = d.byRole;
            }
        }
    }
    const track::FrameworkState* framework = m_trigger.framework;
    if (!framework)
        return;
    for (report::MemoryRow& row : m_r.memory) {
        const track::FrameworkDevice* fw = framework->device(row.device);
        if (!fw)
            continue;
        if (auto roles = fw->roles(m_r.trigger.timeNs))
            row.byRole = roles;
        row.allocatedBytes = fw->allocated;
        row.reservedBytes = fw->reserved;
        row.fragmentedBytes = fw->reserved > fw->allocated ? fw->reserved - fw->allocated : 0;
        row.largestFreeBlockBytes = framework->largestFreeBlock(row.device);
    }
}

// The framework's segments with their blocks (a finer view than raw mappings; blocks get the
// Python stack of the tensor in them when the framework gave one), else the VMM mappings.
void Builder::addSegments()
{
    if (const track::FrameworkState* framework = m_trigger.framework) {
        m_r.segments = framework->segments;
        const auto& blockFrames = framework->blockFrames;
        for (size_t si = 0; si < m_r.segments.size() && si < blockFrames.size(); ++si) {
            for (size_t bi = 0; bi < m_r.segments[si].blocks.size() && bi < blockFrames[si].size(); ++bi) {
                if (!blockFrames[si][bi].empty())
                    m_r.segments[si].blocks[bi].stack = textStack(blockFrames[si][bi]);
            }
        }
    } else {
        for (const track::VmmMapping& m : m_image.mappings) {
            report::Segment segment;
            segment.address = m.address;
            segment.size = m.size;
            segment.kind = report::SegmentKind::Vmm;
            segment.device = m.device;
            m_r.segments.push_back(std::move(segment));
        }
    }
    std::sort(m_r.segments.begin(), m_r.segments.end(), [](const report::Segment& a, const report::Segment& b) {
        return std::tie(a.device, a.address) < std::tie(b.device, b.address);
    });
}

uint32_t Builder::textStack(const std::vector<track::PythonFrameText>& frames)
{
    std::vector<std::tuple<std::string, uint32_t, std::string>> key;
    for (const track::PythonFrameText& f : frames)
        key.emplace_back(f.file, f.line, f.function);
    auto [it, inserted] = m_textStackIds.emplace(std::move(key), m_nextTextStack);
    if (inserted) {
        m_textStacks[m_nextTextStack] = frames;
        ++m_nextTextStack;
    }
    return it->second;
}

// Straight from the image's events into rows (a million of them: no intermediate copy).
void Builder::addTimeline()
{
    report::Timeline& tl = m_r.timeline;
    tl.capacity = m_image.ringCapacity;
    tl.pushed = m_image.pushed;
    tl.dropped = m_image.dropped;
    tl.rows.reserve(m_image.events.size());
    report::adviseHugePages(tl.rows.data(), tl.rows.capacity() * sizeof(report::TimelineRow));
    uint16_t kindIndex[size_t(EventKind::Count)];
    for (size_t k = 0; k < size_t(EventKind::Count); ++k)
        kindIndex[k] = tl.intern(track::eventKindName(EventKind(k)));
    std::vector<int32_t> apiIndex;  // API id → index into the names, -1 until first seen
    for (const Event& e : m_image.events) {
        report::TimelineRow row;
        row.timeNs = e.timeNs;
        row.kind = size_t(e.kind) < size_t(EventKind::Count) ? kindIndex[size_t(e.kind)] : tl.intern("unknown");
        row.device = e.device;
        row.address = e.address;
        row.size = e.size;
        row.stream = e.stream;
        row.handle = e.handle;
        if (e.api >= apiIndex.size())
            apiIndex.resize(size_t(e.api) + 1, -1);
        if (apiIndex[e.api] < 0)
            apiIndex[e.api] = tl.intern(m_image.apiName(e.api));
        row.api = uint16_t(apiIndex[e.api]);
        row.stack = e.stack;
        row.thread = e.thread;
        row.error = e.error;
        m_timelineStacks.insert(e.stack);
        tl.rows.push_back(row);
    }
}

std::set<uint32_t> Builder::referencedStacks() const
{
    std::set<uint32_t> referenced = m_timelineStacks;
    for (const report::Site& s : m_r.sites)
        referenced.insert(s.stack);
    if (m_r.trigger.stack)
        referenced.insert(*m_r.trigger.stack);
    for (const auto& [id, frames] : m_textStacks)
        referenced.insert(id);
    for (const report::Step& step : m_r.steps) {
        for (const auto* list : {&step.sites, &step.tensors}) {
            for (const report::StepSite& site : *list)
                referenced.insert(site.stack);
        }
    }
    if (m_facts.capture.coverage) {
        for (const report::MissedAllocation& m : m_facts.capture.coverage->missedAllocations)
            referenced.insert(m.stack);
    }
    for (const track::PeakSites& p : m_image.peaks) {
        for (const auto& [stack, bytes] : p.stacks)
            referenced.insert(stack);
    }
    for (const track::VmmPaused& p : m_image.paused)
        referenced.insert(p.stack);
    referenced.erase(0);
    return referenced;
}

report::Frame Builder::pythonFrame(uint64_t word) const
{
    report::Frame frame;
    frame.kind = report::FrameKind::Python;
    frame.line = track::pythonLine(word);
    auto it = m_codes.find(track::pythonCodeIndex(word));
    frame.file = it == m_codes.end() ? "<unknown>" : it->second->file;
    frame.function = it == m_codes.end() ? "<unknown>" : it->second->function;
    return frame;
}

std::string Builder::pythonModule(uint64_t word) const
{
    auto it = m_codes.find(track::pythonCodeIndex(word));
    return it == m_codes.end() ? std::string() : it->second->module;
}

// The referenced stacks, symbolized, into the report's stacks and modules, and each one's
// source (the library that made the outermost call into CUDA).
void Builder::addStacks()
{
    Symbolizer symbolizer(m_image.modules);
    std::map<int, uint32_t> moduleIds;  // symbolizer index → report id
    const auto pathOf = [&](uint64_t pc) {
        const ResolvedFrame resolved = symbolizer.resolve(pc);
        return resolved.module >= 0 ? symbolizer.modules()[size_t(resolved.module)].path : std::string();
    };
    for (uint32_t id : referencedStacks()) {
        report::Stack stack;
        stack.id = id;
        if (auto text = m_textStacks.find(id); text != m_textStacks.end()) {
            for (const track::PythonFrameText& f : text->second)
                stack.frames.push_back(report::Frame{report::FrameKind::Python, std::nullopt, 0, "", f.file, f.line, f.function});
            m_r.stacks.push_back(std::move(stack));
            continue;
        }
        auto words = m_image.stacks.find(id);
        if (words == m_image.stacks.end()) {
            ++m_missingStacks;  // an id whose record was lost (a flight file's journal cut short)
            continue;
        }
        for (uint64_t pc : words->second) {
            if (track::isPythonFrame(pc)) {
                stack.frames.push_back(pythonFrame(pc));
                continue;
            }
            const ResolvedFrame resolved = symbolizer.resolve(pc);
            // A wrapper of ours that calls on (NCCL's, nccl_hooks.cpp) is no frame of the
            // program: dropped here, not on the hot path (the capture cuts only the top).
            if (resolved.module >= 0 && report::isOwnModule(symbolizer.modules()[size_t(resolved.module)].path))
                continue;
            report::Frame frame;
            frame.offset = resolved.offset;
            frame.symbol = resolved.symbol;
            frame.file = resolved.file;
            frame.line = resolved.line;
            if (resolved.module >= 0)
                frame.module = moduleIds.emplace(resolved.module, uint32_t(moduleIds.size() + 1)).first->second;
            stack.frames.push_back(std::move(frame));
        }
        m_sourceOfStack[id] =
            sourceOfFrames(words->second, pathOf, [this](uint64_t word) { return pythonModule(word); });
        stack.source = m_sourceOfStack[id];
        m_r.stacks.push_back(std::move(stack));
    }
    for (const auto& [index, id] : moduleIds) {
        const track::LoadedModule& m = symbolizer.modules()[size_t(index)];
        m_r.modules.push_back(report::Module{id, m.path, m.buildId, m.base});
    }
    std::sort(m_r.modules.begin(), m_r.modules.end(), [](const report::Module& a, const report::Module& b) { return a.id < b.id; });
}

// by_source of each memory row: device memory only, so that it adds up to tracked bytes; the
// untracked residue (CUDA context, what capture could not see) completes the driver's view.
void Builder::attributeBySource()
{
    std::map<int64_t, report::MemoryRow*> rows;
    for (report::MemoryRow& row : m_r.memory)
        rows[row.device] = &row;
    for (const LiveAllocation& a : m_image.live) {
        auto row = rows.find(a.device);
        if (a.memKind != MemKind::Device || row == rows.end())
            continue;
        auto it = m_sourceOfStack.find(a.stack);
        row->second->bySource[it == m_sourceOfStack.end() ? Source::Other : it->second] += a.size;
    }
    for (report::MemoryRow& row : m_r.memory) {
        if (row.untrackedBytes)
            row.bySource[Source::Untracked] = *row.untrackedBytes;
    }
}

// NCCL's memory by communicator: each live allocation made by NCCL (by its stack's source, or
// inside a range ncclMemAlloc returned) goes to the communicator whose window holds its time
// (track/nccl_table.h); in the windows of several at once it is shared, in none other.
void Builder::addNccl()
{
    const track::NcclState& s = m_image.nccl;
    if (s.empty())
        return;
    report::NcclMemory n;
    std::vector<size_t> row(s.comms.size(), SIZE_MAX);  // comms index → communicators index
    for (size_t i = 0; i < s.comms.size(); ++i) {
        const track::NcclComm& c = s.comms[i];
        if (!c.handle)
            continue;
        report::NcclCommunicator out;
        out.handle = c.handle;
        char id[17];
        std::snprintf(id, sizeof(id), "%016" PRIx64, c.id);
        out.id = id;
        if (c.parent)
            out.parent = c.parent;
        out.device = c.device;
        out.rank = c.rank;
        out.nranks = c.nranks;
        out.createdNs = c.createdNs;
        if (c.destroyedNs)
            out.destroyedNs = c.destroyedNs;
        row[i] = n.communicators.size();
        n.communicators.push_back(std::move(out));
    }
    const uint64_t now = m_image.timeNs;
    for (const LiveAllocation& a : m_image.live) {
        if (a.memKind != MemKind::Device)
            continue;
        bool symmetric = false;
        for (const track::NcclRange& r : s.symmetric)
            symmetric = symmetric || (a.address >= r.address && a.address < r.address + r.size);
        if (symmetric) {
            n.symmetricBytes += a.size;
            ++n.symmetricAllocations;
            continue;
        }
        auto source = m_sourceOfStack.find(a.stack);
        if (source == m_sourceOfStack.end() || source->second != Source::Nccl)
            continue;
        const track::NcclWindow* only = nullptr;
        bool several = false;
        for (const track::NcclWindow& w : s.windows) {
            if (a.timeNs < w.beginNs || a.timeNs > (w.endNs ? w.endNs : now) || row[w.comm] == SIZE_MAX)
                continue;
            several = several || (only && only->comm != w.comm);
            only = only ? only : &w;
        }
        if (several)
            n.sharedBytes += a.size;
        else if (!only)
            n.otherBytes += a.size;
        else {
            report::NcclCommunicator& c = n.communicators[row[only->comm]];
            if (c.device < 0)  // made before the calling thread had a CUDA context: where its memory is
                c.device = a.device;
            (only->phase == track::NcclPhase::Init              ? c.initBytes
             : only->phase == track::NcclPhase::FirstCollective ? c.firstCollectiveBytes
                                                                : c.registrationBytes) += a.size;
        }
    }
    m_r.nccl = std::move(n);
}

// What is paused: reservations with ranges unmapped while reserved, but PyTorch's own (its
// expandable segments unmap free pages for good, keeping the address space to grow into).
void Builder::addPaused()
{
    for (const track::VmmPaused& p : m_image.paused) {
        auto source = m_sourceOfStack.find(p.stack);
        if (source != m_sourceOfStack.end() && source->second == Source::Torch)
            continue;
        report::PausedRange range;
        range.device = p.device;
        range.address = p.address;
        range.reservedBytes = p.size;
        range.pausedBytes = p.pausedBytes;
        if (p.stack)
            range.stack = p.stack;
        m_r.paused.push_back(range);
        for (report::MemoryRow& row : m_r.memory)
            if (row.device == p.device)
                row.pausedBytes = row.pausedBytes.value_or(0) + p.pausedBytes;
    }
}

// Each device's peak composition: by source as the row's by_source (the stacks beyond the
// tracker's largest count as other), the largest sites, and the framework's own peak
// allocated from the last step sample that has it.
void Builder::addPeaks()
{
    constexpr size_t kSites = 10;
    for (const track::PeakSites& p : m_image.peaks) {
        auto row = std::find_if(m_r.memory.begin(), m_r.memory.end(),
                                [&](const report::MemoryRow& r) { return r.device == p.device; });
        if (row == m_r.memory.end() || p.bytes == 0)
            continue;
        report::PeakComposition c;
        c.bytes = p.bytes;
        c.timeNs = p.timeNs;
        for (Source source : report::kLibrarySources)
            c.bySource[source] = 0;
        for (const auto& [stack, bytes] : p.stacks) {
            auto it = m_sourceOfStack.find(stack);
            c.bySource[it == m_sourceOfStack.end() ? Source::Other : it->second] += bytes;
            if (c.sites.size() < kSites)
                c.sites.push_back(report::PeakSite{stack, bytes});
        }
        c.bySource[Source::Other] += p.otherBytes;
        for (auto step = m_image.steps.rbegin(); step != m_image.steps.rend() && !c.allocatedBytes; ++step) {
            for (const report::StepDevice& d : step->devices) {
                if (d.device == p.device && d.peakAllocatedBytes)
                    c.allocatedBytes = d.peakAllocatedBytes;
            }
        }
        row->peak = std::move(c);
    }
}

void Builder::addCapture()
{
    report::Capture& c = m_r.capture;
    c = std::move(m_facts.capture);
    if (!m_image.framework.empty())
        c.backends.push_back(m_image.framework);
    if (m_trigger.framework && m_trigger.framework->ignoredLines > 0)
        c.notes.push_back(std::to_string(m_trigger.framework->ignoredLines) +
                          " lines of the framework's state were not understood");
    c.eventsPushed = m_r.timeline.pushed;
    c.eventsRecorded = m_r.timeline.rows.size();
    c.eventsDropped = m_r.timeline.dropped;
    c.liveAllocations = m_image.live.size();
    c.distinctStacks = m_image.distinctStacks;
    c.ringBytes = m_image.ringBytes;
    c.liveMapBytes = m_image.liveMapBytes;
    c.stackTableBytes = m_image.stackTableBytes;
    c.unknownFrees = m_image.unknownFrees;
    c.oomEpisodes = m_image.oomEpisodes;
    c.failedAllocations = m_image.failedAllocations;
    c.unwinder = m_image.unwinder;
    c.notes.insert(c.notes.end(), m_image.notes.begin(), m_image.notes.end());
    if (m_missingStacks > 0)
        c.notes.push_back(std::to_string(m_missingStacks) + " stacks are not in the file's journal");
}

} // namespace

std::vector<report::MemoryRow> memoryRows(const std::vector<track::DeviceCounters>& counters,
                                          const std::vector<report::Device>& devices)
{
    std::map<int64_t, report::MemoryRow> rows;
    for (const track::DeviceCounters& d : counters) {
        report::MemoryRow& row = rows[d.device];
        row.device = d.device;
        for (size_t k = 0; k < size_t(MemKind::Count); ++k)
            row.byKind[MemKind(k)] = d.bytes[k];
        row.trackedBytes = d.tracked();
        row.peakTrackedBytes = std::max(d.peakDeviceBytes, row.trackedBytes);
    }
    for (const report::Device& d : devices) {
        if (!d.freeBytes || rows.count(d.index))
            continue;
        report::MemoryRow& row = rows[d.index];
        row.device = d.index;
        for (size_t k = 0; k < size_t(MemKind::Count); ++k)
            row.byKind[MemKind(k)] = 0;
    }
    for (auto& [device, row] : rows) {
        for (Source source : report::kLibrarySources)
            row.bySource[source] = 0;
    }
    for (const report::Device& d : devices) {
        auto it = rows.find(d.index);
        if (it == rows.end() || !d.freeBytes || !d.totalBytes || *d.freeBytes > *d.totalBytes)
            continue;
        // The process's own memory where the driver listed it; else the device's used memory
        // (every other process on the card counted as this one's).
        const uint64_t used = d.processBytes ? *d.processBytes : *d.totalBytes - *d.freeBytes;
        it->second.untrackedBytes = used > it->second.trackedBytes ? used - it->second.trackedBytes : 0;
    }
    std::vector<report::MemoryRow> out;
    for (auto& [device, row] : rows)
        out.push_back(std::move(row));
    return out;
}

std::vector<report::Site> liveSites(const std::vector<LiveAllocation>& live)
{
    std::map<std::tuple<uint32_t, int, MemKind>, report::Site> sites;
    for (const LiveAllocation& a : live) {
        report::Site& site = sites[{a.stack, a.device, a.memKind}];
        if (site.count == 0) {
            site.stack = a.stack;
            site.device = a.device;
            site.kind = a.memKind;
            site.firstNs = a.timeNs;
        }
        ++site.count;
        site.bytes += a.size;
        site.firstNs = std::min(site.firstNs, a.timeNs);
        site.lastNs = std::max(site.lastNs, a.timeNs);
    }
    std::vector<report::Site> out;
    for (auto& [key, site] : sites)
        out.push_back(site);
    std::sort(out.begin(), out.end(), [](const report::Site& a, const report::Site& b) {
        return a.bytes != b.bytes ? a.bytes > b.bytes : a.stack < b.stack;
    });
    return out;
}

report::Report buildReport(const TrackImage& image, const TriggerInfo& trigger, TriggerFacts facts)
{
    return Builder(image, trigger, std::move(facts)).build();
}

} // namespace oomscope::interpret
