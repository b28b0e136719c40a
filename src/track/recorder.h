// The one surface that capture code calls (src/interpose, src/cupti): it keeps the timeline
// (ring), the live allocations (live map, VMM table), the stacks and the counters, and asks
// for a report at a trigger. Every record* method is called from any thread, never throws,
// never blocks on I/O and never allocates beyond amortised growth of its tables.
//
// It builds no report and names no file: snapshot() gives one immutable image of what it holds
// (track/image.h), and dump() hands the trigger to the ReportWriter the preload plugged in
// (src/preload), which builds the report with src/interpret and writes it. Its parts, each
// with one job: ApiNames, LiveCounters, OomEpisodes, StepSampler (their own headers).
#pragma once

#include "track/api_names.h"
#include "track/event.h"
#include "track/framework_state.h"
#include "track/ids.h"
#include "track/image.h"
#include "track/live_counters.h"
#include "track/live_map.h"
#include "track/oom_episodes.h"
#include "track/peak_compose.h"
#include "track/ring_buffer.h"
#include "track/spin_lock.h"
#include "track/stack_table.h"
#include "track/step_sampler.h"
#include "track/trigger_info.h"
#include "track/nccl_table.h"
#include "track/vmm_table.h"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace oomscope::track {

class Recorder;

// What the capture layer knows that the recorder must not: how to ask the driver about devices
// and how CUDA names its errors. Provided by src/interpose; called at triggers only.
class DeviceProbe {
public:
    virtual ~DeviceProbe() = default;
    virtual std::vector<report::Device> probeDevices() = 0;
    virtual std::string errorName(ApiId api, int error) = 0;
    // Stream-ordered pools of the devices that have a context, and the explicit pools seen.
    virtual std::vector<report::Pool> probePools(const std::vector<uint64_t>& explicitPools) = 0;
    // What does not change while the process runs (name, UUID, total, versions, the rehearsed
    // card's limit), for the flight file: asked once, after the first allocation.
    virtual std::vector<report::Device> probeDeviceFacts() { return {}; }
};

// What a capture backend adds to a report's capture section: its name in `backends`, its
// coverage, its notes. Provided by src/preload (the interposer) and src/cupti.
class CaptureSource {
public:
    virtual ~CaptureSource() = default;
    virtual void describe(report::Capture& capture) = 0;
};

// Where reports go: plugged in by the preload (src/preload/report_writer.h), which builds them
// with the interpreter and writes the files. Called on the trigger's thread, under the
// recorder's dump lock.
class ReportWriter {
public:
    virtual ~ReportWriter() = default;
    // The report of this trigger from the recorder's present state; its path, or "" (one notice
    // on stderr says why).
    virtual std::string write(Recorder& recorder, const TriggerInfo& trigger) = 0;
    // True when the allocation of this stack was made by the framework (its first frame past
    // CUDA belongs to it): that framework reports its own OOMs.
    virtual bool madeBy(const Recorder& recorder, StackId stack, const std::string& framework) = 0;
};

class Recorder {
public:
    static constexpr int kMaxDevices = LiveCounters::kMaxDevices;

    // Null until start(). start() is idempotent and thread-safe; the first caller builds the
    // recorder (flight file, ring, unwinder), runs configure before any other thread can see
    // it (API names, probe, writer), then installs the triggers.
    static Recorder* get() { return s_instance.load(std::memory_order_acquire); }
    static Recorder* start(void (*configure)(Recorder&) = nullptr);

    // ---- Wiring, before the recorder is shared.
    ApiId registerApi(const char* name) { return m_apis.add(name); }
    const char* apiName(ApiId id) const { return m_apis.name(id); }
    void setDeviceProbe(DeviceProbe* probe) { m_probe.store(probe, std::memory_order_release); }
    DeviceProbe* deviceProbe() const { return m_probe.load(std::memory_order_acquire); }
    void setWriter(ReportWriter* writer) { m_writer.store(writer, std::memory_order_release); }
    // Asked in order at every report. At most kMaxCaptureSources.
    void addCaptureSource(CaptureSource* source) noexcept;
    std::vector<CaptureSource*> captureSources() const;
    // The module of the capture layer: its frames are cut off the top of every stack.
    void setOwnModule(uint64_t begin, uint64_t end);

