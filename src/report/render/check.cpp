#include "report/render/check.h"

#include "report/format.h"
#include "report/json_out.h"

#include <algorithm>

namespace oomscope::report {
namespace {

std::string xmlEscape(const std::string& s)
{
    std::string out;
    for (const char c : s) {
        switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        case '\'': out += "&apos;"; break;
        default:
            // XML 1.0 allows no other control characters than tab, newline and return.
            if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r')
                out += ' ';
            else
                out += c;
        }
    }
    return out;
}

std::string orDash(const std::optional<uint64_t>& v)
{
    return v ? formatBytes(*v) : "-";
}

std::string deltaOf(const std::optional<uint64_t>& a, const std::optional<uint64_t>& b)
{
    if (!a || !b)
        return "-";
    return formatSignedBytes(int64_t(*b) - int64_t(*a));
}

} // namespace

bool CheckedReport::passed() const
{
    return std::all_of(results.begin(), results.end(), [](const CheckResult& c) { return c.passed; });
}

std::string checkJson(const std::vector<CheckedReport>& reports)
{
    JsonOut w;
    w.beginObject();
    w.key("passed");
    w.value(std::all_of(reports.begin(), reports.end(), [](const CheckedReport& r) { return r.passed(); }));
    w.key("reports");
    w.beginArray();
    for (const CheckedReport& r : reports) {
        w.beginObject();
        w.key("name");
        w.value(r.name);
        w.key("passed");
        w.value(r.passed());
        w.key("results");
        w.beginArray();
        for (const CheckResult& c : r.results) {
            w.beginObject();
            w.key("rule");
            w.value(c.rule);
            w.key("passed");
            w.value(c.passed);
            w.key("summary");
            w.value(c.summary);
            if (c.limitBytes) {
                w.key("measured_bytes");
                w.value(c.measuredBytes);
                w.key("limit_bytes");
                w.value(c.limitBytes);
            }
            w.key("details");
            w.beginArray();
            for (const std::string& d : c.details)
                w.value(d);
            w.endArray();
            w.endObject();
        }
        w.endArray();
        w.endObject();
    }
    w.endArray();
    w.endObject();
    std::string out = std::move(w.buffer());
    out += "\n";
    return out;
}

void renderCheck(const std::vector<CheckedReport>& reports, std::ostream& out)
{
    size_t failedRules = 0, rules = 0, failedReports = 0;
    for (const CheckedReport& r : reports) {
        out << r.name << "\n";
        for (const CheckResult& c : r.results) {
            ++rules;
            failedRules += c.passed ? 0 : 1;
            std::string rule = c.rule;
            rule.resize(std::max<size_t>(rule.size() + 1, 14), ' ');
            out << "  " << (c.passed ? "PASS" : "FAIL") << "  " << rule << c.summary << "\n";
            for (const std::string& d : c.details)
                out << "        " << d << "\n";
        }
        failedReports += r.passed() ? 0 : 1;
    }
    if (failedRules == 0)
        out << "oomscope check: PASS (" << rules << (rules == 1 ? " check" : " checks") << " on " << reports.size()
            << (reports.size() == 1 ? " report" : " reports") << ")\n";
    else
        out << "oomscope check: FAIL (" << failedRules << " of " << rules << " checks failed, in " << failedReports
            << " of " << reports.size() << (reports.size() == 1 ? " report" : " reports") << ")\n";
}

std::string junitXml(const std::vector<CheckedReport>& reports)
{
    size_t tests = 0, failures = 0;
    for (const CheckedReport& r : reports) {
        for (const CheckResult& c : r.results) {
            ++tests;
            failures += c.passed ? 0 : 1;
        }
    }
    std::string x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
    x += "<testsuites name=\"oomscope check\" tests=\"" + std::to_string(tests) + "\" failures=\"" +
         std::to_string(failures) + "\">\n";
    x += "  <testsuite name=\"oomscope check\" tests=\"" + std::to_string(tests) + "\" failures=\"" +
         std::to_string(failures) + "\" errors=\"0\" skipped=\"0\">\n";
    for (const CheckedReport& r : reports) {
        for (const CheckResult& c : r.results) {
            x += "    <testcase classname=\"" + xmlEscape("oomscope." + baseName(r.name)) + "\" name=\"" +
                 xmlEscape(c.rule) + "\">\n";
            if (!c.passed) {
                std::string body = c.summary;
                for (const std::string& d : c.details)
                    body += "\n" + d;
                x += "      <failure message=\"" + xmlEscape(c.summary) + "\" type=\"" + xmlEscape(c.rule) + "\">" +
                     xmlEscape(body) + "</failure>\n";
            } else {
                x += "      <system-out>" + xmlEscape(c.summary) + "</system-out>\n";
            }
            x += "    </testcase>\n";
        }
    }
    x += "  </testsuite>\n</testsuites>\n";
    return x;
}

void renderDiff(const std::string& nameA, const std::string& nameB, const ReportDiff& d, size_t topSites,
                std::ostream& out)
{
    out << "A  " << nameA << "\nB  " << nameB << "\n\nMemory per device (A -> B)\n";
    TextTable devices({"device", "tracked A", "tracked B", "delta", "peak A", "peak B", "delta", "reserved A",
                       "reserved B", "delta"},
                      1);
    for (const DeviceDelta& dd : d.devices) {
        devices.addRow({std::to_string(dd.device), formatBytes(dd.trackedA), formatBytes(dd.trackedB),
                        formatSignedBytes(int64_t(dd.trackedB) - int64_t(dd.trackedA)), formatBytes(dd.peakA),
                        formatBytes(dd.peakB), formatSignedBytes(int64_t(dd.peakB) - int64_t(dd.peakA)),
                        orDash(dd.reservedA), orDash(dd.reservedB), deltaOf(dd.reservedA, dd.reservedB)});
    }
    out << devices.render();
    out << "\nSites by growth (live bytes at the trigger)\n";
    if (d.sites.empty()) {
        out << "  no site changed\n";
        return;
    }
    // Numbers right-aligned, the site (the long, left-aligned part) last.
    const size_t n = std::min(topSites, d.sites.size());
    std::vector<std::vector<std::string>> rows = {{"delta", "A", "B", "device"}};
    for (size_t i = 0; i < n; ++i) {
        const SiteDelta& s = d.sites[i];
        rows.push_back({formatSignedBytes(s.delta()), formatBytes(s.bytesA), formatBytes(s.bytesB),
                        std::to_string(s.device)});
    }
    std::vector<size_t> width(4, 0);
    for (const auto& row : rows) {
        for (size_t c = 0; c < 4; ++c)
            width[c] = std::max(width[c], row[c].size());
    }
    for (size_t i = 0; i < rows.size(); ++i) {
        out << " ";
        for (size_t c = 0; c < 4; ++c)
            out << " " << std::string(width[c] - rows[i][c].size(), ' ') << rows[i][c];
        out << "  " << (i == 0 ? std::string("site") : d.sites[i - 1].label) << "\n";
    }
    if (d.sites.size() > n)
        out << "  ... " << (d.sites.size() - n) << " more sites changed\n";
}

} // namespace oomscope::report
