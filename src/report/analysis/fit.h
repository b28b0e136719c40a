// Will it fit? The peak of each source of device memory as a function of a size (the batch):
// peak_s(n) = a + b·n (+ c·n² where the runs ask for it), fitted by least squares over runs at
// a few small sizes, and the largest size whose predicted peak, with what the process holds
// outside the tracked memory (the CUDA context), stays within a device's capacity. Pure
// functions: `oomscope fit` (tools/oomscope/commands/fit.cpp) runs the program, reads each run's
// reports into a FitTrial here, and renders the prediction with report/render/fit.h.
#pragma once

#include "report/analysis/allocator_replay.h"
#include "report/enums.h"

#include <cstdint>
#include <map>
#include <optional>
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
// `most`). headroom: what must stay free beside the peak (headroomAt: the largest segment a
// caching allocator asks for at that size, half or whole), none when null.
uint64_t largestFitting(const FitModel& model, uint64_t fixed, uint64_t capacity, const SourceModel* headroom = nullptr,
                        uint64_t most = uint64_t(1) << 40);

// Near the capacity a caching allocator (PyTorch's, CuPy's) strands free memory in segments
// that still hold a live block, so that a large request fails below the allocated peak. What
// the OOM reports at the edge show (docs/GPU-RESULTS.md, "Over a model zoo"): the request that
// fails is the largest one (a language model's float32 logits), and beside it a segment of that
// size from the step before holds a few small live blocks and a hole of most of its size
// (GPT-2 with checkpointing at 30 under 24 GiB: a 5890 MiB segment holding ten 90 MiB blocks;
// an LSTM's 5470 MiB, BERT's 3398 MiB: half). Where the largest segment is a tenth of the peak
// or more (kStrandedAbove), the prediction keeps the whole of it free; below, half of it
// (kHeadroomShare: convolutional networks, whose largest requests are a few percent of the
// peak, strand 0.1 to 0.5 GiB at 24 GiB). Empirical: fitted to GPT-2's whole H200 (half) and
// to eight rows of the model zoo on an H100 (whole), no row's answer above its truth.
constexpr double kHeadroomShare = 0.5;
constexpr double kStrandedAbove = 0.10;
// peak: the predicted peak at n, which decides between half and whole (strandsWhole).
bool strandsWhole(const SourceModel& largestSegment, uint64_t n, uint64_t peak);
uint64_t headroomAt(const SourceModel& largestSegment, uint64_t n, uint64_t peak);

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
    std::string torchTrace;  // PyTorch's allocator trace of the run (allocator_replay.h), where written
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

// The answer by replaying PyTorch's allocator (allocator_replay.h) on the binding device.
struct ReplayOutcome {
    bool used = false;
    std::string why;  // where not used: why (said; the peak model answers)
    uint64_t largest = 0;
    uint64_t runs = 0, actions = 0, offLine = 0;
    ReplayResult atLargest, atNext;      // the replay at the answer and the next size
    ScaledTrace trace;                   // what was replayed (where used)
    uint64_t limitAtLargest = 0, limitAtNext = 0;  // what PyTorch had there: capacity less context and other sources
};

// The binding device's model and prediction: per device the model and the largest size within
// its capacity; the device with the smallest such size.
struct FitPrediction {
    int64_t device = 0;
    FitModel model;
    SourceModel largestSegment;  // the largest caching-allocator segment by size
    uint64_t context = 0, capacity = 0, largest = 0, predicted = 0, headroom = 0;
    bool headroomWhole = false;  // the headroom is the whole largest segment (strandsWhole)
    uint64_t others = 0;  // what other processes held on the device through every run
    // The same from the tracked peaks (PyTorch's reserved memory, its cache with it): the
    // model before PyTorch's allocated peaks were used, said in the JSON to compare the two.
    uint64_t largestByTracked = 0;
    std::map<Source, uint64_t> at;  // by source at the largest size
    // Leading sizes whose peak sits above the line through the larger ones (a step the size does
    // not scale sets it there: AdamW's update at BERT's batch 1): shown, not fitted or held to it.
    std::vector<uint64_t> leftOut;
    uint64_t largestByModel = 0;  // the peak model's answer (largest holds the replay's where it is used)
    ReplayOutcome replay;
    std::vector<FitTrial> verified;  // --verify: the largest size and the next one, then its walk
    // --verify: the largest size seen to fit beside the next one seen to run out of memory (0:
    // size 1 does not fit); none where the walk stopped at another failure or past twice the
    // predicted size.
    std::optional<uint64_t> verifiedLargest;
};
FitPrediction bindingPrediction(const std::vector<const FitTrial*>& fitting);

