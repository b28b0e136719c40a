#include "report/json_reader.h"
#include "report/report_file.h"
#include "sample_report.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace oomscope::report;

namespace {

struct TempDir {
    std::string path;
    TempDir()
    {
        char tmpl[] = "/tmp/oomscope-test-XXXXXX";
        REQUIRE(mkdtemp(tmpl));
        path = tmpl;
    }
    ~TempDir() { std::system(("rm -rf " + path).c_str()); }
    std::vector<std::string> entries() const
    {
        std::vector<std::string> names;
        DIR* d = opendir(path.c_str());
        while (dirent* e = readdir(d)) {
            if (e->d_name[0] != '.' || std::string(e->d_name).size() > 2)
                if (std::string(e->d_name) != "." && std::string(e->d_name) != "..")
                    names.push_back(e->d_name);
        }
        closedir(d);
        std::sort(names.begin(), names.end());
        return names;
    }
};

std::string slurp(const std::string& path)
{
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

} // namespace

TEST_CASE("report files are written whole, under the next free name", "[file]")
{
    TempDir dir;
    const Report report = oomscope::test::sampleReport();
    const WriteResult first = writeReportFile(report, dir.path, "oomscope-h-1-oom");
    REQUIRE(first.ok);
    CHECK(first.path == dir.path + "/oomscope-h-1-oom.json");
    const WriteResult second = writeReportFile(report, dir.path, "oomscope-h-1-oom");
    REQUIRE(second.ok);
    CHECK(second.path == dir.path + "/oomscope-h-1-oom-2.json");
    // No temporary file left behind; both read back.
    CHECK(dir.entries() == std::vector<std::string>{"oomscope-h-1-oom-2.json", "oomscope-h-1-oom.json"});
    Report read;
    std::string error;
    CHECK(readReportFile(second.path, &read, &error));
    CHECK(read == report);
}

TEST_CASE("a report's file name carries its host, its rank when it has one, pid and trigger", "[file]")
{
    Report report = oomscope::test::sampleReport();
    report.process.hostname = "node 7/a";
    report.process.pid = 4242;
    report.process.rank.reset();
    CHECK(reportStem(report) == "oomscope-node_7_a-4242-" + std::string(enumName(report.trigger.kind)));
    report.process.rank = 12;
    CHECK(reportStem(report) == "oomscope-node_7_a-r12-4242-" + std::string(enumName(report.trigger.kind)));
}

TEST_CASE("a symlink at the target name is never followed nor replaced", "[file]")
{
    TempDir dir;
    const std::string victim = dir.path + "/victim.txt";
    std::ofstream(victim) << "precious";
    REQUIRE(symlink(victim.c_str(), (dir.path + "/oomscope-h-1-exit.json").c_str()) == 0);
    const WriteResult result = writeReportFile(oomscope::test::sampleReport(), dir.path, "oomscope-h-1-exit");
    REQUIRE(result.ok);
    CHECK(result.path == dir.path + "/oomscope-h-1-exit-2.json");
    CHECK(slurp(victim) == "precious");
    struct stat st {};
    REQUIRE(lstat((dir.path + "/oomscope-h-1-exit.json").c_str(), &st) == 0);
    CHECK(S_ISLNK(st.st_mode));
}

TEST_CASE("an unwritable folder gives one error line", "[file]")
{
    const WriteResult result = writeReportFile(oomscope::test::sampleReport(), "/nonexistent/folder", "x");
    CHECK_FALSE(result.ok);
    CHECK(result.error.find("/nonexistent/folder") != std::string::npos);
    CHECK(result.error.find('\n') == std::string::npos);
}
