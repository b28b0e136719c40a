// The job view: the reports of every rank of a job (torchrun, Slurm, mpirun) side by side, as
// `oomscope report DIR` shows them. Which rank failed first and with what request, what every
// other rank held at that moment, the ranks whose peak stands out from the median rank and the
// sites that make the difference, and the job's diagnosis (wrong_device, rank_imbalance).
// Pure: the reports come in read (or recovered from a flight file) by the caller.
#pragma once

#include "report/analysis/check.h"
#include "report/model.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace oomscope::report {

// One report of the set, and where it came from.
struct JobMember {
    std::string path;             // the report file, or the flight file it was recovered from
    const Report* report = nullptr;
};

// What a rank held when the first rank failed, and how that is known.
enum class HeldHow {
    Timeline,      // its timeline replayed back to that moment
    Sample,        // its last step sample before it (the timeline no longer reaches back)
    ItsReport,     // its own report, written before that moment (it had ended already)
    Unknown,
};

struct RankRow {
    std::vector<const JobMember*> reports;  // every report of the process, the one shown first
    const Report* shown = nullptr;          // the OOM report if any, else a signal one, else the latest
    std::optional<int64_t> rank;
    std::optional<int64_t> localRank;
    std::string host;
    int64_t pid = 0;
    std::vector<int64_t> devices;       // allocated on or had a context on, ascending
    uint64_t triggerUnixNs = 0;         // the shown report's trigger, on the wall clock
    std::optional<double> sinceFirstS;  // the trigger relative to the first failure
    Peak peak;                          // on its busiest device
    uint64_t trackedBytes = 0;          // at the shown trigger, all devices
    std::optional<uint64_t> allocatedBytes;
    std::optional<uint64_t> reservedBytes;
    uint64_t outsideFrameworkBytes = 0;  // tracked, not the framework's (torch, jax, cupy)
    std::map<Source, uint64_t> bySource;
    std::optional<uint64_t> heldAtFirstFailure;
    HeldHow heldHow = HeldHow::Unknown;
};

struct JobFailure {
    size_t row = 0;  // into JobView::ranks
    uint64_t unixNs = 0;
    const Report* report = nullptr;
    std::string path;  // its file
    std::string what;  // "cudaMalloc of 6.00 GiB on device 2 failed (error 2)"
};

struct RankStandout {
    size_t row = 0;
    uint64_t peak = 0;
    uint64_t medianPeak = 0;
    size_t medianRow = 0;
    std::vector<SiteDelta> sites;  // what it holds beyond the median rank, largest first (at most 5)
};

struct JobView {
    std::string jobId;   // the launcher's run id, else the Slurm job id; "" when the reports name none
    std::string jobKey;  // "run_id", "slurm_job_id" or ""
    std::optional<int64_t> worldSize;
    std::vector<RankRow> ranks;  // by rank (reports without one last), then host and pid
    std::vector<int64_t> missingRanks;  // of 0 .. world_size-1, no report of them
    std::optional<JobFailure> firstFailure;
    std::optional<uint64_t> medianPeak;
    std::vector<RankStandout> standouts;
    std::vector<Diagnosis> diagnosis;  // wrong_device per rank, rank_imbalance per standout
    std::vector<std::string> diagnosisRank;  // the rank each diagnosis is about ("rank 3")
};

// The members grouped into jobs (by run id, else Slurm job id; reports naming neither form one
// group), each job's view; jobs in order of their first member.
std::vector<JobView> jobViews(const std::vector<JobMember>& members);

// `oomscope check` over a job (rule "job" of --fail-on): oom (a rank ran out of memory: the
// first one, its request, named), wrong_device and rank_imbalance (the job's diagnosis).
std::vector<CheckResult> checkJob(const JobView& job);

// `rank 3`, or `pid 1234` for a process without a rank.
std::string rankName(const RankRow& row);

// A report's trigger time on the wall clock (its process start on both clocks).
uint64_t unixTimeOf(const Report& report, uint64_t monoNs);

} // namespace oomscope::report
