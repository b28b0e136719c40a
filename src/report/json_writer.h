// Writes a Report as JSON (schema oomscope.report/1). Hand-written streaming output, no DOM:
// it runs inside the traced process at OOM time, where a million timeline rows must not
// become a million heap objects. Strings are escaped and made valid UTF-8 (U+FFFD for bad
// bytes). Not thread-safe; allocates only its output buffer.
#pragma once

#include "report/model.h"

#include <string>

namespace oomscope::report {

// Sink: the writer appends to `buffer` and hands full chunks to flush(); the last chunk is
// flushed by finish(). A failed flush() stops the writer, and finish() then returns false.
class JsonSink {
public:
    virtual ~JsonSink() = default;
    virtual bool flush(const char* data, size_t size) = 0;
};

bool writeReport(const Report& report, JsonSink& sink);
std::string reportToJson(const Report& report);

// Appends s to out as a JSON string literal (quotes included).
void appendJsonString(std::string& out, const std::string& s);

} // namespace oomscope::report
