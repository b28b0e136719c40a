#include "report/analysis/fit.h"

#include "report/analysis/largest_where.h"
#include "report/analysis/memory_over_time.h"
#include "report/model.h"
#include "report/format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace oomscope::report {
namespace {

// Solves the normal equations of a polynomial fit of degree 1 or 2 (Gaussian elimination on a
// 3x3 at most); false when they are singular (fewer distinct sizes than terms).
bool leastSquares(const std::vector<double>& x, const std::vector<double>& y, int degree, double* coef)
{
    const int n = degree + 1;
    double m[3][4] = {};
    for (size_t i = 0; i < x.size(); ++i) {
        double powers[5] = {1, x[i], x[i] * x[i], x[i] * x[i] * x[i], x[i] * x[i] * x[i] * x[i]};
        for (int r = 0; r < n; ++r) {
            for (int c = 0; c < n; ++c)
                m[r][c] += powers[r + c];
            m[r][n] += powers[r] * y[i];
        }
    }
    for (int col = 0; col < n; ++col) {
        int pivot = col;
        for (int r = col + 1; r < n; ++r)
            if (std::fabs(m[r][col]) > std::fabs(m[pivot][col]))
                pivot = r;
        if (std::fabs(m[pivot][col]) < 1e-12)
            return false;
        std::swap(m[col], m[pivot]);
        for (int r = 0; r < n; ++r) {
            if (r == col)
                continue;
            const double f = m[r][col] / m[col][col];
            for (int c = col; c <= n; ++c)
                m[r][c] -= f * m[col][c];
        }
    }
    for (int r = 0; r < n; ++r)
        coef[r] = m[r][n] / m[r][r];
    return true;
}

} // namespace

FitModel fitPeaks(const std::vector<FitPoint>& points)
{
    FitModel model;
    std::map<Source, bool> seen;
    for (const FitPoint& p : points)
        for (const auto& [s, bytes] : p.bytes)
            seen[s] = seen[s] || bytes > 0;
    for (const auto& [source, any] : seen) {
        if (!any)
            continue;
        std::vector<double> x, y;
        for (const FitPoint& p : points) {
            x.push_back(double(p.size));
            auto it = p.bytes.find(source);
            y.push_back(it == p.bytes.end() ? 0.0 : double(it->second));
        }
        SourceModel m;
        double coef[3] = {};
        if (leastSquares(x, y, 1, coef)) {
            m.a = coef[0];
            m.b = coef[1];
        } else {
            m.a = y.empty() ? 0 : *std::max_element(y.begin(), y.end());  // one size only: a constant
        }
        double worst = 0, largest = 1;
        for (size_t i = 0; i < x.size(); ++i) {
            worst = std::max(worst, std::fabs(m.at(x[i]) - y[i]));
            largest = std::max(largest, y[i]);
        }
        double q[3] = {};
        if (x.size() >= 4 && worst > 0.02 * largest && leastSquares(x, y, 2, q) && q[2] > 0) {
            m.a = q[0];
            m.b = q[1];
            m.c = q[2];
            m.quadratic = true;
        }
        model[source] = m;
    }
    return model;
}

uint64_t predictPeak(const FitModel& model, uint64_t n, std::map<Source, uint64_t>* bySource)
{
    uint64_t total = 0;
    for (const auto& [source, m] : model) {
        const double v = std::max(0.0, std::round(m.at(double(n))));
        const uint64_t bytes = v >= 1.8e19 ? UINT64_MAX / 4 : uint64_t(v);
        if (bySource)
            (*bySource)[source] = bytes;
        total += bytes;
    }
    return total;
}

bool strandsWhole(const SourceModel& largestSegment, uint64_t n, uint64_t peak)
{
    return largestSegment.at(double(n)) >= kStrandedAbove * double(peak);
}

uint64_t headroomAt(const SourceModel& largestSegment, uint64_t n, uint64_t peak)
{
    const double segment = largestSegment.at(double(n));
    const double v = strandsWhole(largestSegment, n, peak) ? segment : kHeadroomShare * segment;
    return v <= 0 ? 0 : v >= 1.8e19 ? UINT64_MAX / 4 : uint64_t(v);
}

