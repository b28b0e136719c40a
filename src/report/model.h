// The report, schema oomscope.report/1, as plain structs: what the preload writes and what the
// CLI reads, analyses and renders. No behaviour beyond small helpers; no third-party types.
// docs/report-schema.md describes every field; sizes are bytes, times nanoseconds
// (CLOCK_MONOTONIC unless the name says unix).
#pragma once

#include "report/enums.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace oomscope::report {

inline constexpr const char* kSchema = "oomscope.report/1";
inline constexpr size_t kStepSitesMax = 32;

struct Tool {
    std::string name = "oomscope";
    std::string version;
    std::map<std::string, std::string> options;  // capture options in force

    bool operator==(const Tool&) const = default;
};

struct Trigger {
    TriggerKind kind = TriggerKind::Request;
    uint64_t timeNs = 0;
    std::optional<int64_t> device;
    std::optional<uint64_t> requestedBytes;
    std::string api;                       // the call that failed (oom) or "" (others)
    std::optional<int64_t> error;          // CUDA error code
    std::string errorName;
    std::optional<uint32_t> stack;
    std::optional<std::string> framework;  // null or "torch"
    std::string message;
    // Revision 8: the framework's pool the failed request was made in (torch.cuda.use_mem_pool),
    // as Segment::poolId; absent for the default pool.
    std::vector<int64_t> poolId;

    bool operator==(const Trigger&) const = default;
};

struct Process {
    int64_t pid = 0;
    int64_t ppid = 0;
    std::string hostname;
    std::vector<std::string> cmdline;  // values that look like secrets are "<redacted>" (common/redact.h)
    std::string cwd;
    uint64_t startUnixNs = 0;
    uint64_t startNs = 0;  // CLOCK_MONOTONIC at start: subtract from time_ns for "seconds in"
    std::optional<int64_t> rank;
    std::optional<int64_t> localRank;
    std::optional<int64_t> worldSize;
    // The job around the process, from the launcher's environment (schema revision 3).
    std::optional<int64_t> localWorldSize;  // LOCAL_WORLD_SIZE (torchrun), SLURM_NTASKS_PER_NODE
    std::optional<int64_t> groupRank;       // GROUP_RANK (torchrun's node rank), SLURM_NODEID
    std::optional<std::string> runId;       // TORCHELASTIC_RUN_ID
    std::optional<std::string> slurmJobId;  // SLURM_JOB_ID
    // PyTorch's allocator settings (revision 8): PYTORCH_ALLOC_CONF, else PYTORCH_CUDA_ALLOC_CONF.
    std::optional<std::string> allocatorConfig;
    // How many values of the command line were redacted (revision 8; absent when none).
    uint64_t redactedValues = 0;

    bool operator==(const Process&) const = default;
};

struct Device {
    int64_t index = 0;
    std::string name;
    std::string uuid;
    std::optional<uint64_t> totalBytes;
    std::optional<uint64_t> freeBytes;  // at the trigger; null where the driver could not say
    std::optional<int64_t> driverVersion;
    std::optional<int64_t> runtimeVersion;
    // Whether the process had a context on the device at the trigger (its current one, or an
    // active primary context); null where the driver could not say (schema revision 3).
    std::optional<bool> context;
    // The card rehearsed (OOMSCOPE_DEVICE_LIMIT): allocations past it were refused with the
    // API's out-of-memory error (schema revision 4; absent when the run was not limited).
    std::optional<uint64_t> limitBytes;
    // The device memory the driver counts for this process at the trigger (NVML's per-process
    // used memory; schema revision 6, absent where NVML could not say). free_bytes is the whole
    // device's: other processes' memory is in it, not in this.
    std::optional<uint64_t> processBytes;

    bool operator==(const Device&) const = default;
};

// What held a device's memory at its peak: taken by the tracker when the memory first shrinks
// after the peak grew by 1 % (at least 4 MiB) over the last composition (or at the report when
// it has not shrunk since), so within 1 % of the peak itself.
struct PeakSite {
    uint32_t stack = 0;
    uint64_t bytes = 0;

    bool operator==(const PeakSite&) const = default;
};

struct PeakComposition {
    uint64_t bytes = 0;   // tracked device bytes live then
    uint64_t timeNs = 0;
    std::map<Source, uint64_t> bySource;  // the same split as the row's by_source (no untracked)
    std::vector<PeakSite> sites;          // largest first, at most 10
    std::optional<uint64_t> allocatedBytes;  // the framework's own peak allocated (the last step sample's)

