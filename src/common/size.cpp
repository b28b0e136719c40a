#include "common/size.h"

#include <cstdlib>
#include <cstring>
#include <strings.h>

namespace oomscope::common {
namespace {

bool isSpace(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

bool isDigit(char c)
{
    return c >= '0' && c <= '9';
}

char lower(char c)
{
    return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c;
}

std::string_view trim(std::string_view s)
{
    while (!s.empty() && isSpace(s.front()))
        s.remove_prefix(1);
    while (!s.empty() && isSpace(s.back()))
        s.remove_suffix(1);
    return s;
}

// The unit's power of 1024 (0 for bytes), or -1.
int unitPower(std::string_view unit)
{
    if (unit.empty())
        return 0;
    if (unit.size() > 3)
        return -1;
    char u[3] = {};
    for (size_t i = 0; i < unit.size(); ++i)
        u[i] = lower(unit[i]);
    if (unit.size() == 1 && u[0] == 'b')
        return 0;
    int power = 0;
    switch (u[0]) {
    case 'k': power = 1; break;
    case 'm': power = 2; break;
    case 'g': power = 3; break;
    case 't': power = 4; break;
    default: return -1;
    }
    // K, Ki, KiB, KB
    if (unit.size() == 1 || (unit.size() == 2 && (u[1] == 'i' || u[1] == 'b')) ||
        (unit.size() == 3 && u[1] == 'i' && u[2] == 'b'))
        return power;
    return -1;
}

} // namespace

bool parseSize(std::string_view text, uint64_t* out) noexcept
{
    constexpr size_t kMaxFractionDigits = 18;
    text = trim(text);
    size_t i = 0;
    if (i >= text.size() || !isDigit(text[i]))
        return false;
    unsigned __int128 whole = 0;
    for (; i < text.size() && isDigit(text[i]); ++i) {
        whole = whole * 10 + unsigned(text[i] - '0');
        if (whole > UINT64_MAX)
            return false;
    }
    uint64_t fraction = 0, denominator = 1;
    if (i < text.size() && text[i] == '.') {
        ++i;
        const size_t first = i;
        for (; i < text.size() && isDigit(text[i]); ++i) {
            if (i - first >= kMaxFractionDigits)
                return false;
            fraction = fraction * 10 + uint64_t(text[i] - '0');
            denominator *= 10;
        }
        if (i == first)
            return false;  // "1." has no digits after the point
    }
    const int power = unitPower(trim(text.substr(i)));
    if (power < 0)
        return false;
    const unsigned __int128 scale = static_cast<unsigned __int128>(1) << (10 * power);
    const unsigned __int128 bytes = whole * scale + static_cast<unsigned __int128>(fraction) * scale / denominator;
    if (bytes > UINT64_MAX)
        return false;
    *out = uint64_t(bytes);
    return true;
}

bool envFlag(const char* name, bool fallback) noexcept
{
    const char* v = std::getenv(name);
    if (!v || !*v)
        return fallback;
    return !(!std::strcmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcasecmp(v, "off"));
}

} // namespace oomscope::common
