#include "report/analysis/job.h"

#include "report/analysis/diagnosis.h"
#include "report/analysis/memory_over_time.h"
#include "report/format.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace oomscope::report {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

bool frameworkSource(Source s)
{
    return s == Source::Torch || s == Source::Jax || s == Source::Cupy;
}

// Which of a process's reports its row shows: the OOM (the earliest), else a signal, else the
// latest of the others.
int preference(TriggerKind k)
{
    switch (k) {
    case TriggerKind::Oom: return 0;
    case TriggerKind::Signal: return 1;
    case TriggerKind::Recovered: return 2;
    case TriggerKind::Request:
    case TriggerKind::Snapshot: return 3;
    default: return 4;
    }
}

std::string groupKey(const Report& r, std::string* kind)
{
    if (r.process.runId) {
        *kind = "run_id";
        return *r.process.runId;
    }
    if (r.process.slurmJobId) {
        *kind = "slurm_job_id";
        return *r.process.slurmJobId;
    }
    kind->clear();
    return {};
}

void fillRow(RankRow& row)
{
    std::stable_sort(row.reports.begin(), row.reports.end(), [](const JobMember* a, const JobMember* b) {
        const Report& x = *a->report;
        const Report& y = *b->report;
        if (preference(x.trigger.kind) != preference(y.trigger.kind))
            return preference(x.trigger.kind) < preference(y.trigger.kind);
        // The earliest OOM; of the others, the latest.
        return x.trigger.kind == TriggerKind::Oom ? x.trigger.timeNs < y.trigger.timeNs
                                                  : x.trigger.timeNs > y.trigger.timeNs;
    });
    const Report& r = *row.reports.front()->report;
    row.shown = &r;
    row.rank = r.process.rank;
    row.localRank = r.process.localRank;
    row.host = r.process.hostname;
    row.pid = r.process.pid;
    row.triggerUnixNs = unixTimeOf(r, r.trigger.timeNs);
    row.peak = peakOf(r);
    std::set<int64_t> devices;
    for (const Device& d : r.devices) {
        if (d.context.value_or(false))
            devices.insert(d.index);
    }
    for (const MemoryRow& m : r.memory) {
        if (m.trackedBytes > 0 || m.peakTrackedBytes > 0)
            devices.insert(m.device);
        row.trackedBytes += m.trackedBytes;
        if (m.allocatedBytes)
            row.allocatedBytes = row.allocatedBytes.value_or(0) + *m.allocatedBytes;
        if (m.reservedBytes)
            row.reservedBytes = row.reservedBytes.value_or(0) + *m.reservedBytes;
        for (const auto& [source, bytes] : m.bySource) {
            row.bySource[source] += bytes;
            if (!frameworkSource(source) && source != Source::Untracked)
                row.outsideFrameworkBytes += bytes;
        }
    }
    row.devices.assign(devices.begin(), devices.end());
}

// The report of the process that holds its earliest OOM, and that OOM's wall-clock time.
std::optional<JobFailure> firstFailure(const std::vector<RankRow>& rows)
{
    std::optional<JobFailure> first;
    for (size_t i = 0; i < rows.size(); ++i) {
        for (const JobMember* m : rows[i].reports) {
            const Report& r = *m->report;
            if (r.trigger.kind != TriggerKind::Oom)
                continue;
            const uint64_t at = unixTimeOf(r, r.trigger.timeNs);
            if (!first || at < first->unixNs)
                first = JobFailure{i, at, &r, m->path, {}};
        }
    }
    if (!first)
        return first;
    const Trigger& t = first->report->trigger;
    std::string what = t.api.empty() ? std::string(t.framework.value_or("the program")) : t.api;
    if (t.requestedBytes)
        what += " of " + formatBytes(*t.requestedBytes);
    if (t.device)
        what += " on device " + std::to_string(*t.device);
    what += " failed";
    if (t.error)
        what += " (" + (t.errorName.empty() ? "error " + std::to_string(*t.error) : t.errorName) + ")";
    first->what = what;
    return first;
}

