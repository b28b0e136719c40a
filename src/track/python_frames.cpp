#include "track/python_frames.h"

#include "track/flight_writer.h"
#include "track/module_map.h"
#include "track/python_layout.h"

#include <algorithm>
#include <cstring>
#include <atomic>
#include <dlfcn.h>
#include <mutex>
#include <sys/syscall.h>
#include <unistd.h>
#include <unordered_map>
#include <vector>

namespace oomscope::track {
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
    long (*longAsLong)(void*) = nullptr;
    int (*addPendingCall)(int (*)(void*), void*) = nullptr;  // callable without the GIL
    const unsigned long* version = nullptr;     // Py_Version (3.11)
    uint64_t codeType = 0;                      // &PyCode_Type
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
        find(a->longAsLong, "PyLong_AsLong");
        find(a->addPendingCall, "Py_AddPendingCall");
        a->version = static_cast<const unsigned long*>(dlsym(RTLD_DEFAULT, "Py_Version"));
        a->codeType = reinterpret_cast<uint64_t>(dlsym(RTLD_DEFAULT, "PyCode_Type"));
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
    // Registered with the GIL, a code object is kept alive (pinned). Registered by an unlocked
    // walk it is not: the fields that identify it tell a reused address apart.
    bool pinned = false;
    pylayout::CodeKey key;
    bool linesRead = false;
    std::vector<pylayout::LineRange> lines;
};

std::mutex g_codeMutex;
std::unordered_map<const void*, uint32_t>* g_codeIndex = nullptr;  // leaked: read at exit
std::unordered_map<std::string, uint32_t>* g_namedIndex = nullptr;  // file + '\0' + function
std::vector<CodeInfo>* g_codes = nullptr;

// A new code object's names into the flight-recorder file, for `oomscope recover`.
void journalCode(uint32_t index, const CodeInfo& info)
{
    if (FlightFile* flight = FlightFile::active())
        flight->pythonCode(index, info.file, info.function, info.module);
}

void ensureTablesLocked()
{
    if (!g_codeIndex) {
        g_codeIndex = new std::unordered_map<const void*, uint32_t>();
        g_namedIndex = new std::unordered_map<std::string, uint32_t>();
        g_codes = new std::vector<CodeInfo>();
    }
}

uint64_t frameWord(uint32_t index, int line)
{
    return kPythonFrameBit | (uint64_t(index) << 32) | uint32_t(line < 0 ? 0 : line);
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
    if (it != g_codeIndex->end() && (*g_codes)[it->second].pinned)
        return it->second;
    if (g_codes->size() >= 0x7fffffff)
        return 0x7fffffff;
    CodeInfo info;
    info.file = attrString(py, code, "co_filename");
    info.function = attrString(py, code, "co_qualname");
    if (info.function.empty())
        info.function = attrString(py, code, "co_name");
    info.module = moduleName(py, frame);
    info.pinned = true;
    py.incRef(code);  // a code object's address must never be reused for another while we hold its index
    const uint32_t index = uint32_t(g_codes->size());
    journalCode(index, info);
    g_codes->push_back(std::move(info));
    (*g_codeIndex)[code] = index;
    return index;
}

// ---- Unlocked walks (python_layout.h) ----------------------------------------------------

// 0: not calibrated yet, 1: ready, -1: unavailable in this interpreter.
std::atomic<int> g_calibration{0};
std::mutex g_calibrationMutex;
int g_calibrationAttempts = 0;
pylayout::Layout g_layout;                      // written before g_calibration turns 1 (release)
std::atomic<uint64_t> g_mainThreadState{0};     // the main thread's PyThreadState

bool onMainThread()
{
    return long(syscall(SYS_gettid)) == long(getpid());
}

// "…/site-packages/torch/nn/modules/linear.py" → "torch.nn.modules.linear": what the frame's
// __name__ would be, for attribution, when the frame was read without the GIL.
std::string moduleFromPath(const std::string& file)
{
    for (const char* marker : {"/site-packages/", "/dist-packages/"}) {
        const size_t at = file.rfind(marker);
        if (at == std::string::npos)
            continue;
        std::string name = file.substr(at + std::strlen(marker));
        if (name.size() > 3 && name.compare(name.size() - 3, 3, ".py") == 0)
            name.resize(name.size() - 3);
        std::replace(name.begin(), name.end(), '/', '.');
        return name;
    }
    return {};
}

