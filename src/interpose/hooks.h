// Machinery shared by every wrapper: the HookId enum generated from hooked_functions.def, the
// typed pointers to the real functions, the reentrancy guard and the two recording helpers.
// Wrappers are one line each; everything clever lives in src/track.
//
// Threading: any thread. The hot path takes no lock (the recorder's shards aside) and never
// throws; the guard makes a wrapper reached from inside another wrapper (cudaMalloc →
// cuMemAlloc_v2) a pass-through, so each user call is recorded once, under the outermost name.
#pragma once

#include "track/event.h"
#include "track/ids.h"

#include "interpose/cuda_extra.h"
#include "interpose/device_limit.h"
#include "interpose/nccl_api.h"
#include <dlfcn.h>

#include <atomic>
#include <cstdint>

#define OOMSCOPE_EXPORT extern "C" __attribute__((visibility("default")))

namespace oomscope::interpose {

enum class Family : uint8_t { Runtime, Driver, Loader, Cupti, Nccl };
constexpr size_t kFamilyCount = 5;

enum class HookId : uint16_t {
#define OOMSCOPE_HOOK(family, name) name,
#include "interpose/hooked_functions.def"
#undef OOMSCOPE_HOOK
    Count
};
constexpr size_t kHookCount = size_t(HookId::Count);

struct HookInfo {
    const char* name;
    Family family;
};
extern const HookInfo kHooks[kHookCount];

template <HookId>
struct HookTraits;
// cudaGetDriverEntryPoint is deprecated in CUDA 13 but still exported and still called.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#define OOMSCOPE_HOOK(family, name)                                                                                   \
    template <>                                                                                                       \
    struct HookTraits<HookId::name> {                                                                                 \
        using Fn = decltype(&::name);                                                                                 \
    };
#include "interpose/hooked_functions.def"
#undef OOMSCOPE_HOOK
#pragma GCC diagnostic pop

// The real function behind a hook: resolved on first use (RTLD_NEXT, then the loaded CUDA
// library by soname, then any loaded object of that family), never our own wrapper. Null when
// the library is not loaded.
void* resolveReal(HookId id) noexcept;
extern std::atomic<void*> g_real[kHookCount];

template <HookId H>
inline typename HookTraits<H>::Fn realFn() noexcept
{
    void* p = g_real[size_t(H)].load(std::memory_order_acquire);
    if (__builtin_expect(p == nullptr, 0))
        p = resolveReal(H);
    return reinterpret_cast<typename HookTraits<H>::Fn>(p);
}

// A function of the same CUDA library instance as the family's resolved hooks, for our own use
// (cudaGetDevice, cuMemGetInfo_v2…). Never hooked, never recorded. Null when unavailable.
void* auxFunction(Family family, const char* name) noexcept;

// The loader's real dlsym (never our wrapper), for every lookup of our own.
using DlsymFn = void* (*)(void*, const char*) noexcept;  // noexcept: lets dlsym tail-call it
extern std::atomic<DlsymFn> g_loaderDlsym;
DlsymFn loaderDlsym() noexcept;  // finds it on first use
inline void* realDlsym(void* handle, const char* name) noexcept
{
    DlsymFn fn = g_loaderDlsym.load(std::memory_order_acquire);
    if (__builtin_expect(!fn, 0))
        fn = loaderDlsym();
    return fn ? fn(handle, name) : nullptr;
}

// A resolver's answer, replaced by our wrapper of exactly that function when it is one we
// hook (entry_points.cpp).
void* substituteWrapper(Family family, void* fn) noexcept;

// 1 enabled, 2 disabled (OOMSCOPE_DISABLE=1), 0 not yet read.
extern std::atomic<int> g_mode;
bool readMode() noexcept;
inline bool enabled() noexcept
{
    const int mode = g_mode.load(std::memory_order_relaxed);
    return __builtin_expect(mode == 1, 1) || (mode == 0 && readMode());
}

extern thread_local int t_depth __attribute__((tls_model("initial-exec")));
// Set by every outermost hook that records: CUPTI's callback of the call around it (a
// statically linked cudaMalloc whose cuMemAlloc_v2 reached our wrapper) then knows the hooks
// saw it (src/cupti).
extern thread_local bool t_hookRecorded __attribute__((tls_model("initial-exec")));

// Reentrancy guard: only the outermost wrapper on a thread records.
class HookScope {
public:
    HookScope() noexcept : m_outer(t_depth++ == 0) {}
    ~HookScope() { --t_depth; }
    HookScope(const HookScope&) = delete;
    HookScope& operator=(const HookScope&) = delete;
    bool recording() const noexcept
    {
        if (!m_outer || !enabled())
            return false;
        t_hookRecorded = true;
        return true;
    }

private:
    bool m_outer;
};

// The device current on this thread for a call of this family, or -1 (recording.cpp).
int currentDevice(Family family) noexcept;

// The recording helpers, called after the real allocation returns and before the real free.
void afterAlloc(HookId id, track::MemKind kind, int result, uint64_t address, uint64_t size, uint64_t requested,
                uint64_t stream) noexcept;
void beforeFree(HookId id, uint64_t address, uint64_t stream) noexcept;

// Error code of a wrapper whose real function cannot be found (the library is not loaded).
template <class R>
constexpr R unresolvedResult()
{
    return static_cast<R>(3);  // cudaErrorInitializationError == CUDA_ERROR_NOT_INITIALIZED == 3
}

template <HookId H, class OutFn, class... Args>
inline auto allocHook(track::MemKind kind, uint64_t requested, uint64_t stream, OutFn&& out, Args... args)
{
    const auto real = realFn<H>();
    using R = decltype(real(args...));
    if (__builtin_expect(!real, 0))
        return unresolvedResult<R>();
    HookScope scope;
    if (!scope.recording())
        return real(args...);
    if (__builtin_expect(deviceLimitOnFast(), 0) && kind == track::MemKind::Device &&
        deviceLimitRefuses(currentDevice(kHooks[size_t(H)].family), requested)) {
        afterAlloc(H, kind, 2, 0, 0, requested, stream);  // the API's own out-of-memory error
        return static_cast<R>(2);
    }
    LimitOpScope inFlight;  // to the record (device_limit.h)
    const R rc = real(args...);
    uint64_t address = 0, size = requested;
    if (static_cast<int>(rc) == 0)
        out(address, size);
    afterAlloc(H, kind, static_cast<int>(rc), address, size, requested, stream);
    return rc;
}

template <HookId H, class... Args>
inline auto freeHook(uint64_t address, uint64_t stream, Args... args)
{
    const auto real = realFn<H>();
    using R = decltype(real(args...));
    if (__builtin_expect(!real, 0))
        return unresolvedResult<R>();
    HookScope scope;
    if (!scope.recording() || address == 0)
        return real(args...);
    LimitOpScope inFlight;  // from the record to the driver (device_limit.h)
    beforeFree(H, address, stream);
    return real(args...);
}

inline uint64_t toU64(const void* p)
{
    return reinterpret_cast<uint64_t>(p);
}

} // namespace oomscope::interpose
