// The entry-point doors. Most CUDA programs never call an exported allocation function: the
// runtime (dynamic or static) dlopen()s libcuda and takes cuGetProcAddress_v2 with dlsym, then
// every driver function through it; PyTorch takes cuMemCreate & co. through
// cudaGetDriverEntryPointByVersion; XLA and cuda-python use dlsym on a libcuda handle.
//
// Each door calls the real resolver first, then identifies exactly which function it returned
// and hands back our wrapper of that very function; anything it does not identify goes through
// untouched. Identification is by address against the real functions of the library that is
// loaded (cuGetProcAddress, cudaGetDriverEntryPoint*), or by the exact exported name looked up
// in an explicit handle (dlsym). No version is ever inferred from a name and a number: that
// guessing is what broke other interposers (HAMi-core issues #57 and #233).
#include "interpose/hooks.h"

#include <cstring>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // cudaGetDriverEntryPoint

namespace oomscope::interpose {
namespace {

// Our wrappers, in HookId order. With -Bsymbolic-functions these are our own definitions
// even when the preload is dlopen()ed after the CUDA libraries.
const void* const kWrappers[kHookCount] = {
#define OOMSCOPE_HOOK(family, name) reinterpret_cast<const void*>(&::name),
#include "interpose/hooked_functions.def"
#undef OOMSCOPE_HOOK
};

// Hooked names sorted for the dlsym door's lookup (built at compile time order: sorted once).
struct NameIndex {
    const char* name;
    HookId id;
};
NameIndex g_sorted[kHookCount];
std::atomic<bool> g_sortedReady{false};

void sortNames()
{
    // Insertion sort of ~50 names, no allocation: safe from inside dlsym.
    size_t n = 0;
    for (size_t i = 0; i < kHookCount; ++i) {
        NameIndex e{kHooks[i].name, HookId(i)};
        size_t j = n++;
        while (j > 0 && std::strcmp(g_sorted[j - 1].name, e.name) > 0) {
            g_sorted[j] = g_sorted[j - 1];
            --j;
        }
        g_sorted[j] = e;
    }
    g_sortedReady.store(true, std::memory_order_release);
}

int findHook(const char* name)
{
    if (!g_sortedReady.load(std::memory_order_acquire))
        sortNames();  // idempotent: concurrent first callers write the same table
    size_t lo = 0, hi = kHookCount;
    while (lo < hi) {
        const size_t mid = (lo + hi) / 2;
        const int c = std::strcmp(g_sorted[mid].name, name);
        if (c == 0)
            return int(g_sorted[mid].id);
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

bool inOwnWrappers(const void* p)
{
    for (const void* w : kWrappers) {
        if (w == p)
            return true;
    }
    return false;
}

} // namespace

// The function a resolver returned, replaced by our wrapper of the same function when it is
// one of the real functions we hook; otherwise unchanged.
void* substituteWrapper(Family family, void* fn) noexcept
{
    if (!fn || !enabled() || inOwnWrappers(fn))
        return fn;
    for (size_t i = 0; i < kHookCount; ++i) {
        if (kHooks[i].family != family)
            continue;
        void* real = g_real[i].load(std::memory_order_acquire);
        if (!real)
            real = resolveReal(HookId(i));
        if (real == fn)
            return const_cast<void*>(kWrappers[i]);
    }
    return fn;
}

} // namespace oomscope::interpose

namespace oi = oomscope::interpose;
using oi::HookId;

// ---- cuGetProcAddress, both exported versions

OOMSCOPE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags)
{
    const auto real = oi::realFn<HookId::cuGetProcAddress>();
    if (!real)
        return oi::unresolvedResult<CUresult>();
    const CUresult rc = real(symbol, pfn, cudaVersion, flags);
    if (rc == CUDA_SUCCESS && pfn)
        *pfn = oi::substituteWrapper(oi::Family::Driver, *pfn);
    return rc;
}

OOMSCOPE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                              CUdriverProcAddressQueryResult* symbolStatus)
{
    const auto real = oi::realFn<HookId::cuGetProcAddress_v2>();
    if (!real)
        return oi::unresolvedResult<CUresult>();
    const CUresult rc = real(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (rc == CUDA_SUCCESS && pfn)
        *pfn = oi::substituteWrapper(oi::Family::Driver, *pfn);
    return rc;
}

// ---- the runtime's doors to the driver

namespace {
template <class Real, class... Args>
cudaError_t runtimeDoor(Real real, void** funcPtr, Args... args)
{
    if (!real)
        return oi::unresolvedResult<cudaError_t>();
    const cudaError_t rc = real(args...);
    if (rc == cudaSuccess && funcPtr)
        *funcPtr = oi::substituteWrapper(oi::Family::Driver, *funcPtr);
    return rc;
}
} // namespace

OOMSCOPE_EXPORT cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long flags,
                                                     cudaDriverEntryPointQueryResult* driverStatus)
{
    return runtimeDoor(oi::realFn<HookId::cudaGetDriverEntryPoint>(), funcPtr, symbol, funcPtr, flags, driverStatus);
}

