// The oomscope_* C API (include/oomscope/oomscope.h). Exported; never throws.
#include "interpose/capture.h"
#include "oomscope/oomscope.h"
#include "record/triggers.h"

#ifndef OOMSCOPE_VERSION
#define OOMSCOPE_VERSION "0.0.0"
#endif

OOMSCOPE_EXPORT const char* oomscope_dump(const char* reason)
{
    try {
        if (!oomscope::interpose::enabled() || !oomscope::interpose::recorder())
            return "";
        oomscope::interpose::HookScope scope;  // our own CUDA queries are not recorded
        return oomscope::record::requestDump(reason);
    } catch (...) {
        return "";
    }
}

OOMSCOPE_EXPORT const char* oomscope_version(void)
{
    return OOMSCOPE_VERSION;
}
