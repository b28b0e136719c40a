#include "report/render/fit.h"

#include "common/paths.h"
#include "report/format.h"
#include "report/json_out.h"

#include <algorithm>
#include <iomanip>

namespace oomscope::report {
namespace {

std::string sizeList(const std::vector<uint64_t>& sizes)
{
    std::string out;
    for (uint64_t s : sizes)
        out += (out.empty() ? "" : ", ") + std::to_string(s);
    return out;
}

std::string recovered(const FitTrial& t)
{
    return " (after " + std::to_string(t.oomReports) + " out-of-memory episode" + (t.oomReports == 1 ? "" : "s") +
           " it recovered from: " + common::dirName(t.log) + ")";
}

bool anyTorchAllocated(const std::vector<FitTrial>& trials)
{
    return std::any_of(trials.begin(), trials.end(), [](const FitTrial& t) { return t.torchAllocated; });
}

const FitResidual* residualAt(const std::vector<FitResidual>& residuals, uint64_t size)
{
    for (const FitResidual& r : residuals)
        if (r.size == size)
            return &r;
    return nullptr;
}

// The measured peak and the model's at a size, by source, and the relative residual.
void writeResidual(JsonOut& w, const FitResidual& r)
{
    const auto bySource = [&](const char* key, const std::map<Source, uint64_t>& bytes) {
        w.key(key);
        w.beginObject();
        for (const auto& [s, b] : bytes)
            w.key(std::string(enumName(s)).c_str()), w.value(b);
        w.endObject();
    };
    w.key("measured_bytes"), w.value(r.measuredBytes);
    w.key("predicted_bytes"), w.value(r.predictedBytes);
    w.key("relative_residual"), w.value(r.relative);
    bySource("measured_by_source", r.measured);
    bySource("predicted_by_source", r.predicted);
    if (r.replayed) {
        w.key("replayed_torch_allocated_bytes"), w.value(r.replayedAllocated);
        w.key("replayed_torch_reserved_bytes"), w.value(r.replayedReserved);
        w.key("replay_relative"), w.value(r.replayRelative);
    }
}

std::string percent(double relative)
{
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%+.1f %%", 100.0 * relative);
    return buf;
}

bool leftOut(const FitPrediction& p, uint64_t size)
{
    return std::find(p.leftOut.begin(), p.leftOut.end(), size) != p.leftOut.end();
}

} // namespace

void renderFitJson(const FitOutcome& o, std::ostream& out)
{
    const FitPrediction& p = o.prediction;
    JsonOut w;
    w.beginObject();
    w.key("sizes");
    w.beginArray();
    for (const FitTrial& t : o.trials) {
        w.beginObject();
        w.key("size"), w.value(t.size);
        w.key("fits"), w.value(t.fits);
        w.key("oom_reports"), w.value(t.oomReports);
        w.key("peak_bytes"), w.value(trialPeakOn(t, p.device));
        if (const FitResidual* r = residualAt(o.residuals, t.size))
            writeResidual(w, *r);
        if (leftOut(p, t.size))
            w.key("left_out"), w.value(true);
        w.endObject();
    }
    w.endArray();
    w.key("rounds");
    w.beginArray();
    for (const std::vector<uint64_t>& round : o.rounds) {
        w.beginArray();
        for (uint64_t n : round)
            w.value(n);
        w.endArray();
    }
    w.endArray();
    w.key("torch_need");
    w.value(anyTorchAllocated(o.trials) ? "allocated_peak" : "reserved_peak");
    w.key("rerun_alone");
    w.beginArray();
    for (uint64_t n : o.reruns)
        w.value(n);
    w.endArray();
    w.key("seconds"), w.value(o.seconds);
    w.key("device"), w.value(p.device);
    w.key("capacity_bytes"), w.value(p.capacity);
    w.key("context_bytes"), w.value(p.context);
    w.key("other_processes_bytes"), w.value(p.others);
    w.key("model");
    w.beginObject();
    for (const auto& [s, m] : p.model) {
        w.key(std::string(enumName(s)).c_str());
        w.beginObject();
        w.key("a"), w.value(m.a);
        w.key("b"), w.value(m.b);
        w.key("c"), w.value(m.c);
        w.endObject();
    }
    w.endObject();
    if (!o.refused.empty()) {  // fail closed: why, and no size
        w.key("refused");
        w.beginArray();
        for (const std::string& why : o.refused)
            w.value(why);
        w.endArray();
        w.endObject();
        out << w.buffer() << "\n";
        return;
    }
    w.key("largest_size"), w.value(p.largest);
    w.key("method"), w.value(p.replay.used ? "allocator_replay" : "peak_model");
    w.key("largest_size_by_peak_model"), w.value(p.largestByModel);
    if (p.replay.used) {
        const ReplayOutcome& r = p.replay;
        w.key("replay");
        w.beginObject();
        w.key("runs"), w.value(r.runs);
        w.key("actions"), w.value(r.actions);
        w.key("off_line"), w.value(r.offLine);
        w.key("reserved_bytes"), w.value(r.atLargest.peakReserved);
        w.key("allocated_bytes"), w.value(r.atLargest.peakAllocated);
        w.key("limit_bytes"), w.value(r.limitAtLargest);
        w.key("next_failed_request_bytes"), w.value(r.atNext.failedBytes);
        w.key("next_reserved_at_failure_bytes"), w.value(r.atNext.reservedAtFailure);
        w.endObject();
    } else if (!p.replay.why.empty()) {
        w.key("replay_not_used"), w.value(p.replay.why);
    }
    w.key("largest_measured_size"), w.value(largestMeasured(o.trials));
    w.key("largest_size_by_tracked_peak"), w.value(p.largestByTracked);
    w.key("predicted_bytes"), w.value(p.predicted);
    w.key("headroom_bytes"), w.value(p.headroom);
    w.key("margin_bytes"), w.value(p.capacity > p.predicted + p.headroom ? p.capacity - p.predicted - p.headroom : 0);
    w.key("by_source");
    w.beginObject();
    for (const auto& [s, b] : p.at)
        w.key(std::string(enumName(s)).c_str()), w.value(b);
    w.endObject();
    if (!p.verified.empty()) {
        w.key("verify");
        w.beginArray();
        for (const FitTrial& t : p.verified) {
            w.beginObject();
            w.key("size"), w.value(t.size);
            w.key("fits"), w.value(t.fits);
            w.key("oom_reports"), w.value(t.oomReports);
            if (const FitResidual* r = residualAt(o.verified, t.size))
                writeResidual(w, *r);
            w.endObject();
        }
        w.endArray();
        w.key("verify_seconds"), w.value(o.verifySeconds);
        if (p.verifiedLargest)
            w.key("verified_largest_size"), w.value(*p.verifiedLargest);
    }
    w.endObject();
    out << w.buffer() << "\n";
}

void renderFitText(const FitOutcome& o, std::ostream& out)
{
    const FitPrediction& p = o.prediction;
    const std::vector<FitTrial>& trials = o.trials;
    std::string rounds;
    for (const std::vector<uint64_t>& round : o.rounds) {
        rounds += rounds.empty() ? "" : ", then ";
        for (size_t i = 0; i < round.size(); ++i)
            rounds += (i ? "+" : "") + std::to_string(round[i]);
    }
    const std::ios::fmtflags flags = out.flags();
    const std::streamsize precision = out.precision();
    out << "oomscope fit: " << o.fitted << " runs that fit (sizes " << rounds << "; " << std::fixed
        << std::setprecision(1) << o.seconds << " s" << (o.reruns.empty() ? "" : "; rerun alone: " + sizeList(o.reruns))
        << ")";
    out.flags(flags);
    out.precision(precision);
    if (trials.back().outOfMemory())
        out << "; out of memory at size " << trials.back().size;
    out << "\n\n  size  peak on device " << p.device << "  the model's  residual\n";
    for (const FitTrial& t : trials) {
        out << "  " << t.size << "     " << (t.fits ? formatBytes(trialPeakOn(t, p.device)) : "out of memory");
        if (const FitResidual* r = residualAt(o.residuals, t.size))
            out << "  " << formatBytes(r->predictedBytes) << "  " << percent(r->relative);
        if (leftOut(p, t.size))
            out << "  left out";
        out << "\n";
    }
    if (!p.leftOut.empty())
        out << "  (left out: " << sizeList(p.leftOut) << ", above the line through the larger sizes: what does not "
            << "grow with the size sets the peak there, as an optimizer's update does at a small batch)\n";
    if (anyTorchAllocated(trials))
        out << "  (torch: the most PyTorch allocated at once; its cache is given back when the device is full)\n";
    out << "\n  model, per source:";
    for (const auto& [s, m] : p.model)
        out << "  " << enumName(s) << " " << formatBytes(uint64_t(std::max(0.0, m.a))) << " + "
            << formatBytes(uint64_t(std::max(0.0, m.b))) << "·size"
            << (m.quadratic ? " + " + formatBytes(uint64_t(m.c)) + "·size²" : "");
    if (!o.refused.empty()) {
        out << "\n\nNo answer: the runs are not explained by the model, so no size is given:\n";
        for (const std::string& why : o.refused)
            out << "  " << why << "\n";
        return;
    }
    out << "\n\nLargest size that fits device " << p.device << " (" << formatBytes(p.capacity)
        << (o.deviceLimit ? ", --device-limit" : "") << "): " << p.largest << "\n";
    if (p.largest > 0) {
        out << "  predicted peak " << formatBytes(p.predicted) << " (context " << formatBytes(p.context) << ")";
        if (p.headroom) {
            out << ", headroom " << formatBytes(p.headroom)
                << (p.headroomWhole ? " (the largest segment PyTorch's allocator asks for there: one of that size is "
                            "stranded at the edge)"
                          : " (half the largest segment PyTorch's allocator asks for there)");
        }
        out << ", margin " << formatBytes(p.capacity > p.predicted + p.headroom ? p.capacity - p.predicted - p.headroom : 0)
            << "\n  at size " << p.largest << ":";
        for (const auto& [s, b] : p.at)
            out << "  " << enumName(s) << " " << formatBytes(b);
        out << "\n";
    }
    if (p.replay.used) {
        const ReplayOutcome& r = p.replay;
        out << "  by replaying PyTorch's allocator (" << r.actions << " actions of " << r.runs << " runs, scaled to the size";
        if (r.offLine)
            out << "; " << r.offLine << " allocations off a line, taken at their steepest";
        out << "): at " << p.largest << " its segments take " << formatBytes(r.atLargest.peakReserved) << " of the "
            << formatBytes(r.limitAtLargest) << " left to it (allocated " << formatBytes(r.atLargest.peakAllocated)
            << ")";
        if (r.atNext.failedBytes)
            out << "; at " << p.largest + 1 << " a request of " << formatBytes(r.atNext.failedBytes) << " finds no room with "
                << formatBytes(r.atNext.reservedAtFailure) << " in segments";
        out << "\n";
        if (p.largestByModel != p.largest)
            out << "  (the peak model alone says " << p.largestByModel << ")\n";
    } else if (!p.replay.why.empty()) {
        out << "  (PyTorch's allocator not replayed: " << p.replay.why << "; the peak model answers)\n";
    }
    if (!o.deviceLimit && p.others > std::max<uint64_t>(1ull << 30, p.capacity / 20))
        out << "  (other processes held " << formatBytes(p.others) << " of device " << p.device
            << " through every run: the answer is for the device without them; --device-limit for what is "
            << "left beside them)\n";
    // Far beyond the measured sizes, a term the small runs could not show (a cache that
    // grows in steps, a workspace picked by size) can move the answer: said, with the remedy.
    const uint64_t measured = largestMeasured(trials);
    if (p.largest > 8 * measured && p.verified.empty())
        out << "  (" << p.largest / measured << "x the largest size measured: --verify runs it, or measure "
            << "closer with --sizes)\n";
    for (const FitTrial& t : p.verified) {
        out << "verify: size " << t.size << (t.fits ? " fits" : t.outOfMemory() ? " runs out of memory" : " fails")
            << (t.fits && t.oomReports ? recovered(t) : "");
        if (const FitResidual* r = residualAt(o.verified, t.size); r && t.fits)
            out << " (peak " << formatBytes(r->measuredBytes) << ", the model's " << formatBytes(r->predictedBytes) << ", "
                << percent(r->relative)
                << (r->replayed ? "; PyTorch allocated " + formatBytes(r->measured.at(Source::Torch)) + ", the replay " +
                                      formatBytes(r->replayedAllocated) + ", " + percent(r->replayRelative)
                                : std::string())
                << ")";
        out << "\n";
    }
    if (!p.verified.empty())
        out << (!p.verified[0].fits   ? "verify: the prediction does NOT hold\n"
                : p.verified[1].fits ? "verify: the prediction holds, conservatively (the next size fits too)\n"
                                     : "verify: the prediction holds\n");
    if (p.verifiedLargest && (!p.verified[0].fits || *p.verifiedLargest > p.largest))
        out << (*p.verifiedLargest ? "verify: the largest size that fits, by real runs: " + std::to_string(*p.verifiedLargest)
                                   : std::string("verify: no size below it fits"))
            << "\n";
    else if (!p.verified.empty() && !p.verifiedLargest && p.verified.size() > 2)
        out << "verify: the walk to the largest size that fits stopped (a run failed for another reason than memory, "
               "or fits at twice the predicted size)\n";
}

} // namespace oomscope::report
