#include "cupti/backend.h"

#include "common/paths.h"

#include "cupti/calls.h"
#include "interpose/recording.h"
#include "interpose/hooks.h"
#include "track/config.h"
#include "track/process_info.h"

#include <cupti_result.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <functional>
#include <mutex>
#include <string>
#include <sys/stat.h>
#include <unordered_set>
#include <vector>

namespace oomscope::cupti {
namespace {

namespace oi = oomscope::interpose;
using track::Recorder;

// CUPTI of CUDA 12.0 (API version 18) has every callback id of calls.cpp.
constexpr uint32_t kMinVersion = 18;
constexpr size_t kMaxMissedListed = 64;

using GetVersionFn = CUptiResult (*)(uint32_t*);
using SubscribeFn = CUptiResult (*)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*);
using Subscribe2Fn = CUptiResult (*)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*, CUpti_SubscriberParams*);
using UnsubscribeFn = CUptiResult (*)(CUpti_SubscriberHandle);
using EnableCallbackFn = CUptiResult (*)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain, CUpti_CallbackId);
using ResultStringFn = CUptiResult (*)(CUptiResult, const char**);

struct MissedSlot {
    std::atomic<bool> ready{false};
    uint16_t api = 0;
    int device = -1;
    uint64_t size = 0;
    uint64_t address = 0;
    uint64_t timeNs = 0;
    uint32_t stack = 0;
};

struct State {
    std::mutex mutex;  // start, yield, describe
    bool started = false;
    bool injected = false;
    bool programSubscribed = false;
    std::string status = "off";  // coverage.cupti
    std::string library;
    std::string note;
    uint64_t yieldedNs = 0;
    CUpti_SubscriberHandle subscriber = nullptr;
    UnsubscribeFn unsubscribe = nullptr;

    std::mutex originMutex;  // the allocations CUPTI recorded: their runtime frees are ours too
    std::unordered_set<uint64_t> origin;

    std::atomic<bool> active{false};
    std::atomic<uint64_t> confirmed{0};
    std::atomic<uint64_t> missed{0};
    std::atomic<uint64_t> missedBytes{0};
    std::atomic<uint32_t> missedNext{0};
    MissedSlot missedSlots[kMaxMissedListed];
};

State& state()
{
    static State* s = new State();  // leaked: callbacks may run during static destruction
    return *s;
}

// Per thread: how deep we are in CUPTI-reported memory calls (a cudaMalloc's own cuMemAlloc
// is nested), and whether the outermost one runs inside a hook, which records it.
thread_local int t_cuptiDepth __attribute__((tls_model("initial-exec"))) = 0;
thread_local bool t_outerHooked __attribute__((tls_model("initial-exec"))) = false;

void notice(const std::string& text)
{
    dprintf(2, "oomscope: %s\n", text.c_str());
}

// Where libcupti is looked for, in order: OOMSCOPE_CUPTI_LIB alone when set; else a libcupti
// already loaded (the program's own: Kineto's); the folder of the libcudart in use (PyTorch
// wheels: nvidia/cu13/lib) and its toolkit's extras/CUPTI; the folder of the libcuda in use;
// CUDA_HOME/CUDA_PATH; the toolkit's standard location; the loader's search path.
std::vector<std::string> candidates()
{
    std::vector<std::string> out;
    const char* const sonames[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so"};
    std::vector<std::string> dirs;
    const std::string runtime = common::moduleDirectory(reinterpret_cast<void*>(oi::realFn<oi::HookId::cudaMalloc>()));
    if (!runtime.empty()) {
        dirs.push_back(runtime);
        dirs.push_back(runtime + "/../extras/CUPTI/lib64");
        dirs.push_back(runtime + "/../../../extras/CUPTI/lib64");  // targets/<arch>/lib
    }
    const std::string driver = common::moduleDirectory(reinterpret_cast<void*>(oi::realFn<oi::HookId::cuMemAlloc_v2>()));
    if (!driver.empty())
        dirs.push_back(driver);
    for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
        if (const char* home = std::getenv(var); home && *home) {
            dirs.push_back(std::string(home) + "/extras/CUPTI/lib64");
            dirs.push_back(std::string(home) + "/lib64");
        }
    }
    dirs.push_back("/usr/local/cuda/extras/CUPTI/lib64");
    dirs.push_back("/usr/local/cuda/lib64");
    for (const std::string& dir : dirs) {
        for (const char* soname : sonames) {
            const std::string path = dir + "/" + soname;
            if (common::isFile(path))
                out.push_back(path);
        }
    }
    for (const char* soname : sonames)
        out.push_back(soname);  // LD_LIBRARY_PATH, the loader's cache
    return out;
}


