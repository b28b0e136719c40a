// The recorder's unit of history: a fixed-size, trivially copyable event, copied by value into
// the ring (and so into the flight file); owns nothing. Built only through the named
// constructors below, one per kind, so that each column holds one quantity for every kind
// (as PyTorch's TraceEntry actions document theirs). Names of kinds are stable: they are
// written into reports. Header-only: the interpreter reads events without linking the hot path.
//
// Columns per kind (0 where the kind has none; api, thread, stack, time always set):
//   kind           device  address               size             stream  handle        error
//   alloc          yes     device/host address   bytes            stream  VMM handle¹   -
//   free           yes     address freed         bytes            stream  VMM handle¹   -
//   alloc_failed   yes     -                     bytes requested  stream  -             CUDA error
//   segment_map    yes     virtual address       bytes mapped     -       VMM handle    -
//   segment_unmap  yes     virtual address       bytes unmapped   -       VMM handle    -
//   pool_trim      yes     -                     bytes to keep    -       pool          -
//   step           -       -                     -                -       -             -
//   oom            (not recorded by the hot path; kept for reports that have it)
//   marker         yes     address reserved²     bytes reserved²  -       -             -
// ¹ physical allocations of CUDA VMM (cuMemCreate / cuMemRelease) have no address: the handle
//   names them, their mappings are segment_map events.
// ² markers of cuMemAddressReserve/Free; a program's label (oomscope_mark) is the api name.
// A step event's index is the position of its sample in the report's `steps` (same time).
#pragma once

#include "report/enums.h"
#include "track/ids.h"

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace oomscope::track {

using report::MemKind;

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

inline constexpr const char* kEventKindNames[] = {"alloc",     "free", "alloc_failed", "segment_map", "segment_unmap",
                                                  "pool_trim", "step", "oom",          "marker"};
static_assert(sizeof(kEventKindNames) / sizeof(kEventKindNames[0]) == size_t(EventKind::Count));

inline const char* eventKindName(EventKind kind)
{
    return size_t(kind) < size_t(EventKind::Count) ? kEventKindNames[size_t(kind)] : "unknown";
}

inline bool parseEventKind(const char* name, EventKind* out)
{
    for (size_t i = 0; i < size_t(EventKind::Count); ++i) {
        if (std::strcmp(name, kEventKindNames[i]) == 0) {
            *out = EventKind(i);
            return true;
        }
    }
    return false;
}

inline const char* memKindName(MemKind kind)
{
    return report::enumName(kind);
}

// What the capture layer saw of one allocation call (or of a failed request): the input of
// Recorder::recordAlloc, recordFailure and recordVmmCreate. Plain data.
struct Allocation {
    ApiId api;
    MemKind kind = MemKind::Device;
    int device = -1;
    uint64_t address = 0;  // 0 for a failed request and for CUDA VMM physical memory
    uint64_t size = 0;     // bytes allocated, or requested when the call failed
    uint64_t stream = 0;
    uint64_t handle = 0;   // CUDA VMM physical handle (cuMemCreate), else 0
    StackId stack;
};

struct Event {
    uint64_t timeNs = 0;   // the event clock (fast_clock.h): CLOCK_MONOTONIC nanoseconds
    uint64_t address = 0;
    uint64_t size = 0;
    uint64_t stream = 0;
    uint64_t handle = 0;
    uint32_t stack = 0;    // StackId value, 0 = none
    uint32_t thread = 0;   // kernel thread id
    int16_t error = 0;     // CUDA error code of a failed call, 0 otherwise
    uint16_t api = 0;      // ApiId value
    int8_t device = -1;    // -1 = unknown / host
    EventKind kind = EventKind::Marker;
    MemKind memKind = MemKind::Device;
    uint8_t flags = 0;

    static Event alloc(const Allocation& a) { return fromAllocation(EventKind::Alloc, a); }
    static Event free(const Allocation& a) { return fromAllocation(EventKind::Free, a); }
    static Event failure(const Allocation& a, int error)
    {
        Event e = fromAllocation(EventKind::AllocFailed, a);
        e.address = 0;
        e.handle = 0;
        e.error = int16_t(error);
        return e;
    }
    static Event segmentMap(uint16_t api, int device, uint64_t address, uint64_t size, uint64_t handle)
    {
        return segment(EventKind::SegmentMap, api, device, address, size, handle);
    }
    static Event segmentUnmap(uint16_t api, int device, uint64_t address, uint64_t size, uint64_t handle)
    {
        return segment(EventKind::SegmentUnmap, api, device, address, size, handle);
    }
    static Event poolTrim(uint16_t api, int device, uint64_t pool, uint64_t bytesToKeep)
    {
        Event e = of(EventKind::PoolTrim, api, device);
        e.size = bytesToKeep;
        e.handle = pool;
        return e;
    }
    static Event addressRange(uint16_t api, int device, uint64_t address, uint64_t size)
    {
        Event e = of(EventKind::Marker, api, device);
        e.address = address;
        e.size = size;
        return e;
    }
    static Event label(uint16_t api) { return of(EventKind::Marker, api, -1); }
    static Event step(uint16_t api) { return of(EventKind::Step, api, -1); }

private:
    static int8_t deviceByte(int device) { return int8_t(device < 127 ? device : 127); }
    static Event of(EventKind kind, uint16_t api, int device)
    {
        Event e;
        e.kind = kind;
        e.api = api;
        e.device = deviceByte(device);
        return e;
    }
    static Event segment(EventKind kind, uint16_t api, int device, uint64_t address, uint64_t size, uint64_t handle)
    {
        Event e = of(kind, api, device);
        e.address = address;
        e.size = size;
        e.handle = handle;
        return e;
    }
    static Event fromAllocation(EventKind kind, const Allocation& a)
    {
        Event e = of(kind, a.api.value(), a.device);
        e.address = a.address;
        e.size = a.size;
        e.stream = a.stream;
        e.handle = a.handle;
        e.stack = a.stack.value();
        e.memKind = a.kind;
        return e;
    }
};

static_assert(sizeof(Event) == 56, "events are fixed-size: seven words, a ring slot with its sequence word");
static_assert(std::is_trivially_copyable_v<Event>);

} // namespace oomscope::track
