#include "report/analysis/fit.h"

#include <catch2/catch.hpp>

using namespace oomscope::report;

namespace {
constexpr uint64_t MiB = uint64_t(1) << 20;

std::vector<FitPoint> runs(std::initializer_list<uint64_t> sizes, uint64_t weights, uint64_t perItem, uint64_t square = 0)
{
    std::vector<FitPoint> out;
    for (uint64_t n : sizes)
        out.push_back(FitPoint{n, {{Source::Torch, weights + perItem * n + square * n * n}, {Source::Cublas, 64 * MiB}}});
    return out;
}
} // namespace

TEST_CASE("fit: a + b·size predicts the exact largest size", "[fit]")
{
    const FitModel model = fitPeaks(runs({1, 2, 4, 8}, 100 * MiB, 30 * MiB));
    REQUIRE(model.count(Source::Torch));
    CHECK_FALSE(model.at(Source::Torch).quadratic);
    CHECK(model.at(Source::Cublas).b == Approx(0).margin(1e-3));  // a workspace: constant
    // 32 MiB of context + 100 + 64 + 30·n <= 1024 MiB: n <= 27.6.
    CHECK(largestFitting(model, 32 * MiB, 1024 * MiB) == 27);
    std::map<Source, uint64_t> at;
    CHECK(predictPeak(model, 27, &at) == 100 * MiB + 64 * MiB + 27 * 30 * MiB);
    CHECK(at[Source::Torch] == 100 * MiB + 27 * 30 * MiB);
    // Exactly at the boundary: the capacity itself fits.
    CHECK(largestFitting(model, 32 * MiB, (32 + 164 + 28 * 30) * MiB) == 28);
    CHECK(largestFitting(model, 32 * MiB, (32 + 164 + 28 * 30) * MiB - 1) == 27);
    // Not even one.
    CHECK(largestFitting(model, 32 * MiB, 100 * MiB) == 0);
}

TEST_CASE("fit: a quadratic term when the runs ask for it", "[fit]")
{
    const FitModel model = fitPeaks(runs({1, 2, 4, 8, 16}, 100 * MiB, 10 * MiB, 2 * MiB));
    REQUIRE(model.at(Source::Torch).quadratic);
    // 100 + 64 + 10n + 2n² <= 1024 - 32: n = 18 (100+64+180+648 = 992), 19 is 1076.
    CHECK(largestFitting(model, 32 * MiB, 1024 * MiB) == 18);
    // Three sizes: a line, never a parabola through every point.
    CHECK_FALSE(fitPeaks(runs({1, 2, 4}, 100 * MiB, 10 * MiB, 2 * MiB)).at(Source::Torch).quadratic);
}

TEST_CASE("fit: headroom for the largest segment a caching allocator asks for", "[fit]")
{
    const FitModel model = fitPeaks(runs({1, 2, 4, 8}, 100 * MiB, 30 * MiB));
    SourceModel segment;
    segment.b = 8 * MiB;  // the largest segment: 8 MiB per item
    CHECK(headroomAt(segment, 10) == uint64_t(kHeadroomShare * 80 * MiB));
    // 32 + 164 + 30·n + (half of 8·n) <= 1024 MiB: n <= 24.4 (27 without the headroom).
    CHECK(largestFitting(model, 32 * MiB, 1024 * MiB, &segment) == 24);
    CHECK(largestFitting(model, 32 * MiB, 1024 * MiB, nullptr) == 27);
    const SourceModel none;
    CHECK(largestFitting(model, 32 * MiB, 1024 * MiB, &none) == 27);
}
