#include "track/config.h"
#include "track/device_cards.h"

#include <catch2/catch.hpp>

using oomscope::track::parseSize;

TEST_CASE("sizes with binary units", "[config]")
{
    uint64_t v = 0;
    CHECK((parseSize("1048576", &v) && v == 1048576));
    CHECK((parseSize("64Ki", &v) && v == 64 * 1024));
    CHECK((parseSize("1Mi", &v) && v == 1 << 20));
    CHECK((parseSize("2GiB", &v) && v == 2ull << 30));
    CHECK((parseSize("512MB", &v) && v == 512ull << 20));
    CHECK((parseSize(" 3 g ", &v) && v == 3ull << 30));
    CHECK_FALSE(parseSize("", &v));
    CHECK_FALSE(parseSize("lots", &v));
    CHECK_FALSE(parseSize("12 parsecs", &v));
    CHECK_FALSE(parseSize("-5", &v));
    CHECK_FALSE(parseSize("99999999999999999999Ti", &v));
    CHECK_FALSE(parseSize(nullptr, &v));
}

TEST_CASE("device limits: a size for every device, one per device, or a card's name", "[config]")
{
    using oomscope::track::parseDeviceLimitList;
    using oomscope::track::parseSize;
    uint64_t l[4] = {};
    REQUIRE(parseDeviceLimitList("24GiB", l, 4, parseSize));
    CHECK((l[0] == (24ull << 30) && l[3] == (24ull << 30)));
    REQUIRE(parseDeviceLimitList("24GiB,40GiB", l, 4, parseSize));
    CHECK((l[0] == (24ull << 30) && l[1] == (40ull << 30)));
    REQUIRE(parseDeviceLimitList("A100-40GB", l, 4, parseSize));  // names in any case
    CHECK(l[2] == 40960ull << 20);
    for (const char* bad : {"", ",", "24GiB,", "0", "l5", "24XB", "1,2,3,4,5"})
        CHECK_FALSE(parseDeviceLimitList(bad, l, 4, parseSize));
}

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
