#include "track/config.h"

#include <catch2/catch.hpp>

TEST_CASE("the flight recorder's budget and the ring it gives", "[config]")
{
    using oomscope::track::flightMiBFrom;
    using oomscope::track::ringEventsFor;
    CHECK(flightMiBFrom(nullptr, 16) == 16);
    CHECK(flightMiBFrom("", 16) == 16);
    CHECK(flightMiBFrom("64", 16) == 64);
    CHECK(flightMiBFrom("0", 16) == 1);
    CHECK(flightMiBFrom("99999999", 16) == 16384);
    CHECK(flightMiBFrom("lots", 16) == 16);  // garbage keeps the default, never a tiny budget
    CHECK(flightMiBFrom("8MiB", 16) == 16);
    CHECK(flightMiBFrom("-4", 16) == 16);
    // The largest power of two of 48-byte slots beside 0.76 MiB: 16 -> 256 Ki, 64 -> 1 Mi.
    CHECK(ringEventsFor(16) == (size_t(1) << 18));
    CHECK(ringEventsFor(64) == (size_t(1) << 20));
    CHECK(ringEventsFor(2) == (size_t(1) << 14));
    CHECK(ringEventsFor(1) == 1024);  // the least ring: a 1 MiB budget is spent on the fixed pages
    CHECK(ringEventsFor(16384) == (size_t(1) << 28));  // the ring's cap
}