// The replay's answer from the traces of the fitting runs (`traced`, the runs the model was
// fitted to, by size): aligned, checked against every run (the replay at its size must
// allocate at most what PyTorch allocated there, within kReplayCheck), then the largest size
// whose replay fits the capacity less the context and the other sources' predicted peaks.
// Not used (why said) where the runs were not traced, do not align, or the check fails.
inline constexpr double kReplayCheck = 0.01;
ReplayOutcome replayPrediction(const FitPrediction& prediction,
                               const std::vector<std::pair<const FitTrial*, TorchTrace>>& traced);

// How many of `fitting` (by size) to leave out at the front on a device: the fewest leading runs
// that sit above the line through the rest (each by kHingeShare of its peak and kResidualFloor)
// while the rest, three runs at least, lie on it (each within kHingeShare of its peak). The
// peak is then the larger of two lines (a phase that does not grow with the size, one that
// does: AdamW's update at BERT's batch 1, an LSTM's weights and optimizer state up to batch 8),
// and the larger sizes follow the second; a peak that bends upwards all along is left to the
// quadratic term, a first round of three to the line through all three.
inline constexpr double kHingeShare = 0.02;
size_t leadingLeftOut(const std::vector<const FitTrial*>& fitting, int64_t device);

// The model against its own runs, on the binding device: each measured run's peak by source
// and the model's at its size (the context left out of both), and the relative residual.
struct FitResidual {
    uint64_t size = 0;
    std::map<Source, uint64_t> measured, predicted;
    uint64_t measuredBytes = 0, predictedBytes = 0;
    double relative = 0;  // (predicted − measured) / measured
    // Where the replay answered: its peaks at this size with room to spare (PyTorch's allocated,
    // the segments' reserved), against PyTorch's measured allocated peak.
    bool replayed = false;
    uint64_t replayedAllocated = 0, replayedReserved = 0;
    double replayRelative = 0;
};
// The replay's peaks at each residual's size (nothing where the replay was not used or the run
// has no PyTorch allocated peak).
void addReplayedPeaks(const ReplayOutcome& replay, std::vector<FitResidual>* residuals);
std::vector<FitResidual> fitResiduals(const FitPrediction& prediction, const std::vector<const FitTrial*>& fitting);

// Fail closed: the runs must explain themselves before a size is given. The model has to
// reproduce every run it was fitted to within the error the answer is held to at any size (5 %
// of the run's peak, docs/commands/fit.md; 4 MiB at least: two of PyTorch's 2 MiB rounding
// granules), no run's peak may be below a smaller size's (beyond the same 4 MiB), and the peak
// must move with the size. Each reason names its runs; empty when they explain themselves.
inline constexpr double kResidualBound = 0.05;
inline constexpr uint64_t kResidualFloor = uint64_t(4) << 20;
// Sizes the prediction left out (FitPrediction::leftOut) are shown, not held to the bound.
std::vector<std::string> unexplainedRuns(const std::vector<const FitTrial*>& fitting,
                                         const std::vector<FitResidual>& residuals, const FitPrediction& prediction);

// Whether the device has room for runs at all of `sizes` at once, by the runs so far (their
// tracked peaks, a quarter to spare, the context each).
bool roomForTogether(const std::vector<uint64_t>& sizes, const std::vector<FitTrial>& trials);

} // namespace oomscope::report
