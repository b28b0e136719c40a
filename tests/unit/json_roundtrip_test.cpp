#include "report/json_reader.h"
#include "report/json_writer.h"
#include "sample_report.h"

#include <catch2/catch.hpp>

using namespace oomscope::report;

TEST_CASE("a report survives JSON and back unchanged", "[json]")
{
    const Report original = oomscope::test::sampleReport();
    const std::string text = reportToJson(original);
    Report read;
    std::string error;
    REQUIRE(readReport(text, &read, &error));
    CHECK(error.empty());
    CHECK(read == original);
    // And writing what was read gives the same bytes.
    CHECK(reportToJson(read) == text);
}

TEST_CASE("an empty report round-trips", "[json]")
{
    Report original;
    original.trigger.kind = "exit";
    Report read;
    std::string error;
    REQUIRE(readReport(reportToJson(original), &read, &error));
    CHECK(read == original);
}

TEST_CASE("strings are escaped and made valid UTF-8", "[json]")
{
    std::string out;
    appendJsonString(out, std::string("a\"b\\c\n\x01") + "\xff" + "\xc3\xa9");
    CHECK(out == "\"a\\\"b\\\\c\\n\\u0001\xEF\xBF\xBD\xc3\xa9\"");
    Report r;
    r.trigger.kind = "request";
    r.trigger.message = std::string("bad \xc0\xaf bytes \xed\xa0\x80 here");
    Report read;
    std::string error;
    REQUIRE(readReport(reportToJson(r), &read, &error));
    CHECK(read.trigger.message == "bad \xEF\xBF\xBD\xEF\xBF\xBD bytes \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD here");
}

TEST_CASE("a large timeline is written through a sink in chunks", "[json]")
{
    struct Collect : JsonSink {
        std::string data;
        int flushes = 0;
        bool flush(const char* p, size_t n) override
        {
            data.append(p, n);
            ++flushes;
            return true;
        }
    } sink;
    Report r = oomscope::test::sampleReport();
    const TimelineRow row = r.timeline.rows.front();
    r.timeline.rows.assign(100000, row);
    REQUIRE(writeReport(r, sink));
    CHECK(sink.flushes > 1);
    CHECK(sink.data == reportToJson(r));

    struct Failing : JsonSink {
        bool flush(const char*, size_t) override { return false; }
    } failing;
    CHECK_FALSE(writeReport(r, failing));
}
