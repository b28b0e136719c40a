// The oomscope_* C API (include/oomscope/oomscope.h). Exported; never throws.
#include "interpose/recording.h"
#include "oomscope/oomscope.h"
#include "track/config.h"
#include "track/framework_state.h"
#include "track/python_frames.h"
#include "track/triggers.h"

#include <cstdlib>
#include <cstring>
#include <string>

#ifndef OOMSCOPE_VERSION
#define OOMSCOPE_VERSION "0.0.0"
#endif

namespace oi = oomscope::interpose;
namespace rec = oomscope::track;

namespace {

thread_local std::string t_lastPath;

} // namespace

OOMSCOPE_EXPORT const char* oomscope_dump(const char* reason)
{
    try {
        if (!oi::enabled() || !oi::recorder())
            return "";
        oi::HookScope scope;  // our own CUDA queries are not recorded
        return rec::requestDump(reason);
    } catch (...) {
        return "";
    }
}

OOMSCOPE_EXPORT const char* oomscope_version(void)
{
    return OOMSCOPE_VERSION;
}

OOMSCOPE_EXPORT void oomscope_step(const char* state)
{
    try {
        if (!oi::enabled())
            return;
        if (rec::Recorder* r = oi::recorder()) {
            oi::HookScope scope;
            if (state) {
                const rec::FrameworkState parsed = rec::parseFrameworkState("", state);
                r->recordStep(&parsed);
            } else {
                r->recordStep(nullptr);
            }
        }
    } catch (...) {
    }
}

OOMSCOPE_EXPORT void oomscope_mark(const char* label)
{
    try {
        if (!oi::enabled() || !label)
            return;
        if (rec::Recorder* r = oi::recorder()) {
            // Labels become API names of marker events (the table is bounded).
            r->recordEvent(rec::Event::label(r->registerApi(label).value()));
        }
    } catch (...) {
    }
}

OOMSCOPE_EXPORT int oomscope_framework_attach(const char* name, int reports_oom)
{
    try {
        if (!oi::enabled() || !name)
            return 0;
        // Called from Python with the GIL held (the adapter's ctypes.PyDLL): the moment to learn
        // the interpreter's frame layout, before the framework allocates without the GIL.
        rec::PythonFrames::prepare();
        if (rec::Recorder* r = oi::recorder()) {
            r->attachFramework(name, reports_oom != 0);
            return 1;
        }
    } catch (...) {
    }
    return 0;
}

OOMSCOPE_EXPORT int oomscope_oom_report_wanted(void)
{
    try {
        if (!oi::enabled())
            return 0;
        if (rec::Recorder* r = oi::recorder())
            return r->oomReportWanted() ? 1 : 0;
    } catch (...) {
    }
    return 0;
}

namespace {
// A report with the framework's view: `write(recorder, parsed state)` gives its path. Our own CUDA
// queries inside are not recorded; nothing escapes.
template <class Write>
const char* withFrameworkState(const char* name, const char* state, Write&& write)
{
    try {
        if (!oi::enabled() || !name)
            return "";
        if (rec::Recorder* r = oi::recorder()) {
            oi::HookScope scope;
            t_lastPath = write(*r, rec::parseFrameworkState(name, state));
            return t_lastPath.c_str();
        }
    } catch (...) {
    }
    return "";
}
} // namespace

OOMSCOPE_EXPORT const char* oomscope_framework_oom(const char* name, int device, unsigned long long requested,
                                                   const char* state)
{
    return withFrameworkState(name, state, [&](rec::Recorder& r, const rec::FrameworkState& parsed) {
        return r.frameworkOom(parsed, device, requested);
    });
}

OOMSCOPE_EXPORT const char* oomscope_framework_dump(const char* reason, const char* name, const char* state)
{
    return withFrameworkState(name, state, [&](rec::Recorder& r, const rec::FrameworkState& parsed) {
        return r.frameworkDump(parsed, reason && *reason ? reason : "requested");
    });
}

OOMSCOPE_EXPORT unsigned long long oomscope_peak(int device)
{
    if (!oi::enabled())
        return 0;
    if (rec::Recorder* r = oi::recorder())
        return r->windowPeak(device);
    return 0;
}

OOMSCOPE_EXPORT unsigned long long oomscope_live(int device)
{
    if (!oi::enabled())
        return 0;
    if (rec::Recorder* r = oi::recorder())
        return r->liveBytes(device, rec::MemKind::Device);
    return 0;
}

OOMSCOPE_EXPORT void oomscope_peak_reset(void)
{
    if (!oi::enabled())
        return;
    if (rec::Recorder* r = oi::recorder())
        r->resetPeakWindow();
}

OOMSCOPE_EXPORT void oomscope_python_prepare(void)
{
    if (!oi::enabled())
        return;
    rec::PythonFrames::prepare();
}
