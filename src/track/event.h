// The recorder's unit of history: a fixed-size, trivially copyable event. Copied by value into
// the ring; owns nothing. Names of kinds are stable: they are written into reports.
#pragma once

#include <cstdint>
#include <type_traits>

namespace oomscope::track {

enum class EventKind : uint8_t {
    Alloc = 0,
    Free,
    AllocFailed,
    SegmentMap,
    SegmentUnmap,
    PoolTrim,
    Step,
    Oom,
    Marker,
    Count
};

// What kind of memory an allocation is. Device covers cudaMalloc, VMM physical memory and
// stream-ordered pools: everything that occupies the GPU's own memory.
enum class MemKind : uint8_t { Device = 0, Managed, HostPinned, Count };

const char* eventKindName(EventKind kind);
const char* memKindName(MemKind kind);
bool parseEventKind(const char* name, EventKind* out);
bool parseMemKind(const char* name, MemKind* out);

struct Event {
    uint64_t timeNs = 0;   // CLOCK_MONOTONIC
    uint64_t address = 0;
    uint64_t size = 0;
    uint64_t stream = 0;
    uint32_t stack = 0;    // StackId value, 0 = none
    uint32_t thread = 0;   // kernel thread id
    int16_t error = 0;     // CUDA error code of a failed call, 0 otherwise
    uint16_t api = 0;      // ApiId value
    int8_t device = -1;    // -1 = unknown / host
    EventKind kind = EventKind::Marker;
    MemKind memKind = MemKind::Device;
    uint8_t flags = 0;
};

static_assert(sizeof(Event) == 48, "events are fixed-size: six words");
static_assert(std::is_trivially_copyable_v<Event>);

} // namespace oomscope::track
