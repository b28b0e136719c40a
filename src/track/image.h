// One immutable picture of what the tracker holds: the events, the live allocations, the names
// that turn ids into words (API names, stacks, Python code objects, loaded files), the
// counters, the step samples. Recorder::snapshot() takes it from a running process; the flight
// reader (src/interpret/flight_reader.h) reads the same from a flight file; the report builder
// (src/interpret/report_builder.h) turns either into a report. Plain data, header-only: the
// interpreter links nothing of the hot path.
#pragma once

#include "track/event.h"
#include "track/nccl_table.h"
#include "report/model.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace oomscope::track {

// An entry of the live map (and of the flight file's live tables, byte for byte).
struct LiveAllocation {
    uint64_t address = 0;
    uint64_t size = 0;
    uint64_t timeNs = 0;
    uint64_t stream = 0;
    uint32_t stack = 0;
    uint16_t api = 0;
    int8_t device = -1;
    MemKind memKind = MemKind::Device;
};
static_assert(sizeof(LiveAllocation) == 40, "live entries are written to the flight file as they are");

// A range of CUDA VMM address space mapped to a physical allocation.
struct VmmMapping {
    uint64_t address = 0;
    uint64_t size = 0;
    uint64_t handle = 0;
    int device = -1;
};

// A reservation of CUDA VMM address space with paused bytes: ranges in it that were mapped,
// then unmapped while the reservation stayed (less those mapped again since).
struct VmmPaused {
    uint64_t address = 0;      // the reservation
    uint64_t size = 0;
    uint32_t stack = 0;        // that reserved it
    int device = -1;           // of the last range unmapped in it
    uint64_t pausedBytes = 0;
};

// A file mapped into the process: what symbolization needs to turn a return address into
// module + offset (+ the symbol, read from the file on disk).
struct LoadedModule {
    std::string path;      // absolute where known; the main program via /proc/self/exe
    std::string buildId;   // hex of NT_GNU_BUILD_ID, empty when absent
    uint64_t base = 0;     // ELF virtual address 0 maps here
    std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [begin, end) of its mapped segments
};

// A Python code object named by the frame tokens of stacks (python_frames.h).
struct PythonCode {
    uint32_t index = 0;
    std::string file;
    std::string function;
    std::string module;  // the module's __name__, for attribution
};

// One device's counters: live bytes by memory kind and the most device memory held at once.
struct DeviceCounters {
    int device = -1;
    uint64_t bytes[size_t(MemKind::Count)] = {};
    uint64_t peakDeviceBytes = 0;

    uint64_t tracked() const { return bytes[size_t(MemKind::Device)]; }
};

// What held one device's memory at its peak: the live bytes by stack when the tracker last
// saw the peak grow by 1 % (at least 4 MiB), the largest kStacks stacks and the rest.
struct PeakSites {
    static constexpr size_t kStacks = 64;
    int device = -1;
    uint64_t bytes = 0;   // live device bytes then
    uint64_t timeNs = 0;
    std::vector<std::pair<uint32_t, uint64_t>> stacks;  // stack id, live bytes; largest first
    uint64_t otherBytes = 0;                             // of the stacks beyond those
};

// What wrote the report, and what it knows that the tracker does not.
struct TrackImage {
    uint64_t timeNs = 0;  // when it was taken (the event clock)
    report::Process process;
    std::map<std::string, std::string> options;  // capture options in force: the report's tool.options

    // The timeline: stable events in time order, and how many went where.
    std::vector<Event> events;
    uint64_t ringCapacity = 0;
    uint64_t pushed = 0;
    uint64_t dropped = 0;  // overwritten by newer laps, or being written when the image was taken
    uint64_t ringBytes = 0;

    // Live memory: the live map's entries, then the live VMM physical allocations (their
    // address: the lowest range mapped to them, 0 while unmapped); the VMM mappings.
    std::vector<LiveAllocation> live;
    std::vector<VmmMapping> mappings;
    std::vector<VmmPaused> paused;  // reservations with paused bytes (not from a flight file)
    NcclState nccl;  // NCCL's communicators and their windows (not from a flight file)
    // Per device; empty when the producer kept none (a flight file before counters): the
    // builder then adds up `live`, and the peak is at least what is live.
    std::vector<DeviceCounters> counters;
    std::vector<PeakSites> peaks;  // per device that held memory; empty where none was kept
    // The devices' facts the producer kept (a flight file: names, totals, versions; no free
    // memory); empty where the trigger asks the driver itself.
    std::vector<report::Device> devices;

    // Names. apiNames[id] is the name of ApiId id ("unknown" for 0 and gaps).
    std::vector<std::string> apiNames;
    std::unordered_map<uint32_t, std::vector<uint64_t>> stacks;  // StackId value → frame words
    std::vector<PythonCode> pythonCodes;
    std::vector<LoadedModule> modules;

    // Memory samples at step boundaries (or periodic ones), oldest first.
    std::vector<report::Step> steps;
    std::string framework;       // the framework adapter attached ("torch"), "" when none
    std::optional<report::SkippedOoms> skippedOoms;  // OOM episodes that got no report of their own
    std::vector<uint64_t> pools;  // stream-ordered pools the program allocated from explicitly

    // What the tracker lost or spent.
    uint64_t unknownFrees = 0;
    uint64_t oomEpisodes = 0;        // out-of-memory episodes so far
    uint64_t failedAllocations = 0;  // failed allocations so far (out of memory or not)
    uint64_t liveMapBytes = 0;
    uint64_t stackTableBytes = 0;
    uint64_t distinctStacks = 0;
    std::string unwinder;
    std::vector<std::string> notes;

    const std::string& apiName(uint16_t id) const
    {
        static const std::string kUnknown = "unknown";
        return id < apiNames.size() && !apiNames[id].empty() ? apiNames[id] : kUnknown;
    }
};

} // namespace oomscope::track