// What each other rank held at the first failure: its timeline replayed back to that moment,
// else its last step sample before it, else (it had ended already) its own report.
void heldAtFailure(std::vector<RankRow>& rows, const JobFailure& failure)
{
    for (RankRow& row : rows) {
        const Report& r = *row.shown;
        if (r.process.startUnixNs == 0)
            continue;
        const int64_t mono = int64_t(failure.unixNs) - int64_t(r.process.startUnixNs) + int64_t(r.process.startNs);
        // A recovered report's time is its last event's: when the process died is not known.
        const bool recovered = r.trigger.kind == TriggerKind::Recovered;
        if (!recovered)
            row.sinceFirstS = (double(int64_t(row.triggerUnixNs) - int64_t(failure.unixNs))) / 1e9;
        if (mono < 0)
            continue;  // the process started after the failure
        if (uint64_t(mono) >= r.trigger.timeNs) {
            // After a flight file's last event nothing changed: what it holds is what it held.
            row.heldAtFirstFailure = row.trackedBytes;
            row.heldHow = recovered ? HeldHow::Timeline : HeldHow::ItsReport;
            continue;
        }
        if (std::optional<uint64_t> held = trackedAt(r, uint64_t(mono))) {
            row.heldAtFirstFailure = *held;
            row.heldHow = HeldHow::Timeline;
            continue;
        }
        for (auto it = r.steps.rbegin(); it != r.steps.rend(); ++it) {
            if (it->timeNs > uint64_t(mono))
                continue;
            uint64_t held = 0;
            for (const StepDevice& d : it->devices)
                held += d.trackedBytes;
            row.heldAtFirstFailure = held;
            row.heldHow = HeldHow::Sample;
            break;
        }
    }
}

// Ranks whose peak is at least 10% and 1 GiB above the median rank's, with the sites that make
// the difference.
void findStandouts(JobView& job)
{
    if (job.ranks.size() < 3)
        return;  // with two, "the median" is one of them: nothing stands out from the others
    std::vector<size_t> order(job.ranks.size());
    for (size_t i = 0; i < order.size(); ++i)
        order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return job.ranks[a].peak.bytes < job.ranks[b].peak.bytes; });
    const size_t median = order[(order.size() - 1) / 2];
    const uint64_t medianPeak = job.ranks[median].peak.bytes;
    job.medianPeak = medianPeak;
    for (size_t i = 0; i < job.ranks.size(); ++i) {
        const uint64_t peak = job.ranks[i].peak.bytes;
        if (peak < medianPeak + kGiB || double(peak) < 1.1 * double(medianPeak))
            continue;
        RankStandout s{i, peak, medianPeak, median, {}};
        for (const SiteDelta& d : diffReports(*job.ranks[median].shown, *job.ranks[i].shown, false).sites) {
            if (d.delta() <= 0 || s.sites.size() == 5)
                break;
            s.sites.push_back(d);
        }
        job.standouts.push_back(std::move(s));
    }
    std::stable_sort(job.standouts.begin(), job.standouts.end(),
                     [](const RankStandout& a, const RankStandout& b) { return a.peak > b.peak; });
}

void diagnoseJob(JobView& job)
{
    for (const RankRow& row : job.ranks) {
        if (std::optional<Diagnosis> d = wrongDevice(*row.shown)) {
            d->message = rankName(row) + " (" + row.host + ", pid " + std::to_string(row.pid) + "): " + d->message;
            job.diagnosis.push_back(std::move(*d));
            job.diagnosisRank.push_back(rankName(row));
        }
    }
    for (const RankStandout& s : job.standouts) {
        const RankRow& row = job.ranks[s.row];
        const double above = s.medianPeak ? 100.0 * double(s.peak - s.medianPeak) / double(s.medianPeak) : 0;
        std::string message = rankName(row) + "'s peak " + formatBytes(s.peak) + " is " + formatBytes(s.peak - s.medianPeak) +
                              " (+" + std::to_string(int(std::lround(above))) + "%) above the median rank's " +
                              formatBytes(s.medianPeak) + " (" + rankName(job.ranks[s.medianRow]) + ")";
        if (!s.sites.empty()) {
            message += "; the most of it at " + s.sites.front().label + " (+" +
                       formatBytes(uint64_t(s.sites.front().delta())) + ")";
        }
        job.diagnosis.push_back(Diagnosis{
            "rank_imbalance", Severity::Warning, message,
            "look at what this rank does that the others do not: the sites above (an uneven shard of the data, "
            "work on rank 0 only such as evaluation, logging or checkpointing, an unbalanced pipeline stage)"});
        job.diagnosisRank.push_back(rankName(row));
    }
}

