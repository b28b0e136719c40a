// The report format, declared once: for each struct of model.h, its JSON keys in the order
// they are written, the member each one holds, and since when it exists. The writer
// (json_writer.cpp), the strict reader (json_reader.cpp) and the schema test
// (tests/unit/report_fields_test.cpp, both ways against docs/report.schema.json) all walk
// these tables, so a field added here appears in all three, and one added elsewhere fails the
// test. Header-only; no third-party types.
//
// A visitor is called as v(key, member, since) for each field, in order:
//   - member types: integers, bool, std::string, the enums of enums.h (written by name),
//     std::optional<T> (null when empty), std::vector<T>, std::map<K, V> (an object; K a
//     string or an enum), and every struct described below (an object);
//   - since: the schema revision that added the key to its object. Revision 0 keys are in
//     every such object of a v1 report (for an object added later, such as a pool: in every
//     pool); a key of a later revision may be absent in older reports and reads as its default.
//   - proxies where the JSON is not one key per member: the timeline's columns and rows
//     (compact arrays, a million rows: the visitors read and write them their own way), a
//     step's sites (each a [stack, device, bytes] triple), and a key that is left out, not
//     null, when empty (AbsentWhenEmpty).
#pragma once

#include "report/model.h"

#include <map>
#include <optional>
#include <type_traits>
#include <vector>

