#include "report/json_reader.h"
#include "report/json_writer.h"
#include "report/render/table.h"
#include "sample_report.h"

#include <catch2/catch.hpp>

#include <dirent.h>
#include <fstream>
#include <sstream>

using namespace oomscope::report;

namespace {

std::string slurp(const std::string& path)
{
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Golden files: tests/fixtures/v1/NAME.json renders to NAME.txt. OOMSCOPE_UPDATE_GOLDEN=1
// rewrites the .txt files (review the diff before committing).
void checkGolden(const Report& report, const std::string& golden)
{
    std::ostringstream out;
    RenderOptions options;
    renderReport(report, options, out);
    if (std::getenv("OOMSCOPE_UPDATE_GOLDEN")) {
        std::ofstream(golden) << out.str();
        return;
    }
    const std::string expected = slurp(golden);
    REQUIRE_FALSE(expected.empty());
    CHECK(out.str() == expected);
}

} // namespace

TEST_CASE("the sample report renders as its golden file", "[render]")
{
    checkGolden(oomscope::test::sampleReport(), std::string(OOMSCOPE_FIXTURES) + "/render/sample.txt");
}

TEST_CASE("every v1 fixture reads and renders as its golden file", "[render][fixtures]")
{
    const std::string dir = std::string(OOMSCOPE_FIXTURES) + "/v1";
    DIR* d = opendir(dir.c_str());
    REQUIRE(d);
    std::vector<std::string> names;
    while (dirent* e = readdir(d)) {
        const std::string name = e->d_name;
        if (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0)
            names.push_back(name.substr(0, name.size() - 5));
    }
    closedir(d);
    REQUIRE(names.size() >= 2);
    for (const std::string& name : names) {
        INFO(name);
        Report report;
        std::string error;
        REQUIRE(readReportFile(dir + "/" + name + ".json", &report, &error));
        checkGolden(report, dir + "/" + name + ".txt");
    }
}

TEST_CASE("colour only when asked", "[render]")
{
    std::ostringstream plain, colored;
    RenderOptions options;
    renderReport(oomscope::test::sampleReport(), options, plain);
    options.color = true;
    renderReport(oomscope::test::sampleReport(), options, colored);
    CHECK(plain.str().find('\033') == std::string::npos);
    CHECK(colored.str().find("\033[1;31mOUT OF MEMORY") != std::string::npos);
}
