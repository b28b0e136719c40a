#include "report/render/job_html.h"

#include "report/analysis/memory_over_time.h"
#include "report/format.h"
#include "report/render/html.h"
#include "report/render/html_assets.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>

namespace oomscope::report {
namespace {

const char* const kPalette[] = {"#2b6cb0", "#dd6b20", "#2f855a", "#805ad5", "#d53f8c",
                                "#00a3c4", "#975a16", "#4a5568", "#38a169", "#e53e3e"};

std::string esc(const std::string& text)
{
    return escapeHtml(text);
}

std::string num(double v)
{
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f", v);
    return buf;
}

// A rank's device memory over the job's wall clock: the highest total within each span.
struct Series {
    std::vector<std::pair<uint64_t, uint64_t>> points;  // (unix ns, bytes)
};

Series seriesOf(const RankRow& row, size_t buckets)
{
    Series s;
    const Report& r = *row.shown;
    OverTimeOptions o;
    o.buckets = buckets;
    const std::vector<DeviceOverTime> devices = memoryOverTime(r, o);
    if (devices.empty())
        return s;
    const size_t n = devices.front().timeNs.size();
    for (size_t b = 0; b < n; ++b) {
        uint64_t total = 0;
        for (const DeviceOverTime& d : devices)
            total += b < d.totalMax.size() ? d.totalMax[b] : 0;
        s.points.emplace_back(unixTimeOf(r, devices.front().timeNs[b]), total);
    }
    return s;
}

struct Frame {
    double left = 70, top = 12, width = 1100, height = 280;
    uint64_t t0 = 0, t1 = 1, yMax = 1;
    double x(uint64_t t) const { return left + width * double(t - std::min(t, t0)) / double(std::max<uint64_t>(1, t1 - t0)); }
    double y(uint64_t b) const { return top + height - height * double(b) / double(yMax); }
};

void axes(const Frame& f, const JobView& job, std::ostream& out)
{
    for (int i = 0; i <= 4; ++i) {
        const uint64_t b = f.yMax / 4 * uint64_t(i);
        out << "<line x1=\"" << num(f.left) << "\" x2=\"" << num(f.left + f.width) << "\" y1=\"" << num(f.y(b)) << "\" y2=\""
            << num(f.y(b)) << "\" stroke=\"#d9dee7\"/>";
        out << "<text x=\"" << num(f.left - 6) << "\" y=\"" << num(f.y(b) + 4) << "\" text-anchor=\"end\">"
            << esc(formatBytes(b)) << "</text>";
    }
    const uint64_t origin = job.firstFailure ? job.firstFailure->unixNs : f.t0;
    for (int i = 0; i <= 5; ++i) {
        const uint64_t t = f.t0 + (f.t1 - f.t0) / 5 * uint64_t(i);
        char label[32];
        std::snprintf(label, sizeof(label), "%+.2f s", (double(int64_t(t) - int64_t(origin))) / 1e9);
        out << "<text x=\"" << num(f.x(t)) << "\" y=\"" << num(f.top + f.height + 16) << "\" text-anchor=\"middle\">" << label
            << "</text>";
    }
}

void chart(const JobView& job, std::ostream& out)
{
    const size_t buckets = job.ranks.size() > 32 ? 300 : 800;
    std::vector<Series> series;
    Frame f;
    f.t0 = UINT64_MAX;
    f.t1 = 0;
    f.yMax = 0;
    for (const RankRow& row : job.ranks) {
        series.push_back(seriesOf(row, buckets));
        for (const auto& [t, b] : series.back().points) {
            f.t0 = std::min(f.t0, t);
            f.t1 = std::max(f.t1, t);
            f.yMax = std::max(f.yMax, b);
        }
    }
    if (f.t0 >= f.t1 || f.yMax == 0) {
        out << "<p class=\"empty\">No timeline to draw.</p>";
        return;
    }
    f.yMax += f.yMax / 20;
    out << "<svg class=\"job-chart\" viewBox=\"0 0 1200 320\" role=\"img\" aria-label=\"device memory of each rank over time\">";
    axes(f, job, out);
    for (size_t i = 0; i < series.size(); ++i) {
        out << "<path data-rank=\"" << esc(rankName(job.ranks[i])) << "\" fill=\"none\" stroke-width=\"1.6\" stroke=\""
            << kPalette[i % 10] << "\" d=\"";
        for (size_t p = 0; p < series[i].points.size(); ++p)
            out << (p ? "L" : "M") << num(f.x(series[i].points[p].first)) << " " << num(f.y(series[i].points[p].second));
        out << "\"><title>" << esc(rankName(job.ranks[i])) << "</title></path>";
    }
    if (job.firstFailure) {
        const double x = f.x(job.firstFailure->unixNs);
        out << "<line data-first-failure=\"" << esc(rankName(job.ranks[job.firstFailure->row])) << "\" x1=\"" << num(x)
            << "\" x2=\"" << num(x) << "\" y1=\"" << num(f.top) << "\" y2=\"" << num(f.top + f.height)
            << "\" stroke=\"#c62828\" stroke-dasharray=\"5 3\"/><text x=\"" << num(x + 4) << "\" y=\"" << num(f.top + 12)
            << "\" fill=\"#c62828\">" << esc(rankName(job.ranks[job.firstFailure->row])) << " fails</text>";
    }
    out << "</svg><div class=\"legend\">";
    for (size_t i = 0; i < job.ranks.size() && i < 64; ++i)
        out << "<span><i style=\"background:" << kPalette[i % 10] << "\"></i>" << esc(rankName(job.ranks[i])) << "</span>";
    if (job.ranks.size() > 64)
        out << "<span>… " << job.ranks.size() - 64 << " more (colours repeat)</span>";
    out << "</div>";
}

std::string cell(const std::string& text, bool number = false)
{
    return std::string(number ? "<td class=\"num\">" : "<td>") + esc(text) + "</td>";
}

void ranksTable(const JobView& job, std::ostream& out)
{
    const std::vector<std::vector<std::string>> cells = rankTableCells(job);
    out << "<table class=\"job\"><tr>";
    for (const std::string& h : cells.front())
        out << "<th>" << esc(h) << "</th>";
    out << "</tr>";
    for (size_t i = 1; i < cells.size(); ++i) {
        const bool failed = job.firstFailure && job.firstFailure->row == i - 1;
        out << "<tr data-rank=\"" << esc(rankName(job.ranks[i - 1])) << "\"" << (failed ? " class=\"failed\"" : "") << ">";
        for (size_t c = 0; c < cells[i].size(); ++c)
            out << cell(cells[i][c], c >= 6);
        out << "</tr>";
    }
    out << "</table>";
}

void findings(const JobView& job, std::ostream& out)
{
    if (job.diagnosis.empty()) {
        out << "<p class=\"empty\">Nothing found by the job's rules (wrong_device, rank_imbalance).</p>";
        return;
    }
    for (size_t i = 0; i < job.diagnosis.size(); ++i) {
        const Diagnosis& d = job.diagnosis[i];
        out << "<div class=\"finding " << enumName(d.severity) << "\" data-code=\"" << esc(d.code) << "\" data-rank=\""
            << esc(job.diagnosisRank[i]) << "\"><span class=\"sev\">" << enumName(d.severity) << "</span><span class=\"code\">"
            << esc(d.code) << "</span>" << esc(d.message) << "<div class=\"fix\">" << esc(d.suggestion) << "</div></div>";
    }
}

void standouts(const JobView& job, std::ostream& out)
{
    if (!job.medianPeak)
        return;
    out << "<h2>Ranks that stand out</h2><p class=\"hint\">Peak at least 10% and 1 GiB above the median rank's "
        << esc(formatBytes(*job.medianPeak)) << ", with the sites that hold more than on the median rank.</p>";
    if (job.standouts.empty())
        out << "<p class=\"empty\">None.</p>";
    for (const RankStandout& s : job.standouts) {
        out << "<h3 data-standout=\"" << esc(rankName(job.ranks[s.row])) << "\">" << esc(rankName(job.ranks[s.row]))
            << ": peak " << esc(formatBytes(s.peak)) << ", " << esc(formatSignedBytes(int64_t(s.peak - s.medianPeak)))
            << " against " << esc(rankName(job.ranks[s.medianRow])) << "</h3><table class=\"job\">";
        for (const SiteDelta& d : s.sites)
            out << "<tr>" << cell(formatSignedBytes(d.delta()), true) << "<td class=\"mono\">" << esc(d.label) << "</td></tr>";
        out << "</table>";
    }
}

void jobSection(const JobView& job, std::ostream& out)
{
    out << "<section class=\"job-section\" data-job=\"" << esc(job.jobId) << "\"><h2>Job "
        << esc(job.jobId.empty() ? "(no job id)" : job.jobKey + " " + job.jobId) << "</h2>";
    if (job.firstFailure) {
        const JobFailure& f = *job.firstFailure;
        out << "<div class=\"finding error\" id=\"first-failure\" data-rank=\"" << esc(rankName(job.ranks[f.row]))
            << "\"><span class=\"sev\">first failure</span>" << esc(rankName(job.ranks[f.row])) << " ("
            << esc(job.ranks[f.row].host) << ", pid " << job.ranks[f.row].pid << ") at " << esc(formatWallClock(f.unixNs, true))
            << ": " << esc(f.what) << "<div class=\"fix mono\">" << esc(f.path) << "</div></div>";
    } else {
        out << "<p class=\"empty\">No rank ran out of memory.</p>";
    }
    if (!job.missingRanks.empty()) {
        std::string missing;
        for (int64_t r : job.missingRanks)
            missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        out << "<div class=\"finding warning\"><span class=\"sev\">missing</span>no report from rank(s) " << esc(missing)
            << "</div>";
    }
    out << "<h2>Device memory of each rank</h2><p class=\"hint\">The highest total within each span of time, on the "
           "job's wall clock (seconds from the first failure).</p>";
    chart(job, out);
    out << "<h2>Ranks</h2>";
    ranksTable(job, out);
    out << "<h2>Diagnosis of the job</h2>";
    findings(job, out);
    standouts(job, out);
    out << "</section>";
}

} // namespace

std::string renderJobHtml(const std::vector<JobView>& jobs, const std::vector<SetProblem>& problems, const std::string& title)
{
    std::ostringstream out;
    if (jobs.size() > 1)
        out << "<p class=\"hint\">" << jobs.size() << " jobs in this set: grouped by job id (run_id, else slurm_job_id).</p>";
    for (const JobView& job : jobs)
        jobSection(job, out);
    if (!problems.empty()) {
        out << "<h2>Not read</h2><ul id=\"problems\">";
        for (const SetProblem& p : problems)
            out << "<li class=\"mono\">" << esc(p.path) << ": " << esc(p.error) << "</li>";
        out << "</ul>";
    }
    return fillTemplate(htmlJobTemplate(),
                        {{"title", esc(title)}, {"css", htmlPageStyle()}, {"jobCss", htmlJobStyle()}, {"body", out.str()}});
}

} // namespace oomscope::report
