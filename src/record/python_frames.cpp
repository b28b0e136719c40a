#include "record/python_frames.h"

#include "record/module_map.h"

#include <algorithm>
#include <atomic>
#include <dlfcn.h>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace oomscope::record {
namespace {

// The CPython C API, by name (stable ABI where it exists; 3.9 and later).
struct PyApi {
    int (*isInitialized)() = nullptr;
    int (*gilStateCheck)() = nullptr;
    void* (*gilStateThisThread)() = nullptr;    // PyThreadState*
    void* (*threadStateGetFrame)(void*) = nullptr;  // PyFrameObject*, new reference
    void* (*frameGetBack)(void*) = nullptr;     // new reference
    void* (*frameGetCode)(void*) = nullptr;     // new reference
    int (*frameGetLineNumber)(void*) = nullptr;
    void (*decRef)(void*) = nullptr;
    void (*incRef)(void*) = nullptr;
    void* (*getAttrString)(void*, const char*) = nullptr;
    const char* (*unicodeAsUtf8)(void*) = nullptr;
    void (*errClear)() = nullptr;
    int (*isFinalizing)() = nullptr;            // Py_IsFinalizing (3.13) or _Py_IsFinalizing
    void* (*frameGetGlobals)(void*) = nullptr;  // PyFrame_GetGlobals (3.11), new reference
    void* (*dictGetItemString)(void*, const char*) = nullptr;  // borrowed
    uint64_t interpreterBegin = 0;              // the module holding the eval loop
    uint64_t interpreterEnd = 0;
    bool ok = false;
};

template <class Fn>
bool find(Fn& slot, const char* name)
{
    slot = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
    return slot != nullptr;
}

const PyApi& api()
{
    static const PyApi* instance = [] {
        auto* a = new PyApi();
        bool ok = find(a->isInitialized, "Py_IsInitialized") && find(a->gilStateCheck, "PyGILState_Check") &&
                  find(a->gilStateThisThread, "PyGILState_GetThisThreadState") &&
                  find(a->threadStateGetFrame, "PyThreadState_GetFrame") && find(a->frameGetBack, "PyFrame_GetBack") &&
                  find(a->frameGetCode, "PyFrame_GetCode") && find(a->frameGetLineNumber, "PyFrame_GetLineNumber") &&
                  find(a->decRef, "Py_DecRef") && find(a->incRef, "Py_IncRef") &&
                  find(a->getAttrString, "PyObject_GetAttrString") && find(a->unicodeAsUtf8, "PyUnicode_AsUTF8") &&
                  find(a->errClear, "PyErr_Clear");
        if (!find(a->isFinalizing, "Py_IsFinalizing"))
            find(a->isFinalizing, "_Py_IsFinalizing");
        find(a->frameGetGlobals, "PyFrame_GetGlobals");
        find(a->dictGetItemString, "PyDict_GetItemString");
        if (ok) {
            void* eval = dlsym(RTLD_DEFAULT, "PyEval_EvalCode");
            const auto range = eval ? moduleRangeOf(eval) : std::pair<uint64_t, uint64_t>{0, 0};
            a->interpreterBegin = range.first;
            a->interpreterEnd = range.second;
        }
        a->ok = ok;
        return a;
    }();
    return *instance;
}

struct CodeInfo {
    std::string file;
    std::string function;
    std::string module;  // __name__ of the frame's globals: "torch.cuda.memory"
};

std::mutex g_codeMutex;
std::unordered_map<const void*, uint32_t>* g_codeIndex = nullptr;  // leaked: read at exit
std::unordered_map<std::string, uint32_t>* g_namedIndex = nullptr;  // file + '\0' + function
std::vector<CodeInfo>* g_codes = nullptr;

void ensureTablesLocked()
{
    if (!g_codeIndex) {
        g_codeIndex = new std::unordered_map<const void*, uint32_t>();
        g_namedIndex = new std::unordered_map<std::string, uint32_t>();
        g_codes = new std::vector<CodeInfo>();
    }
}

std::string attrString(const PyApi& py, void* object, const char* name)
{
    void* value = py.getAttrString(object, name);
    if (!value) {
        py.errClear();
        return {};
    }
    const char* utf8 = py.unicodeAsUtf8(value);
    std::string out = utf8 ? utf8 : "";
    if (!utf8)
        py.errClear();
    py.decRef(value);
    return out;
}

std::string moduleName(const PyApi& py, void* frame)
{
    if (!py.frameGetGlobals || !py.dictGetItemString)
        return {};
    void* globals = py.frameGetGlobals(frame);
    if (!globals)
        return {};
    std::string out;
    if (void* name = py.dictGetItemString(globals, "__name__")) {
        if (const char* utf8 = py.unicodeAsUtf8(name))
            out = utf8;
        else
            py.errClear();
    }
    py.decRef(globals);
    return out;
}

// Index of a code object, registering it (and keeping it alive) on first sight. GIL held.
uint32_t codeIndex(const PyApi& py, void* code, void* frame)
{
    std::lock_guard<std::mutex> lock(g_codeMutex);
    ensureTablesLocked();
    auto it = g_codeIndex->find(code);
    if (it != g_codeIndex->end())
        return it->second;
    if (g_codes->size() >= 0x7fffffff)
        return 0x7fffffff;
    CodeInfo info;
    info.file = attrString(py, code, "co_filename");
    info.function = attrString(py, code, "co_qualname");
    if (info.function.empty())
        info.function = attrString(py, code, "co_name");
    info.module = moduleName(py, frame);
    py.incRef(code);  // a code object's address must never be reused for another while we hold its index
    const uint32_t index = uint32_t(g_codes->size());
    g_codes->push_back(std::move(info));
    g_codeIndex->emplace(code, index);
    return index;
}

} // namespace

