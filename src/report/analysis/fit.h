// Will it fit? The peak of each source of device memory as a function of a size (the batch):
// peak_s(n) = a + b·n (+ c·n² where the runs ask for it), fitted by least squares over runs at
// a few small sizes, and the largest size whose predicted peak, with what the process holds
// outside the tracked memory (the CUDA context), stays within a device's capacity. Pure
// functions: `oomscope fit` (tools/oomscope/commands/fit.cpp) runs the program, reads each run's
// reports into a FitTrial here, and renders the prediction with report/render/fit.h.
#pragma once

#include "report/enums.h"

#include <cstdint>
#include <map>
#include <string>
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

struct Report;

// One run of the command at one size, as read back from its reports.
struct FitTrial {
    uint64_t size = 0;
    // Whether it fits is the program's own verdict: it exited 0. A run that fits may still
    // have had out-of-memory episodes it recovered from (PyTorch's cuDNN convolutions catch the
    // OOM of a workspace and take an algorithm that needs less: ResNet-50 at the edge of the
    // H200's 24 GiB rehearsal wrote 8 OOM reports and trained its steps); said, not a failure.
    bool fits = false;
    uint64_t oomReports = 0;  // OOM reports it wrote
    bool outOfMemory() const { return !fits && oomReports > 0; }
    int status = 0;          // the wait status
    std::string log;         // the program's output (its folder holds the run's reports)
    std::map<int64_t, FitPoint> peaks;  // by device (fitting runs)
    std::map<int64_t, uint64_t> context;        // by device: what the process held outside tracked memory
    std::map<int64_t, uint64_t> others;         // by device: what other processes held at exit (where the
                                                // driver listed this one: devices[].process_bytes)
    std::map<int64_t, uint64_t> capacity;       // by device: the limit, else the device's memory
    std::map<int64_t, uint64_t> room;           // by device: free at exit + what the run held there
    std::map<int64_t, uint64_t> largestSegment; // by device: the largest a caching allocator asked for
    std::map<int64_t, uint64_t> tracked;        // by device: the tracked peak (what the run held at most)
    bool torchAllocated = false;                // torch's peak is PyTorch's allocated peak (step samples)
};

// What one report of a run says of it: an OOM report counts; the exit report gives the peaks by
// device and source (PyTorch's by its allocated peak where the step samples carry it), the
// context, the capacity, the room and the largest caching-allocator segment.
void addTrialReport(const Report& report, FitTrial* trial);

// The trial's peak on a device, every source together (0 when it has none there).
uint64_t trialPeakOn(const FitTrial& trial, int64_t device);
// The largest size that fitted (1 at least).
uint64_t largestMeasured(const std::vector<FitTrial>& trials);
// Whether the first device's peak moves with the size (by 1 MiB and 0.5 % at least) between
// the first and the last of `fitting`.
bool peakChangesWithSize(const std::vector<const FitTrial*>& fitting);

// The binding device's model and prediction: per device the model and the largest size within
// its capacity; the device with the smallest such size.
struct FitPrediction {
    int64_t device = 0;
    FitModel model;
    SourceModel largestSegment;  // the largest caching-allocator segment by size
    uint64_t context = 0, capacity = 0, largest = 0, predicted = 0, headroom = 0;
    uint64_t others = 0;  // what other processes held on the device through every run
    // The same from the tracked peaks (PyTorch's reserved memory, its cache with it): the
    // model before PyTorch's allocated peaks were used, said in the JSON to compare the two.
    uint64_t largestByTracked = 0;
    std::map<Source, uint64_t> at;  // by source at the largest size
    std::vector<FitTrial> verified; // --verify: the largest size and the next one
};
FitPrediction bindingPrediction(const std::vector<const FitTrial*>& fitting);

// The model against its own runs, on the binding device: each measured run's peak by source
// and the model's at its size (the context left out of both), and the relative residual.
struct FitResidual {
    uint64_t size = 0;
    std::map<Source, uint64_t> measured, predicted;
    uint64_t measuredBytes = 0, predictedBytes = 0;
    double relative = 0;  // (predicted − measured) / measured
};
std::vector<FitResidual> fitResiduals(const FitPrediction& prediction, const std::vector<const FitTrial*>& fitting);

// Fail closed: the runs must explain themselves before a size is given. The model has to
// reproduce every run it was fitted to within the error the answer is held to at any size (5 %
// of the run's peak, docs/commands/fit.md; 4 MiB at least: two of PyTorch's 2 MiB rounding
// granules), no run's peak may be below a smaller size's (beyond the same 4 MiB), and the peak
// must move with the size. Each reason names its runs; empty when they explain themselves.
inline constexpr double kResidualBound = 0.05;
inline constexpr uint64_t kResidualFloor = uint64_t(4) << 20;
std::vector<std::string> unexplainedRuns(const std::vector<const FitTrial*>& fitting,
                                         const std::vector<FitResidual>& residuals, int64_t device);

// Whether the device has room for runs at all of `sizes` at once, by the runs so far (their
// tracked peaks, a quarter to spare, the context each).
bool roomForTogether(const std::vector<uint64_t>& sizes, const std::vector<FitTrial>& trials);

} // namespace oomscope::report
