#include "report/analysis/memory_over_time.h"

#include "report/format.h"
#include "report/sources.h"

#include <algorithm>
#include <array>
#include <map>
#include <unordered_map>

namespace oomscope::report {
namespace {

constexpr size_t kSources = size_t(Source::Count);

Source classifyFrames(const Report& r, const Stack& stack)
{
    for (const Frame& f : stack.frames) {
        if (f.kind == FrameKind::Python) {
            if (f.line == 0 && !f.file.empty() && f.file[0] == '<')
                continue;  // a marker frame
            return classifyPythonFile(f.file);
        }
        const Module* m = f.module ? r.findModule(*f.module) : nullptr;
        if (!m || isCudaModule(m->path))
            continue;
        return classifySource(m->path);
    }
    return Source::Other;
}

class Replay {
public:
    Replay(const Report& r, const OverTimeOptions& o) : m_r(r), m_o(o)
    {
        // By stack id, a vector (ids are dense from 1; a million rows look theirs up).
        uint32_t most = 0;
        for (const Stack& s : r.stacks)
            most = std::max(most, s.id);
        m_sources.assign(size_t(std::min<uint32_t>(most, 1u << 24)) + 1, Source::Other);
        for (const Stack& s : r.stacks)
            if (s.id < m_sources.size())
                m_sources[s.id] = s.source ? *s.source : classifyFrames(r, s);
    }

    std::vector<DeviceOverTime> run();

private:
    struct Device {
        DeviceOverTime out;
        int64_t now[kSources] = {};
        int64_t total = 0;
        std::array<int64_t, kSources> before{};  // the state entering the window (events before it)
        std::vector<std::array<int64_t, kSources>> endOf;  // [bucket]: the state after its last event
        std::vector<int64_t> maxTotal, minTotal;
        std::vector<bool> touched;
    };
    Device& device(int64_t index);
    void apply(Device& d, const TimelineRow& row, int sign);
    void close(Device& d);
    void addMarkers();

