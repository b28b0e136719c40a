// The CUPTI doors of the preload: the program's cuptiSubscribe (we step aside first) and the
// driver's injection entry point (CUDA_INJECTION64_PATH=…/liboomscope.so).
#include "cupti/backend.h"
#include "interpose/recording.h"
#include "interpose/hooks.h"

#include <cupti_result.h>

namespace oi = oomscope::interpose;
using oi::HookId;

OOMSCOPE_EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                                           void* userdata)
{
    const auto real = oi::realFn<HookId::cuptiSubscribe>();
    if (!real)
        return CUPTI_ERROR_NOT_INITIALIZED;
    if (oi::enabled())
        oomscope::cupti::programSubscribes();
    return real(subscriber, callback, userdata);
}

OOMSCOPE_EXPORT CUptiResult cuptiSubscribe_v2(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                                              void* userdata, CUpti_SubscriberParams* params)
{
    const auto real = oi::realFn<HookId::cuptiSubscribe_v2>();
    if (!real)
        return CUPTI_ERROR_NOT_INITIALIZED;
    if (oi::enabled())
        oomscope::cupti::programSubscribes();
    return real(subscriber, callback, userdata, params);
}

// Called by libcuda in cuInit when CUDA_INJECTION64_PATH names this library: CUPTI callbacks
// are then the capture (static runtimes included). Returns 1: the driver goes on either way.
OOMSCOPE_EXPORT int InitializeInjection(void)
{
    if (!oi::enabled())
        return 1;
    oomscope::cupti::markInjected();
    oi::recorder();  // starts the recorder, then CUPTI
    return 1;
}