void* newAttr(const PyApi& py, void* object, const char* name)
{
    void* value = py.getAttrString(object, name);
    if (!value)
        py.errClear();
    return value;
}

// What the C API says of one frame of the calibrating thread.
struct SeenFrame {
    uint64_t code = 0, interpreterFrame = 0;
    uint64_t filename = 0, name = 0, qualname = 0, linetable = 0;
    long firstLine = 0;
    int line = 0;
    std::string file, function;
};

// One frame's code object through the C API (the GIL held); l.asciiData is learnt on the way.
SeenFrame seeFrame(const PyApi& py, void* frame, void* code, pylayout::Layout& l)
{
    SeenFrame s;
    s.code = reinterpret_cast<uint64_t>(code);
    s.line = py.frameGetLineNumber(frame);
    std::memcpy(&s.interpreterFrame, static_cast<char*>(frame) + 24, 8);  // PyFrameObject.f_frame
    void* attrs[4] = {newAttr(py, code, "co_filename"), newAttr(py, code, "co_name"), newAttr(py, code, "co_qualname"),
                      newAttr(py, code, "co_linetable")};
    s.filename = reinterpret_cast<uint64_t>(attrs[0]);
    s.name = reinterpret_cast<uint64_t>(attrs[1]);
    s.qualname = reinterpret_cast<uint64_t>(attrs[2]);
    s.linetable = reinterpret_cast<uint64_t>(attrs[3]);
    if (attrs[0]) {
        const char* utf8 = py.unicodeAsUtf8(attrs[0]);
        if (utf8) {
            s.file = utf8;
            if (l.asciiData < 0 && reinterpret_cast<uint64_t>(utf8) > s.filename &&
                reinterpret_cast<uint64_t>(utf8) - s.filename <= 64)
                l.asciiData = int(reinterpret_cast<uint64_t>(utf8) - s.filename);
        } else {
            py.errClear();
        }
    }
    if (attrs[2]) {
        const char* utf8 = py.unicodeAsUtf8(attrs[2]);
        s.function = utf8 ? utf8 : "";
        if (!utf8)
            py.errClear();
    }
    if (void* first = newAttr(py, code, "co_firstlineno")) {
        s.firstLine = py.longAsLong(first);
        py.decRef(first);
    }
    for (void* attr : attrs) {
        if (attr)
            py.decRef(attr);  // the code object keeps each alive
    }
    return s;
}

// The calibrating thread's frames, innermost first (at most 12).
std::vector<SeenFrame> seeFrames(const PyApi& py, void* tstate, pylayout::Layout& l)
{
    std::vector<SeenFrame> seen;
    void* frame = py.threadStateGetFrame(tstate);
    while (frame && seen.size() < 12) {
        if (void* code = py.frameGetCode(frame)) {
            seen.push_back(seeFrame(py, frame, code, l));
            py.decRef(code);  // this thread's frames keep the code object alive
        }
        void* back = py.frameGetBack(frame);
        py.decRef(frame);
        frame = back;
    }
    if (frame)
        py.decRef(frame);
    py.errClear();
    return seen;
}

