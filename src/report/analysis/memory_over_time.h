// Device memory over time, by the library that asked for it, from a report's timeline: the
// events replayed in order (allocations up, frees down, per stack's source), anchored so that
// the last value of each source is what the report says was live at the trigger (the ring may
// have lost the oldest events), and cut into at most `buckets` spans of time: for each, the
// composition at its end and the highest and lowest total within it, so that a downsampled
// chart never hides a peak. Also PyTorch's allocated and reserved bytes from the step samples, and the
// moments worth marking (steps, labels, failed allocations, the OOM). Pure functions.
#pragma once

#include "report/model.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace oomscope::report {

struct TimeMarker {
    enum class Kind { Step, Label, Failure, Oom } kind = Kind::Step;
    uint64_t timeNs = 0;
    std::string label;   // "step 12", the program's label, "cudaMalloc of 6.00 GiB failed (error 2)"
};

struct DeviceOverTime {
    int64_t device = 0;
    uint64_t startNs = 0;  // the process's start (times are drawn from it)
    uint64_t endNs = 0;
    std::vector<Source> sources;               // present on this device, in table order
    std::vector<uint64_t> timeNs;              // each bucket's end
    std::vector<std::vector<uint64_t>> bytes;  // [source][bucket]: the composition at the bucket's end
    std::vector<uint64_t> totalMax;            // [bucket]: the highest total within the bucket
    std::vector<uint64_t> totalMin;            // [bucket]: the lowest
    std::vector<std::pair<uint64_t, uint64_t>> allocated;  // (time, bytes) from the framework's samples
    std::vector<std::pair<uint64_t, uint64_t>> reserved;
    std::vector<TimeMarker> markers;
    size_t markersDropped = 0;  // markers beyond the cap, left out
    uint64_t events = 0;        // timeline events of this device replayed
};

struct OverTimeOptions {
    size_t buckets = 10000;      // two values a bucket: at most ~20k points a series
    size_t maxMarkers = 2000;    // per device and kind
    // A window of the run (the process's CLOCK_MONOTONIC, as the timeline's times): the buckets
    // and markers cover only it; the events outside still count for the memory held within it.
    uint64_t fromNs = 0;
    uint64_t toNs = UINT64_MAX;
};

std::vector<DeviceOverTime> memoryOverTime(const Report& report, const OverTimeOptions& options = {});

// The device memory (all devices together) the report's process held at monoNs, a time of its
// own CLOCK_MONOTONIC before the trigger: the live bytes at the trigger with the timeline's later
// allocations taken off and its later frees put back. nullopt when the timeline does not reach
// back that far (the ring lost events after it) or the time is after the trigger.
std::optional<uint64_t> trackedAt(const Report& report, uint64_t monoNs);

// Whether a timeline event's call makes device memory: host-pinned and managed memory are told
// apart by the call that made them (the timeline carries no memory kind).
bool deviceMemoryApi(const std::string& api);

// The source a stack's memory is counted as: the one the builder stored, else (reports before
// stacks carried one) classified from its frames' modules and files.
Source stackSource(const Report& report, uint32_t stack);

} // namespace oomscope::report
