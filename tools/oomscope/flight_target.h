// What `oomscope snapshot` and `oomscope top` look at: a running process named by its PID (its
// flight-recorder file found in /proc/PID/maps: the preload keeps the file mapped), a flight
// file named directly, or a folder of them (a job's output directory: one file per running
// process). One line saying why when a PID has no file to read.
#pragma once

#include <string>
#include <vector>

namespace oomscope::report {
struct Report;
}

namespace oomscope::cli {

// A PID (all digits) or a path. The flight file it names, or false with *error: no such
// process, not ours to read, not running under oomscope, running under oomscope without a
// flight file (OOMSCOPE_FLIGHT=0, or no CUDA call yet).
bool flightFileOf(const std::string& target, std::string* path, std::string* error);

// The *.flight files in dir whose process (the PID in the name) runs on this host and has that
// file mapped. notOurs, when given, gets those whose process runs here but is another user's
// (its maps are not ours to read, so whether it has the file mapped cannot be told).
std::vector<std::string> liveFlightFiles(const std::string& dir, std::vector<std::string>* notOurs = nullptr);

// A report read from a flight file (recover, snapshot) written atomically into outputDir, or
// next to the file when outputDir is empty; its path on stdout. The exit status: 0, or 2 with
// one line (`command: why`) when it cannot be written.
int writeReportBeside(const report::Report& r, const std::string& flightFile, const std::string& outputDir,
                      const std::string& command);

} // namespace oomscope::cli
