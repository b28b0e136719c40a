// A Python pickle written opcode by opcode (protocol 4's opcodes, no framing): dicts, lists,
// strings, integers of any size that fits 64 bits, floats, booleans, None, pairs, and a memo
// so that a list written once (a stack's frames) is referred to after. Only the opcodes that
// PyTorch's memory_viz page reads (torch/utils/viz/MemoryViz.js unpickles protocol 4 but not 5)
// and Python's pickle of course. Appends to a string.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace oomscope::report {

class PickleWriter {
public:
    explicit PickleWriter(std::string& out) : m_out(out) {}

    void begin() { op(0x80), byte(4); }  // PROTO 4
    void end() { op('.'); }              // STOP

    // Containers: begin, the items (a dict's as key, value, key, value…), end. Items are
    // committed every kBatch, as Python's own pickler does.
    void beginDict() { op('}'), op('('), m_batches.push_back(0); }
    void endDict() { op('u'), m_batches.pop_back(); }
    void beginList() { op(']'), op('('), m_batches.push_back(0); }
    void endList() { op('e'), m_batches.pop_back(); }
    // After each element of a list (or each pair of a dict) whose container may be long.
    void next(bool dict)
    {
        if (!m_batches.empty() && ++m_batches.back() == kBatch) {
            op(dict ? 'u' : 'e');
            op('(');
            m_batches.back() = 0;
        }
    }
    void tuple2() { op(0x86); }

    void str(std::string_view s)
    {
        if (s.size() < 256) {
            op(0x8c);  // SHORT_BINUNICODE
            byte(uint8_t(s.size()));
        } else {
            op('X');  // BINUNICODE
            word(uint32_t(s.size()));
        }
        m_out.append(s.data(), s.size());
    }
    void integer(int64_t v)
    {
        if (v >= INT32_MIN && v <= INT32_MAX) {
            op('J');  // BININT
            word(uint32_t(int32_t(v)));
            return;
        }
        long1(uint64_t(v), v < 0);
    }
    void integer(uint64_t v)
    {
        if (v <= uint64_t(INT32_MAX)) {
            integer(int64_t(v));
            return;
        }
        long1(v, false);
    }
    void real(double v)
    {
        op('G');  // BINFLOAT: 8 bytes, big-endian
        uint64_t bits;
        std::memcpy(&bits, &v, sizeof(bits));
        for (int shift = 56; shift >= 0; shift -= 8)
            byte(uint8_t(bits >> shift));
    }
    void boolean(bool b) { op(b ? 0x88 : 0x89); }
    void none() { op('N'); }

    // The object on top of the stack, remembered: its index for get().
    uint32_t memoize()
    {
        op(0x94);  // MEMOIZE
        return m_memo++;
    }
    void get(uint32_t index)
    {
        op('j');  // LONG_BINGET
        word(index);
    }

private:
    static constexpr uint32_t kBatch = 1000;
    void op(int c) { m_out.push_back(char(c)); }
    void byte(uint8_t b) { m_out.push_back(char(b)); }
    void word(uint32_t w)
    {
        for (int i = 0; i < 4; ++i)
            byte(uint8_t(w >> (8 * i)));
    }
    // LONG1: little-endian two's complement in as few bytes as keep the sign.
    void long1(uint64_t bits, bool negative)
    {
        uint8_t bytes[9];
        int n = 0;
        do {
            bytes[n++] = uint8_t(bits);
            bits >>= 8;
        } while (n < 8 && (negative ? (bits != UINT64_MAX >> (8 * n) || !(bytes[n - 1] & 0x80))
                                    : (bits != 0 || (bytes[n - 1] & 0x80))));
        if (!negative && n == 8 && (bytes[7] & 0x80))
            bytes[n++] = 0;  // a positive value with its top bit set needs a ninth byte
        op(0x8a);
        byte(uint8_t(n));
        m_out.append(reinterpret_cast<const char*>(bytes), size_t(n));
    }

    std::string& m_out;
    uint32_t m_memo = 0;
    std::vector<uint32_t> m_batches;  // elements since the last commit, per open container
};

} // namespace oomscope::report
