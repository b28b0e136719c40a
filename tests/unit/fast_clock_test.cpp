// The event clock: CLOCK_MONOTONIC nanoseconds from the time-stamp counter once calibrated.
#include "track/fast_clock.h"
#include "track/process_info.h"

#include <catch2/catch.hpp>

#include <cstdint>

using namespace oomscope::track;

TEST_CASE("the event clock follows CLOCK_MONOTONIC and never goes backwards")
{
    // Read it for 60 ms of wall time: calibration takes the first 20 ms of its use.
    const uint64_t start = monotonicNs();
    uint64_t last = eventNs();
    uint64_t reads = 0;
    while (monotonicNs() - start < 60'000'000) {
        const uint64_t t = eventNs();
        REQUIRE(t >= last);
        last = t;
        ++reads;
    }
    CHECK(reads > 1000);
    if (!eventClockCalibrated())
        WARN("no invariant TSC here: the event clock is clock_gettime");
    // Against clock_gettime, read around it: within 1 ms (the rate comes from a 20 ms span).
    for (int i = 0; i < 1000; ++i) {
        const uint64_t before = monotonicNs();
        const uint64_t t = eventNs();
        const uint64_t after = monotonicNs();
        REQUIRE(t + 1'000'000 >= before);
        REQUIRE(t <= after + 1'000'000);
    }
}
