// Recorder::snapshot(): everything the recorder holds, as one image for the report builder.
// Dump time only: allocates freely, takes the tables' locks one after another.
#include "track/recorder.h"

#include "track/backtrace.h"
#include "track/config.h"
#include "track/fast_clock.h"
#include "track/module_map.h"
#include "track/process_info.h"
#include "track/python_frames.h"

#include <algorithm>
#include <tuple>

namespace oomscope::track {
namespace {

// Events in time order, stably. One thread's events come in order but for a rare step back
// (the event clock's switch to the time-stamp counter): a few moved into place; several
// threads' blocks interleave: a full sort.
void sortByTime(std::vector<Event>& events)
{
    const auto byTime = [](const Event& a, const Event& b) { return a.timeNs < b.timeNs; };
    size_t descents = 0;
    for (size_t i = 1; i < events.size(); ++i)
        descents += byTime(events[i], events[i - 1]);
    if (descents == 0)
        return;
    if (descents * 1024 > events.size()) {
        std::stable_sort(events.begin(), events.end(), byTime);
        return;
    }
    for (size_t i = 1; i < events.size(); ++i) {
        if (!byTime(events[i], events[i - 1]))
            continue;
        const auto to = std::upper_bound(events.begin(), events.begin() + ptrdiff_t(i), events[i], byTime);
        std::rotate(to, events.begin() + ptrdiff_t(i), events.begin() + ptrdiff_t(i) + 1);
    }
}

} // namespace

// The live map and the live VMM physical allocations, copied (dump time, samples, the
// peak's composition).
std::vector<LiveAllocation> Recorder::liveAllocations() const
{
    std::vector<LiveAllocation> live = m_live.snapshot();
    const std::vector<LiveAllocation> vmm = m_vmm.snapshot();
    live.insert(live.end(), vmm.begin(), vmm.end());
    return live;
}

TrackImage Recorder::snapshot() const
{
    const Config& config = Config::get();
    TrackImage image;
    image.timeNs = eventNs();
    image.process = currentProcess();
    image.options = {{"ring_events", std::to_string(m_ring.capacity())},
                     {"cupti", config.cupti},
                     {"stack_depth", std::to_string(m_stackDepth)},
                     {"output_dir", config.outputDir.empty() ? "." : config.outputDir},
                     {"exit_report", config.exitReport ? "1" : "0"}};
    // The timeline first, the names last: every stack an event or entry names is interned by then.
    image.ringCapacity = m_ring.capacity();
    image.ringBytes = m_ring.memoryBytes();
    image.events.reserve(std::min<uint64_t>(m_ring.pushed(), m_ring.capacity()));
    std::tie(image.pushed, image.dropped) = m_ring.forEachStable([&](const Event& e) { image.events.push_back(e); });
    sortByTime(image.events);  // the ring gives each thread's events in order, not one order
    image.live = liveAllocations();
    image.mappings = m_vmm.mappings();
    image.paused = m_vmm.paused();
    image.nccl = m_nccl.snapshot();
    image.counters = m_counters.snapshot();
    {
        // The compositions taken at the frees after a peak; a device whose peak grew since its
        // last one and has not shrunk since holds its peak now: composed from the live copy.
        bool holds[LiveCounters::kMaxDevices] = {};
        for (const LiveAllocation& a : image.live) {
            if (a.memKind == MemKind::Device && a.device >= 0 && a.device < LiveCounters::kMaxDevices)
                holds[a.device] = true;
        }
        std::lock_guard<SpinLock> lock(m_peakLock);
        for (int d = 0; d < LiveCounters::kMaxDevices; ++d) {
            const bool kept = size_t(d) < m_peakSites.size() && m_peakSites[size_t(d)].device >= 0;
            if (holds[d] && peakPending(d)) {
                PeakSites now = composePeak(d, image.live, nullptr);
                if (now.bytes > 0 && (!kept || now.bytes >= m_peakSites[size_t(d)].bytes)) {
                    now.timeNs = image.timeNs;
                    image.peaks.push_back(std::move(now));
                    continue;
                }
            }
            if (kept)
                image.peaks.push_back(m_peakSites[size_t(d)]);
        }
    }
    image.steps = m_steps.steps();
    image.framework = m_episodes.framework();
    image.skippedOoms = m_episodes.skipped();
    for (const auto& slot : m_pools) {
        if (const uint64_t pool = slot.load(std::memory_order_relaxed))
            image.pools.push_back(pool);
    }
    image.apiNames = m_apis.all();
    image.stacks = m_stacks.all();
    image.pythonCodes = PythonFrames::codes();
    image.modules = loadedModules();
    image.unknownFrees = m_unknownFrees.load(std::memory_order_relaxed);
    image.oomEpisodes = m_oomEpisodes.load(std::memory_order_relaxed);
    image.failedAllocations = m_failedAllocations.load(std::memory_order_relaxed);
    image.liveMapBytes = m_live.memoryBytes();
    image.stackTableBytes = m_stacks.memoryBytes();
    image.distinctStacks = m_stacks.size();
    image.unwinder = unwinderName();
    if (m_ring.memoryBytes() == 0)
        image.notes.push_back("the event ring could not be mapped: no timeline");
    if (m_live.refused() > 0)
        image.notes.push_back(std::to_string(m_live.refused()) + " allocations could not enter the live map (out of memory)");
    return image;
}

} // namespace oomscope::track
