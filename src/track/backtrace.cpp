#include "track/backtrace.h"

#include <atomic>
#include <dlfcn.h>
#include <execinfo.h>
#include <libunwind.h>
#include <mutex>
#include <string>

namespace oomscope::track {
namespace {

using UnwBacktraceFn = int (*)(void**, int);
using UnwSetCachingFn = int (*)(unw_addr_space_t, unw_caching_policy_t);

std::atomic<UnwBacktraceFn> g_unwBacktrace{nullptr};
std::atomic<int> g_mode{0};  // 0 = none, 1 = libunwind, 2 = glibc backtrace()
std::once_flag g_once;

// The exported names of libunwind 1.x for local unwinding on x86-64 (what the UNW_LOCAL_ONLY
// macros of <libunwind.h> expand to).
constexpr const char* kSetCachingPolicy = "_ULx86_64_set_caching_policy";
constexpr const char* kLocalAddrSpace = "_ULx86_64_local_addr_space";

void* openLibunwind(const char* libDir)
{
    const int flags = RTLD_NOW | RTLD_LOCAL;
    if (libDir && *libDir) {
        std::string path = std::string(libDir) + "/libunwind.so.8";
        if (void* handle = dlopen(path.c_str(), flags))
            return handle;
    }
    return dlopen("libunwind.so.8", flags);
}

// ThreadSanitizer's runtime in the process (a program built with -fsanitize=thread): libunwind's
// per-thread trace cache is freed by a thread-specific-data destructor that takes a mutex on
// the destructors' last round, after TSan has finished the thread, and TSan's interceptor of
// pthread_mutex_lock then crashes the exiting thread. glibc's backtrace() keeps nothing per
// thread.
bool underThreadSanitizer()
{
    return dlsym(RTLD_DEFAULT, "__tsan_init") != nullptr;
}

void init(const char* libDir)
{
    void* handle = underThreadSanitizer() ? nullptr : openLibunwind(libDir);
    if (handle) {
        auto fn = reinterpret_cast<UnwBacktraceFn>(dlsym(handle, "unw_backtrace"));
        auto setCaching = reinterpret_cast<UnwSetCachingFn>(dlsym(handle, kSetCachingPolicy));
        auto* space = static_cast<unw_addr_space_t*>(dlsym(handle, kLocalAddrSpace));
        if (setCaching && space)
            setCaching(*space, UNW_CACHE_PER_THREAD);
        if (fn) {
            g_unwBacktrace.store(fn, std::memory_order_release);
            g_mode.store(1, std::memory_order_release);
            return;
        }
    }
    // glibc loads libgcc_s on its first call: do that now, not on the allocation path.
    void* warm[4];
    if (backtrace(warm, 4) > 0)
        g_mode.store(2, std::memory_order_release);
}

} // namespace

void backtraceInit(const char* libDir) noexcept
{
    try {
        std::call_once(g_once, [libDir] { init(libDir); });
    } catch (...) {
    }
}

int captureBacktrace(uint64_t* out, int max) noexcept
{
    static_assert(sizeof(void*) == sizeof(uint64_t));
    switch (g_mode.load(std::memory_order_acquire)) {
    case 1: {
        const int n = g_unwBacktrace.load(std::memory_order_relaxed)(reinterpret_cast<void**>(out), max);
        return n > 0 ? n : 0;
    }
    case 2: {
        const int n = backtrace(reinterpret_cast<void**>(out), max);
        return n > 0 ? n : 0;
    }
    default:
        return 0;
    }
}

const char* unwinderName() noexcept
{
    switch (g_mode.load(std::memory_order_acquire)) {
    case 1:
        return "libunwind";
    case 2:
        return "glibc-backtrace";
    default:
        return "none";
    }
}

} // namespace oomscope::track
