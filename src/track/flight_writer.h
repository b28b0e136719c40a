// The flight-recorder file: the ring, the live map's tables and a journal of what turns ids into
// names (API names, stacks, Python code objects, the mapped files) kept in a memory-mapped file
// in OOMSCOPE_OUTPUT_DIR, so that a process ended by SIGKILL, the OOM killer or a crash leaves
// its evidence: `oomscope recover FILE` turns the file into a report. The file is removed when
// the process ends cleanly (and after a signal's report is written).
//
// The space is reserved with fallocate before it is written: the header, the ring and the
// counters when the file is made (a full disk then means no flight file: one notice, memory as
// before), the journal, the live arena and the VMM table a chunk at a time as they fill (a full
// disk then means a region that stops growing: counted as for a full region), never a SIGBUS in
// the middle of a hook. A forked child keeps a private copy of the mapping (copy-on-write) and
// never touches the parent's file.
//
// The layout is flight_format.h's; the reader is src/interpret/flight_reader.h.
#pragma once

#include "track/flight_format.h"
#include "report/model.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace oomscope::track {

class FlightFile {
public:
    // The process's file, made at the recorder's start; nullptr when OOMSCOPE_FLIGHT=0 or when it
    // cannot be made (one notice on stderr). ringCapacity: a power of two.
    static FlightFile* create(size_t ringCapacity) noexcept;
    // The one create() made, or nullptr.
    static FlightFile* active() noexcept;
    // A flight file at path, not the process's own (tests: a writer and its reader side by side).
    static FlightFile* createAt(const std::string& path, size_t ringCapacity) noexcept;

    void* ringMemory() const noexcept { return m_base + m_header->ringOffset; }
    std::atomic<uint64_t>* ringHead() const noexcept
    {
        return reinterpret_cast<std::atomic<uint64_t>*>(m_base + flight::kRingHeadOffset);
    }
    size_t ringCapacity() const noexcept { return m_header->ringCapacity; }
    const std::string& path() const { return m_path; }

    // The regions that grow, and making sure that their first `upTo` bytes are reserved on disk
    // before they are written: false when the region is at its largest or the disk is full.
    // Slow paths only (a new table, journal record or VMM slot): takes a mutex, may call
    // fallocate.
    enum RegionId : unsigned { kJournal = 0, kArena, kVmm, kSteps, kRegionCount };
    bool reserve(RegionId region, size_t upTo) noexcept;
    // Bytes with blocks reserved now (the file is sparse: its length is the regions' largest).
    size_t reservedBytes() const noexcept;
    static constexpr size_t kReserveChunk = size_t(256) << 10;

    // The VMM table's region: vmmCapacity() entries, zeroed; vmmFull() counts what did not fit.
    flight::VmmEntry* vmmEntries() const noexcept;
    size_t vmmCapacity() const noexcept { return m_header->vmmCapacity; }
    uint64_t* vmmFull() const noexcept { return &m_header->vmmFull; }
    // The counters' region: flight::kCounterSlots peaks (LiveCounters keeps them there).
    int64_t* counters() const noexcept;

    // Live-map tables: bytes from the arena (zeroed), or nullptr when it is spent.
    void* allocLive(size_t bytes) noexcept;
    // Shard `shard` now uses `table` (from allocLive, or nullptr: a table in memory only).
    void publishShard(size_t shard, const void* table, size_t capacity) noexcept;

    // The facts (flight_format.h, version 4), each record under its sequence word: slow paths
    // only (the first allocation, a framework attaching, a peak's composition, a step sample).
    // Never throw.
    void framework(const std::string& name) noexcept;
    // One more out-of-memory episode, one more failed allocation (the facts' counters).
    void countOomEpisode() noexcept;
    void countFailedAllocation() noexcept;
    void devices(const std::vector<report::Device>& devices) noexcept;
    void peak(const PeakSites& peak) noexcept;  // device -1 … : none kept (a peak reset) for peak.device
    void clearPeaks() noexcept;
    void step(const report::Step& step) noexcept;
    void dropSteps() noexcept;  // the samples so far are gone (StepSampler: the first step event)

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
    bool openReserved();
    bool append(uint32_t type, const void* a, size_t aBytes, const void* b, size_t bBytes) noexcept;
    void recordMappingsLocked(uint64_t pc);  // may throw (allocation): callers catch

    int m_fd = -1;
    pid_t m_owner = 0;
    char* m_base = nullptr;
    size_t m_bytes = 0;
    struct Region {
        size_t offset = 0, maxBytes = 0;
        size_t reserved = 0;  // from offset; atomic loads and stores, grown under m_reserveMutex
    };
    Region m_regions[kRegionCount];
    size_t m_fixedBytes = 0;      // the header and the ring, reserved whole
    size_t m_countersOffset = 0;  // the counters and the facts, to the end, reserved whole
    std::mutex m_factsMutex;
    flight::FactsHeader* facts() const noexcept;
    std::mutex m_reserveMutex;
    flight::Header* m_header = nullptr;
    std::string m_path;
    std::mutex m_journalMutex;
    // Executable ranges of the mapped files already journaled, and the pages of frames that
    // were in none of them after a fresh look (JIT code: not looked up again).
    std::vector<std::pair<uint64_t, uint64_t>> m_exec;
    std::set<std::pair<uint64_t, std::string>> m_journaled;
    std::set<uint64_t> m_unknownPages;
};

} // namespace oomscope::track
