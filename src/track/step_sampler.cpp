#include "track/step_sampler.h"

#include "track/flight_writer.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace oomscope::track {

uint64_t StepSampler::addStep(report::Step step)
{
    std::lock_guard<std::mutex> lock(m_mutex);
    if (!m_sawStep.exchange(true, std::memory_order_relaxed)) {
        // The program has step events: the periodic samples taken before the first one (model
        // loading) give way.
        m_steps.clear();
        m_index = 0;
        if (m_flight)
            m_flight->dropSteps();
    }
    step.index = ++m_index;
    if (m_steps.size() == m_max)
        m_steps.pop_front();
    m_steps.push_back(std::move(step));
    if (m_flight)
        m_flight->step(m_steps.back());
    return m_index;
}

bool StepSampler::claimPeriodic(uint64_t nowNs) noexcept
{
    if (m_periodNs == 0 || m_sawStep.load(std::memory_order_relaxed))
        return false;
    uint64_t last = m_lastPeriodicNs.load(std::memory_order_relaxed);
    if (last != 0 && nowNs - last < m_periodNs)
        return false;
    // One thread takes the sample; the others go on.
    if (!m_lastPeriodicNs.compare_exchange_strong(last, nowNs, std::memory_order_relaxed))
        return false;
    return last != 0;  // the first allocation starts the clock: no sample of an empty process
}

void StepSampler::addPeriodic(report::Step sample)
{
    std::lock_guard<std::mutex> lock(m_mutex);
    if (m_sawStep.load(std::memory_order_relaxed))
        return;  // a step event came while this sample was taken: it gives way
    sample.source = report::StepSource::Sample;
    sample.index = ++m_index;
    if (m_steps.size() == m_max)
        m_steps.pop_front();
    m_steps.push_back(std::move(sample));
    if (m_flight)
        m_flight->step(m_steps.back());
}

std::vector<report::Step> StepSampler::steps() const
{
    std::lock_guard<std::mutex> lock(m_mutex);
    return {m_steps.begin(), m_steps.end()};
}

namespace {

void keepLargest(std::vector<report::StepSite>& sites)
{
    std::sort(sites.begin(), sites.end(), [](const report::StepSite& a, const report::StepSite& b) {
        return a.bytes != b.bytes ? a.bytes > b.bytes : std::tie(a.stack, a.device) < std::tie(b.stack, b.device);
    });
    if (sites.size() > report::kStepSitesMax)
        sites.resize(report::kStepSitesMax);
}

} // namespace

report::Step StepSampler::sample(uint64_t timeNs, const LiveCounters& counters, const std::vector<LiveAllocation>& live,
                                 const FrameworkState* state,
                                 const std::function<uint32_t(const TensorGroup&)>& internTensorStack)
{
    report::Step step;
    step.timeNs = timeNs;
    for (int device = 0; device < LiveCounters::kMaxDevices; ++device) {
        const FrameworkDevice* fw = state ? state->device(device) : nullptr;
        const uint64_t tracked = counters.live(device, MemKind::Device);
        if (tracked == 0 && !fw && counters.peak(device) == 0)
            continue;
        report::StepDevice d;
        d.device = device;
        d.trackedBytes = tracked;
        if (fw) {
            d.allocatedBytes = fw->allocated;
            d.reservedBytes = fw->reserved;
            d.inactiveSplitBytes = fw->inactiveSplit;
            d.peakAllocatedBytes = fw->allocatedPeak;
            d.expandableSegments = fw->expandable;
            d.segmentCount = fw->segmentCount;
            d.largestFreeBlockBytes = state->largestFreeBlock(device);
            d.byRole = fw->roles(timeNs);
        }
        step.devices.push_back(d);
    }
    // Live bytes by stack: what the capture sees (the largest sites).
    std::map<std::pair<uint32_t, int64_t>, uint64_t> bytes;
    for (const LiveAllocation& a : live)
        bytes[{a.stack, a.device}] += a.size;
    for (const auto& [key, total] : bytes)
        step.sites.push_back(report::StepSite{key.first, key.second, total});
    keepLargest(step.sites);
    // The framework's tensors by Python stack, when its adapter sent them.
    if (state) {
        for (const TensorGroup& g : state->tensorGroups) {
            if (const uint32_t id = internTensorStack(g))
                step.tensors.push_back(report::StepSite{id, g.device, g.bytes});
        }
        keepLargest(step.tensors);
        if (state->census) {
            std::vector<report::Retainer> retainers;
            for (const RetainerText& t : state->retainers) {
                report::Retainer r = t.retainer;
                if (!t.frames.empty())
                    r.stack = internTensorStack(TensorGroup{r.device, r.bytes, t.frames});
                retainers.push_back(std::move(r));
            }
            step.retainers = std::move(retainers);
        }
    }
    return step;
}

} // namespace oomscope::track
