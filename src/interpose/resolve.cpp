// Finding the real functions behind our wrappers, and the loader's own dlsym.
//
// RTLD_NEXT alone is not enough: PyTorch and JAX load the CUDA libraries as dependencies of
// Python extension modules opened with RTLD_LOCAL, which are not in the global scope that
// RTLD_NEXT searches. So a miss falls back to the already loaded library by soname
// (dlopen(RTLD_NOLOAD) never loads anything), then to any loaded object of that family.
#include "interpose/hooks.h"

#include "track/config.h"

#include <cstring>
#include <dlfcn.h>
#include <link.h>
#include <string>

namespace oomscope::interpose {

const HookInfo kHooks[kHookCount] = {
#define OOMSCOPE_HOOK(family, name) {#name, Family::family},
#include "interpose/hooked_functions.def"
#undef OOMSCOPE_HOOK
};

std::atomic<void*> g_real[kHookCount];
std::atomic<int> g_mode{0};
thread_local int t_depth __attribute__((tls_model("initial-exec"))) = 0;
thread_local bool t_hookRecorded __attribute__((tls_model("initial-exec"))) = false;

namespace {

struct FamilyLibrary {
    const char* const* sonames;
    const char* prefix;  // basename prefix of any loaded object of the family
};
const char* const kRuntimeSonames[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so", nullptr};
const char* const kDriverSonames[] = {"libcuda.so.1", "libcuda.so", nullptr};
const char* const kLoaderSonames[] = {"libc.so.6", nullptr};
const char* const kCuptiSonames[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so", nullptr};
const char* const kNcclSonames[] = {"libnccl.so.2", "libnccl.so", nullptr};

FamilyLibrary libraryOf(Family family)
{
    switch (family) {
    case Family::Runtime: return {kRuntimeSonames, "libcudart"};
    case Family::Driver: return {kDriverSonames, "libcuda.so"};
    case Family::Loader: return {kLoaderSonames, "libc.so"};
    case Family::Cupti: return {kCuptiSonames, "libcupti"};
    case Family::Nccl: return {kNcclSonames, "libnccl"};
    }
    return {kLoaderSonames, "libc.so"};
}

std::atomic<void*> g_familyHandle[kFamilyCount];

// dladdr, not dl_iterate_phdr: this runs inside the first dlsym call, which a sanitizer
// runtime makes while it sets up its interceptors, and dl_iterate_phdr may be one of them, not
// ready yet (TSan's was: a call through its null "real" pointer at every program's start).
bool inOwnModule(const void* p)
{
    Dl_info own{}, other{};
    if (!dladdr(reinterpret_cast<const void*>(&inOwnModule), &own) || !dladdr(p, &other))
        return false;
    return own.dli_fbase == other.dli_fbase;
}

// No function-local static (its guard is a __cxa_guard_* call, which TSan intercepts and is
// not ready for here): loaderDlsym() keeps the result; two threads racing both find the same.
DlsymFn findLoaderDlsym()
{
    for (const char* version : {"GLIBC_2.34", "GLIBC_2.2.5"}) {
        for (void* scope : {RTLD_NEXT, RTLD_DEFAULT}) {
            void* p = dlvsym(scope, "dlsym", version);
            if (p && !inOwnModule(p))
                return reinterpret_cast<DlsymFn>(p);
        }
    }
    if (void* libc = dlopen("libc.so.6", RTLD_NOLOAD | RTLD_LAZY)) {
        for (const char* version : {"GLIBC_2.34", "GLIBC_2.2.5"}) {
            if (void* p = dlvsym(libc, "dlsym", version))
                return reinterpret_cast<DlsymFn>(p);
        }
    }
    return nullptr;
}

// dl_iterate_phdr: the first loaded object (not us) whose basename starts with prefix and
// that defines name.
void* searchLoadedObjects(const char* prefix, const char* name)
{
    struct Query {
        const char* prefix;
        const char* name;
        void* result;
    } q{prefix, name, nullptr};
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* data) -> int {
            auto* query = static_cast<Query*>(data);
            const char* path = info->dlpi_name;
            if (!path || !*path)
                return 0;
            const char* base = std::strrchr(path, '/');
            base = base ? base + 1 : path;
            if (std::strncmp(base, query->prefix, std::strlen(query->prefix)) != 0)
                return 0;
            void* handle = dlopen(path, RTLD_NOLOAD | RTLD_LAZY);
            if (!handle)
                return 0;
            void* p = realDlsym(handle, query->name);
            if (p && !inOwnModule(p)) {
                query->result = p;
                return 1;
            }
            return 0;
        },
        &q);
    return q.result;
}

void* lookupInFamily(Family family, const char* name)
{
    if (void* handle = g_familyHandle[size_t(family)].load(std::memory_order_acquire)) {
        if (void* p = realDlsym(handle, name); p && !inOwnModule(p))
            return p;
    }
    const FamilyLibrary lib = libraryOf(family);
    for (const char* const* soname = lib.sonames; *soname; ++soname) {
        void* handle = dlopen(*soname, RTLD_NOLOAD | RTLD_LAZY);
        if (!handle)
            continue;
        if (void* p = realDlsym(handle, name); p && !inOwnModule(p)) {
            void* expected = nullptr;
            g_familyHandle[size_t(family)].compare_exchange_strong(expected, handle);
            return p;
        }
    }
    return searchLoadedObjects(lib.prefix, name);
}

} // namespace

std::atomic<DlsymFn> g_loaderDlsym{nullptr};

DlsymFn loaderDlsym() noexcept
{
    const DlsymFn fn = findLoaderDlsym();
    g_loaderDlsym.store(fn, std::memory_order_release);
    return fn;
}

bool readMode() noexcept
{
    const bool disabled = track::Config::get().disabled;
    g_mode.store(disabled ? 2 : 1, std::memory_order_relaxed);
    return !disabled;
}

void* resolveReal(HookId id) noexcept
{
    const HookInfo& info = kHooks[size_t(id)];
    void* p = realDlsym(RTLD_NEXT, info.name);
    if (!p || inOwnModule(p))
        p = lookupInFamily(info.family, info.name);
    if (p)
        g_real[size_t(id)].store(p, std::memory_order_release);
    return p;
}

void* auxFunction(Family family, const char* name) noexcept
{
    // Prefer the very library our resolved hooks came from: with two copies of a CUDA library
    // loaded, our own queries must go to the one the program uses.
    if (!g_familyHandle[size_t(family)].load(std::memory_order_acquire)) {
        for (size_t i = 0; i < kHookCount; ++i) {
            void* real = g_real[i].load(std::memory_order_acquire);
            Dl_info dl{};
            if (kHooks[i].family != family || !real || !dladdr(real, &dl) || !dl.dli_fname)
                continue;
            if (void* handle = dlopen(dl.dli_fname, RTLD_NOLOAD | RTLD_LAZY)) {
                void* expected = nullptr;
                g_familyHandle[size_t(family)].compare_exchange_strong(expected, handle);
                break;
            }
        }
    }
    return lookupInFamily(family, name);
}

} // namespace oomscope::interpose
