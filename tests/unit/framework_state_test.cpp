// The line protocol a framework adapter hands the preload (track/framework_state.h): each line
// kind read, anything it does not understand skipped and counted.
#include "track/framework_state.h"

#include <catch2/catch.hpp>

using namespace oomscope;
using namespace oomscope::track;

TEST_CASE("the framework's counters, segments, blocks and frames are read", "[framework]")
{
    const FrameworkState state = parseFrameworkState(
        "torch",
        "device 0 allocated 100 reserved 300 active 120 inactive_split 50 segments 2 allocated_peak 250 expandable 1\n"
        "segment 0 4096 200 7 large\n"
        "block 0 100 active_allocated\tmodel.py\t12\tforward\ttrain.py\t40\tstep\n"
        "block 100 60 active_awaiting_free\n"
        "block 160 40 inactive\n"
        "segment 0 8192 100 0 small\n"
        "block 0 100 inactive\n"
        "frames 4096 train.py\t40\tstep\n"
        "tensors 0 100\tmodel.py\t12\tforward\n");
    CHECK(state.name == "torch");
    CHECK(state.ignoredLines == 0);
    REQUIRE(state.devices.size() == 1);
    const FrameworkDevice& d = state.devices[0];
    CHECK(d.allocated == 100);
    CHECK(d.reserved == 300);
    CHECK(d.active == 120u);
    CHECK(d.inactiveSplit == 50u);
    CHECK(d.segmentCount == 2u);
    CHECK(d.allocatedPeak == 250u);
    CHECK(d.expandable == true);
    REQUIRE(state.segments.size() == 2);
    CHECK(state.segments[0].kind == report::SegmentKind::Large);
    CHECK(state.segments[0].stream == 7);
    REQUIRE(state.segments[0].blocks.size() == 3);
    CHECK(state.segments[0].blocks[1].state == report::BlockState::ActiveAwaitingFree);
    REQUIRE(state.blockFrames.size() == 2);
    REQUIRE(state.blockFrames[0][0].size() == 2);
    CHECK(state.blockFrames[0][0][1].file == "train.py");
    CHECK(state.blockFrames[0][0][1].line == 40);
    CHECK(state.blockFrames[0][1].empty());
    // The largest inactive block of the device's segments.
    CHECK(state.largestFreeBlock(0) == 100u);
    CHECK_FALSE(state.largestFreeBlock(1));
    REQUIRE(state.allocationFrames.size() == 1);
    CHECK(state.allocationFrames[0].first == 4096);
    CHECK(state.allocationFrames[0].second[0].function == "step");
    REQUIRE(state.tensorGroups.size() == 1);
    CHECK(state.tensorGroups[0].bytes == 100);
    CHECK(state.tensorGroups[0].frames[0].file == "model.py");
}

TEST_CASE("lines the parser does not understand are skipped and counted", "[framework]")
{
    const FrameworkState state = parseFrameworkState(
        "torch",
        "block 0 10 inactive\n"                 // before any segment
        "device 0 allocated 5\n"                // reserved missing
        "device x allocated 5 reserved 6\n"     // not a device number
        "device 1 allocated -5 reserved 6\n"    // negative
        "segment 0 4096 200 0 enormous\n"       // not a segment kind
        "segment 0 4096 200 0 large\n"
        "block 0 10 awaiting\n"                 // not a block state
        "tensors 0 100\n"                       // no frames
        "frames 12\n"                           // no frames
        "future_key 1 2 3\n"                    // a newer adapter's line
        "\n"
        "device 2 allocated 1 reserved 2 future 7\n");  // an unknown key on a good line: kept
    CHECK(state.ignoredLines == 9);
    REQUIRE(state.devices.size() == 1);
    CHECK(state.devices[0].device == 2);
    REQUIRE(state.segments.size() == 1);
    CHECK(state.segments[0].blocks.empty());
    CHECK(state.tensorGroups.empty());
    CHECK(state.allocationFrames.empty());
    CHECK(parseFrameworkState("torch", nullptr).ignoredLines == 0);
}

TEST_CASE("without segments, the largest free block is the one the device line gives", "[framework]")
{
    const FrameworkState state = parseFrameworkState("torch", "device 0 allocated 1 reserved 2 largest_free 77\n");
    CHECK(state.largestFreeBlock(0) == 77u);
}

TEST_CASE("the CUDA graphs' captures and the graphs using each pool are read", "[framework]")
{
    const FrameworkState state = parseFrameworkState("torch",
                                                     "graphs captures 3 aborted 1 live 1\n"
                                                     "graph_pool 0 4 2\n"
                                                     "graph_pool 2 0 0\n"
                                                     "graph_pool 0 0 1\n");  // the default pool: not a graph's
    CHECK(state.ignoredLines == 1);
    REQUIRE(state.graphs);
    CHECK(state.graphs->captures == 3);
    CHECK(state.graphs->aborted == 1);
    CHECK(state.graphs->live == 1);
    REQUIRE(state.graphs->pools.size() == 2);
    CHECK(state.graphs->pools[0].poolId == std::vector<int64_t>{0, 4});
    CHECK(state.graphs->pools[0].graphs == 2);
    CHECK(state.graphs->pools[1].poolId == std::vector<int64_t>{2, 0});
    // A pool line before the graphs line, a graphs line missing a count: skipped.
    const FrameworkState out_of_order = parseFrameworkState("torch", "graph_pool 1 0 1\ngraphs captures 1 live 1\n");
    CHECK_FALSE(out_of_order.graphs);
    CHECK(out_of_order.ignoredLines == 2);
}
