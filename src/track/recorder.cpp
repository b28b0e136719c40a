#include "track/recorder.h"

#include "common/paths.h"

#include "track/backtrace.h"
#include "track/config.h"
#include "track/fast_clock.h"
#include "track/flight_writer.h"
#include "track/module_map.h"
#include "track/process_info.h"
#include "track/python_frames.h"
#include "track/triggers.h"

#include <algorithm>
#include <dlfcn.h>
#include <new>

namespace oomscope::track {

std::atomic<Recorder*> Recorder::s_instance{nullptr};

namespace {

LiveAllocation liveEntry(const Allocation& alloc, uint64_t timeNs)
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

// The allocation a live entry describes, for its free event.
Allocation allocationOf(const LiveAllocation& live, ApiId api)
{
    Allocation a;
    a.api = api;
    a.kind = live.memKind;
    a.device = live.device;
    a.address = live.address;
    a.size = live.size;
    a.stream = live.stream;
    a.stack = StackId(live.stack);
    return a;
}

} // namespace

Recorder::Recorder(FlightFile* flight)
    : m_flight(flight),
      m_ring(flight ? flight->ringCapacity() : Config::get().ringEvents, flight ? flight->ringMemory() : nullptr,
             flight ? flight->ringHead() : nullptr),
      m_counters(flight ? flight->counters() : nullptr),
      m_episodes(uint64_t(Config::get().oomEpisodeMs) * 1000000ull, Config::get().maxOomReports),
      m_steps(uint64_t(Config::get().sampleMs) * 1000000ull),
      m_stackDepth(Config::get().stackDepth)
{
    m_live.setFlight(flight);
    m_stacks.setFlight(flight);
    m_apis.setFlight(flight);
    m_steps.setFlight(flight);
    if (flight)
        m_vmm.setFlight(flight->vmmEntries(), flight->vmmCapacity(), flight->vmmFull(), flight);
}

Recorder::~Recorder() = default;

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
    const std::string dir = common::moduleDirectory(reinterpret_cast<const void*>(&liveEntry));
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

std::vector<CaptureSource*> Recorder::captureSources() const
{
    std::vector<CaptureSource*> out;
    for (const auto& slot : m_captureSources) {
        if (CaptureSource* source = slot.load(std::memory_order_acquire))
            out.push_back(source);
    }
    return out;
}

void Recorder::setOwnModule(uint64_t begin, uint64_t end)
{
    m_ownBegin.store(begin, std::memory_order_relaxed);
    m_ownEnd.store(end, std::memory_order_relaxed);
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
    const int spliced = python ? PythonFrames::splice(frames, count, m_stackDepth, kPythonFramesMax) : -1;
    count = spliced >= 0 ? spliced : std::min(count, m_stackDepth);
    return m_stacks.intern(frames, uint32_t(count > 0 ? count : 0));
}

void Recorder::push(Event& event) noexcept
{
    if (event.timeNs == 0)
        event.timeNs = eventNs();
    event.thread = currentThreadId();
    m_ring.push(event);
}

void Recorder::recordAlloc(const Allocation& alloc) noexcept
{
    markProcessActive();
    const uint64_t now = eventNs();  // one clock read for the live entry and the event
    LiveAllocation replaced;
    switch (m_live.insert(liveEntry(alloc, now), &replaced)) {
    case LiveMap::InsertResult::Replaced:
        m_counters.add(replaced.device, replaced.memKind, -int64_t(replaced.size));
        [[fallthrough]];
    case LiveMap::InsertResult::Inserted:
        m_counters.add(alloc.device, alloc.kind, int64_t(alloc.size));
        break;
    case LiveMap::InsertResult::Refused:
        break;
    }
    Event e = Event::alloc(alloc);
    e.timeNs = now;
    push(e);
    maybeSample(now);
    if (__builtin_expect(!m_devicesNoted.load(std::memory_order_relaxed), 0))
        noteDevices();
}

// Cold, once: the devices' names and totals into the flight file, asked of the driver after the
// process's first allocation returned (a context exists; nothing created here), so that a
// report read back from the file names its cards.
__attribute__((noinline, cold)) void Recorder::noteDevices() noexcept
{
    if (m_devicesNoted.exchange(true, std::memory_order_acq_rel) || !m_flight)
        return;
    DeviceProbe* probe = m_probe.load(std::memory_order_acquire);
    if (!probe)
        return;
    try {
        m_flight->devices(probe->probeDeviceFacts());
    } catch (...) {
    }
}

void Recorder::attachFramework(const std::string& name, bool reportsOom)
{
    m_episodes.attachFramework(name, reportsOom);
    if (m_flight)
        m_flight->framework(name);
}

bool Recorder::recordFree(ApiId api, uint64_t address, uint64_t stream) noexcept
{
    const std::optional<LiveAllocation> found = m_live.erase(address);
    if (!found) {
        m_unknownFrees.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    markProcessActive();
    notePeak(*found);
    m_counters.add(found->device, found->memKind, -int64_t(found->size));
    Allocation freed = allocationOf(*found, api);
    freed.stream = stream;
    push(Event::free(freed));
    return true;
}

void Recorder::recordFailure(const Allocation& alloc, int error, bool outOfMemory) noexcept
{
    markProcessActive();
    push(Event::failure(alloc, error));
    m_failedAllocations.fetch_add(1, std::memory_order_relaxed);
    if (m_flight)
        m_flight->countFailedAllocation();
    if (!outOfMemory)
        return;
    try {
        openEpisode(alloc, error);
    } catch (...) {
        m_episodes.reported(eventNs());
    }
}

// An out-of-memory error: a report now when it opens an episode, or, when its framework
// reports its own OOMs, the moment kept for the framework's report.
void Recorder::openEpisode(const Allocation& alloc, int error)
{
    const bool fresh = m_episodes.opens(eventNs());
    if (m_episodes.frameworkReportsOom()) {
        ReportWriter* writer = m_writer.load(std::memory_order_acquire);
        const std::string framework = m_episodes.framework();
        if (writer && !framework.empty() && writer->madeBy(*this, alloc.stack, framework)) {
            if (fresh) {
                FirstFailure first;
                first.timeNs = eventNs();
                first.alloc = alloc;
                first.error = error;
                first.counters = m_counters.snapshot();
                if (DeviceProbe* probe = deviceProbe())
                    first.devices = probe->probeDevices();
                m_episodes.keepFirstFailure(std::move(first));
            }
            return;
        }
    }
    if (!fresh)
        return;  // the same episode
    if (!takeEpisodeReport()) {
        const char* api = m_apis.name(alloc.api);
        m_episodes.skip(report::SkippedOom{eventNs(), alloc.device, api ? api : "unknown", alloc.size});
        m_episodes.reported(eventNs());
        return;
    }
    TriggerInfo trigger;
    trigger.kind = report::TriggerKind::Oom;
    trigger.failed = alloc;
    trigger.error = error;
    dump(trigger);
    // The window runs from the end of the report: writing it must not split one episode.
    m_episodes.reported(eventNs());
}

void Recorder::recordEvent(Event event) noexcept
{
    if (event.kind != EventKind::Marker || event.address != 0)
        markProcessActive();  // a program's own label alone is no CUDA activity
    push(event);
}

StackId Recorder::internPythonFrames(const std::vector<PythonFrameText>& frames, std::vector<uint64_t> words)
{
    for (const PythonFrameText& f : frames)
        words.push_back(PythonFrames::token(f.file, f.function, f.line));
    return m_stacks.intern(words.data(), uint32_t(words.size()));
}

void Recorder::attachPythonFrames(uint64_t address, const std::vector<PythonFrameText>& python)
{
    const std::optional<LiveAllocation> live = m_live.find(address);
    const uint32_t oldStack = live ? live->stack : m_vmm.stackAt(address);
    if (!live && oldStack == 0)
        return;
    std::vector<uint64_t> native;
    for (uint64_t pc : m_stacks.frames(StackId(oldStack))) {
        if (isPythonFrame(pc) || PythonFrames::inInterpreter(pc))
            break;
        native.push_back(pc);
    }
    const StackId stack = internPythonFrames(python, std::move(native));
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

// An out-of-memory episode opens: counted, and whether it may have a report of its own.
bool Recorder::takeEpisodeReport() noexcept
{
    m_oomEpisodes.fetch_add(1, std::memory_order_relaxed);
    if (m_flight)
        m_flight->countOomEpisode();
    return m_episodes.takeReport();
}

std::string Recorder::frameworkDump(const FrameworkState& state, const std::string& reason)
{
    for (const auto& [address, frames] : state.allocationFrames)
        attachPythonFrames(address, frames);
    TriggerInfo trigger;
    trigger.kind = report::TriggerKind::Request;
    trigger.reason = reason;
    trigger.framework = &state;
    return dump(trigger);
}

std::string Recorder::frameworkOom(const FrameworkState& state, int device, uint64_t requested)
{
    markProcessActive();
    if (!takeEpisodeReport()) {
        m_episodes.takeFirstFailure(eventNs());  // this episode's, spent
        m_episodes.skip(report::SkippedOom{eventNs(), device, state.name, requested});
        m_episodes.reported(eventNs());
        return {};
    }
    for (const auto& [address, frames] : state.allocationFrames)
        attachPythonFrames(address, frames);
    TriggerInfo trigger;
    trigger.kind = report::TriggerKind::Oom;
    trigger.framework = &state;
    // The program's line that asked, Python frames included; the adapter's own frames (the
    // ctypes call from oomscope's package) are cut off the top.
    std::vector<uint64_t> words = m_stacks.frames(captureStack());
    for (size_t i = words.size(); i-- > 0;) {
        if (isPythonFrame(words[i]) && PythonFrames::resolve(words[i]).module.rfind("oomscope", 0) == 0) {
            words.erase(words.begin(), words.begin() + long(i) + 1);
            break;
        }
    }
    trigger.stack = m_stacks.intern(words.data(), uint32_t(words.size())).value();
    Allocation alloc;
    if (std::optional<FirstFailure> first = m_episodes.takeFirstFailure(eventNs())) {
        // The CUDA call that failed first in this episode: what, where, which error.
        alloc = first->alloc;
        trigger.error = first->error;
        trigger.firstFailure = std::move(first);
    } else {
        // No CUDA call failed: the framework's own limit (set_per_process_memory_fraction).
        alloc.api = registerApi(state.name.c_str());
    }
    alloc.size = requested;
    alloc.device = device;
    alloc.stack = StackId(trigger.stack);
    trigger.failed = alloc;
    const std::string path = dump(trigger);
    m_episodes.reported(eventNs());
    return path;
}

report::Step Recorder::takeSample(const FrameworkState* state, uint64_t timeNs)
{
    return StepSampler::sample(timeNs, m_counters, liveAllocations(), state,
                               [this](const TensorGroup& g) { return internPythonFrames(g.frames).value(); });
}

void Recorder::recordStep(const FrameworkState* state) noexcept
{
    markProcessActive();
    try {
        const uint64_t now = eventNs();
        m_steps.addStep(takeSample(state, now));
        Event e = Event::step(registerApi("step").value());
        e.timeNs = now;  // the sample's time: a step event is found in `steps` by its time
        push(e);
    } catch (...) {
    }
}

void Recorder::maybeSample(uint64_t nowNs) noexcept
{
    if (!m_steps.claimPeriodic(nowNs))
        return;
    try {
        m_steps.addPeriodic(takeSample(nullptr, nowNs));
    } catch (...) {
    }
}

void Recorder::recordVmmCreate(const Allocation& alloc) noexcept
{
    markProcessActive();
    LiveAllocation entry = liveEntry(alloc, eventNs());
    entry.address = alloc.handle;  // the VMM table knows physical memory by its handle
    try {
        if (m_vmm.create(entry))
            m_counters.add(alloc.device, alloc.kind, int64_t(alloc.size));
    } catch (...) {
        return;
    }
    Event e = Event::alloc(alloc);
    e.timeNs = entry.timeNs;
    push(e);
}

void Recorder::vmmEnded(ApiId api, const LiveAllocation& ended) noexcept
{
    notePeak(ended);
    m_counters.add(ended.device, ended.memKind, -int64_t(ended.size));
    Allocation freed = allocationOf(ended, api);
    freed.address = 0;
    freed.handle = ended.address;  // the table's entries hold the handle there
    push(Event::free(freed));
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
        if (const std::optional<int> device = m_vmm.map(address, size, handle))
            push(Event::segmentMap(api.value(), *device, address, size, handle));
    } catch (...) {
    }
}

void Recorder::recordVmmUnmap(ApiId api, uint64_t address, uint64_t size) noexcept
{
    markProcessActive();
    try {
        VmmTable::Mapping unmapped;
        const auto ended = m_vmm.unmap(address, &unmapped);
        push(Event::segmentUnmap(api.value(), unmapped.device, address, size, unmapped.handle));
        if (ended)
            vmmEnded(api, *ended);
    } catch (...) {
    }
}

void Recorder::recordAddressReserve(ApiId api, int device, uint64_t address, uint64_t size) noexcept
{
    markProcessActive();
    try {
        m_vmm.reserve(address, size, captureStack().value());
    } catch (...) {
    }
    push(Event::addressRange(api.value(), device, address, size));
}

void Recorder::recordAddressFree(ApiId api, int device, uint64_t address, uint64_t size) noexcept
{
    markProcessActive();
    try {
        m_vmm.addressFree(address);
    } catch (...) {
    }
    push(Event::addressRange(api.value(), device, address, size));
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

std::string Recorder::dump(const TriggerInfo& trigger)
{
    std::lock_guard<std::recursive_mutex> lock(m_dumpMutex);
    ReportWriter* writer = m_writer.load(std::memory_order_acquire);
    if (!writer)
        return {};
    try {
        return writer->write(*this, trigger);
    } catch (...) {
        return {};
    }
}

void Recorder::lockAllForFork() noexcept
{
    m_dumpMutex.lock();
    m_peakLock.lock();
    m_live.lockAll();
    m_vmm.lockForFork();
    m_nccl.lockForFork();
    m_stacks.lockAll();
    if (m_flight)
        m_flight->lockForFork();
}

void Recorder::unlockAllAfterFork() noexcept
{
    if (m_flight)
        m_flight->unlockAfterFork();
    m_stacks.unlockAll();
    m_nccl.unlockAfterFork();
    m_vmm.unlockAfterFork();
    m_live.unlockAll();
    m_peakLock.unlock();
    m_dumpMutex.unlock();
}

void Recorder::unlockAllInChild() noexcept
{
    if (m_flight)
        m_flight->detachInChild();
    m_stacks.unlockAll();
    m_nccl.unlockAfterFork();
    m_vmm.unlockAfterFork();
    m_live.unlockAll();
    m_peakLock.unlock();
    // A recursive mutex knows its owner by thread id, and the child's thread has a new one:
    // unlocking fails (EPERM) and the child's first dump hung at exit. A fresh mutex instead.
    new (&m_dumpMutex) std::recursive_mutex();
}

} // namespace oomscope::track