JobView viewOf(std::vector<const JobMember*> members)
{
    JobView job;
    job.jobId = groupKey(*members.front()->report, &job.jobKey);
    std::map<std::pair<std::string, int64_t>, size_t> byProcess;
    for (const JobMember* m : members) {
        const Process& p = m->report->process;
        auto [it, added] = byProcess.try_emplace({p.hostname, p.pid}, job.ranks.size());
        if (added)
            job.ranks.emplace_back();
        job.ranks[it->second].reports.push_back(m);
        if (p.worldSize)
            job.worldSize = std::max(job.worldSize.value_or(0), *p.worldSize);
    }
    for (RankRow& row : job.ranks)
        fillRow(row);
    std::stable_sort(job.ranks.begin(), job.ranks.end(), [](const RankRow& a, const RankRow& b) {
        if (a.rank.has_value() != b.rank.has_value())
            return a.rank.has_value();
        if (a.rank != b.rank)
            return a.rank < b.rank;
        return std::tie(a.host, a.pid) < std::tie(b.host, b.pid);
    });
    if (job.worldSize) {
        std::set<int64_t> seen;
        for (const RankRow& row : job.ranks) {
            if (row.rank)
                seen.insert(*row.rank);
        }
        for (int64_t r = 0; r < *job.worldSize && r < 1'000'000; ++r) {
            if (!seen.count(r))
                job.missingRanks.push_back(r);
        }
    }
    job.firstFailure = firstFailure(job.ranks);
    if (job.firstFailure)
        heldAtFailure(job.ranks, *job.firstFailure);
    findStandouts(job);
    diagnoseJob(job);
    return job;
}

} // namespace

uint64_t unixTimeOf(const Report& report, uint64_t monoNs)
{
    const Process& p = report.process;
    if (p.startUnixNs == 0)
        return monoNs;
    return uint64_t(int64_t(p.startUnixNs) + (int64_t(monoNs) - int64_t(p.startNs)));
}

std::string rankName(const RankRow& row)
{
    return row.rank ? "rank " + std::to_string(*row.rank) : "pid " + std::to_string(row.pid);
}

std::vector<CheckResult> checkJob(const JobView& job)
{
    std::vector<CheckResult> out;
    CheckResult oom;
    oom.rule = "oom";
    if (job.firstFailure) {
        const RankRow& row = job.ranks[job.firstFailure->row];
        size_t failed = 0;
        for (const RankRow& r : job.ranks) {
            failed += std::any_of(r.reports.begin(), r.reports.end(),
                                  [](const JobMember* m) { return m->report->trigger.kind == TriggerKind::Oom; });
        }
        oom.passed = false;
        oom.summary = rankName(row) + " ran out of memory first" +
                      (failed > 1 ? " (" + std::to_string(failed) + " ranks did)" : "") + ": " + job.firstFailure->what;
        oom.details.push_back("its report: " + job.firstFailure->path + " (" + row.host + ", pid " +
                              std::to_string(row.pid) + ")");
    } else {
        oom.summary = "no rank ran out of memory";
    }
    out.push_back(std::move(oom));
    for (const char* code : {"wrong_device", "rank_imbalance"}) {
        CheckResult c;
        c.rule = code;
        for (size_t i = 0; i < job.diagnosis.size(); ++i) {
            const Diagnosis& d = job.diagnosis[i];
            if (d.code != code)
                continue;
            c.passed = false;
            c.summary += (c.summary.empty() ? "" : ", ") + job.diagnosisRank[i];
            c.details.push_back(d.message);
            c.details.push_back("  -> " + d.suggestion);
        }
        if (c.passed)
            c.summary = "none";
        out.push_back(std::move(c));
    }
    return out;
}

std::vector<JobView> jobViews(const std::vector<JobMember>& members)
{
    std::vector<std::string> order;
    std::map<std::string, std::vector<const JobMember*>> groups;
    for (const JobMember& m : members) {
        if (!m.report)
            continue;
        std::string kind;
        const std::string key = groupKey(*m.report, &kind) + "\n" + kind;
        if (!groups.count(key))
            order.push_back(key);
        groups[key].push_back(&m);
    }
    std::vector<JobView> out;
    for (const std::string& key : order)
        out.push_back(viewOf(groups[key]));
    return out;
}

} // namespace oomscope::report