// The code object's fields found by value: the offset where every seen code object holds what
// the C API gave.
bool findCodeFields(const std::vector<SeenFrame>& seen, pylayout::Layout& l)
{
    auto candidates = [&](int step, auto&& value) {
        std::vector<int> out;
        for (int off = 24; off + step <= l.codeBytecode; off += step) {
            bool all = true;
            for (const SeenFrame& s : seen) {
                int64_t word = 0;
                std::memcpy(&word, reinterpret_cast<const char*>(s.code) + off, size_t(step));
                if (word != value(s)) {
                    all = false;
                    break;
                }
            }
            if (all)
                out.push_back(off);
        }
        return out;
    };
    const auto filename = candidates(8, [](const SeenFrame& s) { return int64_t(s.filename); });
    const auto name = candidates(8, [](const SeenFrame& s) { return int64_t(s.name); });
    const auto qualname = candidates(8, [](const SeenFrame& s) { return int64_t(s.qualname); });
    const auto linetable = candidates(8, [](const SeenFrame& s) { return int64_t(s.linetable); });
    const auto firstLine = candidates(4, [](const SeenFrame& s) { return int64_t(int32_t(s.firstLine)); });
    bool distinctFirstLines = false;
    for (const SeenFrame& s : seen)
        distinctFirstLines |= s.firstLine != seen[0].firstLine;
    if (filename.empty() || name.empty() || qualname.empty() || linetable.empty() || firstLine.empty() ||
        !distinctFirstLines)
        return false;
    l.codeFilename = filename[0];
    l.codeLinetable = linetable[0];
    l.codeFirstLine = firstLine[0];
    // co_name and co_qualname are one object for a plain function: take the one that is not co_name.
    l.codeQualname = -1;
    for (int off : qualname) {
        if (off != name[0]) {
            l.codeQualname = off;
            break;
        }
    }
    if (l.codeQualname < 0)
        return false;
    l.codeSize = std::max({l.codeFilename, l.codeQualname, l.codeLinetable}) + 8;
    l.codeSize = std::max(l.codeSize, l.codeFirstLine + 4);
    return true;
}

// 3.13: PyThreadState.current_frame, by value.
bool findThreadFrame(void* tstate, const std::vector<SeenFrame>& seen, pylayout::Layout& l)
{
    if (l.threadFrame >= 0)
        return true;
    for (int off = 0; off < 512; off += 8) {
        uint64_t word = 0;
        if (pylayout::readMemory(reinterpret_cast<uint64_t>(tstate) + uint64_t(off), &word, 8, true) &&
            word == seen[0].interpreterFrame) {
            l.threadFrame = off;
            return true;
        }
    }
    return false;
}

// The raw walk must see what the C API saw: code objects, names and lines.
bool rawWalkAgrees(const pylayout::Layout& l, void* tstate, const std::vector<SeenFrame>& seen)
{
    pylayout::RawFrame raw[12];
    const int n = pylayout::walkFrames(l, reinterpret_cast<uint64_t>(tstate), true, raw, int(seen.size()));
    if (n != int(seen.size()))
        return false;
    for (int i = 0; i < n; ++i) {
        const SeenFrame& s = seen[size_t(i)];
        pylayout::CodeKey key;
        std::vector<uint8_t> table;
        std::string file, function;
        if (raw[i].code != s.code || !pylayout::readCodeKey(l, s.code, true, key) ||
            !pylayout::readBytes(key.linetable, true, 1 << 20, table) || key.filename != s.filename ||
            key.qualname != s.qualname || key.firstLine != s.firstLine)
            return false;
        const auto lines = pylayout::parseLineTable(table.data(), table.size(), key.firstLine);
        if (pylayout::lineAt(lines, raw[i].byteOffset, key.firstLine) != s.line)
            return false;
        if (pylayout::readAscii(l, key.filename, true, file) && file != s.file)
            return false;
        if (pylayout::readAscii(l, key.qualname, true, function) && function != s.function)
            return false;
    }
    return true;
}

// With the GIL held, on a thread with Python frames, given the version's frame layout: fill in
// the offsets that scanning live objects can find, then walk this thread's frames both ways
// (C API, raw memory with checked reads) and accept the layout only if code objects, names and
// lines all agree.
bool calibrateLocked(const PyApi& py, void* tstate, pylayout::Layout& l)
{
    l.codeType = py.codeType;
    int64_t basicSize = 0;  // PyTypeObject.tp_basicsize: offsetof(PyCodeObject, co_code_adaptive)
    std::memcpy(&basicSize, reinterpret_cast<const char*>(py.codeType) + 32, sizeof(basicSize));
    if (basicSize < 64 || basicSize > 480)
        return false;
    l.codeBytecode = int(basicSize);
    const std::vector<SeenFrame> seen = seeFrames(py, tstate, l);
    if (seen.size() < 2 || l.asciiData < 0)
        return false;
    return findCodeFields(seen, l) && findThreadFrame(tstate, seen, l) && rawWalkAgrees(l, tstate, seen);
}

