#include "report/render/job_table.h"

#include "report/analysis/analysis.h"
#include "report/format.h"
#include "report/render/style.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <set>

namespace oomscope::report {
namespace {

std::string orDash(const std::optional<uint64_t>& v)
{
    return v ? formatBytes(*v) : "-";
}

std::string signedSeconds(double s)
{
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%+.3f s", s);
    return buf;
}

std::string joinInts(const std::vector<int64_t>& values)
{
    std::string out;
    for (int64_t v : values)
        out += (out.empty() ? "" : ",") + std::to_string(v);
    return out.empty() ? "-" : out;
}

std::string triggers(const RankRow& row)
{
    std::string out;
    for (const JobMember* m : row.reports)
        out += (out.empty() ? "" : "+") + std::string(enumName(m->report->trigger.kind));
    return out;
}

std::string heldText(const RankRow& row)
{
    if (!row.heldAtFirstFailure)
        return "-";
    switch (row.heldHow) {
    case HeldHow::Timeline: return formatBytes(*row.heldAtFirstFailure);
    case HeldHow::Sample: return formatBytes(*row.heldAtFirstFailure) + " (last sample)";
    case HeldHow::ItsReport: return formatBytes(*row.heldAtFirstFailure) + " (its report)";
    default: return "-";
    }
}

void renderHeader(const JobView& job, const Style& s, std::ostream& out)
{
    size_t reports = 0;
    std::set<std::string> hosts;
    for (const RankRow& row : job.ranks) {
        reports += row.reports.size();
        hosts.insert(row.host);
    }
    std::string line = std::to_string(job.ranks.size()) + (job.ranks.size() == 1 ? " process" : " processes") + ", " +
                       std::to_string(reports) + (reports == 1 ? " report" : " reports") + ", " +
                       std::to_string(hosts.size()) + (hosts.size() == 1 ? " host" : " hosts");
    if (job.worldSize)
        line += ", world size " + std::to_string(*job.worldSize);
    out << s.bold("JOB") << " " << (job.jobId.empty() ? "(the reports name no job id)" : job.jobKey + " " + job.jobId) << ": "
        << line << "\n";
    if (!job.missingRanks.empty())
        out << "  " << s.red("no report from rank" + std::string(job.missingRanks.size() == 1 ? " " : "s ") +
                             joinInts(job.missingRanks))
            << " (nor a flight file to recover)\n";
}

void renderFirstFailure(const JobView& job, const Style& s, std::ostream& out)
{
    out << "\n" << s.bold("First failure") << "\n";
    if (!job.firstFailure) {
        out << "  no rank ran out of memory\n";
        return;
    }
    const JobFailure& f = *job.firstFailure;
    const RankRow& row = job.ranks[f.row];
    out << "  " << s.red(rankName(row)) << " (" << row.host << ", pid " << row.pid << ") at "
        << formatWallClock(f.unixNs, true) << ": " << f.what << "\n";
    out << "  report " << f.path << "\n";
    if (f.report->trigger.stack)
        out << "  at " << stackLabel(*f.report, f.report->findStack(*f.report->trigger.stack)) << "\n";
    out << "  " << s.dim("the other ranks at that moment: the column \"at first failure\" below") << "\n";
}

void renderRanks(const JobView& job, const Style& s, std::ostream& out)
{
    out << "\n" << s.bold("Ranks") << "\n";
    const std::vector<std::vector<std::string>> cells = rankTableCells(job);
    TextTable table(cells.front(), 6);
    for (size_t i = 1; i < cells.size(); ++i)
        table.addRow(cells[i]);
    out << table.render();
}

} // namespace

std::vector<std::vector<std::string>> rankTableCells(const JobView& job)
{
    const bool framework =
        std::any_of(job.ranks.begin(), job.ranks.end(), [](const RankRow& r) { return r.reservedBytes.has_value(); });
    std::vector<std::string> header = {"rank", "local", "host", "pid", "devices", "reports"};
    if (job.firstFailure)
        header.push_back("when");
    header.insert(header.end(), {"peak", "tracked"});
    if (framework)
        header.insert(header.end(), {"allocated", "reserved", "outside framework"});
    if (job.firstFailure)
        header.push_back("at first failure");
    std::vector<std::vector<std::string>> table = {header};
    for (const RankRow& row : job.ranks) {
        std::vector<std::string> cells = {row.rank ? std::to_string(*row.rank) : "-",
                                          row.localRank ? std::to_string(*row.localRank) : "-",
                                          truncateMiddle(row.host, 24),
                                          std::to_string(row.pid),
                                          joinInts(row.devices),
                                          triggers(row)};
        if (job.firstFailure)
            cells.push_back(row.sinceFirstS ? signedSeconds(*row.sinceFirstS) : "-");
        cells.insert(cells.end(), {formatBytes(row.peak.bytes), formatBytes(row.trackedBytes)});
        if (framework)
            cells.insert(cells.end(), {orDash(row.allocatedBytes), orDash(row.reservedBytes), formatBytes(row.outsideFrameworkBytes)});
        if (job.firstFailure)
            cells.push_back(heldText(row));
        table.push_back(std::move(cells));
    }
    return table;
}

namespace {

void renderSources(const JobView& job, const Style& s, std::ostream& out)
{
    std::set<Source> present;
    for (const RankRow& row : job.ranks) {
        for (const auto& [source, bytes] : row.bySource) {
            if (bytes > 0)
                present.insert(source);
        }
    }
    if (present.empty())
        return;
    out << "\n" << s.bold("Memory by source, at each rank's report") << "\n";
    std::vector<std::string> header = {"rank"};
    for (Source src : present)
        header.push_back(enumName(src));
    TextTable table(header, 1);
    for (const RankRow& row : job.ranks) {
        std::vector<std::string> cells = {rankName(row)};
        for (Source src : present) {
            auto it = row.bySource.find(src);
            cells.push_back(it == row.bySource.end() ? "-" : formatBytes(it->second));
        }
        table.addRow(std::move(cells));
    }
    out << table.render();
}

void renderStandouts(const JobView& job, const Style& s, std::ostream& out)
{
    if (!job.medianPeak)
        return;
    out << "\n" << s.bold("Ranks that stand out") << s.dim(" (peak >= 10% and >= 1 GiB above the median rank's " +
                                                            formatBytes(*job.medianPeak) + ")")
        << "\n";
    if (job.standouts.empty()) {
        out << "  none\n";
        return;
    }
    for (const RankStandout& st : job.standouts) {
        out << "  " << s.bold(rankName(job.ranks[st.row])) << ": peak " << formatBytes(st.peak) << ", "
            << formatSignedBytes(int64_t(st.peak - st.medianPeak)) << " against " << rankName(job.ranks[st.medianRow])
            << "\n";
        for (const SiteDelta& d : st.sites)
            out << "      " << formatSignedBytes(d.delta()) << "  " << d.label << "\n";
        if (st.sites.empty())
            out << "      " << s.dim("(no site holds more than on the median rank: the difference is in its peak, not at its report)") << "\n";
    }
}

void renderDiagnosis(const JobView& job, const Style& s, std::ostream& out)
{
    out << "\n" << s.bold("Diagnosis of the job") << "\n";
    if (job.diagnosis.empty()) {
        out << "  nothing found by the job's rules (wrong_device, rank_imbalance); each rank's own diagnosis: "
               "oomscope report FILE\n";
        return;
    }
    for (const Diagnosis& d : job.diagnosis) {
        std::string label = enumName(d.severity);
        std::transform(label.begin(), label.end(), label.begin(), [](unsigned char c) { return char(std::toupper(c)); });
        out << "  " << s.bold(label) << "  " << d.code << ": " << d.message << "\n";
        out << "      -> " << d.suggestion << "\n";
    }
}

} // namespace

std::string formatWallClock(uint64_t unixNs, bool withDate)
{
    const time_t seconds = time_t(unixNs / 1000000000ull);
    struct tm tm {};
    gmtime_r(&seconds, &tm);
    char buf[64];
    std::strftime(buf, sizeof(buf), withDate ? "%Y-%m-%d %H:%M:%S" : "%H:%M:%S", &tm);
    char out[96];
    std::snprintf(out, sizeof(out), "%s.%03u UTC", buf, unsigned((unixNs / 1000000ull) % 1000));
    return out;
}

void renderJobs(const std::vector<JobView>& jobs, const std::vector<SetProblem>& problems, const RenderOptions& options,
                std::ostream& out)
{
    const Style s{options.color};
    if (jobs.size() > 1)
        out << s.bold(std::to_string(jobs.size()) + " jobs") << " in this set: grouped by job id (run_id, else slurm_job_id)\n\n";
    for (size_t i = 0; i < jobs.size(); ++i) {
        if (i > 0)
            out << "\n" << std::string(72, '-') << "\n\n";
        const JobView& job = jobs[i];
        renderHeader(job, s, out);
        renderFirstFailure(job, s, out);
        renderRanks(job, s, out);
        renderSources(job, s, out);
        renderStandouts(job, s, out);
        renderDiagnosis(job, s, out);
    }
    if (!problems.empty()) {
        out << "\n" << s.red("Not read") << " (the rest is shown)\n";
        for (const SetProblem& p : problems)
            out << "  " << p.path << ": " << p.error << "\n";
    }
}

} // namespace oomscope::report
