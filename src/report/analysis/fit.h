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

// The largest n >= 1 (at most `most`) with predictPeak(n) + fixed <= capacity; 0 when not even
// size 1 fits. Assumes the peak grows with n (a model that shrinks is clamped by `most`).
uint64_t largestFitting(const FitModel& model, uint64_t fixed, uint64_t capacity, uint64_t most = uint64_t(1) << 40);

} // namespace oomscope::report