// The callback: memory callback ids only; no lock on the common path (calls the hooks saw).
void CUPTIAPI onCallback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* cbdata);

void noteCuptiOrigin(uint64_t address)
{
    State& s = state();
    std::lock_guard<std::mutex> lock(s.originMutex);
    s.origin.insert(address);
}

// True (and forgotten) when CUPTI recorded the allocation at address.
bool takeCuptiOrigin(uint64_t address)
{
    State& s = state();
    std::lock_guard<std::mutex> lock(s.originMutex);
    return s.origin.erase(address) > 0;
}

void recordCall(const Call& c)
{
    Recorder* r = oi::recorder();
    if (!r || !c.spec)
        return;
    State& s = state();
    const CallSpec& spec = *c.spec;
    track::Allocation a;
    a.api = oi::apiOf(spec.hook);
    a.kind = spec.kind;
    a.device = c.device >= 0 ? c.device : oi::currentDevice(oi::Family::Driver);
    a.stream = c.stream;
    const bool ok = c.result == 0;
    auto missed = [&](const track::Allocation& rec) {
        s.missed.fetch_add(1, std::memory_order_relaxed);
        s.missedBytes.fetch_add(rec.size, std::memory_order_relaxed);
        const uint32_t i = s.missedNext.fetch_add(1, std::memory_order_relaxed);
        if (i < kMaxMissedListed) {
            MissedSlot& slot = s.missedSlots[i];
            slot.api = rec.api.value();
            slot.device = rec.device;
            slot.size = rec.size;
            slot.address = rec.address ? rec.address : rec.handle;
            slot.timeNs = track::monotonicNs();
            slot.stack = rec.stack.value();
            slot.ready.store(true, std::memory_order_release);
        }
    };
    switch (spec.op) {
    case Op::Alloc:
    case Op::VmmCreate:
        a.stack = r->captureStack();
        if (!ok) {
            a.size = c.requested;
            r->recordFailure(a, c.result, oi::isOutOfMemory(oi::Family::Driver, c.result));
            return;
        }
        a.size = c.size;
        if (spec.op == Op::Alloc) {
            a.address = c.address;
            if (c.handle)
                oi::notePool(reinterpret_cast<const void*>(c.handle));
            r->recordAlloc(a);
        } else {
            a.handle = c.address;  // cuMemCreate's handle (calls.cpp)
            r->recordVmmCreate(a);
        }
        noteCuptiOrigin(c.address);
        missed(a);
        return;
    case Op::Free:
        if (c.address) {
            r->recordFree(a.api, c.address, c.stream);
            if (spec.domain == CUPTI_CB_DOMAIN_DRIVER_API)
                takeCuptiOrigin(c.address);
        }
        return;
    case Op::VmmRelease: r->recordVmmRelease(a.api, c.address); return;
    case Op::VmmMap:
        if (ok)
            r->recordVmmMap(a.api, c.address, c.size, c.handle);
        return;
    case Op::VmmUnmap: r->recordVmmUnmap(a.api, c.address, c.size); return;
    case Op::Reserve:
    case Op::AddressFree:
        if (ok && c.address)
            r->recordEvent(track::Event::addressRange(a.api.value(), a.device, c.address, c.size));
        return;
    case Op::PoolTrim:
        if (ok)
            r->recordEvent(track::Event::poolTrim(a.api.value(), a.device, c.handle, c.size));
        return;
    }
}

