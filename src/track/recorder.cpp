#include "track/recorder.h"

#include "track/flight_file.h"
#include "interpret/report_parts.h"
#include "track/backtrace.h"
#include "track/config.h"
#include "track/fast_clock.h"
#include "track/module_map.h"
#include "track/process_info.h"
#include "track/python_frames.h"
#include "interpret/attribution.h"
#include "interpret/symbolize.h"
#include "track/triggers.h"
#include "report/huge_pages.h"
#include "report/model.h"
#include "report/report_file.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <cinttypes>
#include <cstdio>
#include <dlfcn.h>
#include <map>
#include <new>
#include <set>
#include <unistd.h>
#include <unordered_map>

#ifndef OOMSCOPE_VERSION
#define OOMSCOPE_VERSION "0.0.0"
#endif

namespace oomscope::track {

std::atomic<Recorder*> Recorder::s_instance{nullptr};

const char* triggerKindName(TriggerKind kind)
{
    switch (kind) {
    case TriggerKind::Oom: return "oom";
    case TriggerKind::Exit: return "exit";
    case TriggerKind::Signal: return "signal";
    case TriggerKind::Request: return "request";
    }
    return "request";
}

namespace {

std::string ownDirectory()
{
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&ownDirectory), &info) && info.dli_fname) {
        std::string path = info.dli_fname;
        const size_t slash = path.rfind('/');
        if (slash != std::string::npos)
            return path.substr(0, slash);
    }
    return {};
}

std::string formatBytes(uint64_t bytes)
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


} // namespace

namespace {
std::atomic<uint64_t> g_nextRecorderId{1};
} // namespace

Recorder::Recorder(FlightFile* flight)
    : m_flight(flight),
      m_ringCapacity(flight ? flight->ringCapacity() : Config::get().ringEvents),
      m_ring(m_ringCapacity, flight ? flight->ringMemory() : nullptr),
      m_stackDepth(Config::get().stackDepth)
{
    m_live.setFlight(flight);
    m_stacks.setFlight(flight);
    if (flight)
        m_vmm.setFlight(flight->vmmEntries(), flight->vmmCapacity(), flight->vmmFull());
    m_id = g_nextRecorderId.fetch_add(1, std::memory_order_relaxed);
    m_apiNames[0].store("unknown", std::memory_order_relaxed);
}

Recorder* Recorder::start(void (*configure)(Recorder&))
{
    if (Recorder* r = get())
        return r;
    static std::mutex startMutex;
    std::lock_guard<std::mutex> lock(startMutex);
    if (Recorder* r = get())
        return r;
    // Leaked on purpose: hooks can run on other threads while the process exits. The flight
    // file first: the ring and the live tables live in it.
    FlightFile* flight = FlightFile::create(RingBuffer::roundCapacity(Config::get().ringEvents));
    auto* recorder = new (std::nothrow) Recorder(flight);
    if (!recorder)
        return nullptr;
    const auto range = moduleRangeOf(reinterpret_cast<const void*>(&Recorder::start));
    recorder->setOwnModule(range.first, range.second);
    const std::string dir = ownDirectory();
    backtraceInit(dir.c_str());
    if (configure)
        configure(*recorder);
    s_instance.store(recorder, std::memory_order_release);
    installTriggers(*recorder);
    return recorder;
}

void Recorder::addCaptureSource(CaptureSource* source) noexcept
{
    for (auto& slot : m_captureSources) {
        CaptureSource* expected = nullptr;
        if (slot.compare_exchange_strong(expected, source, std::memory_order_acq_rel) || expected == source)
            return;
    }
}

void Recorder::setOwnModule(uint64_t begin, uint64_t end)
{
    m_ownBegin.store(begin, std::memory_order_relaxed);
    m_ownEnd.store(end, std::memory_order_relaxed);
}

ApiId Recorder::registerApi(const char* name)
{
    std::lock_guard<std::mutex> lock(m_apiMutex);
    const uint16_t count = m_apiCount.load(std::memory_order_relaxed);
    for (uint16_t i = 1; i < count; ++i) {
        if (std::strcmp(m_apiNames[i].load(std::memory_order_relaxed), name) == 0)
            return ApiId(i);
    }
    if (count >= kMaxApis)
        return ApiId();
    m_apiNames[count].store(name, std::memory_order_release);
    m_apiCount.store(uint16_t(count + 1), std::memory_order_release);
    if (m_flight)
        m_flight->apiName(count, name);
    return ApiId(count);
}

const char* Recorder::apiName(ApiId id) const
{
    if (id.value() >= m_apiCount.load(std::memory_order_acquire))
        return "unknown";
    const char* name = m_apiNames[id.value()].load(std::memory_order_acquire);
    return name ? name : "unknown";
}