    bool operator==(const PeakComposition&) const = default;
};

// What holds the framework's memory on a device, by role (schema revision 4), measured by its
// adapter from the objects, not guessed from stacks: PyTorch's parameters (the optimizers' and
// every nn.Parameter it finds), their gradients and the optimizers' state, each storage counted
// once; activations and temporaries are the rest of what the allocator has allocated, and its
// cache is reserved − allocated. The five add up to the reserved bytes.
struct RoleBytes {
    uint64_t timeNs = 0;  // when measured: the OOM, or the step sample it comes from
    uint64_t parameters = 0;
    uint64_t gradients = 0;
    uint64_t optimizerState = 0;
    uint64_t activations = 0;
    uint64_t cache = 0;

    bool operator==(const RoleBytes&) const = default;
};

struct MemoryRow {
    int64_t device = 0;
    uint64_t trackedBytes = 0;       // live device memory seen by capture
    uint64_t peakTrackedBytes = 0;
    std::optional<uint64_t> allocatedBytes;         // framework fields: null without an adapter
    std::optional<uint64_t> reservedBytes;
    std::optional<uint64_t> fragmentedBytes;
    std::optional<uint64_t> largestFreeBlockBytes;
    std::optional<uint64_t> untrackedBytes;         // driver used − tracked; null without driver view
    std::map<Source, uint64_t> bySource;            // device memory by the library that asked, + untracked
    std::map<MemKind, uint64_t> byKind;             // live bytes by memory kind
    std::optional<PeakComposition> peak;            // absent where the tracker kept none
    std::optional<RoleBytes> byRole;                // absent without an adapter that measures roles
    std::optional<uint64_t> pausedBytes;            // revision 8: the device's paused[] bytes, absent when none

    bool operator==(const MemoryRow&) const = default;
};

// Revision 8: a reservation of CUDA address space with ranges unmapped while it stays reserved,
// to be mapped again at the same addresses (torch_memory_saver's pause, vLLM's sleep mode): not
// in use, not leaked, not fragmentation. PyTorch's own expandable segments, which unmap free
// pages for good, are not paused.
struct PausedRange {
    int64_t device = 0;
    uint64_t address = 0;        // the reservation
    uint64_t reservedBytes = 0;  // its size
    uint64_t pausedBytes = 0;    // unmapped in it, less mapped again since
    std::optional<uint32_t> stack;  // that reserved it

    bool operator==(const PausedRange&) const = default;
};

struct Block {
    uint64_t offset = 0;
    uint64_t size = 0;
    BlockState state = BlockState::Inactive;
    std::optional<uint32_t> stack;

    bool operator==(const Block&) const = default;
};

struct Segment {
    int64_t device = 0;
    uint64_t address = 0;
    uint64_t size = 0;
    SegmentKind kind = SegmentKind::CudaMalloc;
    uint64_t stream = 0;
    std::vector<Block> blocks;
    // Revision 8: PyTorch's segment_pool_id, absent for the default pool (0, 0): (0, n) a
    // torch.cuda.MemPool, (n, 0) a CUDA graph's private pool (poolKind()).
    std::vector<int64_t> poolId;

    bool operator==(const Segment&) const = default;
};

// What a segment's pool is, from its id as PyTorch numbers them.
enum class PoolKind : uint8_t { Default, MemPool, Graph };
PoolKind poolKind(const std::vector<int64_t>& poolId);
// "default pool", "MemPool (0, 3)", "CUDA graph pool (2, 0)".
std::string poolName(const std::vector<int64_t>& poolId);

// Revision 8: what the CUDA graphs' captures did, as PyTorch's adapter followed them (absent
// before the first capture): captures begun, captures that failed at capture_end (their pool
// stays held: pytorch#190348), graphs holding their pool now, and the graphs using each pool
// the adapter knows (a capture's own pool or one given to it, graph_pool_handle()).
struct GraphPoolUse {
    std::vector<int64_t> poolId;
    uint64_t graphs = 0;

    bool operator==(const GraphPoolUse&) const = default;
};
struct CudaGraphs {
    uint64_t captures = 0;
    uint64_t aborted = 0;
    uint64_t live = 0;
    std::vector<GraphPoolUse> pools;

    bool operator==(const CudaGraphs&) const = default;
};

