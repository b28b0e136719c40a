// An Event as the ring stores it: six words (48 bytes) instead of the Event's seven plus a
// sequence word (64), so that the ring, and with it the flight file, holds 4/3 as many events
// in the same bytes. What the writer (ring_buffer.cpp) and the flight file's reader agree on.
// Header-only.
//
//   word 0  bits  0-31  the slot's state: 2*s+1 while event s is written, 2*s+2 once it is
//                       stable, modulo 2^32 (0: never written); written last, with release
//           bits 32-47  api      bits 48-51 kind     bits 52-53 memKind
//           bit  54     word 4 is the VMM handle or pool, not the stream
//           bits 56-63  device (the int8, as a byte)
//   word 1  timeNs
//   word 2  address; for alloc_failed (which has none) the CUDA error
//   word 3  size
//   word 4  stream, or the handle when the event has one (VMM physical memory, mappings, pools:
//           none of them has a stream)
//   word 5  stack (low 32 bits), thread (high 32)
//
// Lossless for every event the named constructors of event.h make. The 32-bit state tells the
// laps of a slot apart as long as a producer never holds a claimed block while 2^30 other
// events are pushed (then one of its events may replace a newer one: the reader skips it).
#pragma once

#include "track/event.h"

#include <cstddef>
#include <cstdint>

namespace oomscope::track::slot {

inline constexpr size_t kWords = 6;
inline constexpr size_t kBytes = kWords * sizeof(uint64_t);
inline constexpr size_t kMaxCapacity = size_t(1) << 28;  // the state's laps stay apart (above)
// Slots a producer claims at once (one fetch_add on the ring's head): 256, so that a block is
// whole pages (12 KiB). With 64 (3 KiB) two threads' blocks met inside a page and the
// prefetcher of one core kept pulling the lines the other was writing: two threads on one
// ring pushed 10-15 % fewer events than with the 64-byte slots of before (docs/BENCHMARKS.md).
inline constexpr uint64_t kBlock = 256;
static_assert(kBlock * kBytes % 4096 == 0);

inline uint32_t writingState(uint64_t s) { return uint32_t(2 * s + 1); }
inline uint32_t stableState(uint64_t s) { return uint32_t(2 * s + 2); }
inline uint32_t stateOf(uint64_t word0) { return uint32_t(word0); }
// Whether a slot in `state` may be claimed for event s: stable, and of an older lap.
inline bool claimable(uint32_t state, uint64_t s)
{
    return (state & 1) == 0 && int32_t(state - writingState(s)) < 0;
}

inline constexpr uint64_t kHandleBit = uint64_t(1) << 54;

// Words 1-5, and word 0's upper half (its state bits zero).
inline void pack(const Event& e, uint64_t out[kWords])
{
    const bool handle = e.handle != 0;
    out[0] = (uint64_t(e.api) << 32) | (uint64_t(uint8_t(e.kind) & 0xf) << 48) |
             (uint64_t(uint8_t(e.memKind) & 0x3) << 52) | (handle ? kHandleBit : 0) | (uint64_t(uint8_t(e.device)) << 56);
    out[1] = e.timeNs;
    out[2] = e.kind == EventKind::AllocFailed ? uint64_t(uint16_t(e.error)) : e.address;
    out[3] = e.size;
    out[4] = handle ? e.handle : e.stream;
    out[5] = uint64_t(e.stack) | (uint64_t(e.thread) << 32);
}

inline Event unpack(const uint64_t in[kWords])
{
    Event e;
    e.api = uint16_t(in[0] >> 32);
    e.kind = EventKind((in[0] >> 48) & 0xf);
    e.memKind = MemKind((in[0] >> 52) & 0x3);
    e.device = int8_t(uint8_t(in[0] >> 56));
    e.timeNs = in[1];
    if (e.kind == EventKind::AllocFailed)
        e.error = int16_t(uint16_t(in[2]));
    else
        e.address = in[2];
    e.size = in[3];
    if (in[0] & kHandleBit)
        e.handle = in[4];
    else
        e.stream = in[4];
    e.stack = uint32_t(in[5]);
    e.thread = uint32_t(in[5] >> 32);
    return e;
}

} // namespace oomscope::track::slot
