// A frame of a stack is one 64-bit word: a native return address, or a Python frame token
// (bit 63 set: code index in bits 32..62, line in bits 0..31; the code index names an entry of
// the Python code table, PythonFrames in the process, the image's pythonCodes elsewhere).
// Header-only: the interpreter decodes tokens without linking the hot path.
#pragma once

#include <cstdint>

namespace oomscope::track {

inline constexpr uint64_t kPythonFrameBit = uint64_t(1) << 63;

inline bool isPythonFrame(uint64_t word)
{
    return (word & kPythonFrameBit) != 0;
}

inline uint32_t pythonCodeIndex(uint64_t word)
{
    return uint32_t((word & ~kPythonFrameBit) >> 32);
}

inline uint32_t pythonLine(uint64_t word)
{
    return uint32_t(word & 0xffffffffu);
}

} // namespace oomscope::track
