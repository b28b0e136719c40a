// Captures the calling thread's native stack as return addresses. The only file that knows
// libunwind. libunwind.so.8 is loaded with dlopen(RTLD_LOCAL), never as a DT_NEEDED of the
// preload: it exports _Unwind_RaiseException and backtrace(), and in the global scope those
// would take over the host program's C++ exceptions. Without libunwind, glibc's backtrace()
// (libgcc's unwinder) is used.
#pragma once

#include <cstdint>

namespace oomscope::track {

// Call once before captureBacktrace (idempotent, thread-safe). libDir: the folder to look
// for a bundled libunwind.so.8 first (the preload's own folder), or null.
void backtraceInit(const char* libDir) noexcept;

// Any thread; never allocates once initialised. Returns the number of frames written.
int captureBacktrace(uint64_t* out, int max) noexcept;

// "libunwind", "glibc-backtrace" or "none".
const char* unwinderName() noexcept;

} // namespace oomscope::track
