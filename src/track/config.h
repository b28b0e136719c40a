// Capture options from the environment (OOMSCOPE_*), read once, on first use, from any thread.
// Never destroyed: hooks may run during static destruction.
#pragma once

#include "common/size.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace oomscope::track {

struct Config {
    bool disabled = false;          // OOMSCOPE_DISABLE=1: every hook is a pass-through
    size_t flightMiB = 16;          // OOMSCOPE_FLIGHT_MIB: the flight file's disk at the start (the
                                    // ring's events follow from it; see ringEventsFor)
    size_t ringEvents = 0;          // OOMSCOPE_RING_EVENTS, else ringEventsFor(flightMiB)
    int stackDepth = 32;            // OOMSCOPE_STACK_DEPTH (0: no stacks)
    bool pythonFrames = true;       // OOMSCOPE_PYTHON_FRAMES=0: native frames only in Python processes
    std::string outputDir;          // OOMSCOPE_OUTPUT_DIR, default: the working directory
    bool exitReport = true;         // OOMSCOPE_EXIT_REPORT=0 turns the report at exit off
    bool flight = true;             // OOMSCOPE_FLIGHT=0: the ring and live map in memory only, no
                                    // flight-recorder file (see flight_writer.h)
    bool signalReports = true;      // OOMSCOPE_SIGNALS=0 installs no signal handlers
    int dumpSignal = 12;            // OOMSCOPE_DUMP_SIGNAL=USR2 (default), USR1, a number, or 0/off:
                                    // the signal that asks for a report while the program goes on
    bool quiet = false;             // OOMSCOPE_QUIET=1: no notice on stderr when a report is written
    uint32_t signalTimeoutMs = 10000;  // how long a fatal signal waits for its report
    uint32_t oomEpisodeMs = 2000;   // OOMSCOPE_OOM_EPISODE_MS: failures closer than this are one episode
    uint32_t maxOomReports = 8;     // OOMSCOPE_MAX_OOM_REPORTS: OOM episodes with a report of their
                                    // own; later ones are counted in the next report (0: no limit)
    std::string cupti = "auto";     // OOMSCOPE_CUPTI=auto|on|off: the CUPTI cross-check (auto: on
                                    // unless another subscriber holds CUPTI's one slot)
    std::string cuptiLib;           // OOMSCOPE_CUPTI_LIB: the libcupti to load (default: searched)
    uint32_t sampleMs = 0;          // OOMSCOPE_SAMPLE_MS: memory samples this often in programs without
                                    // step events, taken by an allocation (0: none; run --check: 1000)

    static const Config& get();
};

// The ring's events for a flight file of `mib` MiB reserved at the start: the largest power of
// two whose slots fit beside the header, the counters and the first chunk of each growing
// region (at least 1024).
size_t ringEventsFor(size_t mib);
// OOMSCOPE_FLIGHT_MIB's value: whole MiB, 1 to 16384 (clamped); fallback when unset or not a number.
size_t flightMiBFrom(const char* text, size_t fallback);

using common::envFlag;  // common/size.h

} // namespace oomscope::track