bool PythonFrames::available() noexcept
{
    try {
        return api().ok;
    } catch (...) {
        return false;
    }
}

int PythonFrames::splice(uint64_t* frames, int count, int maxNative, int maxPython) noexcept
{
    try {
        const PyApi& py = api();
        if (!py.ok || !py.isInitialized() || (py.isFinalizing && py.isFinalizing()) || !py.gilStateCheck())
            return -1;
        void* tstate = py.gilStateThisThread();
        if (!tstate)
            return -1;
        // Native frames up to the first one in the interpreter stay as they are.
        int keep = 0;
        while (keep < count && keep < maxNative && !(frames[keep] >= py.interpreterBegin && frames[keep] < py.interpreterEnd))
            ++keep;
        uint64_t python[256];
        int n = 0;
        void* frame = py.threadStateGetFrame(tstate);
        while (frame && n < 256 && n < maxPython) {
            void* code = py.frameGetCode(frame);
            const int line = py.frameGetLineNumber(frame);
            if (code) {
                python[n++] = kPythonFrameBit | (uint64_t(codeIndex(py, code, frame)) << 32) | uint32_t(line < 0 ? 0 : line);
                py.decRef(code);
            }
            void* back = py.frameGetBack(frame);
            py.decRef(frame);
            frame = back;
        }
        if (frame)
            py.decRef(frame);
        if (n == 0)
            return -1;
        for (int i = 0; i < n; ++i)
            frames[keep + i] = python[i];
        return keep + n;
    } catch (...) {
        return -1;
    }
}

uint64_t PythonFrames::token(const std::string& file, const std::string& function, uint32_t line)
{
    std::lock_guard<std::mutex> lock(g_codeMutex);
    ensureTablesLocked();
    const std::string key = file + '\0' + function;
    auto it = g_namedIndex->find(key);
    uint32_t index;
    if (it != g_namedIndex->end()) {
        index = it->second;
    } else {
        index = uint32_t(std::min<size_t>(g_codes->size(), 0x7fffffff));
        if (index < 0x7fffffff) {
            g_codes->push_back(CodeInfo{file, function, {}});
            g_namedIndex->emplace(key, index);
        }
    }
    return kPythonFrameBit | (uint64_t(index) << 32) | line;
}

bool PythonFrames::inInterpreter(uint64_t pc) noexcept
{
    try {
        const PyApi& py = api();
        return py.ok && pc >= py.interpreterBegin && pc < py.interpreterEnd;
    } catch (...) {
        return false;
    }
}

PythonFrames::Resolved PythonFrames::resolve(uint64_t word)
{
    Resolved r;
    r.line = uint32_t(word & 0xffffffffu);
    const uint32_t index = uint32_t((word & ~kPythonFrameBit) >> 32);
    std::lock_guard<std::mutex> lock(g_codeMutex);
    if (g_codes && index < g_codes->size()) {
        r.file = (*g_codes)[index].file;
        r.function = (*g_codes)[index].function;
        r.module = (*g_codes)[index].module;
    } else {
        r.file = "<unknown>";
        r.function = "<unknown>";
    }
    return r;
}

} // namespace oomscope::record
