// The one surface that capture code calls. Owns the ring (timeline), the live map, the stack
// table and the per-device counters, and turns them into a report at a trigger. Every record*
// method is called from any thread, never throws, never blocks on I/O and never allocates
// beyond amortised growth of its tables. dump() runs at triggers only.
#pragma once

#include "track/event.h"
#include "track/framework_state.h"
#include "track/ids.h"
#include "track/live_map.h"
#include "track/ring_buffer.h"
#include "track/stack_table.h"
#include "track/vmm_table.h"
#include "report/model.h"

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace oomscope::track {

// What the capture layer knows that the recorder must not: how to ask the driver about devices
// and how CUDA names its errors. Provided by src/interpose (record never calls capture).
class DeviceProbe {
public:
    virtual ~DeviceProbe() = default;
    virtual std::vector<report::Device> probeDevices() = 0;  // dump time
    virtual std::string errorName(ApiId api, int error) = 0;  // dump time
    // Stream-ordered pools of the devices that have a context, and the explicit pools seen.
    virtual std::vector<report::Pool> probePools(const std::vector<uint64_t>& explicitPools) = 0;
};

// What a capture backend adds to a report's capture section at a trigger: its name in
// `backends`, its coverage, its notes. Provided by src/interpose and src/cupti.
class CaptureSource {
public:
    virtual ~CaptureSource() = default;
    virtual void describe(report::Capture& capture) = 0;  // dump time
};

enum class TriggerKind { Oom, Exit, Signal, Request };
const char* triggerKindName(TriggerKind kind);

struct AllocRecord {
    ApiId api;
    MemKind kind = MemKind::Device;
    int device = -1;
    uint64_t address = 0;
    uint64_t size = 0;
    uint64_t stream = 0;
    StackId stack;
};

struct TriggerInfo {
    TriggerKind kind = TriggerKind::Request;
    std::string reason;          // free text: the signal name, the dump() argument…
    std::optional<AllocRecord> failed;  // oom: the request that failed
    std::optional<int> error;
    StackId stack;               // the trigger's stack, when not the failed request's
    const FrameworkState* framework = nullptr;  // an OOM raised by a framework: its allocator's view
    std::optional<std::vector<report::MemoryRow>> atFirstFailure;
};

class Recorder {
public:
    static constexpr int kMaxDevices = 64;

    // Null until start(). start() is idempotent and thread-safe; the first caller builds the
    // recorder (ring mapping, unwinder) and installs the triggers.
    static Recorder* get() { return s_instance.load(std::memory_order_acquire); }
    // configure runs once, before the recorder is visible to other threads (API names, probe).
    static Recorder* start(void (*configure)(Recorder&) = nullptr);

    // API names, registered once by the capture layer (ids are stable for the process).
    ApiId registerApi(const char* name);
    const char* apiName(ApiId id) const;

    void setDeviceProbe(DeviceProbe* probe) { m_probe.store(probe, std::memory_order_release); }
    // Capture backends, asked in order at every trigger. At most kMaxCaptureSources.
    void addCaptureSource(CaptureSource* source) noexcept;
    // The module of the capture layer: its frames are cut off the top of every stack.
    void setOwnModule(uint64_t begin, uint64_t end);

    StackId captureStack() noexcept;
    void recordAlloc(const AllocRecord& alloc) noexcept;
    // Records a free before the real free. Returns false (and records nothing) for an address
    // that is not live: unknown frees pass through.
    bool recordFree(ApiId api, uint64_t address, uint64_t stream, EventKind kind = EventKind::Free) noexcept;
    // A failed allocation. An out-of-memory error starts an OOM episode: its first failure
    // writes one report; out-of-memory errors less than OOMSCOPE_OOM_EPISODE_MS after the
    // previous one belong to the same episode, successes in between or not (an allocator's
    // retry after flushing its cache: PyTorch's expandable segments re-create hundreds of
    // handles before failing again, measured on the H200).
    void recordFailure(const AllocRecord& alloc, int error, bool outOfMemory) noexcept;
    void recordMarker(EventKind kind, ApiId api, uint64_t value) noexcept;
    // An event for the timeline only (address-space reservations, pool trims): no live memory.
    void recordTimelineOnly(EventKind kind, const AllocRecord& record) noexcept;

    // Virtual memory management (see vmm_table.h). The handle goes in alloc.address.
    void recordVmmCreate(const AllocRecord& alloc) noexcept;
    void recordVmmRelease(ApiId api, uint64_t handle) noexcept;
    void recordVmmMap(ApiId api, uint64_t address, uint64_t size, uint64_t handle) noexcept;
    void recordVmmUnmap(ApiId api, uint64_t address, uint64_t size) noexcept;

    // A stream-ordered pool the program allocated from explicitly: its statistics go into the
    // report at every trigger.
    void notePool(uint64_t pool) noexcept;

    // A framework adapter is present (the PyTorch adapter). When it reports its own OOMs,
    // out-of-memory errors of allocations made by that framework no longer write a report:
    // the first one of an episode is kept as the "at first failure" view (before the
    // framework flushes its cache), and the adapter's OOM writes the one report. A failure the
    // framework recovers from thus writes none.
    void attachFramework(const std::string& name, bool reportsOom);
    // The framework raised an out-of-memory error (with or without a failing CUDA call).
    std::string frameworkOom(const FrameworkState& state, int device, uint64_t requested);
    // A training-step boundary (optimizer step, oomscope.step()): a timeline event and a
    // sample of every device's memory, with the framework's counters when given.
    void recordStep(const FrameworkState* state) noexcept;
    // A periodic sample (OOMSCOPE_SAMPLE_MS) in a program without step events: called by
    // recordAlloc when the last sample is older than that. The first step event ends the
    // sampling and drops the samples taken so far: steps are then one per step event.
    void maybeSample(uint64_t nowNs) noexcept;

    // Writes a report now. Returns the path written, or empty (one notice on stderr).
    std::string dump(const TriggerInfo& trigger);
    // Builds the report without writing it (tests, and dump()).
    report::Report buildReport(const TriggerInfo& trigger);

    // fork() support: prepare takes every lock, parent/child release them.
    void lockAllForFork() noexcept;
    void unlockAllAfterFork() noexcept;  // in the parent
    void unlockAllInChild() noexcept;    // in the child

    uint64_t liveBytes(int device, MemKind kind) const;
    const LiveMap& liveMap() const { return m_live; }
    const RingBuffer& ring() const { return m_ring; }
    const StackTable& stacks() const { return m_stacks; }

    // flight: the process's flight-recorder file, holding the ring and the live tables; nullptr:
    // all in memory. Public for tests; production code uses start().
    explicit Recorder(class FlightFile* flight = nullptr);
    ~Recorder();
    Recorder(const Recorder&) = delete;
    Recorder& operator=(const Recorder&) = delete;

private:
    void sampleStepSites(const FrameworkState* state, report::Step& step);
    report::Step memorySample(const FrameworkState* state, uint64_t timeNs);
    uint64_t keepStep(report::Step step);  // returns its index
    static std::atomic<Recorder*> s_instance;

    // timeNs: the event's time when the caller has read the clock already (0: read it now).
    void push(EventKind kind, const AllocRecord& alloc, int error, uint64_t timeNs = 0) noexcept;
    bool ownedByFramework(StackId stack);
    // Gives the live allocation at address the Python frames that allocated it (from the
    // framework's own history): its native frames up to the interpreter, then those.
    void attachPythonFrames(uint64_t address, const std::vector<PythonFrameText>& frames);
    bool newEpisode() noexcept;
    void vmmEnded(ApiId api, const LiveAllocation& ended) noexcept;
    void addLive(int device, MemKind kind, int64_t delta) noexcept;
    std::vector<report::MemoryRow> memoryRows(const std::vector<report::Device>& devices);

    static int slot(int device) { return device >= 0 && device < kMaxDevices ? device + 1 : 0; }

    class FlightFile* const m_flight;
    const size_t m_ringCapacity;
    RingBuffer m_ring;
    LiveMap m_live;
    VmmTable m_vmm;
    StackTable m_stacks;
    std::atomic<DeviceProbe*> m_probe{nullptr};
    static constexpr size_t kMaxCaptureSources = 4;
    std::atomic<CaptureSource*> m_captureSources[kMaxCaptureSources] = {};
    std::atomic<uint64_t> m_ownBegin{0};
    std::atomic<uint64_t> m_ownEnd{0};
    int m_stackDepth;

    // Live bytes per device and kind, in a cell per thread (one writer: a plain load and store,
    // no locked instruction; exact: the sum of the cells at a dump), so that threads allocating
    // at once write no common cache line. A thread whose cell cannot be allocated uses the
    // shared one (atomic adds). The peak follows a device total each thread updates in batches
    // of kPeakBatch bytes (or at once for a larger allocation): exact for allocations of
    // kPeakBatch or more, otherwise low by less than kPeakBatch per allocating thread.
    static constexpr int64_t kPeakBatch = int64_t(4) << 20;
    struct alignas(64) LiveCell {
        std::atomic<int64_t> bytes[kMaxDevices + 1][size_t(MemKind::Count)] = {};
        LiveCell* next = nullptr;
    };
    LiveCell* newLiveCell() noexcept;
    int64_t liveSum(int slot, MemKind kind) const;
    uint64_t m_id = 0;  // tells a thread's cell and batch for this recorder from an older one's
    std::atomic<LiveCell*> m_liveCells{nullptr};
    LiveCell m_sharedLiveCell;
    std::atomic<int64_t> m_batchedDevice[kMaxDevices + 1] = {};
    std::atomic<int64_t> m_peakDevice[kMaxDevices + 1] = {};
    std::atomic<uint64_t> m_unknownFrees{0};

    static constexpr size_t kMaxApis = 256;
    std::atomic<const char*> m_apiNames[kMaxApis] = {};
    std::atomic<uint16_t> m_apiCount{1};
    std::mutex m_apiMutex;

    static constexpr size_t kMaxPools = 64;
    std::atomic<uint64_t> m_pools[kMaxPools] = {};

    std::atomic<uint64_t> m_lastOomNs{0};  // the last out-of-memory error (or its report's end)

    struct FirstFailure {
        uint64_t timeNs = 0;
        AllocRecord alloc;
        int error = 0;
        std::vector<report::MemoryRow> rows;
    };
    std::mutex m_frameworkMutex;
    std::string m_framework;
    std::atomic<bool> m_frameworkReportsOom{false};
    std::optional<FirstFailure> m_firstFailure;

    static constexpr size_t kMaxSteps = 4096;
    std::mutex m_stepsMutex;
    std::deque<report::Step> m_steps;
    uint64_t m_stepIndex = 0;
    std::atomic<bool> m_sawStep{false};
    std::atomic<uint64_t> m_lastSampleNs{0};
    ApiId m_stepApi;
    std::recursive_mutex m_dumpMutex;
};

} // namespace oomscope::track