uint64_t largestFitting(const FitModel& model, uint64_t fixed, uint64_t capacity, const SourceModel* headroom,
                        uint64_t most)
{
    return largestWhere(
        [&](uint64_t n) {
            const uint64_t peak = predictPeak(model, n), need = peak + (headroom ? headroomAt(*headroom, n, peak) : 0);
            return fixed <= capacity && need <= capacity - fixed;
        },
        most);
}

namespace {

// Per device, the largest device memory a caching allocator (PyTorch's, CuPy's: the ones that
// strand free memory in their segments) asked for in the run.
std::map<int64_t, uint64_t> largestCachingSegments(const Report& r)
{
    std::map<int64_t, uint64_t> out;
    const Timeline& tl = r.timeline;
    const Timeline::Flags isAlloc = tl.flags("alloc"), deviceApi = tl.flags(deviceMemoryApi);
    std::map<uint32_t, bool> caching;  // by stack
    for (const TimelineRow& row : tl.rows) {
        if (row.device < 0 || !isAlloc(row.kind) || !deviceApi(row.api) || row.size <= out[row.device])
            continue;
        auto [it, fresh] = caching.try_emplace(row.stack, false);
        if (fresh) {
            const Source s = stackSource(r, row.stack);
            it->second = s == Source::Torch || s == Source::Cupy;
        }
        if (it->second)
            out[row.device] = row.size;
    }
    return out;
}

} // namespace

void addTrialReport(const Report& r, FitTrial* t)
{
    if (r.trigger.kind == TriggerKind::Oom)
        ++t->oomReports;
    if (r.trigger.kind != TriggerKind::Exit)
        return;
    // PyTorch's need is the most it had allocated at once, not the most it reserved: a
    // roomy run keeps freed blocks cached (ResNet-50: 15 % of its reserved peak) that the
    // allocator gives back and reuses when the device is full. The step samples carry it.
    std::map<int64_t, uint64_t> torchAllocated;
    for (const Step& step : r.steps)
        for (const StepDevice& d : step.devices)
            if (d.peakAllocatedBytes)
                torchAllocated[d.device] = std::max(torchAllocated[d.device], *d.peakAllocatedBytes);
    for (const MemoryRow& m : r.memory) {
        FitPoint p{t->size, {}};
        t->tracked[m.device] = m.peakTrackedBytes;
        if (m.peak)
            p.bytes = m.peak->bySource;
        else
            p.bytes[Source::Other] = m.peakTrackedBytes;
        if (auto it = torchAllocated.find(m.device); it != torchAllocated.end() && p.bytes.count(Source::Torch)) {
            p.bytes[Source::Torch] = it->second;
            t->torchAllocated = true;
        }
        t->peaks[m.device] = p;
        t->context[m.device] = m.untrackedBytes.value_or(0);
        const Device* d = r.findDevice(m.device);
        t->capacity[m.device] = d && d->limitBytes ? *d->limitBytes : d && d->totalBytes ? *d->totalBytes : 0;
        if (d && d->freeBytes)
            t->room[m.device] = *d->freeBytes + m.trackedBytes + m.untrackedBytes.value_or(0);
        if (d && d->freeBytes && d->totalBytes && d->processBytes && *d->totalBytes >= *d->freeBytes + *d->processBytes)
            t->others[m.device] = *d->totalBytes - *d->freeBytes - *d->processBytes;
    }
    t->largestSegment = largestCachingSegments(r);
}

uint64_t trialPeakOn(const FitTrial& t, int64_t device)
{
    uint64_t total = 0;
    if (auto it = t.peaks.find(device); it != t.peaks.end())
        for (const auto& [s, b] : it->second.bytes)
            total += b;
    return total;
}

uint64_t largestMeasured(const std::vector<FitTrial>& trials)
{
    uint64_t most = 1;
    for (const FitTrial& t : trials)
        if (t.fits)
            most = std::max(most, t.size);
    return most;
}

