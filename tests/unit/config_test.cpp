#include "track/config.h"

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
