#include "report/format.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

namespace oomscope::report {

std::string formatSeconds(uint64_t ns)
{
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.3f s", double(ns) / 1e9);
    return buf;
}

std::string formatHex(uint64_t value)
{
    char buf[24];
    std::snprintf(buf, sizeof(buf), "0x%" PRIx64, value);
    return buf;
}

std::string baseName(const std::string& path)
{
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string truncateMiddle(const std::string& s, size_t max)
{
    if (s.size() <= max || max < 5)
        return s;
    const size_t head = (max - 3) * 2 / 3;
    const size_t tail = max - 3 - head;
    return s.substr(0, head) + "..." + s.substr(s.size() - tail);
}

TextTable::TextTable(std::vector<std::string> header, size_t leftColumns) : m_leftColumns(leftColumns)
{
    m_rows.push_back(std::move(header));
}

void TextTable::addRow(std::vector<std::string> row)
{
    m_rows.push_back(std::move(row));
}

std::string TextTable::render(const std::string& indent) const
{
    std::vector<size_t> widths;
    for (const auto& row : m_rows) {
        if (widths.size() < row.size())
            widths.resize(row.size(), 0);
        for (size_t i = 0; i < row.size(); ++i)
            widths[i] = std::max(widths[i], row[i].size());
    }
    std::string out;
    for (const auto& row : m_rows) {
        std::string line = indent;
        for (size_t i = 0; i < row.size(); ++i) {
            const size_t pad = widths[i] - row[i].size();
            const bool left = i < m_leftColumns;
            if (i > 0)
                line += "  ";
            if (!left)
                line.append(pad, ' ');
            line += row[i];
            if (left && i + 1 < row.size())
                line.append(pad, ' ');
        }
        while (!line.empty() && line.back() == ' ')
            line.pop_back();
        out += line + "\n";
    }
    return out;
}

} // namespace oomscope::report
