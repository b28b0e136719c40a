// Reads a flight-recorder file (src/track/flight_format.h) into the tracker's image type, the
// same one a running process's Recorder::snapshot() gives, so that `oomscope recover` builds
// its report with the one report builder. Every offset and count is checked against the file:
// a damaged or foreign file gives an error line, never a crash (fuzzed: tests/fuzz).
// Allocates freely; not for the hot path.
#pragma once

#include "track/image.h"

#include <cstddef>
#include <string>

namespace oomscope::interpret {

// `bytes` of a flight file: the image, without the modules (their files are not opened).
// false with *error on anything that is not a flight file this oomscope reads.
bool readFlightImage(const unsigned char* data, size_t bytes, track::TrackImage* image, std::string* error);

// How readFlightFile reads. live: the file of a running process, read twice; a slot, entry or
// record that differs between the reads was being written and is left out (counted in the
// image's notes). The process is neither stopped nor slowed. events: the ring (the timeline)
// for about the newest `events` events: only the ring's slots that may hold them are read (a
// window below the head; the caller keeps the newest N of what it gives); 0: the ring's pages
// are not read at all (`oomscope top`, which shows no events), most of the file at the defaults.
inline constexpr size_t kAllEvents = size_t(-1);
struct FlightRead {
    bool live = false;
    size_t events = kAllEvents;
};

// The file at path, with its modules (the files the process had mapped, as they are on disk
// now: the same machine, or one with the same files).
bool readFlightFile(const std::string& path, track::TrackImage* image, std::string* error, FlightRead how = {});

// Why a flight file that readFlightFile refused is not read, in a word a fleet can count
// (`oomscope metrics`' oomscope_flight_files_unreadable): permission (another user's file),
// version (another oomscope's format: its version or record sizes differ), damaged (the rest:
// cut short, not a flight file, regions outside it).
enum class FlightProblem { Permission, Version, Damaged };
FlightProblem flightFileProblem(const std::string& path);
const char* flightProblemName(FlightProblem p);

} // namespace oomscope::interpret