bool peakChangesWithSize(const std::vector<const FitTrial*>& fitting)
{
    const int64_t firstDevice = fitting.front()->peaks.begin()->first;
    const uint64_t low = trialPeakOn(*fitting.front(), firstDevice), high = trialPeakOn(*fitting.back(), firstDevice);
    return high > low + std::max<uint64_t>(uint64_t(1) << 20, low / 200);
}

size_t leadingLeftOut(const std::vector<const FitTrial*>& fitting, int64_t device)
{
    // The fewest leading runs whose leaving out puts the rest on a line with every one of them
    // above it. Three at least are left: two are a line through anything (a peak in steps, a
    // curve bending upwards, whose chord extended under-predicts it, would pass for a kink).
    for (size_t k = 1; k + 3 <= fitting.size(); ++k) {
        std::vector<double> x, y;
        for (size_t i = k; i < fitting.size(); ++i) {
            x.push_back(double(fitting[i]->size));
            y.push_back(double(trialPeakOn(*fitting[i], device)));
        }
        double line[3] = {};
        if (!leastSquares(x, y, 1, line))
            continue;
        bool straight = true;
        for (size_t i = 0; i < x.size() && straight; ++i)
            straight = std::fabs(line[0] + line[1] * x[i] - y[i]) <= std::max(kHingeShare * y[i], double(kResidualFloor));
        if (!straight)
            continue;  // the rest bend: not a kink (the quadratic term's case)
        bool above = true;
        for (size_t i = 0; i < k && above; ++i) {
            const double peak = double(trialPeakOn(*fitting[i], device));
            above = peak - (line[0] + line[1] * double(fitting[i]->size)) >
                    std::max(kHingeShare * peak, double(kResidualFloor));
        }
        if (above)
            return k;
    }
    return 0;
}

FitPrediction bindingPrediction(const std::vector<const FitTrial*>& fitting)
{
    FitPrediction p;
    bool any = false;
    for (const auto& [device, first] : fitting.front()->peaks) {
        const size_t skip = leadingLeftOut(fitting, device);
        std::vector<FitPoint> points;
        FitPrediction d;
        d.device = device;
        for (size_t i = 0; i < fitting.size(); ++i) {
            if (i < skip)
                d.leftOut.push_back(fitting[i]->size);
            else if (auto it = fitting[i]->peaks.find(device); it != fitting[i]->peaks.end())
                points.push_back(it->second);
        }
        d.model = fitPeaks(points);
        std::vector<FitPoint> segments;
        for (size_t i = skip; i < fitting.size(); ++i)
            if (auto it = fitting[i]->largestSegment.find(device); it != fitting[i]->largestSegment.end())
                segments.push_back({fitting[i]->size, {{Source::Other, it->second}}});
        if (const FitModel m = fitPeaks(segments); m.count(Source::Other))
            d.largestSegment = m.at(Source::Other);
        // What the process holds outside its tracked memory (the context): its own memory as
        // the driver lists it (NVML) less the tracked. Where the driver does not list it (a PID
        // namespace), the device's used memory less the tracked, which counts a run beside it
        // too: the least any run saw (the last of a round to exit saw itself alone, unless the
        // runs ended together: GPT-2 on the H200 read 4.65 GiB for 0.65).
        d.context = UINT64_MAX;
        for (const FitTrial* t : fitting)
            if (auto it = t->context.find(device); it != t->context.end())
                d.context = std::min(d.context, it->second);
        if (d.context == UINT64_MAX)
            d.context = 0;
        // Other processes on the device through every run (not fit's own runs: one of them
        // saw none): the answer is for the card without them, said.
        d.others = UINT64_MAX;
        for (const FitTrial* t : fitting) {
            auto it = t->others.find(device);
            d.others = it == t->others.end() ? 0 : std::min(d.others, it->second);
        }
        if (d.others == UINT64_MAX)
            d.others = 0;
        d.capacity = fitting.back()->capacity.at(device);
        d.largest = largestFitting(d.model, d.context, d.capacity, &d.largestSegment);
        std::vector<FitPoint> tracked;
        for (const FitTrial* t : fitting)
            if (auto it = t->tracked.find(device); it != t->tracked.end())
                tracked.push_back({t->size, {{Source::Other, it->second}}});
        d.largestByTracked = largestFitting(fitPeaks(tracked), d.context, d.capacity, &d.largestSegment);
        if (!any || d.largest < p.largest)
            p = d;
        any = true;
    }
    return p;
}