namespace oomscope::report::fields {

// Schema revisions of oomscope.report/1 (a key's `since`).
inline constexpr int kFirst = 0;   // the first v1 fixtures
inline constexpr int kRound1 = 1;  // pools, step sites and samples, allocator counters, CUPTI coverage
inline constexpr int kRound2 = 2;  // the timeline's handle column, a stack's source
inline constexpr int kRound3 = 3;  // a process's job identity, a device's context, skipped OOMs,
                                   // the analysis marker, the peak's composition
inline constexpr int kRound4 = 4;  // memory by role (memory[].by_role, steps[].devices[].by_role),
                                   // a rehearsed device limit (devices[].limit_bytes)
inline constexpr int kRound5 = 5;  // what keeps tensors alive (steps[].retainers, leaks[].held_by)
inline constexpr int kRound6 = 6;  // the process's own device memory (devices[].process_bytes)
inline constexpr int kRound7 = 7;  // counts of OOM episodes and failed allocations (capture)
inline constexpr int kRound8 = 8;  // native frames' source file and line; paused VMM ranges;
                                   // a segment's PyTorch pool; the process's allocator settings;
                                   // CUDA graphs' captures and the graphs using each pool; NCCL's
                                   // communicators and their memory

// The timeline's `columns` and `rows`, and a step's site lists: the visitors' own business.
template <class T>
struct TimelineColumns {
    T& timeline;
};
template <class T>
struct TimelineRows {
    T& timeline;
};
template <class T>
struct SiteTriples {
    T& sites;  // std::vector<StepSite>, written as [[stack, device, bytes], ...]
};
// An optional key: written only when the member holds something (an optional with a value, a
// string that is not empty, a number that is not 0), read as empty when absent (where a
// nullable key is std::optional itself, written as null).
template <class T>
struct AbsentWhenEmpty {
    T& value;
};
template <class T>
AbsentWhenEmpty(T&) -> AbsentWhenEmpty<T>;  // clang before 17 deduces no aggregate's arguments

// What a visitor tells apart among member types.
template <class T>
struct IsOptional : std::false_type {};
template <class T>
struct IsOptional<std::optional<T>> : std::true_type {};
template <class T>
struct IsVector : std::false_type {};
template <class T>
struct IsVector<std::vector<T>> : std::true_type {};
template <class T>
struct IsMap : std::false_type {};
template <class K, class V>
struct IsMap<std::map<K, V>> : std::true_type {};
template <class T>
struct IsAbsentWhenEmpty : std::false_type {};
template <class T>
struct IsAbsentWhenEmpty<AbsentWhenEmpty<T>> : std::true_type {};

// Whether an AbsentWhenEmpty member is left out, and the value written when it is not.
template <class T>
bool isEmptyValue(const T& x)
{
    if constexpr (IsOptional<T>::value)
        return !x.has_value();
    else if constexpr (requires { x.empty(); })
        return x.empty();
    else
        return x == T{};
}
template <class T>
const auto& presentValue(const T& x)
{
    if constexpr (IsOptional<T>::value)
        return *x;
    else
        return x;
}
// The type of what is written (the optional's value type, or the member's own).
template <class T>
struct PresentType {
    using type = T;
};
template <class T>
struct PresentType<std::optional<T>> {
    using type = T;
};

// describe(v, x): the fields of x's type, for a visitor v; x may be const (writers) or not.
#define OOMSCOPE_DESCRIBE(Type)                                                                                         \
    template <class V, class T>                                                                                         \
        requires std::is_same_v<std::remove_const_t<T>, Type>                                                           \
    void describe(V& v, T& x)

OOMSCOPE_DESCRIBE(Tool)
{
    v("name", x.name, kFirst);
    v("version", x.version, kFirst);
    v("options", x.options, kFirst);
}

OOMSCOPE_DESCRIBE(Trigger)
{
    v("kind", x.kind, kFirst);
    v("time_ns", x.timeNs, kFirst);
    v("device", x.device, kFirst);
    v("requested_bytes", x.requestedBytes, kFirst);
    v("api", x.api, kFirst);
    v("error", x.error, kFirst);
    v("error_name", x.errorName, kFirst);
    v("stack", x.stack, kFirst);
    v("framework", x.framework, kFirst);
    v("message", x.message, kFirst);
    v("pool_id", AbsentWhenEmpty{x.poolId}, kRound8);
}

OOMSCOPE_DESCRIBE(Process)
{
    v("pid", x.pid, kFirst);
    v("ppid", x.ppid, kFirst);
    v("hostname", x.hostname, kFirst);
    v("cmdline", x.cmdline, kFirst);
    v("cwd", x.cwd, kFirst);
    v("start_time_unix_ns", x.startUnixNs, kFirst);
    v("start_time_ns", x.startNs, kFirst);
    v("rank", x.rank, kFirst);
    v("local_rank", x.localRank, kFirst);
    v("world_size", x.worldSize, kFirst);
    v("local_world_size", AbsentWhenEmpty{x.localWorldSize}, kRound3);
    v("group_rank", AbsentWhenEmpty{x.groupRank}, kRound3);
    v("run_id", AbsentWhenEmpty{x.runId}, kRound3);
    v("slurm_job_id", AbsentWhenEmpty{x.slurmJobId}, kRound3);
    v("allocator_config", AbsentWhenEmpty{x.allocatorConfig}, kRound8);
    v("redacted_values", AbsentWhenEmpty{x.redactedValues}, kRound8);
}

OOMSCOPE_DESCRIBE(Device)
{
    v("index", x.index, kFirst);
    v("name", x.name, kFirst);
    v("uuid", x.uuid, kFirst);
    v("total_bytes", x.totalBytes, kFirst);
    v("free_bytes", x.freeBytes, kFirst);
    v("driver_version", x.driverVersion, kFirst);
    v("runtime_version", x.runtimeVersion, kFirst);
    v("context", AbsentWhenEmpty{x.context}, kRound3);
    v("limit_bytes", AbsentWhenEmpty{x.limitBytes}, kRound4);
    v("process_bytes", AbsentWhenEmpty{x.processBytes}, kRound6);
}

OOMSCOPE_DESCRIBE(MemoryRow)
{
    v("device", x.device, kFirst);
    v("tracked_bytes", x.trackedBytes, kFirst);
    v("peak_tracked_bytes", x.peakTrackedBytes, kFirst);
    v("allocated_bytes", x.allocatedBytes, kFirst);
    v("reserved_bytes", x.reservedBytes, kFirst);
    v("fragmented_bytes", x.fragmentedBytes, kFirst);
    v("largest_free_block_bytes", x.largestFreeBlockBytes, kFirst);
    v("untracked_bytes", x.untrackedBytes, kFirst);
    v("by_source", x.bySource, kFirst);
    v("by_kind", x.byKind, kFirst);
    v("peak", AbsentWhenEmpty{x.peak}, kRound3);
    v("by_role", AbsentWhenEmpty{x.byRole}, kRound4);
    v("paused_bytes", AbsentWhenEmpty{x.pausedBytes}, kRound8);
}

OOMSCOPE_DESCRIBE(PausedRange)
{
    v("device", x.device, kFirst);
    v("address", x.address, kFirst);
    v("reserved_bytes", x.reservedBytes, kFirst);
    v("paused_bytes", x.pausedBytes, kFirst);
    v("stack", x.stack, kFirst);
}

OOMSCOPE_DESCRIBE(GraphPoolUse)
{
    v("pool_id", x.poolId, kFirst);
    v("graphs", x.graphs, kFirst);
}

OOMSCOPE_DESCRIBE(CudaGraphs)
{
    v("captures", x.captures, kFirst);
    v("aborted", x.aborted, kFirst);
    v("live", x.live, kFirst);
    v("pools", x.pools, kFirst);
}

OOMSCOPE_DESCRIBE(NcclCommunicator)
{
    v("handle", x.handle, kFirst);
    v("id", x.id, kFirst);
    v("parent", AbsentWhenEmpty{x.parent}, kFirst);
    v("device", x.device, kFirst);
    v("rank", x.rank, kFirst);
    v("nranks", x.nranks, kFirst);
    v("created_ns", x.createdNs, kFirst);
    v("destroyed_ns", AbsentWhenEmpty{x.destroyedNs}, kFirst);
    v("init_bytes", x.initBytes, kFirst);
    v("first_collective_bytes", x.firstCollectiveBytes, kFirst);
    v("registration_bytes", x.registrationBytes, kFirst);
}

OOMSCOPE_DESCRIBE(NcclMemory)
{
    v("communicators", x.communicators, kFirst);
    v("symmetric_bytes", x.symmetricBytes, kFirst);
    v("symmetric_allocations", x.symmetricAllocations, kFirst);
    v("shared_bytes", x.sharedBytes, kFirst);
    v("other_bytes", x.otherBytes, kFirst);
}

OOMSCOPE_DESCRIBE(RoleBytes)
{
    v("time_ns", x.timeNs, kFirst);
    v("parameters", x.parameters, kFirst);
    v("gradients", x.gradients, kFirst);
    v("optimizer_state", x.optimizerState, kFirst);
    v("activations", x.activations, kFirst);
    v("cache", x.cache, kFirst);
}

OOMSCOPE_DESCRIBE(PeakSite)
{
    v("stack", x.stack, kFirst);
    v("bytes", x.bytes, kFirst);
}

OOMSCOPE_DESCRIBE(PeakComposition)
{
    v("bytes", x.bytes, kFirst);
    v("time_ns", x.timeNs, kFirst);
    v("by_source", x.bySource, kFirst);
    v("sites", x.sites, kFirst);
    v("allocated_bytes", AbsentWhenEmpty{x.allocatedBytes}, kFirst);
}

OOMSCOPE_DESCRIBE(Block)
{
    v("offset", x.offset, kFirst);
    v("size", x.size, kFirst);
    v("state", x.state, kFirst);
    v("stack", x.stack, kFirst);
}

OOMSCOPE_DESCRIBE(Segment)
{
    v("device", x.device, kFirst);
    v("address", x.address, kFirst);
    v("size", x.size, kFirst);
    v("kind", x.kind, kFirst);
    v("stream", x.stream, kFirst);
    v("blocks", x.blocks, kFirst);
    v("pool_id", AbsentWhenEmpty{x.poolId}, kRound8);
}

OOMSCOPE_DESCRIBE(Pool)
{
    v("device", x.device, kFirst);
    v("handle", x.handle, kFirst);
    v("role", x.role, kFirst);
    v("reserved_bytes", x.reservedBytes, kFirst);
    v("used_bytes", x.usedBytes, kFirst);
    v("reserved_high_bytes", x.reservedHighBytes, kFirst);
    v("used_high_bytes", x.usedHighBytes, kFirst);
    v("release_threshold_bytes", x.releaseThresholdBytes, kFirst);
}

OOMSCOPE_DESCRIBE(Site)
{
    v("stack", x.stack, kFirst);
    v("device", x.device, kFirst);
    v("kind", x.kind, kFirst);
    v("count", x.count, kFirst);
    v("bytes", x.bytes, kFirst);
    v("first_ns", x.firstNs, kFirst);
    v("last_ns", x.lastNs, kFirst);
}

OOMSCOPE_DESCRIBE(Timeline)
{
    using Tl = std::remove_reference_t<decltype(x)>;
    v("columns", TimelineColumns<Tl>{x}, kFirst);
    v("rows", TimelineRows<Tl>{x}, kFirst);
    v("capacity", x.capacity, kFirst);
    v("pushed", x.pushed, kFirst);
    v("dropped", x.dropped, kFirst);
}

OOMSCOPE_DESCRIBE(StepDevice)
{
    v("device", x.device, kFirst);
    v("tracked_bytes", x.trackedBytes, kFirst);
    v("allocated_bytes", x.allocatedBytes, kFirst);
    v("reserved_bytes", x.reservedBytes, kFirst);
    v("inactive_split_bytes", x.inactiveSplitBytes, kFirst);
    v("peak_allocated_bytes", x.peakAllocatedBytes, kRound1);
    v("expandable_segments", x.expandableSegments, kRound1);
    v("segment_count", x.segmentCount, kFirst);
    v("largest_free_block_bytes", x.largestFreeBlockBytes, kFirst);
    v("by_role", AbsentWhenEmpty{x.byRole}, kRound4);
}

OOMSCOPE_DESCRIBE(Retainer)
{
    v("device", x.device, kFirst);
    v("name", x.name, kFirst);
    v("kind", x.kind, kFirst);
    v("container", x.container, kFirst);
    v("bytes", x.bytes, kFirst);
    v("tensors", x.tensors, kFirst);
    v("stack", x.stack, kFirst);
}

OOMSCOPE_DESCRIBE(Step)
{
    using Sites = std::remove_reference_t<decltype((x.sites))>;
    v("index", x.index, kFirst);
    v("time_ns", x.timeNs, kFirst);
    v("source", x.source, kRound1);
    v("devices", x.devices, kFirst);
    v("sites", SiteTriples<Sites>{x.sites}, kRound1);
    v("tensors", SiteTriples<Sites>{x.tensors}, kRound1);
    v("retainers", AbsentWhenEmpty{x.retainers}, kRound5);
}

OOMSCOPE_DESCRIBE(Leak)
{
    v("stack", x.stack, kFirst);
    v("pattern", x.pattern, kFirst);
    v("bytes_per_step", x.bytesPerStep, kFirst);
    v("steps_observed", x.stepsObserved, kFirst);
    v("evidence", x.evidence, kFirst);
    v("held_by", AbsentWhenEmpty{x.heldBy}, kRound5);
}

OOMSCOPE_DESCRIBE(Diagnosis)
{
    v("code", x.code, kFirst);
    v("severity", x.severity, kFirst);
    v("message", x.message, kFirst);
    v("suggestion", x.suggestion, kFirst);
}

// A frame's keys depend on its kind: the kind first, then the keys of that kind (the reader
// has set x.kind by the time it reads them).
OOMSCOPE_DESCRIBE(Frame)
{
    v("kind", x.kind, kFirst);
    if (x.kind == FrameKind::Python) {
        v("file", x.file, kFirst);
        v("line", x.line, kFirst);
        v("function", x.function, kFirst);
    } else {
        v("module", x.module, kFirst);
        v("offset", x.offset, kFirst);
        v("symbol", x.symbol, kFirst);
        v("file", AbsentWhenEmpty{x.file}, kRound8);
        v("line", AbsentWhenEmpty{x.line}, kRound8);
    }
}

OOMSCOPE_DESCRIBE(Stack)
{
    v("id", x.id, kFirst);
    v("frames", x.frames, kFirst);
    v("source", x.source, kRound2);
}

OOMSCOPE_DESCRIBE(Module)
{
    v("id", x.id, kFirst);
    v("path", x.path, kFirst);
    v("build_id", x.buildId, kFirst);
    v("load_address", x.loadAddress, kFirst);
}

OOMSCOPE_DESCRIBE(MissedAllocation)
{
    v("api", x.api, kFirst);
    v("size", x.size, kFirst);
    v("device", x.device, kFirst);
    v("address", x.address, kFirst);
    v("time_ns", x.timeNs, kFirst);
    v("stack", x.stack, kFirst);
}

OOMSCOPE_DESCRIBE(Coverage)
{
    v("cupti", x.cupti, kFirst);
    v("library", x.library, kFirst);
    v("confirmed", x.confirmed, kFirst);
    v("missed", x.missed, kFirst);
    v("missed_bytes", x.missedBytes, kFirst);
    v("missed_allocations", x.missedAllocations, kFirst);
}

OOMSCOPE_DESCRIBE(Capture)
{
    v("backends", x.backends, kFirst);
    v("events_pushed", x.eventsPushed, kFirst);
    v("events_recorded", x.eventsRecorded, kFirst);
    v("events_dropped", x.eventsDropped, kFirst);
    v("live_allocations", x.liveAllocations, kFirst);
    v("distinct_stacks", x.distinctStacks, kFirst);
    v("ring_bytes", x.ringBytes, kFirst);
    v("live_map_bytes", x.liveMapBytes, kFirst);
    v("stack_table_bytes", x.stackTableBytes, kFirst);
    v("unknown_frees", x.unknownFrees, kFirst);
    v("oom_episodes", x.oomEpisodes, kRound7);
    v("failed_allocations", x.failedAllocations, kRound7);
    v("unwinder", x.unwinder, kFirst);
    v("notes", x.notes, kFirst);
    // Absent (not null) when CUPTI was never tried: an optional key, not a nullable one.
    v("coverage", AbsentWhenEmpty<std::remove_reference_t<decltype((x.coverage))>>{x.coverage}, kRound1);
}

// Keys of revision 0 inside an object that only reports of revision 3 have: in every such object.
OOMSCOPE_DESCRIBE(SkippedOom)
{
    v("time_ns", x.timeNs, kFirst);
    v("device", x.device, kFirst);
    v("api", x.api, kFirst);
    v("requested_bytes", x.requestedBytes, kFirst);
}

OOMSCOPE_DESCRIBE(SkippedOoms)
{
    v("count", x.count, kFirst);
    v("max_reports", x.maxReports, kFirst);
    v("episodes", x.episodes, kFirst);
    v("largest_success_after_bytes", x.largestSuccessAfterBytes, kFirst);
}

OOMSCOPE_DESCRIBE(Report)
{
    v("schema", x.schema, kFirst);
    v("tool", x.tool, kFirst);
    v("trigger", x.trigger, kFirst);
    v("process", x.process, kFirst);
    v("devices", x.devices, kFirst);
    v("memory", x.memory, kFirst);
    v("at_first_failure", x.atFirstFailure, kFirst);
    v("skipped_ooms", AbsentWhenEmpty{x.skippedOoms}, kRound3);
    v("segments", x.segments, kFirst);
    v("pools", x.pools, kRound1);
    v("paused", AbsentWhenEmpty{x.paused}, kRound8);
    v("cuda_graphs", AbsentWhenEmpty{x.cudaGraphs}, kRound8);
    v("nccl", AbsentWhenEmpty{x.nccl}, kRound8);
    v("sites", x.sites, kFirst);
    v("timeline", x.timeline, kFirst);
    v("steps", x.steps, kFirst);
    v("leaks", x.leaks, kFirst);
    v("diagnosis", x.diagnosis, kFirst);
    v("analysis", AbsentWhenEmpty{x.analysis}, kRound3);
    v("stacks", x.stacks, kFirst);
    v("modules", x.modules, kFirst);
    v("capture", x.capture, kFirst);
}

#undef OOMSCOPE_DESCRIBE

} // namespace oomscope::report::fields