// GIL held: remember the main thread's state (threads without Python frames borrow its
// stack) and calibrate the unlocked walk once.
void noteThreadWithGil(const PyApi& py, void* tstate)
{
    if (onMainThread())
        g_mainThreadState.store(reinterpret_cast<uint64_t>(tstate), std::memory_order_relaxed);
    if (g_calibration.load(std::memory_order_acquire) != 0)
        return;
    std::lock_guard<std::mutex> lock(g_calibrationMutex);
    if (g_calibration.load(std::memory_order_relaxed) != 0)
        return;
    // An interpreter whose layout we do not know stays on the C API for good; a known one
    // retries on a later capture (a stack too shallow to tell the fields apart, a debugger's
    // trace function changing the line numbers), at most 16 times.
    pylayout::Layout l;
    const unsigned long version = py.version ? *py.version : 0;
    if (!py.codeType || !py.longAsLong ||
        !pylayout::frameLayoutFor(int((version >> 24) & 0xff), int((version >> 16) & 0xff), l)) {
        g_calibration.store(-1, std::memory_order_release);
    } else if (calibrateLocked(py, tstate, l)) {
        g_layout = l;
        g_calibration.store(1, std::memory_order_release);
    } else if (++g_calibrationAttempts >= 16) {
        g_calibration.store(-1, std::memory_order_release);
    }
}

// A thread without the GIL cannot calibrate: ask the interpreter to call prepare() on the main
// thread with the GIL held, at its next check (Py_AddPendingCall needs neither the GIL nor a
// thread state). One request at a time; a failed attempt allows the next.
std::atomic<bool> g_calibrationRequested{false};

int calibrateFromPendingCall(void*)
{
    PythonFrames::prepare();
    g_calibrationRequested.store(false, std::memory_order_release);
    return 0;
}

void requestCalibration(const PyApi& py)
{
    if (!py.addPendingCall || g_calibrationRequested.exchange(true, std::memory_order_acq_rel))
        return;
    if (py.addPendingCall(&calibrateFromPendingCall, nullptr) != 0)
        g_calibrationRequested.store(false, std::memory_order_release);
}

// A frame word for a frame read without the GIL. checked: another thread's frame.
bool rawFrameWord(const pylayout::Layout& l, const pylayout::RawFrame& raw, bool checked, uint64_t& word)
{
    pylayout::CodeKey key;
    if (!pylayout::readCodeKey(l, raw.code, checked, key))
        return false;
    const void* code = reinterpret_cast<const void*>(raw.code);
    std::lock_guard<std::mutex> lock(g_codeMutex);
    ensureTablesLocked();
    auto it = g_codeIndex->find(code);
    uint32_t index;
    if (it != g_codeIndex->end() && ((*g_codes)[it->second].pinned || (*g_codes)[it->second].key == key)) {
        index = it->second;
    } else {
        if (g_codes->size() >= 0x7fffffff)
            return false;
        CodeInfo info;
        if (!pylayout::readAscii(l, key.filename, checked, info.file))
            info.file = "<unknown>";
        if (!pylayout::readAscii(l, key.qualname, checked, info.function))
            info.function = "<unknown>";
        info.module = moduleFromPath(info.file);
        index = uint32_t(g_codes->size());
        journalCode(index, info);
        g_codes->push_back(std::move(info));
        (*g_codeIndex)[code] = index;
    }
    CodeInfo& info = (*g_codes)[index];
    if (!info.linesRead || info.key != key) {
        std::vector<uint8_t> table;
        info.lines.clear();
        if (pylayout::readBytes(key.linetable, checked, 1 << 20, table))
            info.lines = pylayout::parseLineTable(table.data(), table.size(), key.firstLine);
        info.key = key;
        info.linesRead = true;
    }
    word = frameWord(index, pylayout::lineAt(info.lines, raw.byteOffset, key.firstLine));
    return true;
}