ReplayOutcome replayPrediction(const FitPrediction& p, const std::vector<std::pair<const FitTrial*, TorchTrace>>& traced)
{
    ReplayOutcome o;
    std::vector<std::pair<uint64_t, const TorchTrace*>> runs;
    for (const auto& [t, trace] : traced)
        runs.emplace_back(t->size, &trace);
    if (runs.size() < 2) {
        o.why = "PyTorch's allocator was not traced in two runs or more";
        return o;
    }
    // The runs from the smallest that aligns with all the larger ones: the larger runs are the
    // ones the answer is extrapolated from.
    std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    ScaledTrace scaled;
    const size_t from = alignFromSmallest(runs, &scaled, &o.why);
    if (from == runs.size())
        return o;
    o.why.clear();
    if (std::none_of(scaled.slope.begin(), scaled.slope.end(), [](int64_t b) { return b > 0; })) {
        o.why = "no block PyTorch allocates grows with the size";
        return o;
    }
    runs.erase(runs.begin(), runs.begin() + long(from));
    o.runs = runs.size();
    o.actions = scaled.actions.size();
    o.offLine = scaled.offLine;
    // The model of the allocator must give back what PyTorch did in every run: the most it
    // had allocated at once (PyTorch counts whole blocks, as the model does).
    for (const auto& [t, trace] : traced) {
        if (t->size < runs.front().first)
            continue;
        const auto it = t->peaks.find(p.device);
        if (!t->torchAllocated || it == t->peaks.end() || !it->second.bytes.count(Source::Torch))
            continue;
        const uint64_t real = it->second.bytes.at(Source::Torch);
        const uint64_t model = replay(scaled, t->size, UINT64_MAX).peakAllocated;
        const double off = std::fabs(double(model) - double(real));
        if (off > std::max(kReplayCheck * double(real), double(kResidualFloor))) {
            o.why = "the replay of size " + std::to_string(t->size) + " allocates " + formatBytes(model) +
                    " at most, PyTorch allocated " + formatBytes(real);
            return o;
        }
    }
    // What PyTorch's segments may take at size n: the capacity less the context and the other
    // sources' peaks there (cuBLAS's workspace, NCCL's buffers: not in PyTorch's trace).
    const auto limit = [&](uint64_t n) -> uint64_t {
        std::map<Source, uint64_t> at;
        predictPeak(p.model, n, &at);
        uint64_t others = p.context;
        for (const auto& [s, b] : at)
            if (s != Source::Torch)
                others += b;
        return p.capacity > others ? p.capacity - others : 0;
    };
    o.largest = largestByReplay(scaled, limit);
    o.trace = scaled;
    o.limitAtLargest = limit(o.largest), o.limitAtNext = limit(o.largest + 1);
    if (o.largest)
        o.atLargest = replay(scaled, o.largest, o.limitAtLargest);
    o.atNext = replay(scaled, o.largest + 1, o.limitAtNext);
    o.used = true;
    return o;
}

void addReplayedPeaks(const ReplayOutcome& replayed, std::vector<FitResidual>* residuals)
{
    if (!replayed.used)
        return;
    for (FitResidual& r : *residuals) {
        const auto torch = r.measured.find(Source::Torch);
        if (torch == r.measured.end() || !torch->second)
            continue;
        const ReplayResult at = replay(replayed.trace, r.size, UINT64_MAX);
        r.replayed = true;
        r.replayedAllocated = at.peakAllocated, r.replayedReserved = at.peakReserved;
        r.replayRelative = (double(at.peakAllocated) - double(torch->second)) / double(torch->second);
    }
}

