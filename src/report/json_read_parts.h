// The parts of the report reader (json_reader.h), by what each reads: json_document.cpp the
// document, checked field by field against the field table (nlohmann/json, its only user);
// json_scan.cpp the hand readers of the two large arrays (timeline.rows, stacks) and the fast
// path that uses them; json_reader.cpp the file and the choice between the two paths.
// Private to src/report. Not thread-safe (as the reader).
#pragma once

#include "report/model.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace oomscope::report::detail {

// What the rows' own reader saw (the fast path, or the parse callback of the slow one), to be
// checked against the columns once they are read.
struct RowsRead {
    Timeline rows;
    size_t width = 0;                  // of the first row
    std::optional<size_t> firstOther;  // the first row of another width
    void saw(size_t index, size_t rowWidth)
    {
        if (index == 0)
            width = rowWidth;
        else if (rowWidth != width && !firstOther)
            firstOther = index;
    }
};

// Nesting depth before parsing: nlohmann's parser recurses, and a file of a million '['
// must be refused, not overflow the stack. false with *where (the byte) when deeper than limit.
bool depthWithin(std::string_view text, int limit, size_t* where);

// json_document.cpp. The whole text, checked: any deviation is one line in *error.
bool readChecked(std::string_view text, Report* out, std::string* error);
// The rest of a document whose rows (and stacks, when given) were read by hand (their arrays
// left empty in rest): false at anything unexpected, nothing said (the checked path says it).
bool readRest(const std::string& rest, RowsRead* rows, std::vector<Stack>* stacks, Report* out);

// json_scan.cpp. The fast path: the rows (and the stacks where the hand reader takes them) by
// hand, the rest by readRest. false (nothing said) at anything unexpected.
bool readFast(std::string_view text, Report* out);

} // namespace oomscope::report::detail
