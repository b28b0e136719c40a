// Writes a report file atomically and never through a symlink: the JSON goes to a fresh
// temporary file (O_EXCL | O_NOFOLLOW) in the target folder, which is then hard-linked to the
// final name. link() fails rather than follow or replace what is already there, so an existing
// file or symlink at the name is never touched: the next free name (-2, -3, …) is taken.
// Called from any thread; not async-signal-safe.
#pragma once

#include "report/model.h"

#include <string>

namespace oomscope::report {

struct WriteResult {
    bool ok = false;
    std::string path;   // the final path when ok
    std::string error;  // one line when not ok
};

// dir: folder to write into; stem: file name without ".json".
WriteResult writeReportFile(const Report& report, const std::string& dir, const std::string& stem);

// The report's file name without ".json": oomscope-<host>-<pid>-<trigger kind>, the host name
// reduced to letters, digits, '-', '.' and '_'.
std::string reportStem(const Report& report);

} // namespace oomscope::report
