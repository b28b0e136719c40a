// Reading a CPython thread's frames as memory, without the GIL: the interpreter's frame,
// code, string and bytes objects by their byte offsets. PyTorch releases the GIL in its
// generated bindings before it allocates, so the C API (python_frames.h) cannot be used in the
// hooks; but a thread's own frame chain does not change while that thread is inside our hook,
// and the code objects its frames hold stay alive, so reading them is safe. The offsets are per
// CPython minor version and are verified once against the C API with the GIL held
// (python_frames.cpp) before any walk uses them.
// Frames of another thread (the borrowed stack of the main thread, for threads without Python
// frames such as autograd's backward) may change under us: those reads go through
// process_vm_readv on our own pid, which fails on an unmapped address instead of faulting.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace oomscope::track::pylayout {

struct Layout {
    // Thread state → current interpreter frame: *(tstate + threadFrame), then, where the version
    // keeps it in a _PyCFrame (3.11, 3.12), *(that + cframeFrame); cframeFrame < 0: direct.
    int threadFrame = -1;
    int cframeFrame = -1;
    // _PyInterpreterFrame
    int frameCode = -1;      // code object (3.13: f_executable)
    int framePrevious = -1;
    int frameInstr = -1;     // prev_instr (3.11, 3.12) or instr_ptr (3.13)
    int frameOwner = -1;     // one byte
    int ownerCStack = -1;    // owner value of the interpreter's shim frames, -1: none
    int frameSize = 0;       // bytes that cover the fields above
    // PyCodeObject (found by scanning a live code object, python_frames.cpp)
    int codeFilename = -1;
    int codeQualname = -1;
    int codeLinetable = -1;
    int codeFirstLine = -1;  // int32
    int codeBytecode = -1;   // co_code_adaptive: PyCode_Type's tp_basicsize
    int codeSize = 0;        // bytes that cover the fields above
    uint64_t codeType = 0;   // &PyCode_Type, to recognise code objects
    // Strings: compact ASCII data follows the header at asciiData.
    int asciiData = -1;
};

// The per-version offsets of the thread state and the interpreter frame; false for a version
// whose layout we do not know (3.10 and older, 3.14 and newer).
bool frameLayoutFor(int major, int minor, Layout& layout);

// Reads n bytes at address: directly, or, when checked, through process_vm_readv on our own
// pid (false where the memory is not mapped). Never faults when checked.
bool readMemory(uint64_t address, void* out, size_t n, bool checked) noexcept;

struct RawFrame {
    uint64_t code = 0;
    int64_t byteOffset = 0;  // instruction address − first instruction
};

// The thread's frames, innermost first, skipping the interpreter's shim frames. At most max.
int walkFrames(const Layout& layout, uint64_t threadState, bool checked, RawFrame* out, int max) noexcept;

struct CodeKey {
    uint64_t filename = 0;
    uint64_t qualname = 0;
    uint64_t linetable = 0;
    int32_t firstLine = 0;
    bool operator==(const CodeKey&) const = default;
};
// The fields that identify a code object (a freed one's address may be reused).
bool readCodeKey(const Layout& layout, uint64_t code, bool checked, CodeKey& key) noexcept;

// A compact ASCII string's text; empty (false) for anything else.
bool readAscii(const Layout& layout, uint64_t string, bool checked, std::string& out);

// The bytes of a bytes object (co_linetable), at most maxSize.
bool readBytes(uint64_t bytes, bool checked, size_t maxSize, std::vector<uint8_t>& out);

// CPython's location table (3.11 and later, Objects/locations.md) as ranges of bytecode:
// [previous end, end) has line (-1: none).
struct LineRange {
    uint32_t end = 0;
    int32_t line = -1;
};
std::vector<LineRange> parseLineTable(const uint8_t* table, size_t size, int firstLine);
// The line of the instruction at byteOffset, as PyCode_Addr2Line gives it; firstLine before
// the code, 0 past its end.
int lineAt(const std::vector<LineRange>& ranges, int64_t byteOffset, int firstLine) noexcept;

} // namespace oomscope::track::pylayout
