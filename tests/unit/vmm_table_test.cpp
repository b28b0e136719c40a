// The VMM table's copy in the flight-recorder file: what a killed process leaves must be the
// live physical allocations, each with its lowest mapped address and stack.
#include "interpret/flight_reader.h"
#include "track/vmm_table.h"

#include <catch2/catch.hpp>

#include <algorithm>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

using oomscope::track::LiveAllocation;
using oomscope::track::VmmTable;
namespace flight = oomscope::track::flight;

namespace {

LiveAllocation handle(uint64_t value, uint64_t size, uint32_t stack = 7)
{
    LiveAllocation a;
    a.address = value;
    a.size = size;
    a.stack = stack;
    a.device = 0;
    return a;
}

// The file's live entries, by handle.
std::vector<flight::VmmEntry> liveIn(const std::vector<flight::VmmEntry>& region)
{
    std::vector<flight::VmmEntry> out;
    for (const flight::VmmEntry& e : region)
        if (e.state == flight::kVmmLive)
            out.push_back(e);
    return out;
}

const flight::VmmEntry* find(const std::vector<flight::VmmEntry>& live, uint64_t h)
{
    for (const flight::VmmEntry& e : live)
        if (e.handle == h)
            return &e;
    return nullptr;
}

} // namespace

TEST_CASE("the flight file's VMM entries follow the table: created, mapped, released, ended", "[vmm]")
{
    std::vector<flight::VmmEntry> region(4);
    uint64_t full = 0;
    VmmTable table;
    table.setFlight(region.data(), region.size(), &full);

    table.create(handle(0x10, 4 << 20));
    table.create(handle(0x20, 2 << 20));
    auto live = liveIn(region);
    REQUIRE(live.size() == 2);
    REQUIRE(find(live, 0x10)->allocation.size == (4u << 20));
    REQUIRE(find(live, 0x10)->allocation.address == 0);  // not mapped yet

    // Mapped twice: the lowest address is the one kept; unmapping it moves to the other.
    REQUIRE(table.map(0x9000000, 2 << 20, 0x10));
    REQUIRE(table.map(0x7000000, 2 << 20, 0x10));
    REQUIRE(find(liveIn(region), 0x10)->allocation.address == 0x7000000);
    for (const LiveAllocation& a : table.snapshot())  // the report's view: the same address
        REQUIRE(a.address == (a.size == (4u << 20) ? 0x7000000u : 0u));
    REQUIRE(table.setStackAt(0x9000000, 42));
    REQUIRE(find(liveIn(region), 0x10)->allocation.stack == 42);
    REQUIRE(!table.unmap(0x7000000).has_value());
    REQUIRE(find(liveIn(region), 0x10)->allocation.address == 0x9000000);

    // Released while mapped: still live, in the table and in the file.
    REQUIRE(!table.release(0x10).has_value());
    REQUIRE(find(liveIn(region), 0x10) != nullptr);
    REQUIRE(table.unmap(0x9000000).has_value());  // its last mapping: it ends
    REQUIRE(find(liveIn(region), 0x10) == nullptr);

    REQUIRE(table.release(0x20).has_value());
    REQUIRE(liveIn(region).empty());
    REQUIRE(full == 0);
}

TEST_CASE("the flight file's VMM slots are reused, and what does not fit is counted", "[vmm]")
{
    std::vector<flight::VmmEntry> region(2);
    uint64_t full = 0;
    VmmTable table;
    table.setFlight(region.data(), region.size(), &full);

    table.create(handle(1, 100));
    table.create(handle(2, 200));
    table.create(handle(3, 300));  // no slot left
    REQUIRE(full == 1);
    REQUIRE(table.size() == 3);  // the table itself keeps it
    REQUIRE(table.release(1).has_value());
    table.create(handle(4, 400));  // takes the slot handle 1 left
    auto live = liveIn(region);
    REQUIRE(live.size() == 2);
    REQUIRE(find(live, 2) != nullptr);
    REQUIRE(find(live, 4) != nullptr);
    REQUIRE(find(live, 4)->allocation.size == 400);

    // The same handle value created again (the driver reused it) keeps one entry.
    REQUIRE(table.release(4).has_value());
    table.create(handle(2, 250));
    live = liveIn(region);
    REQUIRE(live.size() == 1);
    REQUIRE(find(live, 2)->allocation.size == 250);
}

TEST_CASE("a flight file's VMM table and peaks are read back, and files without them still read", "[vmm][flight]")
{
    const auto read = [](const char* name, oomscope::track::TrackImage* image, std::string* error) {
        std::ifstream in(std::string(OOMSCOPE_FIXTURES) + "/../fuzz/corpus-flight/" + name, std::ios::binary);
        REQUIRE(in);
        const std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        return oomscope::interpret::readFlightImage(bytes.data(), bytes.size(), image, error);
    };
    oomscope::track::TrackImage image;
    std::string error;
    REQUIRE(read("vmm", &image, &error));
    REQUIRE(image.live.size() == 2);  // the live map's one entry, then the VMM one (not the emptied
                                      // slot, nor the one without its live mark)
    REQUIRE(image.live.back().address == 0x9000000);
    REQUIRE(image.live.back().size == (2u << 20));
    REQUIRE(std::count_if(image.notes.begin(), image.notes.end(), [](const std::string& n) {
                return n.find("1 VMM allocations did not fit") == 0;
            }) == 1);
    REQUIRE(image.counters.size() == 1);
    CHECK(image.counters[0].device == 0);
    CHECK(image.counters[0].peakDeviceBytes == (24u << 20));
    CHECK(image.counters[0].tracked() == 4096 + (2u << 20));

    oomscope::track::TrackImage older;
    REQUIRE(read("small", &older, &error));
    REQUIRE(older.live.size() == 1);
    REQUIRE(older.counters.size() == 1);
    CHECK(older.counters[0].peakDeviceBytes == 4096);  // no counters region: at least what is live

    oomscope::track::TrackImage cut;
    REQUIRE(!read("vmm-truncated", &cut, &error));
    REQUIRE(error.find("truncated or damaged") != std::string::npos);

    // The facts region (version 4): the framework, a device, the peak, two step samples.
    oomscope::track::TrackImage facts;
    REQUIRE(read("facts", &facts, &error));
    CHECK(facts.framework == "torch");
    REQUIRE(facts.devices.size() == 1);
    CHECK(facts.devices[0].name == "Fake GPU");
    CHECK(facts.devices[0].totalBytes == (uint64_t(80) << 30));
    CHECK_FALSE(facts.devices[0].driverVersion.has_value());
    REQUIRE(facts.peaks.size() == 1);
    CHECK(facts.peaks[0].bytes == (24u << 20));
    REQUIRE(facts.peaks[0].stacks.size() == 1);
    CHECK(facts.peaks[0].stacks[0] == std::pair<uint32_t, uint64_t>(1, 24u << 20));
    REQUIRE(facts.steps.size() == 2);
    CHECK(facts.steps[1].index == 2);
    CHECK(facts.steps[1].devices.at(0).trackedBytes == 12288);
    CHECK(facts.steps[1].devices.at(0).reservedBytes == 12288 + 4096);
    CHECK_FALSE(facts.steps[1].devices.at(0).inactiveSplitBytes.has_value());
    CHECK(facts.steps[1].sites.at(0).bytes == 12288);
}