void CUPTIAPI onCallback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* cbdata)
{
    if ((domain != CUPTI_CB_DOMAIN_DRIVER_API && domain != CUPTI_CB_DOMAIN_RUNTIME_API) || !cbdata)
        return;
    const CallSpec* spec = findCall(domain, cbid);
    if (!spec)
        return;
    const auto& data = *static_cast<const CUpti_CallbackData*>(cbdata);
    const bool entry = data.callbackSite == CUPTI_API_ENTER;
    bool outer = false;
    if (entry) {
        outer = t_cuptiDepth++ == 0;
        if (outer) {
            t_outerHooked = oi::t_depth > 0;  // inside a hook: the interposer records this call
            oi::t_hookRecorded = false;       // set by a hook that records inside this call
        }
    } else {
        if (t_cuptiDepth <= 0)
            return;  // its entry came before we subscribed
        outer = --t_cuptiDepth == 0;
    }
    State& s = state();
    if (!outer || !s.active.load(std::memory_order_relaxed) || !oi::enabled())
        return;
    if (t_outerHooked) {
        if (!entry && (spec->op == Op::Alloc || spec->op == Op::VmmCreate))
            s.confirmed.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    if (!entry && oi::t_hookRecorded) {
        // A hook inside recorded it (a statically linked runtime's cudaMalloc reaching our
        // cuMemAlloc_v2 through cuGetProcAddress): seen, not missed.
        if (spec->op == Op::Alloc || spec->op == Op::VmmCreate)
            s.confirmed.fetch_add(1, std::memory_order_relaxed);
        return;
    }
    Call call;
    if (!readCall(*spec, data, &call))
        return;
    if (entry && spec->domain == CUPTI_CB_DOMAIN_RUNTIME_API && !takeCuptiOrigin(call.address))
        return;  // a runtime free: its driver call inside reaches the hooks, unless we recorded the allocation
    oi::HookScope scope;  // our own CUDA queries (the current device) are not recorded
    recordCall(call);
}

class Source final : public track::CaptureSource {
public:
    void describe(report::Capture& capture) override
    {
        State& s = state();
        std::lock_guard<std::mutex> lock(s.mutex);
        report::Coverage c;
        c.cupti = s.status;
        c.library = s.library;
        c.confirmed = s.confirmed.load(std::memory_order_relaxed);
        c.missed = s.missed.load(std::memory_order_relaxed);
        c.missedBytes = s.missedBytes.load(std::memory_order_relaxed);
        Recorder* r = Recorder::get();
        const uint32_t n = std::min<uint32_t>(s.missedNext.load(std::memory_order_relaxed), kMaxMissedListed);
        for (uint32_t i = 0; i < n; ++i) {
            const MissedSlot& slot = s.missedSlots[i];
            if (!slot.ready.load(std::memory_order_acquire))
                continue;
            report::MissedAllocation m;
            m.api = r ? r->apiName(ApiId(slot.api)) : "unknown";
            m.size = slot.size;
            m.device = slot.device;
            m.address = slot.address;
            m.timeNs = slot.timeNs;
            m.stack = slot.stack;
            c.missedAllocations.push_back(std::move(m));
        }
        if (s.status == "active" || s.status == "yielded")
            capture.backends.push_back("cupti");
        if (!s.note.empty())
            capture.notes.push_back(s.note);
        capture.coverage = std::move(c);
    }
};

// Leaked: a report written at exit runs after static destructors.
Source& source()
{
    static Source* s = new Source();
    return *s;
}

// libcupti: OOMSCOPE_CUPTI_LIB, else one already loaded, else the candidates' folders.
void* openLibrary(const track::Config& config)
{
    if (!config.cuptiLib.empty())
        return dlopen(config.cuptiLib.c_str(), RTLD_NOW | RTLD_LOCAL);
    for (const char* soname : {"libcupti.so.13", "libcupti.so.12", "libcupti.so"}) {
        if (void* lib = dlopen(soname, RTLD_NOLOAD | RTLD_NOW))
            return lib;
    }
    for (const std::string& path : candidates()) {
        if (void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL))
            return lib;
    }
    return nullptr;
}

struct CuptiApi {
    GetVersionFn getVersion;
    SubscribeFn subscribe;
    Subscribe2Fn subscribe2;
    UnsubscribeFn unsubscribe;
    EnableCallbackFn enable;
    ResultStringFn resultString;

    explicit CuptiApi(void* lib)
        : getVersion(reinterpret_cast<GetVersionFn>(oi::realDlsym(lib, "cuptiGetVersion"))),
          subscribe(reinterpret_cast<SubscribeFn>(oi::realDlsym(lib, "cuptiSubscribe"))),
          subscribe2(reinterpret_cast<Subscribe2Fn>(oi::realDlsym(lib, "cuptiSubscribe_v2"))),
          unsubscribe(reinterpret_cast<UnsubscribeFn>(oi::realDlsym(lib, "cuptiUnsubscribe"))),
          enable(reinterpret_cast<EnableCallbackFn>(oi::realDlsym(lib, "cuptiEnableCallback"))),
          resultString(reinterpret_cast<ResultStringFn>(oi::realDlsym(lib, "cuptiGetResultString")))
    {
    }
    std::string errorText(CUptiResult rc) const
    {
        const char* text = nullptr;
        if (resultString && resultString(rc, &text) == CUPTI_SUCCESS && text)
            return std::string(text);
        return "CUPTI error " + std::to_string(int(rc));
    }
};

using Fail = std::function<void(const std::string& status, const std::string& why)>;