    // ---- The hot path.
    StackId captureStack() noexcept;
    void recordAlloc(const Allocation& alloc) noexcept;
    // Records a free before the real free. Returns false (and records nothing) for an address
    // that is not live: unknown frees pass through.
    bool recordFree(ApiId api, uint64_t address, uint64_t stream) noexcept;
    // A failed allocation. An out-of-memory error may open an OOM episode (oom_episodes.h):
    // its report is written now, or, for a framework that reports its own OOMs, by that
    // framework's OOM (frameworkOom) with this moment kept as the view at the first failure.
    void recordFailure(const Allocation& alloc, int error, bool outOfMemory) noexcept;
    // An event for the timeline only (address-space reservations, pool trims, labels): no
    // live memory. Its time and thread are set here.
    void recordEvent(Event event) noexcept;

    // CUDA virtual memory management (vmm_table.h): physical allocations by handle.
    void recordVmmCreate(const Allocation& alloc) noexcept;  // alloc.handle, no address
    void recordVmmRelease(ApiId api, uint64_t handle) noexcept;
    void recordVmmMap(ApiId api, uint64_t address, uint64_t size, uint64_t handle) noexcept;
    void recordVmmUnmap(ApiId api, uint64_t address, uint64_t size) noexcept;
    // Address space reserved (with the reserving stack, for what is later paused in it) and freed.
    void recordAddressReserve(ApiId api, int device, uint64_t address, uint64_t size) noexcept;
    void recordAddressFree(ApiId api, int device, uint64_t address, uint64_t size) noexcept;
    // NCCL's communicators and the windows in which it allocated for them (nccl_table.h).
    NcclTable& nccl() noexcept { return m_nccl; }

    // A stream-ordered pool the program allocated from explicitly: its statistics go into
    // every report.
    void notePool(uint64_t pool) noexcept;

    // ---- Framework adapters (the PyTorch adapter).
    void attachFramework(const std::string& name, bool reportsOom);
    // Whether the next OOM episode gets a report of its own (OOMSCOPE_MAX_OOM_REPORTS).
    bool oomReportWanted() const noexcept { return m_episodes.reportLeft(); }
    // The framework raised an out-of-memory error (with or without a failing CUDA call): its
    // report, with the framework's view. Returns the path.
    std::string frameworkOom(const FrameworkState& state, int device, uint64_t requested);
    // A report on request with the framework's view (oomscope.dump() in a PyTorch process).
    std::string frameworkDump(const FrameworkState& state, const std::string& reason);
    // A training-step boundary: a timeline event and a memory sample (step_sampler.h), with the
    // framework's counters when given.
    void recordStep(const FrameworkState* state) noexcept;

    // ---- Reports.
    // Everything the recorder holds now, as one image (dump time: allocates freely).
    TrackImage snapshot() const;
    // Hands the trigger to the writer; the path written, or "".
    std::string dump(const TriggerInfo& trigger);

    // ---- fork() support: prepare takes every lock, parent/child release them.
    void lockAllForFork() noexcept;
    void unlockAllAfterFork() noexcept;  // in the parent
    void unlockAllInChild() noexcept;    // in the child

    // ---- Inspection (tests, benchmarks, the writer).
    uint64_t liveBytes(int device, MemKind kind) const { return m_counters.live(device, kind); }
    // The peak window (oomscope_peak, oomscope_peak_reset): a device's most tracked bytes since
    // the last reset; a reset also starts the reports' peak composition afresh.
    uint64_t windowPeak(int device) const { return m_counters.windowPeak(device); }
    void resetPeakWindow() noexcept;
    const LiveMap& liveMap() const { return m_live; }
    const RingBuffer& ring() const { return m_ring; }
    const StackTable& stacks() const { return m_stacks; }
    std::string framework() const { return m_episodes.framework(); }

