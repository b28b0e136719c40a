#include "report/json_reader.h"
#include "report/json_writer.h"
#include "sample_report.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <iterator>

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

TEST_CASE("stacks read the same whether the hand reader takes them or the checked one does", "[json]")
{
    // The sample's stacks are plain ASCII: the hand reader's. A quote in a symbol, a file name in
    // UTF-8 and stacks without a source each send them the checked way; the result is the same.
    Report original = oomscope::test::sampleReport();
    REQUIRE_FALSE(original.stacks.empty());
    for (int variant = 0; variant < 4; ++variant) {
        Report r = original;
        Frame python;
        python.kind = FrameKind::Python;
        python.file = variant == 1 ? "/home/\xc3\xa9t\xc3\xa9/train.py" : "/home/u/train.py";
        python.line = 42;
        python.function = "main";
        Frame native;
        native.symbol = variant == 2 ? "operator\"\"_x(char const*)" : "f(int)";
        native.offset = 0x1234;
        r.stacks.front().frames.push_back(python);
        r.stacks.front().frames.push_back(native);
        if (variant == 3) {
            for (Stack& s : r.stacks)
                s.source.reset();
        }
        const std::string text = reportToJson(r);
        Report read;
        std::string error;
        INFO("variant " << variant);
        REQUIRE(readReport(text, &read, &error));
        CHECK(read.stacks == r.stacks);
        CHECK(read == r);
    }
}

TEST_CASE("an empty report round-trips", "[json]")
{
    Report original;
    original.trigger.kind = TriggerKind::Exit;
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
    r.trigger.kind = TriggerKind::Request;
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

// The field table (fields.h) writes what the hand-written writer of the first fixtures wrote:
// a fixture that has every key of its time reads and writes back to the same bytes; an older
// one (without the keys added later) to the same bytes once those keys are added.
TEST_CASE("every v1 fixture written back is the fixture, byte for byte", "[json][fields]")
{
    const std::string dir = std::string(OOMSCOPE_FIXTURES) + "/v1/";
    for (const char* name : {"fake-cuda-exit.json", "fake-cuda-oom.json", "fake-step-loop-leaky-exit.json",
                             "fake-step-loop-steady-exit.json", "fake-torch-leak-exit.json", "h200-cuda-example-oom.json",
                             "h200-torch-fraction-oom.json", "h200-torch-gpt2-lines-oom.json", "h200-torch-gpt2-oom.json",
                             "h200-torch-gpt2-tensors-oom.json", "h200-torch-oom.json"}) {
        INFO(name);
        Report read;
        std::string error;
        REQUIRE(readReportFile(dir + name, &read, &error));
        std::ifstream in(dir + name, std::ios::binary);
        const std::string original((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::string written = reportToJson(read);
        // Keys added after a fixture was written come back with their defaults; nothing else moves.
        const std::pair<const char*, const char*> later[] = {
            {"\"pools\"", "\"pools\":[],"},
            {"\"source\"", "\"source\":\"step\","},
            {"\"peak_allocated_bytes\"", "\"peak_allocated_bytes\":null,"},
            {"\"expandable_segments\"", "\"expandable_segments\":null,"},
            {"\"tensors\"", ",\"sites\":[],\"tensors\":[]"},
            {"],\"source\":", ",\"source\":null"},
            {"\"oom_episodes\"", "\"oom_episodes\":0,\"failed_allocations\":0,"}};
        for (const auto& [key, text] : later) {
            if (original.find(key) != std::string::npos)
                continue;
            for (size_t at; (at = written.find(text)) != std::string::npos;)
                written.erase(at, std::strlen(text));
        }
        CHECK(written == original);
    }
}

TEST_CASE("the handle column is written only where an event has a handle, and read back", "[json]")
{
    Report r = oomscope::test::sampleReport();
    const std::string without = reportToJson(r);
    CHECK(without.find("\"handle\"]") == std::string::npos);
    r.timeline.rows[1].handle = 0x51;
    const std::string with = reportToJson(r);
    CHECK(with.find("\"error\",\"handle\"]") != std::string::npos);
    Report read;
    std::string error;
    REQUIRE(readReport(with, &read, &error));
    CHECK(read.timeline.rows[1].handle == 0x51);
    CHECK(read.timeline.rows[0].handle == 0);
    CHECK(read == r);
    // A row of the wrong width for its columns names the row.
    const size_t at = with.find(",81]");
    REQUIRE(at != std::string::npos);
    std::string cut = with;
    cut.erase(at, 3);
    CHECK_FALSE(readReport(cut, &read, &error));
    CHECK(error.find("timeline.rows[") == 0);
}
