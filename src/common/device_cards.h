// The cards a run can be rehearsed on by name (OOMSCOPE_DEVICE_LIMIT, `oomscope run
// --device-limit`), and the list syntax: "24GiB", "24GiB,40GiB" (per device, in order) or a
// card's name; one value is every device's. The preload and the CLI (which checks the value
// before it starts the program) read it with this one function, so that what the CLI accepts
// the preload honours. Any thread; allocates nothing.
#pragma once

#include "common/size.h"

#include <cstdint>
#include <cstring>
#include <strings.h>

namespace oomscope::common {

constexpr uint64_t kCardMiB = uint64_t(1) << 20;

// What cudaMemGetInfo reports as the total on these cards (nvidia-smi's "Total" memory).
struct Card {
    const char* name;
    uint64_t bytes;
};
inline constexpr Card kCards[] = {
    {"t4", 15360 * kCardMiB},        {"l4", 23034 * kCardMiB},        {"a10g", 23028 * kCardMiB},
    {"rtx4090", 24564 * kCardMiB},   {"a100-40gb", 40960 * kCardMiB}, {"a100-80gb", 81920 * kCardMiB},
    {"h100-80gb", 81559 * kCardMiB}, {"h200", 143771 * kCardMiB},
};

inline constexpr const char* kDeviceLimitGrammar =
    "a size (24GiB), a list of sizes per device (24GiB,40GiB) or a card (t4, l4, a10g, rtx4090, a100-40gb, "
    "a100-80gb, h100-80gb, h200)";

// limits[0..max) from text. false on an empty item, an unknown name, a zero or unreadable size,
// or more items than max.
inline bool parseDeviceLimitList(const char* text, uint64_t* limits, int max) noexcept
{
    int n = 0;
    for (const char* p = text; p && *p;) {
        const char* comma = std::strchr(p, ',');
        const size_t len = comma ? size_t(comma - p) : std::strlen(p);
        char item[64];
        if (len == 0 || len >= sizeof(item) || n >= max)
            return false;
        std::memcpy(item, p, len);
        item[len] = 0;
        uint64_t bytes = 0;
        for (const Card& c : kCards) {
            if (strcasecmp(item, c.name) == 0)
                bytes = c.bytes;
        }
        if (bytes == 0 && (!parseSize(item, &bytes) || bytes == 0))
            return false;
        limits[n++] = bytes;
        p = comma ? comma + 1 : p + len;
        if (comma && !*p)
            return false;  // a trailing comma
    }
    for (int i = n; n == 1 && i < max; ++i)
        limits[i] = limits[0];
    return n > 0;
}

} // namespace oomscope::common
