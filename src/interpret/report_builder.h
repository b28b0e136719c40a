// The one way a report is made: the tracker's image (a running process's snapshot, or a
// flight file read back) and what the trigger knows, turned into the report model. The
// preload's dump, `oomscope recover` and any later view of a live process all come through
// here, so a field added once appears in every report. Symbolizes the stacks the report names
// (reading ELF files from disk) and attributes live memory to the libraries that asked for it.
// Dump time only: allocates freely; one builder per report, not thread-safe.
#pragma once

#include "report/model.h"
#include "track/image.h"
#include "track/trigger_info.h"

#include <string>
#include <vector>

namespace oomscope::interpret {

// What the report needs that the image does not hold: the driver's view at the trigger and
// what the capture backends say. Empty where there is none (a recovered report).
struct TriggerFacts {
    std::vector<report::Device> devices;
    std::vector<report::Pool> pools;
    std::string errorName;    // CUDA's name of the trigger's error code
    report::Capture capture;  // backends, coverage and notes of the capture sources
};

report::Report buildReport(const track::TrackImage& image, const track::TriggerInfo& trigger, TriggerFacts facts);

// The memory rows of a set of device counters against the driver's view: tracked, peak, by
// kind; untracked (used − tracked) where the driver said how much is free. by_source is zero
// here: the builder attributes live memory afterwards.
std::vector<report::MemoryRow> memoryRows(const std::vector<track::DeviceCounters>& counters,
                                          const std::vector<report::Device>& devices);

// Live allocations grouped by stack, device and kind, largest first.
std::vector<report::Site> liveSites(const std::vector<track::LiveAllocation>& live);

} // namespace oomscope::interpret
