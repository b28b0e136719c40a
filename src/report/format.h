// Human-readable numbers for renderers: sizes in binary units, durations, addresses, and a
// minimal aligned-table builder. Pure functions.
#pragma once

#include "common/bytes.h"

#include <cstdint>
#include <string>
#include <vector>

namespace oomscope::report {

using common::formatBytes;        // "512 B", "1.50 KiB", "2.00 MiB", "79.10 GiB"
using common::formatSignedBytes;  // "+1.00 GiB", "-12.00 MiB", "0 B"
std::string formatSeconds(uint64_t ns);           // "12.345 s"
std::string formatHex(uint64_t value);            // "0x7f3a00000000"
std::string baseName(const std::string& path);
std::string truncateMiddle(const std::string& s, size_t max);

// Columns padded to their widest cell; the first `leftColumns` are left-aligned, the rest
// right-aligned (numbers).
class TextTable {
public:
    explicit TextTable(std::vector<std::string> header, size_t leftColumns = 1);
    void addRow(std::vector<std::string> row);
    std::string render(const std::string& indent = "  ") const;

private:
    std::vector<std::vector<std::string>> m_rows;  // [0] is the header
    size_t m_leftColumns;
};

} // namespace oomscope::report
