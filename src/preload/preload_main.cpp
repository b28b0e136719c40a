// The preloaded object's start: its constructor (the Python adapter's path in Python
// processes), and the recorder's start on the first CUDA call, wired to everything the
// hot-path library must not know: the hooks' API names and device probe (src/interpose), the
// report writer (src/interpret through report_writer.h) and CUPTI (src/cupti), which starts
// right after the recorder. Nothing here runs in a process that never touches CUDA, but the
// constructor's one symbol lookup.
#include "common/paths.h"
#include "cupti/backend.h"
#include "interpose/device_probe.h"
#include "interpose/recording.h"
#include "preload/report_writer.h"
#include "track/config.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/stat.h>

namespace oi = oomscope::interpose;
namespace track = oomscope::track;

namespace {

// In a Python process, put the adapter's folder (<prefix>/share/oomscope/python, from
// <prefix>/lib/oomscope/liboomscope.so: common/paths.h) first on PYTHONPATH: the interpreter reads it after the
// constructors of preloaded objects run, so plain LD_PRELOAD gets the PyTorch adapter too.
// Any other process: one failed symbol lookup, nothing else.
__attribute__((constructor)) void onLoad()
{
    if (track::Config::get().disabled || !track::envFlag("OOMSCOPE_TORCH", true))
        return;
    if (!oi::realDlsym(RTLD_DEFAULT, "Py_InitializeFromConfig") && !oi::realDlsym(RTLD_DEFAULT, "Py_Initialize"))
        return;
    const std::string dir = oomscope::common::moduleDirectory(reinterpret_cast<const void*>(&onLoad)) +
                            oomscope::common::kPrefixFromPreloadDir + "/" + oomscope::common::kPythonFromPrefix;
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

// The interposer is a backend when the preload is in the global scope (LD_PRELOAD), not when
// the library was only opened through CUDA_INJECTION64_PATH.
class InterposeSource final : public track::CaptureSource {
public:
    void describe(oomscope::report::Capture& capture) override
    {
        // The handle of dlopen(NULL) searches the global scope whoever asks (RTLD_DEFAULT
        // would search our own local scope too).
        static void* const global = dlopen(nullptr, RTLD_LAZY);
        if (global && oi::realDlsym(global, "oomscope_version"))
            capture.backends.push_back("interpose");
    }
};

void configure(track::Recorder& r)
{
    for (size_t i = 0; i < oi::kHookCount; ++i)
        r.registerApi(oi::kHooks[i].name);
    r.setDeviceProbe(&oi::DriverDeviceProbe::instance());
    // Leaked: reports are written at exit, while static destructors run.
    static auto* writer = new oomscope::preload::PreloadReportWriter();
    r.setWriter(writer);
    static auto* source = new InterposeSource();
    r.addCaptureSource(source);
}

} // namespace

namespace oomscope::interpose {

track::Recorder* recorder() noexcept
{
    if (track::Recorder* r = track::Recorder::get())
        return r;
    track::Recorder* r = nullptr;
    try {
        r = track::Recorder::start(configure);
    } catch (...) {
        return nullptr;
    }
    if (r)
        cupti::start();  // once: the cross-check (or, injected, the capture)
    return r;
}

} // namespace oomscope::interpose
