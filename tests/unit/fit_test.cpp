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
    // Below a tenth of the peak, half the segment (80 MiB against 1000 MiB).
    CHECK(headroomAt(segment, 10, 1000 * MiB) == uint64_t(kHeadroomShare * 80 * MiB));
    // From a tenth on, the whole of it: a segment of that size is stranded at the edge.
    CHECK(headroomAt(segment, 10, 800 * MiB) == 80 * MiB);
    CHECK(headroomAt(segment, 10, 801 * MiB) == 40 * MiB);
    // A convolutional network's: 2 MiB per item, under a tenth of the peak at every size:
    // 32 + 164 + 30·n + (half of 2·n) <= 1024 MiB: n <= 26.7 (27 without the headroom).
    segment.b = 2 * MiB;
    CHECK(largestFitting(model, 32 * MiB, 1024 * MiB, &segment) == 26);
    CHECK(largestFitting(model, 32 * MiB, 1024 * MiB, nullptr) == 27);
    const SourceModel none;
    CHECK(largestFitting(model, 32 * MiB, 1024 * MiB, &none) == 27);
    // A language model's logits: 40 MiB per item beside a peak of 164 + 30·n, a tenth of it and
    // more at every size: 164 + 30·n + 40·n <= 992 MiB: n <= 11.8 (17 with half of it).
    SourceModel logits;
    logits.b = 40 * MiB;
    CHECK(largestFitting(model, 32 * MiB, 1024 * MiB, &logits) == 11);
}

namespace {
FitTrial trialAt(uint64_t size, uint64_t torchBytes)
{
    FitTrial t;
    t.size = size;
    t.fits = true;
    t.peaks[0] = FitPoint{size, {{Source::Torch, torchBytes}}};
    t.context[0] = 0;
    t.capacity[0] = 4096 * MiB;
    return t;
}

std::vector<const FitTrial*> pointers(const std::vector<FitTrial>& trials)
{
    std::vector<const FitTrial*> out;
    for (const FitTrial& t : trials)
        out.push_back(&t);
    return out;
}
} // namespace

TEST_CASE("fit: a leading size above the line of the larger ones is left out (a hinge)", "[fit]")
{
    // BERT-base's shape: at batch 1 the optimizer's update sets the peak (2300 MiB), from 2 on
    // the activations (2000 + 200·n).
    std::vector<FitTrial> trials = {trialAt(1, 2300 * MiB), trialAt(2, 2400 * MiB), trialAt(4, 2800 * MiB),
                                    trialAt(9, 3800 * MiB), trialAt(18, 5600 * MiB)};
    const std::vector<const FitTrial*> fitting = pointers(trials);
    CHECK(leadingLeftOut(fitting, 0) == 1);
    const FitPrediction p = bindingPrediction(fitting);
    CHECK(p.leftOut == std::vector<uint64_t>{1});
    CHECK_FALSE(p.model.at(Source::Torch).quadratic);
    CHECK(p.model.at(Source::Torch).b == Approx(200.0 * MiB).epsilon(1e-9));
    CHECK(p.largest == (4096 - 2000) / 200);  // the line of the larger sizes, exactly
    // Left out, size 1 is shown and not held to the bound: the runs explain themselves.
    CHECK(unexplainedRuns(fitting, fitResiduals(p, fitting), p).empty());
    // All five on one line: nothing left out. One point a little above (1 %): kept.
    trials[0] = trialAt(1, 2200 * MiB);
    CHECK(leadingLeftOut(fitting, 0) == 0);
    trials[0] = trialAt(1, 2222 * MiB);
    CHECK(leadingLeftOut(fitting, 0) == 0);
    // A peak that bends upwards all along (a quadratic term) leaves nothing out: the parabola
    // takes it (the first point is above the chord of the rest, but the rest are no line).
    std::vector<FitTrial> up = {trialAt(1, 2010 * MiB), trialAt(2, 2040 * MiB), trialAt(4, 2160 * MiB),
                                trialAt(8, 2640 * MiB), trialAt(16, 4560 * MiB)};
    const std::vector<const FitTrial*> upward = pointers(up);
    CHECK(leadingLeftOut(upward, 0) == 0);
    CHECK(bindingPrediction(upward).model.at(Source::Torch).quadratic);
    // An LSTM's: flat to 8 (its weights, gradients and Adam's state), then the activations;
    // the runs of fit's escalation (16, 32, 64) on their line, the first round above it.
    std::vector<FitTrial> lstm = {trialAt(1, 1730 * MiB), trialAt(2, 1730 * MiB), trialAt(4, 1730 * MiB),
                                  trialAt(16, 1400 * MiB + 54 * 16 * MiB), trialAt(32, 1400 * MiB + 54 * 32 * MiB),
                                  trialAt(64, 1400 * MiB + 54 * 64 * MiB)};
    std::vector<const FitTrial*> flat = pointers(lstm);
    CHECK(leadingLeftOut(flat, 0) == 3);
    CHECK(bindingPrediction(flat).model.at(Source::Torch).b == Approx(54.0 * MiB).epsilon(1e-9));
    // Only two on the line after the kink: not told from a curve, nothing left out.
    flat.erase(flat.begin() + 4);
    CHECK(leadingLeftOut(flat, 0) == 0);
    // Three runs at least stay: two points are a line through anything (a first round of three
    // keeps its line through all three).
    trials[0] = trialAt(1, 2300 * MiB);
    std::vector<const FitTrial*> first(fitting.begin(), fitting.begin() + 3);
    CHECK(leadingLeftOut(first, 0) == 0);
    std::vector<const FitTrial*> four(fitting.begin(), fitting.begin() + 4);
    CHECK(leadingLeftOut(four, 0) == 1);
}