// Revision 8: NCCL's communicators (the NCCL hooks saw their init) and the live device memory
// NCCL allocated for each: at its init (or split), at its first collective (buffers connected at
// first use), at its registrations; its symmetric memory (ncclMemAlloc); what fell in the
// windows of several communicators at once, or of none.
struct NcclCommunicator {
    uint64_t handle = 0;
    std::string id;  // 16 hex digits, the same on every rank of the communicator
    std::optional<uint64_t> parent;  // the handle it was split from
    int64_t device = -1;
    int64_t rank = -1;
    int64_t nranks = 0;
    uint64_t createdNs = 0;
    std::optional<uint64_t> destroyedNs;
    uint64_t initBytes = 0;
    uint64_t firstCollectiveBytes = 0;
    uint64_t registrationBytes = 0;

    uint64_t bytes() const { return initBytes + firstCollectiveBytes + registrationBytes; }
    bool operator==(const NcclCommunicator&) const = default;
};
struct NcclMemory {
    std::vector<NcclCommunicator> communicators;
    uint64_t symmetricBytes = 0;
    uint64_t symmetricAllocations = 0;
    uint64_t sharedBytes = 0;
    uint64_t otherBytes = 0;

    bool operator==(const NcclMemory&) const = default;
};

// A stream-ordered memory pool at the trigger (cuMemPoolGetAttribute). Key added after the
// first v1 fixtures: absent in older reports, read as empty.
struct Pool {
    int64_t device = 0;
    uint64_t handle = 0;
    PoolRole role = PoolRole::Default;
    uint64_t reservedBytes = 0;
    uint64_t usedBytes = 0;
    uint64_t reservedHighBytes = 0;
    uint64_t usedHighBytes = 0;
    std::optional<uint64_t> releaseThresholdBytes;

    bool operator==(const Pool&) const = default;
};

struct Site {
    uint32_t stack = 0;
    int64_t device = 0;
    MemKind kind = MemKind::Device;
    uint64_t count = 0;
    uint64_t bytes = 0;
    uint64_t firstNs = 0;
    uint64_t lastNs = 0;

    bool operator==(const Site&) const = default;
};

// Rows refer to names (event kinds, API names) by index into Timeline::names, so that a
// million rows do not carry a million strings in memory. In JSON they are strings. What each
// column holds for each kind of event: src/track/event.h and docs/report-schema.md.
struct TimelineRow {
    uint64_t timeNs = 0;
    uint64_t address = 0;
    uint64_t size = 0;
    uint64_t stream = 0;
    uint32_t stack = 0;
    uint32_t thread = 0;
    int32_t error = 0;
    int32_t device = -1;
    uint16_t kind = 0;  // index into names
    uint16_t api = 0;   // index into names
    uint64_t handle = 0;  // CUDA VMM physical handle or pool; the column exists only where one is set

    bool operator==(const TimelineRow&) const = default;
};

struct Timeline {
    static constexpr const char* kColumns[] = {"time_ns", "kind",  "device", "address", "size",
                                               "stream",  "api",   "stack",  "thread",  "error"};
    static constexpr size_t kWidth = sizeof(kColumns) / sizeof(kColumns[0]);
    // An eleventh column, added after the first v1 fixtures: written only when a row has a
    // handle (CUDA VMM, stream-ordered pools), so that other reports stay as they were.
    static constexpr const char* kHandleColumn = "handle";
    std::vector<std::string> names;
    std::vector<TimelineRow> rows;  // oldest first
    uint64_t capacity = 0;
    uint64_t pushed = 0;
    uint64_t dropped = 0;

    uint16_t intern(const std::string& name);
    const std::string& name(uint16_t index) const;
    // For a loop over a million rows: test each name once, then ask by index (no string compare).
    struct Flags {
        std::vector<bool> byIndex;
        bool operator()(uint16_t index) const { return index < byIndex.size() && byIndex[index]; }
    };
    Flags flags(const std::function<bool(const std::string&)>& test) const;
    Flags flags(std::string_view wanted) const
    {
        return flags([&](const std::string& n) { return n == wanted; });
    }

    // Equal when the rows say the same, whatever the order of the names table.
    bool operator==(const Timeline& other) const;
    bool hasHandles() const;
};