// Without the GIL: this thread's frames read as memory; a thread without any (autograd's
// backward, a library's worker) gets the main thread's, behind a marker frame.
int unlockedFrames(const PyApi& py, uint64_t* out, int maxPython)
{
    const int calibration = g_calibration.load(std::memory_order_acquire);
    if (calibration == 0)
        requestCalibration(py);
    if (calibration != 1)
        return 0;
    const pylayout::Layout& l = g_layout;
    pylayout::RawFrame raw[64];
    const int max = std::min(maxPython, 64);
    void* tstate = py.gilStateThisThread();
    int n = tstate ? pylayout::walkFrames(l, reinterpret_cast<uint64_t>(tstate), false, raw, max) : 0;
    bool borrowed = false;
    if (n == 0 && max > 1 && !onMainThread()) {
        const uint64_t main = g_mainThreadState.load(std::memory_order_relaxed);
        if (main && main != reinterpret_cast<uint64_t>(tstate)) {
            n = pylayout::walkFrames(l, main, true, raw, max - 1);
            borrowed = n > 0;
        }
    }
    int count = 0;
    if (borrowed)
        out[count++] = PythonFrames::token(PythonFrames::kBorrowedFile, PythonFrames::kBorrowedFunction, 0);
    for (int i = 0; i < n; ++i) {
        uint64_t word;
        if (rawFrameWord(l, raw[i], borrowed, word))
            out[count++] = word;
    }
    return count == (borrowed ? 1 : 0) ? 0 : count;
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

void PythonFrames::prepare() noexcept
{
    try {
        const PyApi& py = api();
        if (!py.ok || !py.isInitialized() || (py.isFinalizing && py.isFinalizing()) || !py.gilStateCheck())
            return;
        if (void* tstate = py.gilStateThisThread())
            noteThreadWithGil(py, tstate);
    } catch (...) {
    }
}

bool PythonFrames::unlockedReady() noexcept
{
    return g_calibration.load(std::memory_order_acquire) == 1;
}

int PythonFrames::splice(uint64_t* frames, int count, int maxNative, int maxPython) noexcept
{
    try {
        const PyApi& py = api();
        if (!py.ok || !py.isInitialized() || (py.isFinalizing && py.isFinalizing()))
            return -1;
        // Native frames up to the first one in the interpreter stay as they are.
        int keep = 0;
        while (keep < count && keep < maxNative && !(frames[keep] >= py.interpreterBegin && frames[keep] < py.interpreterEnd))
            ++keep;
        uint64_t python[256];
        int n = 0;
        if (py.gilStateCheck()) {
            void* tstate = py.gilStateThisThread();
            if (!tstate)
                return -1;
            noteThreadWithGil(py, tstate);
            void* frame = py.threadStateGetFrame(tstate);
            while (frame && n < 256 && n < maxPython) {
                void* code = py.frameGetCode(frame);
                const int line = py.frameGetLineNumber(frame);
                if (code) {
                    python[n++] = frameWord(codeIndex(py, code, frame), line);
                    py.decRef(code);
                }
                void* back = py.frameGetBack(frame);
                py.decRef(frame);
                frame = back;
            }
            if (frame)
                py.decRef(frame);
        } else {
            n = unlockedFrames(py, python, std::min(maxPython, 256));
        }
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
            CodeInfo info;
            info.file = file;
            info.function = function;
            info.pinned = true;
            journalCode(index, info);
            g_codes->push_back(std::move(info));
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

std::vector<PythonCode> PythonFrames::codes()
{
    std::lock_guard<std::mutex> lock(g_codeMutex);
    std::vector<PythonCode> out;
    if (!g_codes)
        return out;
    out.reserve(g_codes->size());
    for (size_t i = 0; i < g_codes->size(); ++i) {
        const CodeInfo& c = (*g_codes)[i];
        out.push_back(PythonCode{uint32_t(i), c.file, c.function, c.module});
    }
    return out;
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

} // namespace oomscope::track
