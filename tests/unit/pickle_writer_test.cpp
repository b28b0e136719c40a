// The pickle writer against the bytes Python's own pickle gives for the same values (protocol
// 4, frames aside: Python adds a FRAME opcode the writer leaves out, which both readers accept).
#include "report/render/pickle_writer.h"

#include <catch2/catch.hpp>

#include <string>

using oomscope::report::PickleWriter;

namespace {

std::string hex(const std::string& bytes)
{
    static const char digits[] = "0123456789abcdef";
    std::string out;
    for (unsigned char c : bytes) {
        out.push_back(digits[c >> 4]);
        out.push_back(digits[c & 15]);
    }
    return out;
}

template <class Fn>
std::string written(Fn&& fn)
{
    std::string out;
    PickleWriter p(out);
    fn(p);
    return hex(out);
}

} // namespace

TEST_CASE("integers past 32 bits are LONG1 in as few bytes as keep their sign", "[pickle]")
{
    // pickle.dumps(v, 4) without PROTO, FRAME and STOP.
    CHECK(written([](PickleWriter& p) { p.integer(uint64_t(1) << 31); }) == "8a050000008000");
    CHECK(written([](PickleWriter& p) { p.integer((uint64_t(1) << 63) + 5); }) == "8a09050000000000008000");
    CHECK(written([](PickleWriter& p) { p.integer(-(int64_t(1) << 40)); }) == "8a060000000000ff");
    CHECK(written([](PickleWriter& p) { p.integer(int64_t(-1)); }) == "4affffffff");
    CHECK(written([](PickleWriter& p) { p.real(1.5); }) == "473ff8000000000000");
}

TEST_CASE("containers, strings and the memo", "[pickle]")
{
    const std::string longText(300, 'x');
    const std::string bytes = written([&](PickleWriter& p) {
        p.begin();
        p.beginList();
        p.str("\xc3\xa9");
        p.str(longText);
        p.boolean(true);
        p.none();
        p.beginList();
        p.endList();
        const uint32_t memo = p.memoize();
        p.get(memo);
        p.endList();
        p.end();
    });
    CHECK(bytes.substr(0, 4) == "8004");                      // PROTO 4
    CHECK(bytes.find("8c02c3a9") != std::string::npos);       // SHORT_BINUNICODE "é"
    CHECK(bytes.find("582c010000") != std::string::npos);     // BINUNICODE of 300 bytes
    CHECK(bytes.find("884e5d2865946a00000000") != std::string::npos);  // True None [] MEMOIZE GET 0
    CHECK(bytes.substr(bytes.size() - 4) == "652e");          // APPENDS STOP
}

TEST_CASE("long lists are committed in batches, each a valid APPENDS", "[pickle]")
{
    std::string out;
    PickleWriter p(out);
    p.beginList();
    for (int i = 0; i < 2500; ++i) {
        p.integer(int64_t(i));
        p.next(false);
    }
    p.endList();
    size_t appends = 0;
    for (size_t at = 0; (at = out.find("e(", at)) != std::string::npos; ++at)
        ++appends;
    CHECK(appends == 2);  // after 1000 and 2000 elements; the last by endList
}