std::vector<FitResidual> fitResiduals(const FitPrediction& p, const std::vector<const FitTrial*>& fitting)
{
    std::vector<FitResidual> out;
    for (const FitTrial* t : fitting) {
        auto it = t->peaks.find(p.device);
        if (it == t->peaks.end())
            continue;
        FitResidual r;
        r.size = t->size;
        r.measured = it->second.bytes;
        for (const auto& [s, b] : r.measured)
            r.measuredBytes += b;
        r.predictedBytes = predictPeak(p.model, t->size, &r.predicted);
        r.relative = r.measuredBytes ? (double(r.predictedBytes) - double(r.measuredBytes)) / double(r.measuredBytes) : 0;
        out.push_back(std::move(r));
    }
    return out;
}

std::vector<std::string> unexplainedRuns(const std::vector<const FitTrial*>& fitting,
                                         const std::vector<FitResidual>& residuals, const FitPrediction& prediction)
{
    const int64_t device = prediction.device;
    std::vector<std::string> why;
    for (size_t i = 1; i < fitting.size(); ++i) {
        const uint64_t before = trialPeakOn(*fitting[i - 1], device), now = trialPeakOn(*fitting[i], device);
        if (now + kResidualFloor < before)
            why.push_back("the peak shrinks as the size grows: " + formatBytes(now) + " at size " +
                          std::to_string(fitting[i]->size) + ", " + formatBytes(before) + " at size " +
                          std::to_string(fitting[i - 1]->size) + " (the size is not what the program's memory follows)");
    }
    if (!why.empty())
        return why;
    if (!peakChangesWithSize(fitting)) {
        why.push_back("the peak does not change with the size (" + formatBytes(trialPeakOn(*fitting.front(), device)) +
                      " at size " + std::to_string(fitting.front()->size) + ", " +
                      formatBytes(trialPeakOn(*fitting.back(), device)) + " at size " +
                      std::to_string(fitting.back()->size) + "): does the command use {} or read OOMSCOPE_FIT_SIZE?");
        return why;
    }
    for (const FitResidual& r : residuals) {
        if (std::find(prediction.leftOut.begin(), prediction.leftOut.end(), r.size) != prediction.leftOut.end())
            continue;
        const double off = std::abs(double(r.predictedBytes) - double(r.measuredBytes));
        if (off > std::max(kResidualBound * double(r.measuredBytes), double(kResidualFloor))) {
            char pct[32];
            std::snprintf(pct, sizeof(pct), "%+.1f %%", 100.0 * r.relative);
            why.push_back("size " + std::to_string(r.size) + ": measured " + formatBytes(r.measuredBytes) +
                          ", the model gives " + formatBytes(r.predictedBytes) + " (" + pct +
                          ", more than 5 %): the peak is not a line or a parabola in the size (a cache or a "
                          "workspace that changes in steps?); measure around the size you need with --sizes");
        }
    }
    return why;
}

bool roomForTogether(const std::vector<uint64_t>& sizes, const std::vector<FitTrial>& trials)
{
    std::vector<const FitTrial*> fitting;
    for (const FitTrial& t : trials)
        if (t.fits && !t.peaks.empty())
            fitting.push_back(&t);
    if (fitting.empty() || sizes.size() < 2)
        return sizes.size() < 2;
    const FitTrial& last = *fitting.back();
    for (const auto& [device, held] : last.tracked) {
        auto room = last.room.find(device);
        if (room == last.room.end())
            return false;
        std::vector<FitPoint> points;  // what the runs held (the cache too), not what they needed
        for (const FitTrial* t : fitting)
            if (auto it = t->tracked.find(device); it != t->tracked.end())
                points.push_back({t->size, {{Source::Other, it->second}}});
        const FitModel model = fitPeaks(points);
        uint64_t need = 0;
        for (uint64_t n : sizes) {
            // One run: its peak scaled from the largest run (a + b·n grows no faster than n);
            // two or more: the line through them.
            const uint64_t peak = points.size() >= 2 ? predictPeak(model, n) : held / last.size * n;
            need += peak + peak / 4 + last.context.at(device);
        }
        if (need > room->second)
            return false;
    }
    return true;
}

} // namespace oomscope::report
