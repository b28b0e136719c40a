// Golden tests for `oomscope check` and `oomscope diff` output on v1 fixtures (the CLI prints
// exactly these), and unit tests of the check rules on hand-built reports.
#include "report/analysis/check.h"
#include "report/json_reader.h"
#include "report/render/check.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

using namespace oomscope::report;

namespace {

const std::string kFixtures = std::string(OOMSCOPE_FIXTURES);

Report load(const std::string& name)
{
    Report r;
    std::string error;
    REQUIRE(readReportFile(kFixtures + "/v1/" + name + ".json", &r, &error));
    return r;
}

// OOMSCOPE_UPDATE_GOLDEN=1 rewrites the golden file (review the diff before committing).
void golden(const std::string& text, const std::string& name)
{
    const std::string path = kFixtures + "/cli/" + name;
    if (std::getenv("OOMSCOPE_UPDATE_GOLDEN")) {
        std::ofstream(path) << text;
        return;
    }
    std::ifstream in(path);
    const std::string expected((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    REQUIRE_FALSE(expected.empty());
    CHECK(text == expected);
}

SourceLine fixtureSource()
{
    // The torch fixture's loop, as the file read: the appending line.
    return [](const std::string& file, uint32_t line) -> std::string {
        const std::string script = "torch_scenarios.py";
        if (file.size() >= script.size() && file.compare(file.size() - script.size(), script.size(), script) == 0 &&
            line == 35)
            return "            history.append(forward(1))  # LEAK-LINE";
        return {};
    };
}

} // namespace

TEST_CASE("check output is golden", "[check][golden]")
{
    CheckOptions options;
    options.failOn = {"leak", "peak", "fragmentation"};
    options.maxPeak = 100ull << 20;
    options.maxFragmentationPercent = 30;
    std::vector<CheckedReport> checked;
    for (const char* name : {"fake-step-loop-leaky-exit", "fake-step-loop-steady-exit", "fake-torch-leak-exit",
                             "h200-torch-gpt2-lines-oom"}) {
        const Report r = load(name);
        checked.push_back(CheckedReport{std::string("tests/fixtures/v1/") + name + ".json",
                                        checkReport(r, options, fixtureSource())});
    }
    CHECK_FALSE(checked[0].passed());  // the leaky loop
    CHECK(checked[1].passed());        // the steady one
    CHECK_FALSE(checked[2].passed());  // the PyTorch-style leak
    CHECK_FALSE(checked[3].passed());  // 138 GiB is over the 100 MiB peak
    std::ostringstream text;
    renderCheck(checked, text);
    golden(text.str(), "check.txt");
    golden(junitXml(checked), "check.junit.xml");
}

TEST_CASE("diff output is golden", "[check][golden]")
{
    const Report steady = load("fake-step-loop-steady-exit");
    const Report leaky = load("fake-step-loop-leaky-exit");
    const ReportDiff d = diffReports(steady, leaky);
    REQUIRE_FALSE(d.sites.empty());
    CHECK(d.sites.front().delta() == int64_t(80ull << 20));
    CHECK(d.sites.front().label.find("keep_step_history") != std::string::npos);
    std::ostringstream text;
    renderDiff("steady.json", "leaky.json", d, 10, text);
    golden(text.str(), "diff.txt");
    // A report against itself: nothing changed.
    CHECK(diffReports(leaky, leaky).sites.empty());
}

TEST_CASE("check rules: peak, fragmentation and growth limits", "[check]")
{
    Report r;
    MemoryRow row;
    row.device = 0;
    row.peakTrackedBytes = 3ull << 30;
    row.reservedBytes = 2ull << 30;
    r.memory.push_back(row);
    Step s;
    StepDevice d;
    d.reservedBytes = 4ull << 30;
    d.inactiveSplitBytes = 1ull << 30;
    s.devices.push_back(d);
    r.steps.push_back(s);
    CHECK(peakOf(r).bytes == 4ull << 30);  // the step's reserved bytes are the highest sample
    CHECK(fragmentationPercent(r) == Approx(25.0));
    CheckOptions o;
    o.failOn = {"peak", "fragmentation", "growth"};
    o.maxPeak = 4ull << 30;
    o.maxFragmentationPercent = 20;
    Report baseline;
    MemoryRow b;
    b.peakTrackedBytes = 3ull << 30;
    baseline.memory.push_back(b);
    o.baseline = &baseline;
    o.maxGrowth = 512ull << 20;
    const auto results = checkReport(r, o, nullptr);
    REQUIRE(results.size() == 3);
    CHECK(results[0].rule == "peak");
    CHECK(results[0].passed);  // equal to the limit
    CHECK(results[1].rule == "fragmentation");
    CHECK_FALSE(results[1].passed);
    CHECK(results[2].rule == "growth");
    CHECK_FALSE(results[2].passed);  // +1 GiB over the baseline
    o.maxGrowth = 1ull << 30;
    CHECK(checkReport(r, o, nullptr)[2].passed);
}