OOMSCOPE_EXPORT cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** funcPtr, unsigned long long flags,
                                                          cudaDriverEntryPointQueryResult* driverStatus)
{
    return runtimeDoor(oi::realFn<HookId::cudaGetDriverEntryPoint_ptsz>(), funcPtr, symbol, funcPtr, flags, driverStatus);
}

OOMSCOPE_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                                                              unsigned long long flags,
                                                              cudaDriverEntryPointQueryResult* driverStatus)
{
    return runtimeDoor(oi::realFn<HookId::cudaGetDriverEntryPointByVersion>(), funcPtr, symbol, funcPtr, cudaVersion,
                       flags, driverStatus);
}

OOMSCOPE_EXPORT cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char* symbol, void** funcPtr,
                                                                   unsigned int cudaVersion, unsigned long long flags,
                                                                   cudaDriverEntryPointQueryResult* driverStatus)
{
    return runtimeDoor(oi::realFn<HookId::cudaGetDriverEntryPointByVersion_ptsz>(), funcPtr, symbol, funcPtr,
                       cudaVersion, flags, driverStatus);
}

// ---- dlsym: trivial. No allocation, no logging, no CUDA call. Lookups in the global scope
// (RTLD_DEFAULT, RTLD_NEXT) already find our exported wrappers and must keep the caller's
// identity (RTLD_NEXT is relative to the caller), so they go straight to the loader as a tail
// call; only a lookup of a hooked name in an explicit handle is looked at.

namespace {
__attribute__((noinline)) void* dlsymExplicit(void* handle, const char* name) noexcept
{
    void* p = oi::realDlsym(handle, name);
    const int id = p ? oi::findHook(name) : -1;
    if (id < 0 || !oi::enabled() || oi::kHooks[id].family == oi::Family::Loader)
        return p;
    // Exactly the function named: our wrapper of it, provided it is the very function our
    // wrapper calls (a second copy of the library goes through untouched).
    void* expected = nullptr;
    if (oi::g_real[id].compare_exchange_strong(expected, p, std::memory_order_acq_rel) || expected == p)
        return const_cast<void*>(oi::kWrappers[id]);
    return p;
}

// Cold path of the first call: find the loader's dlsym, then start over (a tail call).
__attribute__((noinline)) void* dlsymFirstCall(void* handle, const char* name) noexcept
{
    if (!oi::loaderDlsym())
        return nullptr;
    return dlsym(handle, name);
}
} // namespace

// Every path to the loader is a tail call (no frame of ours left on the stack), so that the
// loader's "caller", which RTLD_NEXT is relative to, is the program's code. Checked by a test
// and by reading the disassembly: the fast path is a `jmp`.
OOMSCOPE_EXPORT void* dlsym(void* handle, const char* name) noexcept
{
    const oi::DlsymFn fn = oi::g_loaderDlsym.load(std::memory_order_acquire);
    if (__builtin_expect(!fn, 0))
        return dlsymFirstCall(handle, name);
    // Hooked names begin cu (CUDA) or nc (NCCL, which vLLM's PyNccl and ctypes reach this way).
    const bool hookable = (name[0] == 'c' && name[1] == 'u') || (name[0] == 'n' && name[1] == 'c');
    if (handle == RTLD_NEXT || handle == RTLD_DEFAULT || !hookable)
        return fn(handle, name);
    return dlsymExplicit(handle, name);
}
