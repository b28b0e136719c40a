// Fuzz target: a job folder as `oomscope report DIR`, `check DIR` and `html DIR` take it. The
// input is up to 8 report files separated by a line "\n--\n"; each is read (one error line when
// it is not a report, then named in the view as a problem) and the readable ones go through the
// job view, its checks, the text and the HTML. Nothing may crash, hang or fail a sanitizer.
#include "report/analysis/job.h"
#include "report/json_reader.h"
#include "report/render/job_html.h"
#include "report/render/job_table.h"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    using namespace oomscope::report;
    const std::string input(reinterpret_cast<const char*>(data), size);
    std::deque<Report> reports;  // stable addresses for the members
    std::vector<JobMember> members;
    std::vector<SetProblem> problems;
    size_t from = 0;
    for (int file = 0; file < 8 && from <= input.size(); ++file) {
        const size_t sep = input.find("\n--\n", from);
        const std::string text = input.substr(from, sep == std::string::npos ? std::string::npos : sep - from);
        from = sep == std::string::npos ? input.size() + 1 : sep + 4;
        Report r;
        std::string error;
        const std::string path = "rank" + std::to_string(file) + ".json";
        if (!readReport(text, &r, &error)) {
            if (error.empty() || error.find('\n') != std::string::npos)
                __builtin_trap();  // the contract: one error line
            problems.push_back({path, error});
            continue;
        }
        reports.push_back(std::move(r));
        members.push_back({path, &reports.back()});
    }
    const std::vector<JobView> jobs = jobViews(members);
    for (const JobView& job : jobs)
        (void)checkJob(job);
    std::ostringstream out;
    RenderOptions options;
    renderJobs(jobs, problems, options, out);
    (void)renderJobHtml(jobs, problems, "fuzz");
    return 0;
}
