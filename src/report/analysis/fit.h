// Will it fit? The peak of each source of device memory as a function of a size (the batch):
// peak_s(n) = a + b·n (+ c·n² where the runs ask for it), fitted by least squares over runs at
// a few small sizes, and the largest size whose predicted peak, with what the process holds
// outside the tracked memory (the CUDA context), stays within a device's capacity. Pure
// functions: `oomscope fit` runs the program and reads its reports.
#pragma once

#include "report/enums.h"

#include <cstdint>
#include <map>
#include <vector>

namespace oomscope::report {

struct FitPoint {
    uint64_t size = 0;
    std::map<Source, uint64_t> bytes;  // the device's peak by source in the run at that size
};

struct SourceModel {
    double a = 0, b = 0, c = 0;  // bytes = a + b·n + c·n²
    bool quadratic = false;
    double at(double n) const { return a + b * n + c * n * n; }
};

using FitModel = std::map<Source, SourceModel>;

// Least squares per source. A quadratic term only with four sizes or more, where the line
// misses a point by more than 2 % of the source's largest peak and the parabola opens upwards.
FitModel fitPeaks(const std::vector<FitPoint>& points);

// The predicted peak at size n, by source (never below 0), and its total.
uint64_t predictPeak(const FitModel& model, uint64_t n, std::map<Source, uint64_t>* bySource = nullptr);

// The largest n >= 1 (at most `most`) with predictPeak(n) + headroom(n) + fixed <= capacity; 0
// when not even size 1 fits. Assumes the peak grows with n (a model that shrinks is clamped by
// `most`). headroom: what must stay free beside the peak (kHeadroomShare of the largest segment
// a caching allocator asks for at that size), none when null.
uint64_t largestFitting(const FitModel& model, uint64_t fixed, uint64_t capacity, const SourceModel* headroom = nullptr,
                        uint64_t most = uint64_t(1) << 40);

// Near the capacity a caching allocator (PyTorch's, CuPy's) strands free memory in segments
// that still hold a live block, so that a large request can fail below the peak a roomier run
// reserves. On the H200 (session 11, PyTorch's need modelled by its allocated peak): GPT-2 (bf16,
// its largest segments the float32 logits, 206 MB per item) on the whole card trains at 93 and
// not at 94, where the allocated peak with a quarter of the largest segment beside it says 96;
// with half of it: 93 (exact), 14 under 24 GiB (truth 15) and ResNet-50 under 24 GiB 276 (truth
// 280). An empirical rule, fitted to GPT-2's whole card and checked on the other two
// (docs/GPU-RESULTS.md); --verify says when it misses.
constexpr double kHeadroomShare = 0.5;
uint64_t headroomAt(const SourceModel& largestSegment, uint64_t n);

} // namespace oomscope::report