    // flight: the process's flight-recorder file, holding the ring, the live tables and the
    // peaks; nullptr: all in memory. Public for tests; production code uses start().
    explicit Recorder(class FlightFile* flight = nullptr);
    ~Recorder();
    Recorder(const Recorder&) = delete;
    Recorder& operator=(const Recorder&) = delete;

private:
    static std::atomic<Recorder*> s_instance;

    // Sets the event's time (unless set) and thread, and pushes it.
    void push(Event& event) noexcept;  // stamps the thread (and the time, where 0) and pushes
    void push(Event&& event) noexcept { push(event); }
    void maybeSample(uint64_t nowNs) noexcept;
    report::Step takeSample(const FrameworkState* state, uint64_t timeNs);
    void openEpisode(const Allocation& alloc, int error);
    bool takeEpisodeReport() noexcept;
    // Gives the live allocation at address the Python frames that allocated it (from the
    // framework's own history): its native frames up to the interpreter, then those.
    void attachPythonFrames(uint64_t address, const std::vector<PythonFrameText>& frames);
    StackId internPythonFrames(const std::vector<PythonFrameText>& frames, std::vector<uint64_t> nativeFront = {});
    void vmmEnded(ApiId api, const LiveAllocation& ended) noexcept;
    std::vector<LiveAllocation> liveAllocations() const;
    // Before device memory shrinks (a free, a VMM release): when the device's peak has grown by
    // 1 % (at least kPeakStep) since the last composition, the live memory now, with `ending`
    // still in it, is that peak's: its composition is taken. One load and a compare otherwise.
    // Growth that no free follows is composed at dump time (snapshot()).
    void notePeak(const LiveAllocation& ending) noexcept
    {
        const int device = ending.device;
        if (ending.memKind != MemKind::Device || device < 0 || device >= LiveCounters::kMaxDevices)
            return;
        if (__builtin_expect(!peakPending(device), 1))
            return;
        takePeakSites(ending);
    }
    bool peakPending(int device) const noexcept
    {
        return m_counters.windowPeak(device) >= m_peakNext[device].load(std::memory_order_relaxed);
    }
    void takePeakSites(const LiveAllocation& ending) noexcept;
    void noteDevices() noexcept;
    std::atomic<bool> m_devicesNoted{false};

    class FlightFile* const m_flight;
    RingBuffer m_ring;
    LiveMap m_live;
    VmmTable m_vmm;
    NcclTable m_nccl;
    StackTable m_stacks;
    ApiNames m_apis;
    LiveCounters m_counters;
    OomEpisodes m_episodes;
    StepSampler m_steps;
    std::atomic<DeviceProbe*> m_probe{nullptr};
    std::atomic<ReportWriter*> m_writer{nullptr};
    static constexpr size_t kMaxCaptureSources = 4;
    std::atomic<CaptureSource*> m_captureSources[kMaxCaptureSources] = {};
    std::atomic<uint64_t> m_ownBegin{0};
    std::atomic<uint64_t> m_ownEnd{0};
    const int m_stackDepth;
    std::atomic<uint64_t> m_unknownFrees{0};
    std::atomic<uint64_t> m_oomEpisodes{0};        // out-of-memory episodes (each takes or skips a report)
    std::atomic<uint64_t> m_failedAllocations{0};  // every failed allocation, OOM or not
    static constexpr size_t kMaxPools = 64;
    std::atomic<uint64_t> m_pools[kMaxPools] = {};
    std::recursive_mutex m_dumpMutex;
    // The peak's composition per device (notePeak): the peak at which the next one is taken,
    // and the last one, under m_peakLock (tried, never waited for, on the allocation path).
    static constexpr uint64_t kPeakStep = uint64_t(4) << 20;
    std::atomic<uint64_t> m_peakNext[LiveCounters::kMaxDevices] = {};
    mutable SpinLock m_peakLock;
    std::vector<PeakSites> m_peakSites;
};

} // namespace oomscope::track
