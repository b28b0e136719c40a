// The flight-recorder file's layout: what the writer (flight_writer.h, in the traced process)
// and the reader (src/interpret/flight_reader.h, in `oomscope recover`) agree on. Version 3,
// little-endian, offsets from the start of the file: a 4 KiB header, the ring's slots, the
// journal, the live-table arena, the VMM table, the counters. Header-only.
//
// The file is as long as all regions at their largest, but sparse: only the header, the ring,
// the counters and the first chunk of each other region have blocks reserved (fallocate) when it
// is made; the journal, the arena and the VMM table have more reserved as they fill, always
// before the bytes are written (a full disk then means a region that stops growing, never a
// SIGBUS). Holes read as zero: a reader needs no other map of what is reserved.
//
// Journal records are appended under a mutex from slow paths only (a new stack, a new API, a
// new code object, a newly mapped file): a record's head word (type, payload bytes) is
// written last, so a reader stops at the first record that is not whole.
//
// Version 3 (this one): slots of 48 bytes (event_slot.h: the event packed with its 32-bit
// state), the ring's count of claimed slots in the header page (kRingHeadOffset), regions
// reserved as they fill. Version 2 had 64-byte slots (a sequence word and the 56-byte event).
// Files of other versions are refused with a line saying so: a flight file only outlives the
// process that made it until someone recovers it.
#pragma once

#include "track/event.h"
#include "track/event_slot.h"
#include "track/image.h"

#include <cstddef>
#include <cstdint>

namespace oomscope::track::flight {

inline constexpr char kMagic[8] = {'O', 'O', 'M', 'S', 'F', 'L', 'T', '1'};
inline constexpr uint32_t kVersion = 3;
inline constexpr size_t kHeaderBytes = 4096;
inline constexpr size_t kSlotBytes = slot::kBytes;  // RingBuffer::Slot: event_slot.h
// The ring's head (slots claimed so far, a uint64 the producers fetch_add), alone on the header
// page's last cache line.
inline constexpr size_t kRingHeadOffset = kHeaderBytes - 64;
inline constexpr size_t kLiveShards = 64;
inline constexpr uint64_t kOutside = UINT64_MAX;  // a live table the arena could not hold
inline constexpr size_t kCounterSlots = 65;       // LiveCounters' peak per device slot

enum RecordType : uint32_t { kApiName = 1, kStack = 2, kPythonCode = 3, kMapping = 4 };

struct ShardEntry {
    uint64_t offset;    // of the shard's table in the file; 0 = none yet; kOutside = in memory only
    uint64_t capacity;  // entries, a power of two
};

struct Header {
    char magic[8];
    uint32_t version;
    uint32_t headerBytes;
    uint32_t eventBytes;
    uint32_t slotBytes;
    uint32_t liveEntryBytes;
    uint32_t liveShards;
    uint64_t pid;
    uint64_t ppid;
    uint64_t startNs;      // CLOCK_MONOTONIC
    uint64_t startUnixNs;
    uint64_t fileBytes;
    uint64_t ringOffset;
    uint64_t ringCapacity;  // slots, a power of two
    uint64_t journalOffset;
    uint64_t journalBytes;
    uint64_t journalUsed;   // written with release stores
    uint64_t journalFull;   // records that did not fit
    uint64_t liveOffset;
    uint64_t liveBytes;
    uint64_t liveUsed;
    ShardEntry shards[kLiveShards];
    char hostname[64];
    char cwd[512];
    char cmdline[2048];  // arguments separated by NUL, cut at the size
    uint64_t vmmOffset;    // the VMM table: vmmCapacity VmmEntry slots
    uint64_t vmmCapacity;
    uint64_t vmmFull;      // physical allocations the region could not hold
    uint64_t countersOffset;  // kCounterSlots int64 peaks: slot 0 other devices, slot d+1 device d
    // The job around the process (report::Process's rank fields). Added inside version 2: the
    // header's tail is zero in older files, so a clear bit reads as "unset" there too.
    uint64_t jobFields;  // bit i: jobValues[i] holds a value (kJobRank …)
    int64_t jobValues[5];
    char runId[64];       // TORCHELASTIC_RUN_ID, NUL-terminated, cut at the size
    char slurmJobId[32];  // SLURM_JOB_ID
};
enum JobField : unsigned { kJobRank = 0, kJobLocalRank, kJobWorldSize, kJobLocalWorldSize, kJobGroupRank, kJobCount };
static_assert(sizeof(Header) <= kRingHeadOffset);
static_assert(offsetof(Header, vmmOffset) == 3792, "tests/fuzz/make_flight_seeds.py writes the header by offsets");

// A live CUDA VMM physical allocation (cuMemCreate until the later of cuMemRelease and its last
// unmap), kept in place in the file by the VMM table. `state` is written last when a slot is
// filled (kVmmLive) and first when it is emptied (0).
inline constexpr uint64_t kVmmLive = 0x4c4956454d4d56ull;  // a marker, not a stray small value
struct VmmEntry {
    uint64_t state;
    uint64_t handle;
    LiveAllocation allocation;  // address: the first range mapped to it (0 while unmapped)
};
static_assert(sizeof(VmmEntry) == 56);

} // namespace oomscope::track::flight
