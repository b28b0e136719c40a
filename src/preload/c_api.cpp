// The oomscope_* C API (include/oomscope/oomscope.h), and the preload's constructor. Exported;
// never throws.
#include "interpose/capture.h"
#include "oomscope/oomscope.h"
#include "track/config.h"
#include "track/framework_state.h"
#include "track/python_frames.h"
#include "track/triggers.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/stat.h>

#ifndef OOMSCOPE_VERSION
#define OOMSCOPE_VERSION "0.0.0"
#endif

namespace oi = oomscope::interpose;
namespace rec = oomscope::track;

namespace {

thread_local std::string t_lastPath;

std::string ownDirectory()
{
    Dl_info info{};
    if (!dladdr(reinterpret_cast<void*>(&ownDirectory), &info) || !info.dli_fname)
        return {};
    std::string path = info.dli_fname;
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

// In a Python process, put the adapter's folder (<prefix>/share/oomscope/python, beside
// <prefix>/lib/liboomscope.so) first on PYTHONPATH: the interpreter reads it after the
// constructors of preloaded objects run, so plain LD_PRELOAD gets the PyTorch adapter too.
// Any other process: one failed symbol lookup, nothing else.
__attribute__((constructor)) void onLoad()
{
    if (rec::Config::get().disabled || !rec::envFlag("OOMSCOPE_TORCH", true))
        return;
    if (!oi::realDlsym(RTLD_DEFAULT, "Py_InitializeFromConfig") && !oi::realDlsym(RTLD_DEFAULT, "Py_Initialize"))
        return;
    const std::string dir = ownDirectory() + "/../share/oomscope/python";
    struct stat st {};
    if (stat((dir + "/sitecustomize.py").c_str(), &st) != 0)
        return;
    const char* old = std::getenv("PYTHONPATH");
    if (old && std::strstr(old, "share/oomscope/python"))
        return;  // oomscope run already put it there
    std::string value = dir;
    if (old && *old)
        value += ":" + std::string(old);
    setenv("PYTHONPATH", value.c_str(), 1);
}

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
            // Labels become API names of marker events; the table is bounded, the copy kept.
            r->recordMarker(rec::EventKind::Marker, r->registerApi(strdup(label)), 0);
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

OOMSCOPE_EXPORT const char* oomscope_framework_oom(const char* name, int device, unsigned long long requested,
                                                   const char* state)
{
    try {
        if (!oi::enabled() || !name)
            return "";
        if (rec::Recorder* r = oi::recorder()) {
            oi::HookScope scope;
            const rec::FrameworkState parsed = rec::parseFrameworkState(name, state);
            t_lastPath = r->frameworkOom(parsed, device, requested);
            return t_lastPath.c_str();
        }
    } catch (...) {
    }
    return "";
}
