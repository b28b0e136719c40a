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

TEST_CASE("a timeline long enough for the parallel row formatting reads back row for row", "[json]")
{
    Report r = oomscope::test::sampleReport();
    const TimelineRow model = r.timeline.rows.front();
    r.timeline.rows.clear();
    // Past the parallel threshold and not a multiple of any chunk size: every boundary shows.
    for (uint64_t i = 0; i < 300007; ++i) {
        TimelineRow row = model;
        row.timeNs = 1000 + i;
        row.address = 0x7f0000000000 + i * 4096;
        row.size = i % 977;
        row.thread = uint32_t(i % 13);
        r.timeline.rows.push_back(row);
    }
    const std::string text = reportToJson(r);
    Report read;
    std::string error;
    REQUIRE(readReport(text, &read, &error));
    REQUIRE(read.timeline.rows.size() == r.timeline.rows.size());
    // Row for row, with the names (the reader numbers the names it meets, in its own order).
    auto same = [&](const TimelineRow& a, const TimelineRow& b) {
        return a.timeNs == b.timeNs && r.timeline.name(a.kind) == read.timeline.name(b.kind) && a.device == b.device &&
               a.address == b.address && a.size == b.size && a.stream == b.stream &&
               r.timeline.name(a.api) == read.timeline.name(b.api) && a.stack == b.stack && a.thread == b.thread &&
               a.error == b.error;
    };
    size_t firstDifferent = r.timeline.rows.size();
    for (size_t i = 0; i < r.timeline.rows.size() && firstDifferent == r.timeline.rows.size(); ++i) {
        if (!same(r.timeline.rows[i], read.timeline.rows[i]))
            firstDifferent = i;
    }
    CHECK(firstDifferent == r.timeline.rows.size());
}
