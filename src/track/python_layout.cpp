#include "track/python_layout.h"

#include <algorithm>
#include <cstring>
#include <sys/uio.h>
#include <unistd.h>

namespace oomscope::track::pylayout {
namespace {

uint64_t load64(const uint8_t* p)
{
    uint64_t v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}

int32_t load32(const uint8_t* p)
{
    int32_t v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}

// Object header: ob_refcnt, ob_type, then (variable-size objects) ob_size.
constexpr int kObType = 8;
constexpr int kObSize = 16;
constexpr int kBytesData = 32;      // PyBytesObject: var header, ob_shash, ob_sval
constexpr int kUnicodeLength = 16;  // PyASCIIObject: header, length, hash, state
constexpr int kUnicodeState = 32;

uint32_t varint(const uint8_t* p, size_t size, size_t& i)
{
    uint32_t value = 0;
    unsigned shift = 0;
    while (i < size) {
        const uint8_t b = p[i++];
        if (shift < 32)
            value |= uint32_t(b & 63) << shift;
        shift += 6;
        if (!(b & 64))
            break;
    }
    return value;
}

int32_t signedVarint(const uint8_t* p, size_t size, size_t& i)
{
    const uint32_t u = varint(p, size, i);
    return (u & 1) ? -int32_t(u >> 1) : int32_t(u >> 1);
}

} // namespace

bool frameLayoutFor(int major, int minor, Layout& l)
{
    if (major != 3)
        return false;
    switch (minor) {
    case 11:  // Include/internal/pycore_frame.h, Include/cpython/pystate.h of 3.11
        l.threadFrame = 56;  // PyThreadState.cframe
        l.cframeFrame = 8;   // _PyCFrame.current_frame, after use_tracing
        l.frameCode = 32;
        l.framePrevious = 48;
        l.frameInstr = 56;
        l.frameOwner = 69;
        l.ownerCStack = -1;  // 3.11 marks entry frames with is_entry, no shim frames
        l.frameSize = 72;
        return true;
    case 12:  // 3.12 and 3.13 share the frame; 3.13 moved current_frame into the thread state
    case 13:
        l.threadFrame = minor == 12 ? 56 : -1;  // 3.13: found by value at calibration
        l.cframeFrame = minor == 12 ? 0 : -1;
        l.frameCode = 0;                        // f_code (3.12), f_executable (3.13)
        l.framePrevious = 8;
        l.frameInstr = 56;
        l.frameOwner = 70;
        l.ownerCStack = 3;
        l.frameSize = 72;
        return true;
    default:
        return false;
    }
}

bool readMemory(uint64_t address, void* out, size_t n, bool checked) noexcept
{
    if (n == 0)
        return true;
    if (address < 4096 || address + n < address)
        return false;
    if (!checked) {
        std::memcpy(out, reinterpret_cast<const void*>(address), n);
        return true;
    }
    iovec local{out, n};
    iovec remote{reinterpret_cast<void*>(address), n};
    return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == ssize_t(n);
}

int walkFrames(const Layout& l, uint64_t threadState, bool checked, RawFrame* out, int max) noexcept
{
    if (l.threadFrame < 0 || l.frameSize <= 0 || l.frameSize > 128 || !threadState)
        return 0;
    uint64_t frame = 0;
    if (!readMemory(threadState + uint64_t(l.threadFrame), &frame, 8, checked))
        return 0;
    if (l.cframeFrame >= 0) {
        const uint64_t cframe = frame;
        frame = 0;
        if (!cframe || !readMemory(cframe + uint64_t(l.cframeFrame), &frame, 8, checked))
            return 0;
    }
    int n = 0;
    uint8_t buf[128];
    for (int hops = 0; frame && n < max && hops < 4096; ++hops) {
        if ((frame & 7) != 0 || !readMemory(frame, buf, size_t(l.frameSize), checked))
            break;
        const uint64_t code = load64(buf + l.frameCode);
        const uint64_t instr = load64(buf + l.frameInstr);
        const int owner = buf[l.frameOwner];
        frame = load64(buf + l.framePrevious);
        if (owner == l.ownerCStack || !code || (code & 7) != 0)
            continue;
        uint64_t type = 0;
        if (!readMemory(code + kObType, &type, 8, checked) || type != l.codeType)
            continue;
        out[n].code = code;
        out[n].byteOffset = int64_t(instr) - int64_t(code + uint64_t(l.codeBytecode));
        ++n;
    }
    return n;
}

bool readCodeKey(const Layout& l, uint64_t code, bool checked, CodeKey& key) noexcept
{
    uint8_t buf[512];
    if (l.codeSize <= 0 || l.codeSize > int(sizeof(buf)) || !readMemory(code, buf, size_t(l.codeSize), checked))
        return false;
    key.filename = load64(buf + l.codeFilename);
    key.qualname = load64(buf + l.codeQualname);
    key.linetable = load64(buf + l.codeLinetable);
    key.firstLine = load32(buf + l.codeFirstLine);
    return true;
}

bool readAscii(const Layout& l, uint64_t string, bool checked, std::string& out)
{
    out.clear();
    if (l.asciiData <= 0 || l.asciiData > 64 || !string)
        return false;
    uint8_t head[64];
    if (!readMemory(string, head, size_t(l.asciiData), checked))
        return false;
    const int64_t length = int64_t(load64(head + kUnicodeLength));
    const uint32_t state = uint32_t(load32(head + kUnicodeState));
    const bool compact = (state >> 5) & 1;
    const bool ascii = (state >> 6) & 1;
    if (!compact || !ascii || length < 0 || length > 4096)
        return false;
    out.resize(size_t(length));
    if (!readMemory(string + uint64_t(l.asciiData), out.data(), size_t(length), checked)) {
        out.clear();
        return false;
    }
    return true;
}

bool readBytes(uint64_t bytes, bool checked, size_t maxSize, std::vector<uint8_t>& out)
{
    out.clear();
    int64_t size = 0;
    if (!bytes || !readMemory(bytes + kObSize, &size, 8, checked) || size < 0 || uint64_t(size) > maxSize)
        return false;
    out.resize(size_t(size));
    if (!readMemory(bytes + kBytesData, out.data(), size_t(size), checked)) {
        out.clear();
        return false;
    }
    return true;
}

std::vector<LineRange> parseLineTable(const uint8_t* p, size_t size, int firstLine)
{
    std::vector<LineRange> ranges;
    int32_t line = firstLine;
    uint32_t end = 0;
    size_t i = 0;
    while (i < size) {
        const uint8_t head = p[i];
        if (!(head & 0x80))
            break;  // not the start of an entry: a table we do not understand
        const int code = (head >> 3) & 15;
        size_t j = i + 1;
        int32_t delta = 0;
        if (code == 13 || code == 14)  // no columns, long form: a signed line delta follows
            delta = signedVarint(p, size, j);
        else if (code == 11)
            delta = 1;
        else if (code == 12)
            delta = 2;
        line += delta;
        end += ((head & 7) + 1) * 2;  // code units of two bytes
        ranges.push_back(LineRange{end, code == 15 ? -1 : line});
        i = i + 1;
        while (i < size && !(p[i] & 0x80))
            ++i;
    }
    return ranges;
}

int lineAt(const std::vector<LineRange>& ranges, int64_t byteOffset, int firstLine) noexcept
{
    if (byteOffset < 0)
        return firstLine;
    const auto it = std::upper_bound(ranges.begin(), ranges.end(), uint64_t(byteOffset),
                                     [](uint64_t offset, const LineRange& r) { return offset < r.end; });
    return it == ranges.end() ? 0 : it->line;
}

} // namespace oomscope::track::pylayout
