// The flight-recorder file: the ring, the live map's tables and a journal of what turns ids into
// names (API names, stacks, Python code objects, the mapped files) kept in a memory-mapped file
// in OOMSCOPE_OUTPUT_DIR, so that a process ended by SIGKILL, the OOM killer or a crash leaves
// its evidence: `oomscope recover FILE` turns the file into a report. The file is removed when
// the process ends cleanly (and after a signal's report is written).
//
// The space is reserved with fallocate when the file is made: a full disk then means no flight
// file (one notice, memory as before), never a SIGBUS in the middle of a hook. A forked child
// keeps a private copy of the mapping (copy-on-write) and never touches the parent's file.
//
// Layout (version 1, little-endian, offsets from the start of the file): a 4 KiB header, the
// ring's slots, the journal, the live-table arena. Journal records are appended under a mutex
// from slow paths only (a new stack, a new API, a new code object): a record's head word is
// written last, so a reader stops at the first record that is not whole.
#pragma once

#include "track/event.h"
#include "track/live_map.h"

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace oomscope::track {

namespace flight {

inline constexpr char kMagic[8] = {'O', 'O', 'M', 'S', 'F', 'L', 'T', '1'};
inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kHeaderBytes = 4096;
inline constexpr size_t kSlotBytes = 64;  // RingBuffer::Slot: the seq word, the event, padding
inline constexpr size_t kLiveShards = 64;
inline constexpr uint64_t kOutside = UINT64_MAX;  // a live table the arena could not hold

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
    // Added after the first files: zero in those (no VMM region), ignored by readers before it.
    uint64_t vmmOffset;    // the VMM table: vmmCapacity VmmEntry slots
    uint64_t vmmCapacity;
    uint64_t vmmFull;      // physical allocations the region could not hold
};
static_assert(sizeof(Header) <= kHeaderBytes);
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
static_assert(sizeof(Event) + 8 <= kSlotBytes);
static_assert(sizeof(LiveAllocation) == 40, "live entries are written to the file as they are");

} // namespace flight

class FlightFile {
public:
    // The process's file, made at the recorder's start; nullptr when OOMSCOPE_FLIGHT=0 or when it
    // cannot be made (one notice on stderr). ringCapacity: a power of two.
    static FlightFile* create(size_t ringCapacity) noexcept;
    // The one create() made, or nullptr.
    static FlightFile* active() noexcept;

    void* ringMemory() const noexcept { return m_base + m_header->ringOffset; }
    size_t ringCapacity() const noexcept { return m_header->ringCapacity; }
    const std::string& path() const { return m_path; }

    // The VMM table's region: vmmCapacity() entries, zeroed; vmmFull() counts what did not fit.
    flight::VmmEntry* vmmEntries() const noexcept;
    size_t vmmCapacity() const noexcept { return m_header->vmmCapacity; }
    uint64_t* vmmFull() const noexcept { return &m_header->vmmFull; }

    // Live-map tables: bytes from the arena (zeroed), or nullptr when it is spent.
    void* allocLive(size_t bytes) noexcept;
    // Shard `shard` now uses `table` (from allocLive, or nullptr: a table in memory only).
    void publishShard(size_t shard, const void* table, size_t capacity) noexcept;

    // Journal: slow paths only. Never throw.
    void apiName(uint16_t id, const char* name) noexcept;
    void stack(uint32_t id, const uint64_t* frames, uint32_t count) noexcept;
    void pythonCode(uint32_t index, const std::string& file, const std::string& function,
                    const std::string& module) noexcept;

    // At a clean end (or once a signal's report is written): the file goes. Only the process
    // that made it removes it. Async-signal-safe.
    void remove() noexcept;
    // Around fork(): the journal's mutex is held across it (after the stack table's shards:
    // a new stack is journaled under its shard's lock). In the child the mapping becomes a
    // private copy (the file is the parent's) and the mutex a fresh one.
    void lockForFork() noexcept { m_journalMutex.lock(); }
    void unlockAfterFork() noexcept { m_journalMutex.unlock(); }
    void detachInChild() noexcept;

private:
    FlightFile() = default;
    bool append(uint32_t type, const void* a, size_t aBytes, const void* b, size_t bBytes) noexcept;
    void recordMappingsLocked(uint64_t pc);  // may throw (allocation): callers catch

    int m_fd = -1;
    pid_t m_owner = 0;
    char* m_base = nullptr;
    size_t m_bytes = 0;
    flight::Header* m_header = nullptr;
    std::string m_path;
    std::mutex m_journalMutex;
    // Executable ranges of the mapped files already journaled, and the pages of frames that
    // were in none of them after a fresh look (JIT code: not looked up again).
    std::vector<std::pair<uint64_t, uint64_t>> m_exec;
    std::set<std::pair<uint64_t, std::string>> m_journaled;
    std::set<uint64_t> m_unknownPages;
};

// What a flight file holds, read back (oomscope recover). Every offset and count is checked
// against the file: a damaged or foreign file gives an error, never a crash.
struct FlightImage {
    flight::Header header{};
    std::vector<Event> events;       // stable slots, oldest first
    uint64_t pushedAtLeast = 0;      // the highest slot index seen + 1
    std::vector<LiveAllocation> live;  // the live map's entries, then the live VMM allocations
    size_t liveVmm = 0;                // of which VMM (at the end)
    uint64_t vmmNotKept = 0;           // VMM allocations the file's region could not hold
    bool vmmRegion = false;            // the file has one (files before it do not)
    size_t shardsInMemoryOnly = 0;   // live tables the arena could not hold: not in the file
    std::vector<std::pair<uint16_t, std::string>> apiNames;
    std::vector<std::pair<uint32_t, std::vector<uint64_t>>> stacks;
    struct Code {
        uint32_t index;
        std::string file, function, module;
    };
    std::vector<Code> pythonCodes;
    struct Mapping {
        uint64_t start, end, offset;
        std::string path;
    };
    std::vector<Mapping> mappings;
    bool journalCut = false;  // a record that was not whole (the process died while writing it)
};

// Reads `bytes` of a flight file; false with *error on anything that is not one.
bool readFlightImage(const unsigned char* data, size_t bytes, FlightImage* image, std::string* error);

} // namespace oomscope::track
