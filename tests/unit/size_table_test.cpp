// The one size grammar against its table (tests/fixtures/sizes.json): common::parseSize, which
// the CLI and the preload both call, and the device-limit list (cards, lists). The same table
// runs against the CLI, the preload's environment, oomscope.parse_size and the pytest markers
// in tests/integration/test_sizes.py.
#include "common/device_cards.h"
#include "common/size.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

namespace {

nlohmann::json table()
{
    std::ifstream in(std::string(OOMSCOPE_FIXTURES) + "/sizes.json");
    REQUIRE(in);
    return nlohmann::json::parse(in);
}

} // namespace

TEST_CASE("every row of the size table reads as the table says", "[size]")
{
    const nlohmann::json t = table();
    REQUIRE(t["sizes"].size() > 40);
    for (const auto& row : t["sizes"]) {
        const std::string text = row[0];
        INFO("size \"" << text << "\"");
        uint64_t got = 12345;
        const bool ok = oomscope::common::parseSize(text, &got);
        if (row[1].is_null()) {
            CHECK_FALSE(ok);
            CHECK(got == 12345);  // nothing written on refusal
        } else {
            CHECK(ok);
            CHECK(got == row[1].get<uint64_t>());
        }
    }
}

TEST_CASE("a device limit is a size, a card's name or a list; zero is no limit", "[size]")
{
    const nlohmann::json t = table();
    uint64_t l[4] = {};
    for (const auto& row : t["limits"]) {
        const std::string text = row[0];
        INFO("limit \"" << text << "\"");
        const bool ok = oomscope::common::parseDeviceLimitList(text.c_str(), l, 4);
        CHECK(ok == !row[1].is_null());
        if (ok)
            CHECK(l[0] == row[1].get<uint64_t>());
    }
    // Every size the grammar takes is a limit, but zero (the rows that are lists or cards aside:
    // "1,5GiB" is two limits, "h200" a card).
    for (const auto& row : t["sizes"]) {
        const std::string text = row[0];
        if (text.find(',') != std::string::npos || text == "h200")
            continue;
        INFO("size as a limit \"" << text << "\"");
        const bool ok = oomscope::common::parseDeviceLimitList(text.c_str(), l, 4);
        CHECK(ok == (!row[1].is_null() && row[1].get<uint64_t>() > 0 && text.size() < 64));
    }
    REQUIRE(oomscope::common::parseDeviceLimitList("24GiB,40GiB", l, 4));
    CHECK((l[0] == (24ull << 30) && l[1] == (40ull << 30)));
    REQUIRE(oomscope::common::parseDeviceLimitList("24GiB", l, 4));
    CHECK(l[3] == (24ull << 30));  // one value: every device's
    CHECK_FALSE(oomscope::common::parseDeviceLimitList("1,2,3,4,5", l, 4));
}
