// A libcupti.so.13 stand-in for tests without a GPU: the subscriber calls of the callback API
// with the real signatures and result codes, one subscriber per process as CUDA 13.0's CUPTI,
// and callbacks for the memory functions of the fake driver (it reports their entry and exit
// through fakecuda_set_cupti_dispatch). Knobs:
//   FAKECUPTI_VERSION   what cuptiGetVersion answers (default 130001, CUDA 13.0's)
// A whole domain enabled (cuptiEnableDomain, cuptiEnableAllDomains) is reported on stderr:
// the tests check that oomscope never does it.
#include <cupti.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

using FakeCuptiDispatch = void (*)(CUpti_CallbackDomain, CUpti_CallbackId, const CUpti_CallbackData*);
extern "C" void fakecuda_set_cupti_dispatch(FakeCuptiDispatch dispatch);

struct CUpti_Subscriber_st {
    CUpti_CallbackFunc callback;
    void* userdata;
    char name[64];
};

namespace {

constexpr size_t kMaxCbid = 2048;

std::mutex g_mutex;
CUpti_Subscriber_st g_subscriber;
std::atomic<CUpti_Subscriber_st*> g_current{nullptr};
std::atomic<bool> g_enabled[CUPTI_CB_DOMAIN_SIZE][kMaxCbid];

void dispatch(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const CUpti_CallbackData* data)
{
    CUpti_Subscriber_st* s = g_current.load(std::memory_order_acquire);
    if (!s || size_t(domain) >= CUPTI_CB_DOMAIN_SIZE || cbid >= kMaxCbid ||
        !g_enabled[domain][cbid].load(std::memory_order_acquire))
        return;
    s->callback(s->userdata, domain, cbid, data);
}

CUptiResult subscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback, void* userdata,
                      const char* name, char* oldName, size_t oldNameSize)
{
    if (!subscriber)
        return CUPTI_ERROR_INVALID_PARAMETER;
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_current.load()) {
        if (oldName && oldNameSize)
            std::snprintf(oldName, oldNameSize, "%s", g_subscriber.name);
        return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    }
    for (auto& domain : g_enabled) {
        for (auto& flag : domain)
            flag.store(false);
    }
    g_subscriber.callback = callback;
    g_subscriber.userdata = userdata;
    std::snprintf(g_subscriber.name, sizeof(g_subscriber.name), "CUPTI for %s", name && *name ? name : "a client");
    *subscriber = &g_subscriber;
    g_current.store(&g_subscriber, std::memory_order_release);
    fakecuda_set_cupti_dispatch(dispatch);
    return CUPTI_SUCCESS;
}

} // namespace

FAKE_EXPORT CUptiResult cuptiGetVersion(uint32_t* version)
{
    if (!version)
        return CUPTI_ERROR_INVALID_PARAMETER;
    const char* v = std::getenv("FAKECUPTI_VERSION");
    *version = v && *v ? uint32_t(std::strtoul(v, nullptr, 10)) : CUPTI_API_VERSION;
    return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback, void* userdata)
{
    return subscribe(subscriber, callback, userdata, nullptr, nullptr, 0);
}

FAKE_EXPORT CUptiResult cuptiSubscribe_v2(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                                          void* userdata, CUpti_SubscriberParams* params)
{
    if (params && params->structSize == 0)
        return CUPTI_ERROR_INVALID_PARAMETER;
    return subscribe(subscriber, callback, userdata, params ? params->subscriberName : nullptr,
                     params ? params->oldSubscriberName : nullptr, params ? params->oldSubscriberSize : 0);
}

FAKE_EXPORT CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle subscriber)
{
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!subscriber || subscriber != g_current.load())
        return CUPTI_ERROR_INVALID_PARAMETER;
    g_current.store(nullptr, std::memory_order_release);
    return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
                                            CUpti_CallbackDomain domain, CUpti_CallbackId cbid)
{
    if (!subscriber || subscriber != g_current.load() || size_t(domain) >= CUPTI_CB_DOMAIN_SIZE || cbid >= kMaxCbid)
        return CUPTI_ERROR_INVALID_PARAMETER;
    g_enabled[domain][cbid].store(enable != 0, std::memory_order_release);
    return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber, CUpti_CallbackDomain domain)
{
    if (!subscriber || subscriber != g_current.load() || size_t(domain) >= CUPTI_CB_DOMAIN_SIZE)
        return CUPTI_ERROR_INVALID_PARAMETER;
    std::fprintf(stderr, "fakecupti: whole domain %d enabled by %s\n", int(domain), subscriber->name);
    for (auto& flag : g_enabled[domain])
        flag.store(enable != 0);
    return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult cuptiEnableAllDomains(uint32_t enable, CUpti_SubscriberHandle subscriber)
{
    for (int d = 1; d < CUPTI_CB_DOMAIN_SIZE; ++d) {
        if (const CUptiResult rc = cuptiEnableDomain(enable, subscriber, CUpti_CallbackDomain(d)); rc != CUPTI_SUCCESS)
            return rc;
    }
    return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult cuptiGetResultString(CUptiResult result, const char** str)
{
    if (!str)
        return CUPTI_ERROR_INVALID_PARAMETER;
    switch (result) {
    case CUPTI_SUCCESS: *str = "CUPTI_SUCCESS"; break;
    case CUPTI_ERROR_INVALID_PARAMETER: *str = "CUPTI_ERROR_INVALID_PARAMETER"; break;
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: *str = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"; break;
    default: *str = "CUPTI_ERROR_UNKNOWN"; break;
    }
    return CUPTI_SUCCESS;
}