StackId Recorder::captureStack() noexcept
{
    if (m_stackDepth <= 0)
        return StackId();
    constexpr int kOwnFramesMax = 16;
    // In a Python process the native stack is unwound deeper, to find where the interpreter
    // starts: its frames are replaced by the Python frames of the thread (python_frames.h).
    constexpr int kPythonFramesMax = 64;
    constexpr int kInterpreterSearch = 96;
    static const bool pythonFrames = Config::get().pythonFrames;
    const bool python = pythonFrames && PythonFrames::available();
    uint64_t raw[256 + kOwnFramesMax + kInterpreterSearch + kPythonFramesMax];
    const int n = captureBacktrace(raw, m_stackDepth + kOwnFramesMax + (python ? kInterpreterSearch : 0));
    const uint64_t begin = m_ownBegin.load(std::memory_order_relaxed);
    const uint64_t end = m_ownEnd.load(std::memory_order_relaxed);
    const auto own = [begin, end](uint64_t pc) { return pc >= begin && pc < end; };
    // The unwinder's own frames may come first: glibc's backtrace(), or a sanitizer's
    // interceptor of it. Everything up to the last of our frames at the top goes.
    constexpr int kUnwinderFramesMax = 4;
    int skip = 0;
    while (skip < n && skip < kUnwinderFramesMax && !own(raw[skip]))
        ++skip;
    if (skip == n || skip == kUnwinderFramesMax)
        skip = 0;
    while (skip < n && own(raw[skip]))
        ++skip;
    uint64_t* frames = raw + skip;
    int count = n - skip;
    if (python) {
        const int spliced = PythonFrames::splice(frames, count, m_stackDepth, kPythonFramesMax);
        if (spliced >= 0)
            count = spliced;
        else
            count = std::min(count, m_stackDepth);
    } else {
        count = std::min(count, m_stackDepth);
    }
    return m_stacks.intern(frames, uint32_t(count > 0 ? count : 0));
}

void Recorder::push(EventKind kind, const AllocRecord& alloc, int error, uint64_t timeNs) noexcept
{
    Event e;
    e.timeNs = timeNs ? timeNs : eventNs();
    e.address = alloc.address;
    e.size = alloc.size;
    e.stream = alloc.stream;
    e.stack = alloc.stack.value();
    e.thread = currentThreadId();
    e.error = int16_t(error);
    e.api = alloc.api.value();
    e.device = int8_t(alloc.device < 127 ? alloc.device : 127);
    e.kind = kind;
    e.memKind = alloc.kind;
    m_ring.push(e);
}

namespace {

// A thread's live-byte cell and its device-memory deltas not yet added to the batched totals
// (the first kBatchedSlots device slots; others go straight through). Plain data: no destructor.
constexpr int kBatchedSlots = 8;
struct ThreadLive {
    uint64_t owner = 0;
    void* cell = nullptr;
    int64_t pending[kBatchedSlots] = {};
};
thread_local ThreadLive t_live __attribute__((tls_model("initial-exec")));

} // namespace

Recorder::~Recorder()
{
    for (LiveCell* c = m_liveCells.load(std::memory_order_acquire); c;) {
        LiveCell* next = c->next;
        delete c;
        c = next;
    }
}

Recorder::LiveCell* Recorder::newLiveCell() noexcept
{
    LiveCell* cell = new (std::nothrow) LiveCell();
    if (!cell)
        return &m_sharedLiveCell;
    LiveCell* head = m_liveCells.load(std::memory_order_relaxed);
    do {
        cell->next = head;
    } while (!m_liveCells.compare_exchange_weak(head, cell, std::memory_order_release, std::memory_order_relaxed));
    return cell;
}

