// The flight-recorder file's layout: what the writer (flight_writer.h, in the traced process)
// and the reader (src/interpret/flight_reader.h, in `oomscope recover`, `snapshot` and `top`)
// agree on. Version 4, little-endian, offsets from the start of the file: a 4 KiB header, the
// ring's slots, the journal, the live-table arena, the VMM table, the counters, the facts and
// the step samples. Header-only.
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
// Version 4 (this one): version 3 and the facts the reports need beyond the timeline — the
// framework's name, each device's name and total (FactsHeader, DeviceFacts), each device's peak
// composition (PeakRecord), the last kStepSlots step samples (StepRecord) — so that a report
// read back from the file (recover after SIGKILL, a live snapshot) has peaks, steps and
// devices. Those records change while the process runs: each carries a sequence word, odd while
// it is written; a reader of a running process's file reads twice and keeps only what is whole
// and the same in both reads.
// Version 3: slots of 48 bytes (event_slot.h: the event packed with its 32-bit
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
inline constexpr uint32_t kVersion = 4;
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
    // Version 4: the facts (FactsHeader at factsOffset, the device and peak records after it)
    // and the step samples' ring (stepCapacity StepRecords at stepsOffset).
    uint64_t factsOffset;
    uint64_t stepsOffset;
    uint64_t stepCapacity;
};
enum JobField : unsigned { kJobRank = 0, kJobLocalRank, kJobWorldSize, kJobLocalWorldSize, kJobGroupRank, kJobCount };
static_assert(sizeof(Header) <= kRingHeadOffset);
static_assert(offsetof(Header, vmmOffset) == 3792, "tests/fuzz/make_flight_seeds.py writes the header by offsets");
static_assert(offsetof(Header, factsOffset) == 3968, "tests/fuzz/make_flight_seeds.py writes the header by offsets");

// The facts. Sequence words: 2n+1 while record n is written, 2n+2 once it is whole (release).
inline constexpr size_t kFactDevices = 64;  // LiveCounters::kMaxDevices
inline constexpr size_t kStepSlots = 512;
inline constexpr size_t kStepDevices = 8;
inline constexpr size_t kStepSites = 32;  // report::kStepSitesMax

struct NameRecord {
    uint64_t seq;
    char text[56];
};

struct FactsHeader {
    NameRecord framework;  // the framework adapter attached ("torch"), empty when none
    uint64_t stepHead;   // the index of the last step sample written (release), 0 for none
    uint64_t stepEpoch;  // bumped when the samples so far are dropped (the first step event)
    uint64_t devicesKnown;  // DeviceFacts records written (0 until the first allocation)
    // Added inside version 4 (zero in older files, where nothing counted them): out-of-memory
    // episodes and failed allocations so far, relaxed atomic adds (`oomscope metrics` reads them).
    uint64_t oomEpisodes;
    uint64_t failedAllocations;
};

struct DeviceFacts {
    uint64_t seq;
    int64_t index;
    uint64_t present;  // bit 0 total, 1 driver version, 2 runtime version, 3 limit
    uint64_t totalBytes;
    int64_t driverVersion;
    int64_t runtimeVersion;
    uint64_t limitBytes;
    char name[128];
    char uuid[72];
};
static_assert(sizeof(DeviceFacts) == 256);

struct SiteWord {
    uint32_t stack;
    int32_t device;
    uint64_t bytes;
};

struct PeakRecord {
    uint64_t seq;
    int64_t device;
    uint64_t bytes, timeNs, otherBytes, count;
    SiteWord stacks[64];  // PeakSites::kStacks; device unused
};

struct StepDeviceWord {
    int64_t device;
    uint64_t present;  // bit 0 allocated, 1 reserved, 2 inactive split, 3 peak allocated, 4 expandable (5: its
                       // value), 6 segment count, 7 largest free block
    uint64_t trackedBytes, allocatedBytes, reservedBytes, inactiveSplitBytes, peakAllocatedBytes, segmentCount,
        largestFreeBlockBytes;
};

struct StepRecord {
    uint64_t seq;
    uint64_t epoch;
    uint64_t index;
    uint64_t timeNs;
    uint32_t source;  // report::StepSource
    uint16_t devices, sites;
    uint16_t tensors, pad[3];
    StepDeviceWord device[kStepDevices];
    SiteWord site[kStepSites];
    SiteWord tensor[kStepSites];
};
inline constexpr size_t kStepRecordBytes = 2048;
static_assert(sizeof(StepRecord) <= kStepRecordBytes);

// The facts region: the header's page, the device records, the peak records.
inline constexpr size_t kFactsDevicesAt = 4096;
inline constexpr size_t kFactsPeaksAt = kFactsDevicesAt + kFactDevices * sizeof(DeviceFacts);
inline constexpr size_t kFactsBytes = (kFactsPeaksAt + kFactDevices * sizeof(PeakRecord) + 4095) / 4096 * 4096;
static_assert(offsetof(FactsHeader, stepHead) == 64 && offsetof(DeviceFacts, name) == 56 &&
                  sizeof(PeakRecord) == 1072 && offsetof(StepRecord, device) == 48 && sizeof(StepDeviceWord) == 72 &&
                  kFactsBytes == 90112,
              "tests/fuzz/make_flight_seeds.py writes the facts by offsets");

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
