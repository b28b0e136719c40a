#include "track/python_layout.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <sys/mman.h>
#include <vector>

namespace pl = oomscope::track::pylayout;

TEST_CASE("CPython's location table gives the line of each instruction", "[python]")
{
    const std::vector<uint8_t> table = {
        0xEA, 0x04,              // no columns, 3 code units, line +2
        0xD8, 0x05, 0x0A,        // one line form, 1 unit, line +1, two column bytes
        0xF9,                    // no location, 2 units
        0xF0, 0x03, 0x00, 0x01, 0x01,  // long form, 1 unit, line -1, end line, columns
        0x99, 0x12,              // short form, 2 units, same line
        0xE8, 0x48, 0x03,        // no columns, 1 unit, line +100 (a two-byte varint)
    };
    const auto ranges = pl::parseLineTable(table.data(), table.size(), 10);
    REQUIRE(ranges.size() == 6);
    CHECK(pl::lineAt(ranges, -2, 10) == 10);  // before the first instruction: the first line
    CHECK(pl::lineAt(ranges, 0, 10) == 12);
    CHECK(pl::lineAt(ranges, 5, 10) == 12);
    CHECK(pl::lineAt(ranges, 6, 10) == 13);
    CHECK(pl::lineAt(ranges, 9, 10) == -1);
    CHECK(pl::lineAt(ranges, 12, 10) == 12);
    CHECK(pl::lineAt(ranges, 16, 10) == 12);
    CHECK(pl::lineAt(ranges, 18, 10) == 112);
    CHECK(pl::lineAt(ranges, 20, 10) == 0);  // past the end
    // A byte that starts no entry ends the table there instead of misreading it.
    const std::vector<uint8_t> broken = {0xEA, 0x04, 0x12, 0x34};
    CHECK(pl::parseLineTable(broken.data(), broken.size(), 1).size() == 1);
}

namespace {

// Fake interpreter objects laid out as 3.12 keeps them.
struct alignas(8) Blob {
    uint8_t bytes[512] = {};
    uint64_t at() const { return reinterpret_cast<uint64_t>(bytes); }
    void put64(int offset, uint64_t v) { std::memcpy(bytes + offset, &v, 8); }
    void put32(int offset, int32_t v) { std::memcpy(bytes + offset, &v, 4); }
};

pl::Layout layout312(uint64_t codeType)
{
    pl::Layout l;
    REQUIRE(pl::frameLayoutFor(3, 12, l));
    l.codeType = codeType;
    l.codeFilename = 112;
    l.codeQualname = 128;
    l.codeLinetable = 136;
    l.codeFirstLine = 68;
    l.codeBytecode = 200;
    l.codeSize = 144;
    l.asciiData = 40;
    return l;
}

} // namespace

TEST_CASE("a thread's frames are walked as memory, shim frames skipped", "[python]")
{
    Blob type, tstate, cframe, top, shim, caller, code1, code2, name;
    const pl::Layout l = layout312(type.at());
    tstate.put64(56, cframe.at());
    cframe.put64(0, top.at());
    for (Blob* code : {&code1, &code2})
        code->put64(8, type.at());
    top.put64(0, code1.at());
    top.put64(8, shim.at());
    top.put64(56, code1.at() + 200 + 6);
    shim.put64(0, code2.at());
    shim.put64(8, caller.at());
    shim.bytes[70] = 3;  // owned by the C stack: the interpreter's entry shim
    caller.put64(0, code2.at());
    caller.put64(56, code2.at() + 200 + 40);
    for (bool checked : {false, true}) {
        pl::RawFrame out[8];
        REQUIRE(pl::walkFrames(l, tstate.at(), checked, out, 8) == 2);
        CHECK(out[0].code == code1.at());
        CHECK(out[0].byteOffset == 6);
        CHECK(out[1].code == code2.at());
        CHECK(out[1].byteOffset == 40);
        CHECK(pl::walkFrames(l, tstate.at(), checked, out, 1) == 1);
    }
    // A frame whose code is not a code object is not reported.
    Blob notCode;
    caller.put64(0, notCode.at());
    pl::RawFrame out[8];
    CHECK(pl::walkFrames(l, tstate.at(), false, out, 8) == 1);

    // Another thread's chain may point anywhere: checked reads stop at unmapped memory.
    void* page = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(page != MAP_FAILED);
    top.put64(8, reinterpret_cast<uint64_t>(page));
    CHECK(pl::walkFrames(l, tstate.at(), true, out, 8) == 1);
    uint64_t word = 0;
    CHECK_FALSE(pl::readMemory(reinterpret_cast<uint64_t>(page), &word, 8, true));
    CHECK_FALSE(pl::readMemory(8, &word, 8, true));
    munmap(page, 4096);

    // Code fields, names and the location table by offset.
    code1.put64(112, name.at());
    code1.put64(128, name.at());
    code1.put32(68, 42);
    name.put64(16, 5);                    // length
    name.put32(32, (1 << 5) | (1 << 6));  // compact, ASCII
    std::memcpy(name.bytes + 40, "train", 5);
    pl::CodeKey key;
    REQUIRE(pl::readCodeKey(l, code1.at(), true, key));
    CHECK(key.firstLine == 42);
    std::string text;
    CHECK(pl::readAscii(l, key.filename, true, text));
    CHECK(text == "train");
    name.put32(32, (1 << 5));  // compact but not ASCII: not read
    CHECK_FALSE(pl::readAscii(l, key.filename, false, text));
}

TEST_CASE("layouts are known for CPython 3.11 to 3.13 only", "[python]")
{
    pl::Layout l;
    CHECK(pl::frameLayoutFor(3, 11, l));
    CHECK(pl::frameLayoutFor(3, 13, l));
    CHECK(l.threadFrame < 0);  // found by value at calibration
    CHECK_FALSE(pl::frameLayoutFor(3, 10, l));
    CHECK_FALSE(pl::frameLayoutFor(3, 14, l));
}