void Recorder::addLive(int device, MemKind kind, int64_t delta) noexcept
{
    const int s = slot(device);
    ThreadLive& t = t_live;
    if (__builtin_expect(t.owner != m_id, 0)) {
        t = ThreadLive{};
        t.owner = m_id;
        t.cell = newLiveCell();
    }
    auto* cell = static_cast<LiveCell*>(t.cell);
    std::atomic<int64_t>& bytes = cell->bytes[s][size_t(kind)];
    if (__builtin_expect(cell == &m_sharedLiveCell, 0))
        bytes.fetch_add(delta, std::memory_order_relaxed);
    else
        bytes.store(bytes.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
    if (kind != MemKind::Device)
        return;
    int64_t flush = delta;
    if (s < kBatchedSlots) {
        t.pending[s] += delta;
        if (t.pending[s] < kPeakBatch && t.pending[s] > -kPeakBatch)
            return;
        flush = t.pending[s];
        t.pending[s] = 0;
    }
    const int64_t now = m_batchedDevice[s].fetch_add(flush, std::memory_order_relaxed) + flush;
    int64_t peak = m_peakDevice[s].load(std::memory_order_relaxed);
    while (now > peak && !m_peakDevice[s].compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
}

int64_t Recorder::liveSum(int s, MemKind kind) const
{
    int64_t sum = m_sharedLiveCell.bytes[s][size_t(kind)].load(std::memory_order_relaxed);
    for (const LiveCell* c = m_liveCells.load(std::memory_order_acquire); c; c = c->next)
        sum += c->bytes[s][size_t(kind)].load(std::memory_order_relaxed);
    return sum;
}

namespace {
LiveAllocation liveEntry(const AllocRecord& alloc, uint64_t timeNs)
{
    LiveAllocation entry;
    entry.address = alloc.address;
    entry.size = alloc.size;
    entry.timeNs = timeNs;
    entry.stream = alloc.stream;
    entry.stack = alloc.stack.value();
    entry.api = alloc.api.value();
    entry.device = int8_t(alloc.device < 127 ? alloc.device : 127);
    entry.memKind = alloc.kind;
    return entry;
}
} // namespace

void Recorder::recordAlloc(const AllocRecord& alloc) noexcept
{
    markProcessActive();
    const uint64_t now = eventNs();  // one clock read for the live entry and the event
    const LiveAllocation entry = liveEntry(alloc, now);
    LiveAllocation replaced;
    switch (m_live.insert(entry, &replaced)) {
    case LiveMap::InsertResult::Replaced:
        addLive(replaced.device, replaced.memKind, -int64_t(replaced.size));
        [[fallthrough]];
    case LiveMap::InsertResult::Inserted:
        addLive(alloc.device, alloc.kind, int64_t(alloc.size));
        break;
    case LiveMap::InsertResult::Refused:
        break;
    }
    push(EventKind::Alloc, alloc, 0, now);
    maybeSample(now);
}

bool Recorder::recordFree(ApiId api, uint64_t address, uint64_t stream, EventKind kind) noexcept
{
    const std::optional<LiveAllocation> found = m_live.erase(address);
    if (!found) {
        m_unknownFrees.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    markProcessActive();
    addLive(found->device, found->memKind, -int64_t(found->size));
    AllocRecord rec;
    rec.api = api;
    rec.kind = found->memKind;
    rec.device = found->device;
    rec.address = address;
    rec.size = found->size;
    rec.stream = stream;
    rec.stack = StackId(found->stack);
    push(kind, rec, 0);
    return true;
}

bool Recorder::newEpisode() noexcept
{
    const uint64_t now = eventNs();
    const uint64_t previous = m_lastOomNs.exchange(now, std::memory_order_acq_rel);
    const uint64_t window = uint64_t(Config::get().oomEpisodeMs) * 1000000ull;
    return previous == 0 || now - previous > window;
}

bool Recorder::ownedByFramework(StackId stack)
{
    std::string framework;
    {
        std::lock_guard<std::mutex> lock(m_frameworkMutex);
        framework = m_framework;
    }
    // Decided as by_source is, with the loader's view of the modules.
    const std::string source = sourceOfFrames(
        m_stacks.frames(stack),
        [](uint64_t pc) {
            Dl_info info{};
            return dladdr(reinterpret_cast<void*>(pc), &info) && info.dli_fname ? std::string(info.dli_fname) : std::string();
        },
        PythonFrames::resolve);
    return !framework.empty() && source == framework;
}

void Recorder::recordFailure(const AllocRecord& alloc, int error, bool outOfMemory) noexcept
{
    markProcessActive();
    push(EventKind::AllocFailed, alloc, error);
    if (!outOfMemory)
        return;
    try {
        const bool fresh = newEpisode();
        if (m_frameworkReportsOom.load(std::memory_order_acquire) && ownedByFramework(alloc.stack)) {
            // The framework will say whether this becomes an OOM: keep the view at the first
            // failure, before its cache flush.
            if (fresh) {
                FirstFailure first;
                first.timeNs = eventNs();
                first.alloc = alloc;
                first.error = error;
                DeviceProbe* probe = m_probe.load(std::memory_order_acquire);
                first.rows = memoryRows(probe ? probe->probeDevices() : std::vector<report::Device>{});
                std::lock_guard<std::mutex> lock(m_frameworkMutex);
                m_firstFailure = std::move(first);
            }
            return;
        }
        if (!fresh)
            return;  // the same episode
        TriggerInfo trigger;
        trigger.kind = TriggerKind::Oom;
        trigger.failed = alloc;
        trigger.error = error;
        dump(trigger);
    } catch (...) {
    }
    // The window runs from the end of the report: writing it must not split one episode.
    m_lastOomNs.store(eventNs(), std::memory_order_release);
}

void Recorder::attachPythonFrames(uint64_t address, const std::vector<PythonFrameText>& python)
{
    const std::optional<LiveAllocation> live = m_live.find(address);
    const uint32_t oldStack = live ? live->stack : m_vmm.stackAt(address);
    if (!live && oldStack == 0)
        return;
    std::vector<uint64_t> words;
    for (uint64_t pc : m_stacks.frames(StackId(oldStack))) {
        if (isPythonFrame(pc) || PythonFrames::inInterpreter(pc))
            break;
        words.push_back(pc);
    }
    for (const PythonFrameText& f : python)
        words.push_back(PythonFrames::token(f.file, f.function, f.line));
    const StackId stack = m_stacks.intern(words.data(), uint32_t(words.size()));
    if (!stack)
        return;
    if (live) {
        LiveAllocation updated = *live;
        updated.stack = stack.value();
        m_live.update(updated);
    } else {
        m_vmm.setStackAt(address, stack.value());
    }
}

void Recorder::attachFramework(const std::string& name, bool reportsOom)
{
    std::lock_guard<std::mutex> lock(m_frameworkMutex);
    m_framework = name;
    m_frameworkReportsOom.store(reportsOom, std::memory_order_release);
}

std::string Recorder::frameworkOom(const FrameworkState& state, int device, uint64_t requested)
{
    markProcessActive();
    for (const auto& [address, frames] : state.allocationFrames)
        attachPythonFrames(address, frames);
    TriggerInfo trigger;
    trigger.kind = TriggerKind::Oom;
    trigger.framework = &state;
    // The program's line that asked, Python frames included; the adapter's own frames (the
    // ctypes call from oomscope's package) are cut off the top.
    std::vector<uint64_t> words = m_stacks.frames(captureStack());
    for (size_t i = 0; i < words.size(); ++i) {
        if (isPythonFrame(words[i]) && PythonFrames::resolve(words[i]).module.rfind("oomscope", 0) == 0) {
            words.erase(words.begin(), words.begin() + long(i) + 1);
            i = size_t(-1);
        }
    }
    trigger.stack = m_stacks.intern(words.data(), uint32_t(words.size()));
    std::optional<FirstFailure> first;
    {
        std::lock_guard<std::mutex> lock(m_frameworkMutex);
        first.swap(m_firstFailure);
    }
    const uint64_t now = eventNs();
    const uint64_t window = uint64_t(Config::get().oomEpisodeMs) * 1000000ull;
    AllocRecord alloc;
    if (first && now - first->timeNs <= window + 60ull * 1000000000ull) {
        // The CUDA call that failed first in this episode: what, where, which error.
        alloc = first->alloc;
        trigger.error = first->error;
        trigger.atFirstFailure = std::move(first->rows);
    } else {
        // No CUDA call failed: the framework's own limit (set_per_process_memory_fraction).
        alloc.api = registerApi(state.name.c_str());
        alloc.device = device;
    }
    alloc.size = requested;
    alloc.device = device;
    alloc.stack = trigger.stack;
    trigger.failed = alloc;
    const std::string path = dump(trigger);
    m_lastOomNs.store(eventNs(), std::memory_order_release);
    return path;
}

report::Step Recorder::memorySample(const FrameworkState* state, uint64_t timeNs)
{
    report::Step step;
    step.timeNs = timeNs;
    for (int s = 1; s <= kMaxDevices; ++s) {
        const int device = s - 1;
        const FrameworkDevice* fw = state ? state->device(device) : nullptr;
        const uint64_t tracked = liveBytes(device, MemKind::Device);
        if (tracked == 0 && !fw && m_peakDevice[s].load(std::memory_order_relaxed) == 0)
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
        }
        step.devices.push_back(d);
    }
    sampleStepSites(state, step);
    return step;
}

uint64_t Recorder::keepStep(report::Step step)
{
    std::lock_guard<std::mutex> lock(m_stepsMutex);
    if (step.source == "sample" && m_sawStep.load(std::memory_order_relaxed))
        return m_stepIndex;  // a step event came while this sample was taken: it gives way
    step.index = ++m_stepIndex;
    if (m_steps.size() == kMaxSteps)
        m_steps.pop_front();
    m_steps.push_back(std::move(step));
    return m_stepIndex;
}

void Recorder::recordStep(const FrameworkState* state) noexcept
{
    markProcessActive();
    if (!m_sawStep.exchange(true, std::memory_order_relaxed)) {
        // The program has step events: the periodic samples taken before the first one (model
        // loading) give way, so that steps are one per step event, numbered from 1.
        std::lock_guard<std::mutex> lock(m_stepsMutex);
        m_steps.clear();
        m_stepIndex = 0;
    }
    try {
        const uint64_t index = keepStep(memorySample(state, eventNs()));
        AllocRecord rec;
        {
            std::lock_guard<std::mutex> lock(m_stepsMutex);
            if (!m_stepApi)
                m_stepApi = registerApi("step");
            rec.api = m_stepApi;
        }
        rec.size = index;
        push(EventKind::Step, rec, 0);
    } catch (...) {
    }
}

void Recorder::maybeSample(uint64_t nowNs) noexcept
{
    const uint64_t period = uint64_t(Config::get().sampleMs) * 1000000ull;
    if (period == 0 || m_sawStep.load(std::memory_order_relaxed))
        return;
    uint64_t last = m_lastSampleNs.load(std::memory_order_relaxed);
    if (nowNs - last < period && last != 0)
        return;
    // One thread takes the sample; the others go on.
    if (!m_lastSampleNs.compare_exchange_strong(last, nowNs, std::memory_order_relaxed))
        return;
    if (last == 0)
        return;  // the first allocation starts the clock: no sample of an empty process
    try {
        report::Step step = memorySample(nullptr, nowNs);
        step.source = "sample";
        keepStep(std::move(step));
    } catch (...) {
    }
}

// Live bytes by stack at a step boundary, for the leak analysis: what the capture sees (the
// largest sites), and the framework's tensors by Python stack when its adapter sent them.
void Recorder::sampleStepSites(const FrameworkState* state, report::Step& step)
{
    auto keepLargest = [](std::vector<report::StepSite>& sites) {
        std::sort(sites.begin(), sites.end(), [](const report::StepSite& a, const report::StepSite& b) {
            return a.bytes != b.bytes ? a.bytes > b.bytes : std::tie(a.stack, a.device) < std::tie(b.stack, b.device);
        });
        if (sites.size() > report::kStepSitesMax)
            sites.resize(report::kStepSitesMax);
    };
    std::map<std::pair<uint32_t, int64_t>, uint64_t> bytes;
    std::vector<LiveAllocation> live = m_live.snapshot();
    const std::vector<LiveAllocation> vmmLive = m_vmm.snapshot();
    live.insert(live.end(), vmmLive.begin(), vmmLive.end());
    for (const LiveAllocation& a : live)
        bytes[{a.stack, a.device}] += a.size;
    for (const auto& [key, total] : bytes)
        step.sites.push_back(report::StepSite{key.first, key.second, total});
    keepLargest(step.sites);
    if (!state)
        return;
    for (const TensorGroup& g : state->tensorGroups) {
        std::vector<uint64_t> words;
        for (const PythonFrameText& f : g.frames)
            words.push_back(PythonFrames::token(f.file, f.function, f.line));
        if (const StackId id = m_stacks.intern(words.data(), uint32_t(words.size())))
            step.tensors.push_back(report::StepSite{id.value(), g.device, g.bytes});
    }
    keepLargest(step.tensors);
}

void Recorder::recordMarker(EventKind kind, ApiId api, uint64_t value) noexcept
{
    AllocRecord rec;
    rec.api = api;
    rec.size = value;
    push(kind, rec, 0);
}

void Recorder::recordTimelineOnly(EventKind kind, const AllocRecord& record) noexcept
{
    markProcessActive();
    push(kind, record, 0);
}

void Recorder::recordVmmCreate(const AllocRecord& alloc) noexcept
{
    markProcessActive();
    const LiveAllocation entry = liveEntry(alloc, eventNs());
    try {
        if (m_vmm.create(entry))
            addLive(alloc.device, alloc.kind, int64_t(alloc.size));
    } catch (...) {
        return;
    }
    push(EventKind::Alloc, alloc, 0);
}

void Recorder::vmmEnded(ApiId api, const LiveAllocation& ended) noexcept
{
    addLive(ended.device, ended.memKind, -int64_t(ended.size));
    AllocRecord rec;
    rec.api = api;
    rec.kind = ended.memKind;
    rec.device = ended.device;
    rec.address = ended.address;  // the handle
    rec.size = ended.size;
    rec.stack = StackId(ended.stack);
    push(EventKind::Free, rec, 0);
}

void Recorder::recordVmmRelease(ApiId api, uint64_t handle) noexcept
{
    markProcessActive();
    try {
        if (const auto ended = m_vmm.release(handle))
            vmmEnded(api, *ended);
    } catch (...) {
    }
}

void Recorder::recordVmmMap(ApiId api, uint64_t address, uint64_t size, uint64_t handle) noexcept
{
    markProcessActive();
    try {
        if (!m_vmm.map(address, size, handle))
            return;
    } catch (...) {
        return;
    }
    AllocRecord rec;
    rec.api = api;
    rec.address = address;
    rec.size = size;
    rec.stream = handle;
    push(EventKind::SegmentMap, rec, 0);
}

void Recorder::recordVmmUnmap(ApiId api, uint64_t address, uint64_t size) noexcept
{
    markProcessActive();
    try {
        uint64_t handle = 0;
        const auto ended = m_vmm.unmap(address, &handle);
        AllocRecord rec;
        rec.api = api;
        rec.address = address;
        rec.size = size;
        rec.stream = handle;
        push(EventKind::SegmentUnmap, rec, 0);
        if (ended)
            vmmEnded(api, *ended);
    } catch (...) {
    }
}

void Recorder::notePool(uint64_t pool) noexcept
{
    if (pool == 0)
        return;
    for (auto& slot : m_pools) {
        uint64_t current = slot.load(std::memory_order_relaxed);
        if (current == pool)
            return;
        if (current == 0 && slot.compare_exchange_strong(current, pool, std::memory_order_relaxed))
            return;
        if (current == pool)
            return;
    }
}

uint64_t Recorder::liveBytes(int device, MemKind kind) const
{
    const int64_t v = liveSum(slot(device), kind);
    return v > 0 ? uint64_t(v) : 0;
}

void Recorder::lockAllForFork() noexcept
{
    m_dumpMutex.lock();
    m_live.lockAll();
    m_vmm.lockForFork();
    m_stacks.lockAll();
    if (m_flight)
        m_flight->lockForFork();
}

void Recorder::unlockAllAfterFork() noexcept
{
    if (m_flight)
        m_flight->unlockAfterFork();
    m_stacks.unlockAll();
    m_vmm.unlockAfterFork();
    m_live.unlockAll();
    m_dumpMutex.unlock();
}

void Recorder::unlockAllInChild() noexcept
{
    if (m_flight)
        m_flight->detachInChild();
    m_stacks.unlockAll();
    m_vmm.unlockAfterFork();
    m_live.unlockAll();
    // A recursive mutex knows its owner by thread id, and the child's thread has a new one:
    // unlocking fails (EPERM) and the child's first dump hung at exit. A fresh mutex instead.
    new (&m_dumpMutex) std::recursive_mutex();
}

std::vector<report::MemoryRow> Recorder::memoryRows(const std::vector<report::Device>& devices)
{
    std::map<int64_t, report::MemoryRow> rows;
    auto rowFor = [&](int64_t device) -> report::MemoryRow& {
        report::MemoryRow& row = rows[device];
        row.device = device;
        return row;
    };
    for (int s = 1; s <= kMaxDevices; ++s) {
        const int device = s - 1;
        bool any = m_peakDevice[s].load(std::memory_order_relaxed) > 0;
        for (size_t k = 0; k < size_t(MemKind::Count); ++k)
            any = any || liveSum(s, MemKind(k)) != 0;
        if (any)
            rowFor(device);
    }
    for (const report::Device& d : devices) {
        if (d.freeBytes)
            rowFor(d.index);
    }
    for (auto& [device, row] : rows) {
        const int s = slot(int(device));
        for (size_t k = 0; k < size_t(MemKind::Count); ++k)
            row.byKind[memKindName(MemKind(k))] = liveBytes(int(device), MemKind(k));
        row.trackedBytes = liveBytes(int(device), MemKind::Device);
        const int64_t peak = m_peakDevice[s].load(std::memory_order_relaxed);
        row.peakTrackedBytes = std::max<uint64_t>(peak > 0 ? uint64_t(peak) : 0, row.trackedBytes);
        for (const char* source : {"torch", "nccl", "cublas", "cudnn", "jax", "cupy", "other"})
            row.bySource[source] = 0;
    }
    for (const report::Device& d : devices) {
        auto it = rows.find(d.index);
        if (it == rows.end() || !d.freeBytes || !d.totalBytes || *d.freeBytes > *d.totalBytes)
            continue;
        const uint64_t used = *d.totalBytes - *d.freeBytes;
        it->second.untrackedBytes = used > it->second.trackedBytes ? used - it->second.trackedBytes : 0;
    }
    std::vector<report::MemoryRow> out;
    for (auto& [device, row] : rows)
        out.push_back(std::move(row));
    return out;
}

namespace {

// Rows in time order, stably. One thread's rows come in order but for a rare step back (the
// event clock's switch to the time-stamp counter): a few moved into place; several threads'
// blocks interleave: a full sort.
void sortByTime(std::vector<report::TimelineRow>& rows)
{
    const auto byTime = [](const report::TimelineRow& a, const report::TimelineRow& b) { return a.timeNs < b.timeNs; };
    size_t descents = 0;
    for (size_t i = 1; i < rows.size(); ++i)
        descents += byTime(rows[i], rows[i - 1]);
    if (descents == 0)
        return;
    if (descents * 1024 > rows.size()) {
        std::stable_sort(rows.begin(), rows.end(), byTime);
        return;
    }
    for (size_t i = 1; i < rows.size(); ++i) {
        if (!byTime(rows[i], rows[i - 1]))
            continue;
        const auto to = std::upper_bound(rows.begin(), rows.begin() + ptrdiff_t(i), rows[i], byTime);
        std::rotate(to, rows.begin() + ptrdiff_t(i), rows.begin() + ptrdiff_t(i) + 1);
    }
}

} // namespace

report::Report Recorder::buildReport(const TriggerInfo& trigger)
{
    const Config& config = Config::get();
    report::Report r;
    r.tool.version = OOMSCOPE_VERSION;
    r.tool.options["ring_events"] = std::to_string(m_ring.capacity());
    r.tool.options["cupti"] = Config::get().cupti;
    r.tool.options["stack_depth"] = std::to_string(m_stackDepth);
    r.tool.options["output_dir"] = config.outputDir.empty() ? "." : config.outputDir;
    r.tool.options["exit_report"] = config.exitReport ? "1" : "0";

    // Trigger.
    r.trigger.kind = triggerKindName(trigger.kind);
    r.trigger.timeNs = eventNs();
    DeviceProbe* probe = m_probe.load(std::memory_order_acquire);
    if (trigger.failed) {
        const AllocRecord& f = *trigger.failed;
        r.trigger.device = f.device;
        r.trigger.requestedBytes = f.size;
        r.trigger.api = apiName(f.api);
        if (trigger.error) {
            r.trigger.error = *trigger.error;
            r.trigger.errorName = probe ? probe->errorName(f.api, *trigger.error) : "";
        }
        const StackId stack = trigger.stack ? trigger.stack : f.stack;
        if (stack)
            r.trigger.stack = stack.value();
        const std::string what = trigger.framework ? trigger.framework->name + " could not allocate " : r.trigger.api + " of ";
        r.trigger.message = what + formatBytes(f.size) + (trigger.framework ? " on device " : " failed on device ") +
                            std::to_string(f.device);
        if (trigger.error)
            r.trigger.message += ": " + (r.trigger.errorName.empty() ? "error " + std::to_string(*trigger.error)
                                                                       : r.trigger.errorName);
        else if (trigger.framework)
            r.trigger.message += ": its own limit, no CUDA call failed";
    } else {
        r.trigger.message = trigger.reason;
        if (trigger.stack)
            r.trigger.stack = trigger.stack.value();
    }
    if (trigger.framework)
        r.trigger.framework = trigger.framework->name;
    r.atFirstFailure = trigger.atFirstFailure;

    r.process = currentProcess();
    if (probe)
        r.devices = probe->probeDevices();

    // Live memory: memory rows, sites. VMM physical allocations count like any other.
    std::vector<LiveAllocation> live = m_live.snapshot();
    const std::vector<LiveAllocation> vmmLive = m_vmm.snapshot();
    live.insert(live.end(), vmmLive.begin(), vmmLive.end());
    r.memory = memoryRows(r.devices);
    std::set<uint32_t> blockStacks;
    if (trigger.framework) {
        // The framework's segments, with their blocks: a finer view than raw mappings. Blocks
        // get the Python stack of the tensor in them when the framework gave one.
        r.segments = trigger.framework->segments;
        const auto& blockFrames = trigger.framework->blockFrames;
        for (size_t si = 0; si < r.segments.size() && si < blockFrames.size(); ++si) {
            for (size_t bi = 0; bi < r.segments[si].blocks.size() && bi < blockFrames[si].size(); ++bi) {
                const std::vector<PythonFrameText>& frames = blockFrames[si][bi];
                if (frames.empty())
                    continue;
                std::vector<uint64_t> words;
                for (const PythonFrameText& f : frames)
                    words.push_back(PythonFrames::token(f.file, f.function, f.line));
                if (const StackId id = m_stacks.intern(words.data(), uint32_t(words.size()))) {
                    r.segments[si].blocks[bi].stack = id.value();
                    blockStacks.insert(id.value());
                }
            }
        }
        for (report::MemoryRow& row : r.memory) {
            const FrameworkDevice* fw = trigger.framework->device(row.device);
            if (!fw)
                continue;
            row.allocatedBytes = fw->allocated;
            row.reservedBytes = fw->reserved;
            row.fragmentedBytes = fw->reserved > fw->allocated ? fw->reserved - fw->allocated : 0;
            row.largestFreeBlockBytes = trigger.framework->largestFreeBlock(row.device);
        }
    } else {
        for (const VmmTable::Mapping& m : m_vmm.mappings()) {
            report::Segment segment;
            segment.address = m.address;
            segment.size = m.size;
            segment.kind = "vmm";
            segment.device = m.device;
            r.segments.push_back(std::move(segment));
        }
    }
    std::sort(r.segments.begin(), r.segments.end(), [](const report::Segment& a, const report::Segment& b) {
        return std::tie(a.device, a.address) < std::tie(b.device, b.address);
    });
    {
        std::lock_guard<std::mutex> lock(m_stepsMutex);
        r.steps.assign(m_steps.begin(), m_steps.end());
    }
    if (probe) {
        std::vector<uint64_t> pools;
        for (const auto& slot : m_pools) {
            if (const uint64_t pool = slot.load(std::memory_order_relaxed))
                pools.push_back(pool);
        }
        r.pools = probe->probePools(pools);
    }

    r.sites = liveSites(live);

    // Timeline: straight from the ring into rows (a million events: no intermediate copy).
    r.timeline.capacity = m_ring.capacity();
    r.timeline.rows.reserve(std::min<uint64_t>(m_ring.pushed(), m_ring.capacity()));
    report::adviseHugePages(r.timeline.rows.data(), r.timeline.rows.capacity() * sizeof(report::TimelineRow));
    uint16_t kindIndex[size_t(EventKind::Count)];
    for (size_t k = 0; k < size_t(EventKind::Count); ++k)
        kindIndex[k] = r.timeline.intern(eventKindName(EventKind(k)));
    std::vector<int32_t> apiIndex;  // API id → index into the names, -1 until first seen
    std::vector<uint8_t> referencedStack(m_stacks.size() + 1, 0);
    const auto [pushed, dropped] = m_ring.forEachStable([&](const Event& e) {
        report::TimelineRow row;
        row.timeNs = e.timeNs;
        row.kind = size_t(e.kind) < size_t(EventKind::Count) ? kindIndex[size_t(e.kind)] : r.timeline.intern("unknown");
        row.device = e.device;
        row.address = e.address;
        row.size = e.size;
        row.stream = e.stream;
        if (e.api >= apiIndex.size())
            apiIndex.resize(size_t(e.api) + 1, -1);
        if (apiIndex[e.api] < 0)
            apiIndex[e.api] = r.timeline.intern(apiName(ApiId(e.api)));
        row.api = uint16_t(apiIndex[e.api]);
        row.stack = e.stack;
        row.thread = e.thread;
        row.error = e.error;
        if (e.stack < referencedStack.size())
            referencedStack[e.stack] = 1;
        r.timeline.rows.push_back(row);
    });
    r.timeline.pushed = pushed;
    r.timeline.dropped = dropped;
    // The ring gives each thread's events in order, not one order across threads.
    sortByTime(r.timeline.rows);

    // The capture backends: their names, coverage and notes (a coverage's stacks are
    // referenced below).
    for (auto& slot : m_captureSources) {
        if (CaptureSource* source = slot.load(std::memory_order_acquire))
            source->describe(r.capture);
    }

    // Stacks referenced anywhere in the report, symbolized now.
    std::set<uint32_t> referenced;
    for (const report::Site& s : r.sites)
        referenced.insert(s.stack);
    for (uint32_t id = 1; id < referencedStack.size(); ++id) {  // the timeline's, marked above
        if (referencedStack[id])
            referenced.insert(id);
    }
    for (const report::TimelineRow& row : r.timeline.rows) {
        if (row.stack >= referencedStack.size())
            referenced.insert(row.stack);  // a stack interned while the rows were read
    }
    if (r.trigger.stack)
        referenced.insert(*r.trigger.stack);
    referenced.insert(blockStacks.begin(), blockStacks.end());
    for (const report::Step& step : r.steps) {
        for (const auto* list : {&step.sites, &step.tensors}) {
            for (const report::StepSite& site : *list)
                referenced.insert(site.stack);
        }
    }
    if (r.capture.coverage) {
        for (const report::MissedAllocation& m : r.capture.coverage->missedAllocations)
            referenced.insert(m.stack);
    }
    referenced.erase(0);

    Symbolizer symbolizer(loadedModules());
    const auto sourceOfStack = addStacks(
        r, referenced, [this](uint32_t id) { return m_stacks.frames(StackId(id)); }, PythonFrames::resolve, symbolizer);

    attributeBySource(r, live, sourceOfStack);

    // Capture.
    {
        std::lock_guard<std::mutex> lock(m_frameworkMutex);
        if (!m_framework.empty())
            r.capture.backends.push_back(m_framework);
    }
    if (trigger.framework && trigger.framework->ignoredLines > 0)
        r.capture.notes.push_back(std::to_string(trigger.framework->ignoredLines) +
                                  " lines of the framework's state were not understood");
    r.capture.eventsPushed = r.timeline.pushed;
    r.capture.eventsRecorded = r.timeline.rows.size();
    r.capture.eventsDropped = r.timeline.dropped;
    r.capture.liveAllocations = live.size();
    r.capture.distinctStacks = m_stacks.size();
    r.capture.ringBytes = m_ring.memoryBytes();
    r.capture.liveMapBytes = m_live.memoryBytes();
    r.capture.stackTableBytes = m_stacks.memoryBytes();
    r.capture.unknownFrees = m_unknownFrees.load(std::memory_order_relaxed);
    r.capture.unwinder = unwinderName();
    if (m_ring.memoryBytes() == 0)
        r.capture.notes.push_back("the event ring could not be mapped: no timeline");
    if (m_live.refused() > 0)
        r.capture.notes.push_back(std::to_string(m_live.refused()) + " allocations could not enter the live map (out of memory)");
    if (!probe)
        r.capture.notes.push_back("no device probe: device facts unknown");
    return r;
}

std::string Recorder::dump(const TriggerInfo& trigger)
{
    const Config& config = Config::get();
    std::lock_guard<std::recursive_mutex> lock(m_dumpMutex);
    std::string error;
    try {
        const report::Report report = buildReport(trigger);
        std::string host = report.process.hostname.empty() ? "host" : report.process.hostname;
        for (char& c : host) {
            if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_')
                c = '_';
        }
        const std::string stem = "oomscope-" + host + "-" + std::to_string(getpid()) + "-" + report.trigger.kind;
        const report::WriteResult written = report::writeReportFile(report, config.outputDir, stem);
        if (written.ok) {
            if (!config.quiet)
                dprintf(2, "oomscope: %s report written to %s\n", report.trigger.kind.c_str(), written.path.c_str());
            return written.path;
        }
        error = written.error;
    } catch (const std::exception& e) {
        error = e.what();
    } catch (...) {
        error = "unknown error";
    }
    dprintf(2, "oomscope: could not write the %s report: %s\n", triggerKindName(trigger.kind), error.c_str());
    return {};
}

} // namespace oomscope::track
