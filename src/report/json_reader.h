// Reads a report file strictly: any deviation from schema oomscope.report/1 (a missing key, a
// wrong type, a number out of range, a timeline row of the wrong width) is an error with the
// path of the offending value. Hostile input (deep nesting, huge numbers, invalid UTF-8,
// truncation) is an error, never a crash. The only user of nlohmann/json. Not thread-safe.
#pragma once

#include "report/model.h"

#include <string>

namespace oomscope::report {

inline constexpr int kMaxJsonDepth = 64;

// On failure returns false and sets *error to one line (no trailing newline).
bool readReport(const std::string& text, Report* out, std::string* error);
bool readReportFile(const std::string& path, Report* out, std::string* error);

} // namespace oomscope::report
