// The report's closed vocabularies as enums, each with its one table of names: the names are
// what the JSON holds (schema oomscope.report/1), the enums what the code compares. Shared by
// the hot path (memory kinds, trigger kinds), the interpreter (sources) and the views.
// Header-only, constexpr; no allocation.
#pragma once

#include <array>
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include <type_traits>

namespace oomscope::report {

// What kind of memory an allocation is. Device covers cudaMalloc, VMM physical memory and
// stream-ordered pools: everything that occupies the GPU's own memory.
enum class MemKind : uint8_t { Device = 0, Managed, HostPinned, Count };

// What wrote the report. Recovered: `oomscope recover` from the flight file of a process that
// died without writing one. Snapshot: `oomscope snapshot` from the flight file of a process
// that is still running (it was neither stopped nor asked).
enum class TriggerKind : uint8_t { Oom = 0, Exit, Signal, Request, Recovered, Snapshot, Count };

// The library that asked for memory (the outermost caller into CUDA). In alphabetical order of
// their names: a report's `by_source` object lists them in this order. Untracked: memory the
// driver counts as used that no hook saw (the CUDA context, libraries we cannot see).
enum class Source : uint8_t { Cublas = 0, Cudnn, Cupy, Jax, Nccl, Other, Torch, Untracked, Count };

// A block of a framework segment, in PyTorch's own words (torch.cuda.memory._snapshot()).
enum class BlockState : uint8_t { ActiveAllocated = 0, ActiveAwaitingFree, Inactive, Count };

// A segment: PyTorch's pools (large, small), our own views of CUDA VMM mappings, plain
// cudaMalloc segments and stream-ordered pools.
// PyTorch's segments are "large" or "small" (its two pools), or "expandable" (grown in place with
// cuMemMap: expandable_segments:True); the tracker's own are cudaMalloc, pool and vmm.
enum class SegmentKind : uint8_t { CudaMalloc = 0, Expandable, Large, Pool, Small, Vmm, Count };

enum class Severity : uint8_t { Info = 0, Warning, Error, Count };

// Why a stream-ordered pool is in the report: a device's default or current pool, or one the
// program allocated from explicitly.
enum class PoolRole : uint8_t { Default = 0, Current, Explicit, Count };

// What took a step sample: a step event (optimizer step, oomscope.step(), oomscope_step()),
// or the periodic sampling of a program without step events (OOMSCOPE_SAMPLE_MS).
enum class StepSource : uint8_t { Step = 0, Sample, Count };

// A stack frame: a native return address, or a Python line.
enum class FrameKind : uint8_t { Native = 0, Python, Count };

template <class E>
struct EnumNames;

template <>
struct EnumNames<MemKind> {
    static constexpr std::array<const char*, size_t(MemKind::Count)> names = {"device", "managed", "host_pinned"};
};
template <>
struct EnumNames<TriggerKind> {
    static constexpr std::array<const char*, size_t(TriggerKind::Count)> names = {"oom", "exit", "signal", "request",
                                                                                "recovered", "snapshot"};
};
template <>
struct EnumNames<Source> {
    static constexpr std::array<const char*, size_t(Source::Count)> names = {
        "cublas", "cudnn", "cupy", "jax", "nccl", "other", "torch", "untracked"};
};
template <>
struct EnumNames<BlockState> {
    static constexpr std::array<const char*, size_t(BlockState::Count)> names = {"active_allocated",
                                                                               "active_awaiting_free", "inactive"};
};
template <>
struct EnumNames<SegmentKind> {
    static constexpr std::array<const char*, size_t(SegmentKind::Count)> names = {"cudaMalloc", "expandable", "large",
                                                                                "pool",       "small",      "vmm"};
};
template <>
struct EnumNames<Severity> {
    static constexpr std::array<const char*, size_t(Severity::Count)> names = {"info", "warning", "error"};
};

template <>
struct EnumNames<FrameKind> {
    static constexpr std::array<const char*, size_t(FrameKind::Count)> names = {"native", "python"};
};

template <>
struct EnumNames<PoolRole> {
    static constexpr std::array<const char*, size_t(PoolRole::Count)> names = {"default", "current", "explicit"};
};
template <>
struct EnumNames<StepSource> {
    static constexpr std::array<const char*, size_t(StepSource::Count)> names = {"step", "sample"};
};

template <class E>
constexpr const char* enumName(E value)
{
    const auto& names = EnumNames<E>::names;
    return size_t(value) < names.size() ? names[size_t(value)] : "unknown";
}

// false for a name outside the table. Old names kept readable are mapped here, in one place:
// docs/report-schema.md once said `active_pending_free` for PyTorch's `active_awaiting_free`.
template <class E>
constexpr bool parseEnum(std::string_view name, E* out)
{
    const auto& names = EnumNames<E>::names;
    for (size_t i = 0; i < names.size(); ++i) {
        if (name == names[i]) {
            *out = E(i);
            return true;
        }
    }
    if constexpr (std::is_same_v<E, BlockState>) {
        if (name == "active_pending_free") {
            *out = BlockState::ActiveAwaitingFree;
            return true;
        }
    }
    return false;
}

// A map keyed by an enum, as (name, value) pairs in the order of the names: how the JSON and
// the tables list it.
template <class E, class V>
std::vector<std::pair<std::string, V>> byName(const std::map<E, V>& map)
{
    std::vector<std::pair<std::string, V>> out;
    for (const auto& [key, value] : map)
        out.emplace_back(enumName(key), value);
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    return out;
}

// The sources a library can be (every Source but Untracked), in table order.
inline constexpr std::array<Source, 7> kLibrarySources = {Source::Cublas, Source::Cudnn, Source::Cupy, Source::Jax,
                                                          Source::Nccl,   Source::Other, Source::Torch};

} // namespace oomscope::report
