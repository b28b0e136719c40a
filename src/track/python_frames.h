// Python frames of the calling thread, turned into 64-bit frame tokens for the stack table and
// spliced into the native stack in place of the interpreter's own frames.
// - With the GIL held: walked through the CPython C API found with dlsym (so that processes
//   without Python pay nothing and we link no libpython); code objects are kept alive.
// - Without it (PyTorch releases the GIL before it allocates): the thread's own frames read as
//   memory (python_layout.h), once the layout was verified against the C API on a thread that
//   held the GIL (the first capture with the GIL, or prepare()). Python is never entered.
// - A thread without Python frames (autograd's backward, a library's worker) gets the main
//   thread's Python stack behind a marker frame (kBorrowedFile): the line that waits on it.
// The code table is also read at dump time from other threads, under its mutex.
#pragma once

#include "track/frame_word.h"
#include "track/image.h"

#include <cstdint>
#include <string>
#include <vector>

namespace oomscope::track {

class PythonFrames {
public:
    // True once the interpreter's API was found (the process embeds CPython).
    static bool available() noexcept;

    // With the GIL held (a call from Python): learn this interpreter's frame layout for the
    // unlocked walk, and note the main thread. Harmless anywhere else.
    static void prepare() noexcept;
    // True once the unlocked walk is verified and in use.
    static bool unlockedReady() noexcept;

    // The marker frame in front of a borrowed stack (file, function; line 0).
    static constexpr const char* kBorrowedFile = "<main thread>";
    static constexpr const char* kBorrowedFunction = "Python stack of the main thread; this thread has none";

    // Rewrites frames[0..count) in place: the native frames from the first one in the
    // interpreter on are replaced by the Python frames of this thread (innermost first); at
    // most maxNative native frames stay in front, at most maxPython Python frames follow.
    // Returns the new count, or -1 (frames untouched) where no Python frames could be had.
    static int splice(uint64_t* frames, int count, int maxNative, int maxPython) noexcept;

    // A frame token for a Python frame known by name only (PyTorch's recorded history hands
    // us file, line and function as strings). Any thread.
    static uint64_t token(const std::string& file, const std::string& function, uint32_t line);

    // True for a native return address inside the interpreter (its frames are what Python
    // frames replace).
    static bool inInterpreter(uint64_t pc) noexcept;

    struct Resolved {
        std::string file;
        std::string function;
        std::string module;  // the module's __name__, for attribution
        uint32_t line = 0;
    };
    // Dump time: a Python frame token back to file, function and line.
    static Resolved resolve(uint64_t word);
    // Dump time: every code object named so far, by index (the tokens' bits 32..62).
    static std::vector<PythonCode> codes();
};

} // namespace oomscope::track