    const Report& m_r;
    const OverTimeOptions& m_o;
    std::vector<Source> m_sources;  // [stack id]; Other past the end
    std::map<int64_t, Device> m_devices;
    uint64_t m_start = 0, m_end = 0, m_width = 1;
    size_t m_buckets = 1;  // as many as events, at least 64, at most the options' number
};

Replay::Device& Replay::device(int64_t index)
{
    auto [it, inserted] = m_devices.try_emplace(index);
    Device& d = it->second;
    if (inserted) {
        const size_t n = m_buckets;
        d.out.device = index;
        d.out.startNs = m_r.process.startNs;
        d.out.endNs = m_end;
        d.endOf.assign(n, {});
        d.maxTotal.assign(n, -1);
        d.minTotal.assign(n, INT64_MAX);
        d.touched.assign(n, false);
    }
    return d;
}

void Replay::apply(Device& d, const TimelineRow& row, int sign)
{
    const size_t s = size_t(row.stack < m_sources.size() ? m_sources[row.stack] : Source::Other);
    d.now[s] += sign * int64_t(row.size);
    d.total += sign * int64_t(row.size);
    if (row.timeNs < m_start) {  // before the window: what it starts with
        std::copy(std::begin(d.now), std::end(d.now), d.before.begin());
        return;
    }
    if (row.timeNs > m_end)
        return;  // after the window: counted in the anchor only
    ++d.out.events;
    const size_t b = std::min(m_buckets - 1, size_t((std::max(row.timeNs, m_start) - m_start) / m_width));
    d.touched[b] = true;
    std::copy(std::begin(d.now), std::end(d.now), d.endOf[b].begin());
    d.maxTotal[b] = std::max(d.maxTotal[b], d.total);
    d.minTotal[b] = std::min(d.minTotal[b], d.total);
}

// Fills the buckets no event touched with the state before them, anchors every source on the
// live bytes at the trigger, and keeps the sources that ever held memory.
void Replay::close(Device& d)
{
    const MemoryRow* row = m_r.findMemory(d.out.device);
    int64_t offset[kSources] = {};
    for (size_t s = 0; s < kSources && row; ++s) {
        auto live = row->bySource.find(Source(s));
        if (Source(s) != Source::Untracked && live != row->bySource.end())
            offset[s] = int64_t(live->second) - d.now[s];
    }
    int64_t offsetTotal = 0;
    for (size_t s = 0; s < kSources; ++s)
        offsetTotal += offset[s];
    std::array<int64_t, kSources> state = d.before;  // before the first event: what the anchor implies
    const size_t n = m_buckets;
    std::vector<bool> present(kSources, false);
    d.out.bytes.assign(kSources, std::vector<uint64_t>(n, 0));
    for (size_t b = 0; b < n; ++b) {
        int64_t before = 0;  // the total entering the bucket
        for (size_t s = 0; s < kSources; ++s)
            before += state[s];
        if (d.touched[b])
            state = d.endOf[b];
        int64_t end = 0;
        for (size_t s = 0; s < kSources; ++s) {
            const int64_t v = std::max<int64_t>(0, state[s] + offset[s]);
            d.out.bytes[s][b] = uint64_t(v);
            end += v;
            present[s] = present[s] || v > 0;
        }
        const int64_t high = d.touched[b] ? std::max(d.maxTotal[b], before) + offsetTotal : end;
        const int64_t low = d.touched[b] ? std::min(d.minTotal[b], before) + offsetTotal : end;
        d.out.timeNs.push_back(m_start + (b + 1) * m_width);
        d.out.totalMax.push_back(uint64_t(std::max<int64_t>({high, end, 0})));
        d.out.totalMin.push_back(uint64_t(std::clamp<int64_t>(low, 0, end)));
    }
    std::vector<std::vector<uint64_t>> kept;
    for (size_t s = 0; s < kSources; ++s) {
        if (present[s]) {
            d.out.sources.push_back(Source(s));
            kept.push_back(std::move(d.out.bytes[s]));
        }
    }
    d.out.bytes = std::move(kept);
}

std::vector<DeviceOverTime> Replay::run()
{
    const Timeline& tl = m_r.timeline;
    m_start = tl.rows.empty() ? m_r.process.startNs : std::min(tl.rows.front().timeNs, m_r.trigger.timeNs);
    m_end = std::max(m_r.trigger.timeNs, tl.rows.empty() ? m_start : tl.rows.back().timeNs);
    m_start = std::max(m_start, m_o.fromNs);
    m_end = std::min(m_end, m_o.toNs);
    if (m_start == 0 || m_end <= m_start)
        m_start = m_end > 1 ? m_end - 1 : 0;
    m_buckets = std::clamp<size_t>(tl.rows.size(), std::min<size_t>(64, m_o.buckets), m_o.buckets);
    m_width = std::max<uint64_t>(1, (m_end - m_start + m_buckets - 1) / m_buckets);
    for (const MemoryRow& row : m_r.memory)
        device(row.device);
    // Per name index, once: a million rows compare numbers, not strings.
    std::vector<int8_t> sign(tl.names.size(), 0);
    std::vector<bool> deviceApi(tl.names.size(), false);
    for (size_t i = 0; i < tl.names.size(); ++i) {
        sign[i] = tl.names[i] == "alloc" ? 1 : tl.names[i] == "free" ? -1 : 0;
        deviceApi[i] = deviceMemoryApi(tl.names[i]);
    }
    for (const TimelineRow& row : tl.rows) {
        if (row.kind >= sign.size() || row.api >= sign.size() || sign[row.kind] == 0 || row.device < 0 ||
            !deviceApi[row.api])
            continue;
        apply(device(row.device), row, sign[row.kind]);
    }
    for (auto& [index, d] : m_devices)
        close(d);
    addMarkers();
    std::vector<DeviceOverTime> out;
    for (auto& [index, d] : m_devices)
        out.push_back(std::move(d.out));
    return out;
}

void addCapped(std::vector<TimeMarker>& from, size_t cap, DeviceOverTime& to)
{
    if (from.size() <= cap) {
        to.markers.insert(to.markers.end(), from.begin(), from.end());
        return;
    }
    // Evenly spaced, the last one kept (the failure nearest the OOM, the last step).
    for (size_t i = 0; i < cap; ++i)
        to.markers.push_back(from[(from.size() - 1) - (cap - 1 - i) * (from.size() - 1) / (cap - 1)]);
    to.markersDropped += from.size() - cap;
}

void Replay::addMarkers()
{
    const Timeline& tl = m_r.timeline;
    for (auto& [index, d] : m_devices) {
        std::vector<TimeMarker> steps, labels, failures;
        const auto inside = [&](uint64_t t) { return t >= m_start && t <= m_end; };
        for (const Step& s : m_r.steps) {
            if (!inside(s.timeNs))
                continue;
            const int64_t device = index;  // a copy: clang before 16 captures no structured binding
            const bool here = std::any_of(s.devices.begin(), s.devices.end(),
                                          [&](const StepDevice& sd) { return sd.device == device; });
            if (!here)
                continue;
            steps.push_back({TimeMarker::Kind::Step, s.timeNs, std::string(enumName(s.source)) + " " + std::to_string(s.index)});
            for (const StepDevice& sd : s.devices) {
                if (sd.device == index && sd.allocatedBytes)
                    d.out.allocated.emplace_back(s.timeNs, *sd.allocatedBytes);
                if (sd.device == index && sd.reservedBytes)
                    d.out.reserved.emplace_back(s.timeNs, *sd.reservedBytes);
            }
        }
        const Timeline::Flags marker = tl.flags("marker"), failed = tl.flags("alloc_failed");
        for (const TimelineRow& row : tl.rows) {
            if (!inside(row.timeNs))
                continue;
            if (marker(row.kind) && row.address == 0)
                labels.push_back({TimeMarker::Kind::Label, row.timeNs, tl.name(row.api)});
            else if (failed(row.kind) && row.device == index)
                failures.push_back({TimeMarker::Kind::Failure, row.timeNs,
                                    tl.name(row.api) + " of " + formatBytes(row.size) + " failed (error " +
                                        std::to_string(row.error) + ")"});
        }
        addCapped(steps, m_o.maxMarkers, d.out);
        addCapped(labels, m_o.maxMarkers, d.out);
        addCapped(failures, m_o.maxMarkers, d.out);
        if (m_r.trigger.kind == TriggerKind::Oom && m_r.trigger.device.value_or(-1) == index && inside(m_r.trigger.timeNs))
            d.out.markers.push_back({TimeMarker::Kind::Oom, m_r.trigger.timeNs, "OOM: " + m_r.trigger.message});
        std::stable_sort(d.out.markers.begin(), d.out.markers.end(),
                         [](const TimeMarker& a, const TimeMarker& b) { return a.timeNs < b.timeNs; });
    }
}

} // namespace

std::vector<DeviceOverTime> memoryOverTime(const Report& report, const OverTimeOptions& options)
{
    OverTimeOptions o = options;
    o.buckets = std::max<size_t>(1, o.buckets);
    o.maxMarkers = std::max<size_t>(2, o.maxMarkers);
    return Replay(report, o).run();
}

std::optional<uint64_t> trackedAt(const Report& report, uint64_t monoNs)
{
    const Timeline& tl = report.timeline;
    if (monoNs > report.trigger.timeNs)
        return std::nullopt;
    const bool whole = report.capture.eventsPushed <= tl.rows.size();
    if (!whole && (tl.rows.empty() || tl.rows.front().timeNs > monoNs))
        return std::nullopt;
    int64_t held = 0;
    for (const MemoryRow& row : report.memory)
        held += int64_t(row.trackedBytes);
    const Timeline::Flags isAlloc = tl.flags("alloc"), isFree = tl.flags("free"), deviceApi = tl.flags(deviceMemoryApi);
    for (auto it = tl.rows.rbegin(); it != tl.rows.rend() && it->timeNs > monoNs; ++it) {
        const int sign = isAlloc(it->kind) ? 1 : isFree(it->kind) ? -1 : 0;
        if (sign != 0 && it->device >= 0 && deviceApi(it->api))
            held -= sign * int64_t(it->size);
    }
    return uint64_t(std::max<int64_t>(0, held));
}

bool deviceMemoryApi(const std::string& api)
{
    static const char* const kOther[] = {"cudaHostAlloc",   "cudaMallocHost",    "cudaFreeHost",     "cuMemHostAlloc",
                                         "cuMemAllocHost_v2", "cuMemFreeHost",   "cudaMallocManaged", "cuMemAllocManaged"};
    return std::none_of(std::begin(kOther), std::end(kOther), [&](const char* name) { return api == name; });
}

Source stackSource(const Report& report, uint32_t stack)
{
    const Stack* s = report.findStack(stack);
    if (!s)
        return Source::Other;
    return s->source ? *s->source : classifyFrames(report, *s);
}

} // namespace oomscope::report
