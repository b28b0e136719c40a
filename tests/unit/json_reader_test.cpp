#include "report/json_reader.h"
#include "report/json_writer.h"
#include "sample_report.h"

#include <catch2/catch.hpp>

#include <regex>

using namespace oomscope::report;

namespace {

std::string readError(const std::string& text)
{
    Report r;
    std::string error;
    REQUIRE_FALSE(readReport(text, &r, &error));
    REQUIRE_FALSE(error.empty());
    CHECK(error.find('\n') == std::string::npos);  // one line
    return error;
}

std::string valid()
{
    return reportToJson(oomscope::test::sampleReport());
}

std::string replaceOnce(std::string s, const std::string& from, const std::string& to)
{
    const size_t p = s.find(from);
    REQUIRE(p != std::string::npos);
    return s.replace(p, from.size(), to);
}

} // namespace

TEST_CASE("reader rejects what is not JSON", "[reader]")
{
    CHECK(readError("") == "empty file");
    CHECK(readError("  \n ") == "empty file");
    CHECK(readError("not json").find("not valid JSON") == 0);
    CHECK(readError("{\"schema\": ").find("truncated") != std::string::npos);
    const std::string full = valid();
    CHECK(readError(full.substr(0, full.size() / 2)).find("not valid JSON") == 0);
    CHECK(readError("{\"a\": \"\\x\"}").find("not valid JSON") == 0);
}

TEST_CASE("reader rejects other documents and other schemas", "[reader]")
{
    CHECK(readError("[1, 2]").find("expected an object") != std::string::npos);
    CHECK(readError("{\"hello\": 1}") == "not an oomscope report (no \"schema\" key)");
    CHECK(readError("{\"schema\": \"oomscope.report/2\"}").find("unsupported schema \"oomscope.report/2\"") == 0);
    CHECK(readError("{\"schema\": 1}").find("unsupported schema 1") == 0);
}

TEST_CASE("reader names the path of a missing or mistyped value", "[reader]")
{
    const std::string full = valid();
    CHECK(readError(replaceOnce(full, "\"tracked_bytes\":", "\"tracked_bytez\":")) == "memory[0].tracked_bytes: missing");
    CHECK(readError(replaceOnce(full, "\"pid\":4242", "\"pid\":\"4242\"")) ==
          "process.pid: expected an integer, got a string");
    CHECK(readError(replaceOnce(full, "\"requested_bytes\":3221225472", "\"requested_bytes\":-1")) ==
          "trigger.requested_bytes: expected an unsigned integer, got a negative integer");
    CHECK(readError(replaceOnce(full, "\"kind\":\"oom\"", "\"kind\":\"boom\"")).find("trigger.kind") == 0);
    CHECK(readError(replaceOnce(full, "\"columns\":[\"time_ns\"", "\"columns\":[\"time\"")).find("timeline.columns[0]") == 0);
    CHECK(readError(replaceOnce(full, "\"module\":1,", "\"module\":77,")).find("undefined module 77") != std::string::npos);
}

TEST_CASE("reader rejects hostile input without crashing", "[reader]")
{
    // Deep nesting: refused before the recursive parser sees it.
    CHECK(readError(std::string(1000000, '[')).find("nesting deeper than") != std::string::npos);
    CHECK(readError("{\"schema\":\"oomscope.report/1\",\"x\":" + std::string(100, '[') + std::string(100, ']') + "}")
              .find("nesting deeper than") != std::string::npos);
    const std::string full = valid();
    // Huge numbers: beyond 64 bits, or floating point where integers belong.
    CHECK(readError(replaceOnce(full, "\"pid\":4242", "\"pid\":99999999999999999999999")).find("process.pid") == 0);
    CHECK(readError(replaceOnce(full, "\"pid\":4242", "\"pid\":1e400")).size() > 0);
    CHECK(readError(replaceOnce(full, "\"stack\":1,\"device\"", "\"stack\":4294967296,\"device\"")).find("out of range") !=
          std::string::npos);
    // A timeline row of the wrong width.
    const std::regex row(R"(\[1100000000,[^\]]*\])");
    CHECK(readError(std::regex_replace(full, row, "[1100000000,\"alloc\"]", std::regex_constants::format_first_only))
              .find("timeline.rows[0]: expected a row of 10 values") == 0);
    // Invalid UTF-8 inside a string.
    CHECK(readError(replaceOnce(full, "node-7", "node-\xff")).find("not valid JSON") == 0);
}

TEST_CASE("timeline rows read the same by the hand reader and by the checked one", "[reader]")
{
    const Report original = oomscope::test::sampleReport();
    const std::string text = reportToJson(original);
    Report fast;
    std::string error;
    REQUIRE(readReport(text, &fast, &error));
    REQUIRE(fast == original);

    // Whitespace between the values: still the hand reader's.
    std::string spaced = std::regex_replace(text, std::regex(R"(\],\[)"), "],\n  [ ");
    Report read;
    REQUIRE(readReport(spaced, &read, &error));
    CHECK(read == original);

    // An escaped name, a value with an exponent: the hand reader gives up, the checked reader
    // reads the escape and refuses the exponent by its path.
    const std::string escaped = std::regex_replace(text, std::regex(R"(,"cudaMalloc",)"), R"(,"cuda\u004dalloc",)");
    REQUIRE(escaped != text);
    REQUIRE(readReport(escaped, &read, &error));
    CHECK(read == original);
    const size_t rows = text.find("\"rows\":[[");
    REQUIRE(rows != std::string::npos);
    std::string exponent = text;
    exponent.insert(text.find(',', rows + 9), "e0");
    CHECK(readError(exponent).find("timeline.rows[0][0]") != std::string::npos);
}