// Our subscriber, with the memory callback ids enabled one by one (never a whole domain).
// Called with the mutex held.
void subscribeLocked(State& s, const CuptiApi& api, const Fail& fail)
{
    CUpti_SubscriberHandle subscriber = nullptr;
    CUptiResult rc;
    char holder[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 1] = {};
    if (api.subscribe2) {
        CUpti_SubscriberParams params{};
        params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
        params.subscriberName = "oomscope";
        params.oldSubscriberName = holder;
        params.oldSubscriberSize = CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN;
        rc = api.subscribe2(&subscriber, onCallback, nullptr, &params);
    } else {
        rc = api.subscribe(&subscriber, onCallback, nullptr);
    }
    if (rc == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
        const std::string who = holder[0] ? std::string(holder) : std::string("another tool");
        s.status = "busy";
        s.note = "CUPTI: " + who + " holds CUPTI's one subscriber slot: no cross-check";
        notice("CUPTI is in use by " + who + (s.injected ? ": nothing can be recorded through CUDA_INJECTION64_PATH"
                                                         : ": allocations are recorded by the hooks alone"));
        return;
    }
    if (rc != CUPTI_SUCCESS)
        return fail("failed", "cuptiSubscribe failed: " + api.errorText(rc));
    size_t count = 0;
    const CallSpec* calls = memoryCallbacks(&count);
    size_t refused = 0;
    for (size_t i = 0; i < count; ++i) {
        if (api.enable(1, subscriber, calls[i].domain, calls[i].cbid) != CUPTI_SUCCESS)
            ++refused;
    }
    if (refused == count) {
        api.unsubscribe(subscriber);
        return fail("failed", "CUPTI enabled none of the memory callbacks");
    }
    if (refused)
        s.note = "CUPTI: " + std::to_string(refused) + " of " + std::to_string(count) + " memory callbacks could not be enabled";
    s.subscriber = subscriber;
    s.unsubscribe = api.unsubscribe;
    s.status = "active";
    s.active.store(true, std::memory_order_release);
}

// Called with the mutex held.
void startLocked(State& s)
{
    const track::Config& config = track::Config::get();
    if (Recorder* r = oi::recorder())
        r->addCaptureSource(&source());
    if (config.cupti == "off") {
        s.status = "off";
        if (s.injected)
            notice("loaded through CUDA_INJECTION64_PATH with OOMSCOPE_CUPTI=off: nothing is recorded");
        return;
    }
    if (s.programSubscribed) {
        s.status = "busy";
        s.note = "CUPTI: the program's own profiler subscribed first: no cross-check";
        return;
    }
    const Fail fail = [&](const std::string& status, const std::string& why) {
        s.status = status;
        s.note = "CUPTI: " + why;
        notice(why + (s.injected ? ": nothing is recorded" : ": allocations are recorded by the hooks alone"));
    };
    void* lib = openLibrary(config);
    if (!lib)
        return fail("absent", "no libcupti found (" +
                                  (config.cuptiLib.empty() ? std::string("searched next to libcudart, the CUDA toolkit and "
                                                                         "the loader's path; set OOMSCOPE_CUPTI_LIB")
                                                           : config.cuptiLib) +
                                  ")");
    const CuptiApi api(lib);
    // The file the library was loaded from: its folder and name, by one of its functions.
    if (Dl_info info{}; dladdr(api.subscribe ? reinterpret_cast<void*>(api.subscribe) : reinterpret_cast<void*>(api.getVersion),
                               &info) &&
                        info.dli_fname)
        s.library = info.dli_fname;
    uint32_t version = 0;
    if (!api.getVersion || !api.subscribe || !api.unsubscribe || !api.enable || api.getVersion(&version) != CUPTI_SUCCESS ||
        version < kMinVersion)
        return fail("too_old", s.library + " is too old (API version " + std::to_string(version) + ", " +
                                   std::to_string(kMinVersion) + " or later needed)");
    subscribeLocked(s, api, fail);
}

} // namespace

void start() noexcept
{
    State& s = state();
    try {
        std::lock_guard<std::mutex> lock(s.mutex);
        if (s.started)
            return;
        s.started = true;
        oi::HookScope scope;  // CUPTI's own start-up calls are not recorded
        startLocked(s);
    } catch (...) {
    }
}

void markInjected() noexcept
{
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.injected = true;
}

void programSubscribes() noexcept
{
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    s.programSubscribed = true;
    if (!s.subscriber)
        return;
    s.active.store(false, std::memory_order_release);
    s.unsubscribe(s.subscriber);
    s.subscriber = nullptr;
    s.status = "yielded";
    s.yieldedNs = track::monotonicNs();
    s.note = "CUPTI: yielded the subscriber slot to the program's own profiler; the cross-check counts stop there";
}

} // namespace oomscope::cupti
