#include "report/analysis.h"
#include "sample_report.h"

#include <catch2/catch.hpp>

using namespace oomscope::report;

TEST_CASE("live framework blocks grouped by their Python stack", "[analysis]")
{
    Report r = oomscope::test::sampleReport();
    REQUIRE(hasBlockStacks(r));
    // Two more active blocks: one of stack 1, one without a stack (autograd's thread).
    r.segments[0].blocks.push_back(Block{2ull << 30, 256ull << 20, "active_allocated", 1});
    r.segments[0].blocks.push_back(Block{3ull << 30, 512ull << 20, "active_allocated", std::nullopt});
    r.segments[0].blocks.push_back(Block{4ull << 30, 64ull << 20, "active_pending_free", 3});
    const auto sites = tensorSites(r);
    REQUIRE(sites.size() == 3);
    CHECK(sites[0].stack == 1u);
    CHECK(sites[0].bytes == (1ull << 30) + (256ull << 20));
    CHECK(sites[0].count == 2);
    CHECK_FALSE(sites[1].stack);
    CHECK(sites[1].bytes == 512ull << 20);
    CHECK(sites[2].stack == 3u);  // pending-free blocks still hold memory
    r.segments[0].blocks.clear();
    CHECK_FALSE(hasBlockStacks(r));
    CHECK(tensorSites(r).empty());
}