struct StepDevice {
    int64_t device = 0;
    uint64_t trackedBytes = 0;
    std::optional<uint64_t> allocatedBytes;
    std::optional<uint64_t> reservedBytes;
    std::optional<uint64_t> inactiveSplitBytes;
    // Keys added after the first v1 fixtures (absent: null). The most the framework had
    // allocated at once since the start, and whether its cache grows segments in place.
    std::optional<uint64_t> peakAllocatedBytes;
    std::optional<bool> expandableSegments;
    std::optional<uint64_t> segmentCount;
    std::optional<uint64_t> largestFreeBlockBytes;
    std::optional<RoleBytes> byRole;  // revision 4: absent without an adapter that measures roles

    bool operator==(const StepDevice&) const = default;
};

// Live bytes of one stack on one device at a step boundary.
struct StepSite {
    uint32_t stack = 0;
    int64_t device = 0;
    uint64_t bytes = 0;

    bool operator==(const StepSite&) const = default;
};

// What keeps tensors alive (revision 5): a container or object the adapter reached from a
// named root — a module attribute (net[1].seen), a global (train.history), a closure cell, an
// object's attribute — or the autograd graph of a kept tensor that requires grad, with the
// CUDA bytes it holds (storages counted once) at a census of a step sample.
struct Retainer {
    int64_t device = 0;
    std::string name;       // the path from its root: net[1].seen, train.total_loss, f.<closure>.kept
    std::string kind;       // "module attribute", "global", "closure cell", "attribute", "autograd graph"
    std::string container;  // the holder's type: list, dict, deque, Tensor, …
    uint64_t bytes = 0;
    uint64_t tensors = 0;
    uint32_t stack = 0;     // the Python stack that allocated one of its tensors (history on), else 0

    bool operator==(const Retainer&) const = default;
};

struct Step {
    uint64_t index = 0;
    uint64_t timeNs = 0;
    std::vector<StepDevice> devices;
    // Keys added after the first v1 fixtures (absent: empty). sites: the live allocations the
    // capture sees (segments, for a caching allocator), by stack, largest first, at most
    // kStepSitesMax. tensors: the framework's live blocks by the Python stack of their
    // allocation (PyTorch with its history on).
    std::vector<StepSite> sites;
    std::vector<StepSite> tensors;
    // The largest retainers at a census (revision 5; absent where none was taken: the adapter
    // takes one when PyTorch's allocated memory grew since the last, every few step samples).
    std::optional<std::vector<Retainer>> retainers;
    // "step" (a step event: optimizer step, oomscope.step(), oomscope_step()) or "sample"
    // (a periodic sample, OOMSCOPE_SAMPLE_MS, in a program without step events). Key added
    // after the first v1 fixtures: absent reads as "step".
    StepSource source = StepSource::Step;

    bool operator==(const Step&) const = default;
};

struct Leak {
    uint32_t stack = 0;
    std::string pattern;
    int64_t bytesPerStep = 0;
    uint64_t stepsObserved = 0;
    std::string evidence;
    // What keeps the leaked memory alive, where the step samples' censuses tell (revision 5):
    // the retainer that grew most over the leak's steps; its bytes and tensors at the last census.
    std::optional<Retainer> heldBy;

    bool operator==(const Leak&) const = default;
};

// Out-of-memory episodes after the first max_reports, which got no report of their own (a
// program that catches OOMs on purpose: a batch-size finder); counted in every later report.
struct SkippedOom {
    uint64_t timeNs = 0;
    std::optional<int64_t> device;
    std::string api;  // the call that failed, or the framework that raised it ("torch")
    std::optional<uint64_t> requestedBytes;

    bool operator==(const SkippedOom&) const = default;
};

struct SkippedOoms {
    uint64_t count = 0;
    uint64_t maxReports = 0;             // OOMSCOPE_MAX_OOM_REPORTS in force
    std::vector<SkippedOom> episodes;    // the first kSkippedOomsKept of them
    // The largest allocation that succeeded after the first skipped one (the timeline's view).
    std::optional<uint64_t> largestSuccessAfterBytes;
    static constexpr size_t kKept = 64;

    bool operator==(const SkippedOoms&) const = default;
};

struct Diagnosis {
    std::string code;
    Severity severity = Severity::Info;
    std::string message;
    std::string suggestion;

    bool operator==(const Diagnosis&) const = default;
};

struct Frame {
    using Kind = FrameKind;
    Kind kind = Kind::Native;
    std::optional<uint32_t> module;  // native: id into modules
    uint64_t offset = 0;             // native: return address − module base
    std::string symbol;              // native: demangled, may be empty
    std::string file;                // python
    uint32_t line = 0;               // python
    std::string function;            // python

    bool operator==(const Frame&) const = default;
};

