// Small, fast, non-cryptographic hashing for the recorder's tables. Header-only; no state.
#pragma once

#include <cstddef>
#include <cstdint>

namespace oomscope::track {

// MurmurHash3's 64-bit finaliser: every input bit affects every output bit.
inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

inline uint64_t hashWords(const uint64_t* words, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (n * 0x100000001b3ULL);
    for (size_t i = 0; i < n; ++i)
        h = mix64(h ^ (words[i] + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2)));
    return h;
}

} // namespace oomscope::track
