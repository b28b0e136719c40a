#include "common/bytes.h"

#include <cstdio>

namespace oomscope::common {

std::string formatBytes(uint64_t bytes)
{
    static const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    if (bytes < 1024)
        return std::to_string(bytes) + " B";
    double value = double(bytes) / 1024.0;
    size_t unit = 0;
    while (value >= 1024.0 && unit + 1 < sizeof(units) / sizeof(units[0])) {
        value /= 1024.0;
        ++unit;
    }
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.2f %s", value, units[unit]);
    return buf;
}

std::string formatSignedBytes(int64_t bytes)
{
    if (bytes == 0)
        return "0 B";
    const uint64_t magnitude = bytes < 0 ? uint64_t(-(bytes + 1)) + 1 : uint64_t(bytes);
    return (bytes < 0 ? "-" : "+") + formatBytes(magnitude);
}

} // namespace oomscope::common