struct Stack {
    uint32_t id = 0;
    std::vector<Frame> frames;  // innermost first
    // The library that made the outermost call into CUDA through this stack (what by_source
    // counts it as); null where the builder could not tell (stacks made of a framework's
    // recorded Python frames). Key added in schema revision 2: absent in older reports.
    std::optional<Source> source;

    bool operator==(const Stack&) const = default;
};

struct Module {
    uint32_t id = 0;
    std::string path;
    std::string buildId;
    uint64_t loadAddress = 0;

    bool operator==(const Module&) const = default;
};

// CUPTI's cross-check of the interposer (src/cupti): what CUPTI saw that no hook recorded.
struct MissedAllocation {
    std::string api;     // the CUDA function CUPTI reported
    uint64_t size = 0;
    int device = -1;
    uint64_t address = 0;
    uint64_t timeNs = 0;
    uint32_t stack = 0;  // 0: none

    bool operator==(const MissedAllocation&) const = default;
};

struct Coverage {
    // active | yielded (the program's profiler subscribed) | busy (another subscriber held
    // the slot at start) | absent | too_old | failed | off
    std::string cupti;
    std::string library;          // the libcupti loaded, when one was
    uint64_t confirmed = 0;       // allocations CUPTI saw that a hook had recorded
    uint64_t missed = 0;          // allocations CUPTI saw that no hook had recorded
    uint64_t missedBytes = 0;
    std::vector<MissedAllocation> missedAllocations;  // the first ones, with their stacks

    bool operator==(const Coverage&) const = default;
};

struct Capture {
    std::vector<std::string> backends;
    uint64_t eventsPushed = 0;
    uint64_t eventsRecorded = 0;
    uint64_t eventsDropped = 0;
    uint64_t liveAllocations = 0;
    uint64_t distinctStacks = 0;
    uint64_t ringBytes = 0;
    uint64_t liveMapBytes = 0;
    uint64_t stackTableBytes = 0;
    uint64_t unknownFrees = 0;
    uint64_t oomEpisodes = 0;        // out-of-memory episodes the process had (revision 7)
    uint64_t failedAllocations = 0;  // failed allocations, out of memory or not (revision 7)
    std::string unwinder;
    std::vector<std::string> notes;  // what the capture lost or could not do
    std::optional<Coverage> coverage;  // absent when CUPTI was never tried (older reports)

    bool operator==(const Capture&) const = default;
};

struct Report {
    std::string schema = kSchema;
    Tool tool;
    Trigger trigger;
    Process process;
    std::vector<Device> devices;
    std::vector<MemoryRow> memory;
    std::optional<std::vector<MemoryRow>> atFirstFailure;
    std::vector<Segment> segments;
    std::vector<Pool> pools;
    std::vector<PausedRange> paused;  // revision 8: absent when none
    std::optional<CudaGraphs> cudaGraphs;  // revision 8: absent before the first capture
    std::optional<NcclMemory> nccl;  // revision 8: absent unless NCCL's calls were seen
    std::vector<Site> sites;  // sorted by bytes, largest first
    Timeline timeline;
    std::vector<Step> steps;
    std::vector<Leak> leaks;
    std::vector<Diagnosis> diagnosis;
    // Who filled leaks and diagnosis: "not run" in the preload's own files (the analysis runs
    // when a report is read: oomscope report), "oomscope X.Y.Z" in `report --format json`'s
    // output; absent in reports older than revision 3.
    std::optional<std::string> analysis;
    std::optional<SkippedOoms> skippedOoms;  // absent until an OOM episode went without a report
    std::vector<Stack> stacks;
    std::vector<Module> modules;
    Capture capture;

    const Stack* findStack(uint32_t id) const;
    const Module* findModule(uint32_t id) const;
    const Device* findDevice(int64_t index) const;
    const MemoryRow* findMemory(int64_t device) const;
    // A pool the CUDA graphs' captures used (cuda_graphs), nullptr when none did.
    const GraphPoolUse* findGraphPool(const std::vector<int64_t>& poolId) const;

    bool operator==(const Report&) const = default;
};

// As poolKind()/poolName(), also knowing the report's CUDA graphs: a (0, n) handle that
// captures used (graph_pool_handle()) is a graph's pool, not a MemPool.
PoolKind poolKind(const Report& report, const std::vector<int64_t>& poolId);
std::string poolName(const Report& report, const std::vector<int64_t>& poolId);

} // namespace oomscope::report
