// The largest size for which a monotone test holds (true up to some size, false past it): what
// fit's peak model and its allocator replay both search for. Header-only; pure.
#pragma once

#include <algorithm>
#include <cstdint>

namespace oomscope::report {

// The largest n in [1, most] with fits(n); 0 where fits(1) does not hold. Doubling from 1, then
// bisection: about 2·log2(answer) calls of fits.
template <class Fits>
uint64_t largestWhere(Fits&& fits, uint64_t most)
{
    if (most == 0 || !fits(uint64_t(1)))
        return 0;
    uint64_t lo = 1, hi = 2;
    while (hi <= most && fits(hi)) {
        lo = hi;
        hi *= 2;
    }
    hi = std::min(hi, most + 1);
    while (hi - lo > 1) {
        const uint64_t mid = lo + (hi - lo) / 2;
        (fits(mid) ? lo : hi) = mid;
    }
    return lo;
}

} // namespace oomscope::report
