// `oomscope recover` and `oomscope snapshot`: the flight-recorder file (src/track/flight_format.h) of a process that
// ended without writing a report, turned into one by the report builder. Stacks are
// symbolized from the files the process had mapped, read from disk now (the same machine, or
// one with the same files).
#pragma once

#include "interpret/flight_reader.h"
#include "report/model.h"

#include <string>

namespace oomscope::interpret {

// false with *error (one line) when the file cannot be read or is not a flight file.
bool recoverReport(const std::string& flightPath, report::Report* out, std::string* error);

// `oomscope snapshot`: the same from the file of a process that is still running, read twice
// (readFlightFile's live mode: what was being written is left out and counted). Trigger kind
// snapshot, at the time it is taken. events: how many of the newest events its timeline keeps
// (the older ones are counted as dropped, as a wrapped ring's are); 0: the ring is not read at
// all (`oomscope top`, which shows no events and reads a second time each refresh).
bool snapshotReport(const std::string& flightPath, report::Report* out, std::string* error,
                    size_t events = kAllEvents);

} // namespace oomscope::interpret
