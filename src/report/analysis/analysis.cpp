#include "report/analysis/analysis.h"
#include "report/analysis/diagnosis.h"

#include "report/format.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>

#ifndef OOMSCOPE_VERSION
#define OOMSCOPE_VERSION "0.0.0"
#endif

namespace oomscope::report {

// A framework's own Python code (PyTorch, JAX, CuPy): its package right under site-packages
// (a virtualenv may itself be called torch), or, for a package not installed there (a source
// checkout), one of its own folders or modules: a program's examples/torch/ folder is the
// program's. Model libraries (transformers) are the user's model: not skipped.
bool inFrameworkPackage(const std::string& file)
{
    static const char* const kPackages[] = {"torch/", "jax/", "jaxlib/", "cupy/", "cupyx/", "cupy_backends/"};
    for (const char* marker : {"/site-packages/", "/dist-packages/"}) {
        const size_t at = file.rfind(marker);
        if (at == std::string::npos)
            continue;
        const size_t from = at + std::strlen(marker);
        for (const char* package : kPackages) {
            if (file.compare(from, std::strlen(package), package) == 0)
                return true;
        }
        return false;
    }
    static const char* const kInside[] = {
        "/torch/__init__.py", "/torch/_",      "/torch/nn/",          "/torch/cuda/",  "/torch/optim/",
        "/torch/autograd/",   "/torch/utils/", "/torch/distributed/", "/torch/amp/",   "/torch/fx/",
        "/torch/functional.py", "/jax/_src/",  "/jax/__init__.py",    "/jaxlib/",      "/cupy/_",
        "/cupy/cuda/",        "/cupy/__init__.py", "/cupyx/",         "/cupy_backends/"};
    for (const char* inside : kInside) {
        if (file.find(inside) != std::string::npos)
            return true;
    }
    return false;
}

const Frame* programFrame(const Stack& stack, bool* borrowed)
{
    const Frame* first = nullptr;
    bool marker = false;
    bool firstBorrowed = false;
    for (const Frame& f : stack.frames) {
        if (f.kind != Frame::Kind::Python)
            continue;
        if (f.file == kBorrowedFrameFile && f.line == 0) {
            marker = true;
            continue;
        }
        if (!first) {
            first = &f;
            firstBorrowed = marker;
        }
        if (!inFrameworkPackage(f.file)) {
            if (borrowed)
                *borrowed = marker;
            return &f;
        }
    }
    if (borrowed)
        *borrowed = firstBorrowed;
    return first;
}

bool hasBlockStacks(const Report& report)
{
    for (const Segment& s : report.segments) {
        for (const Block& b : s.blocks) {
            if (b.stack)
                return true;
        }
    }
    return false;
}

std::vector<TensorSite> tensorSites(const Report& report)
{
    std::map<std::tuple<int64_t, uint32_t, bool>, TensorSite> groups;
    for (const Segment& s : report.segments) {
        for (const Block& b : s.blocks) {
            if (b.state == BlockState::Inactive)
                continue;
            TensorSite& site = groups[{s.device, b.stack.value_or(0), b.stack.has_value()}];
            site.stack = b.stack;
            site.device = s.device;
            site.bytes += b.size;
            ++site.count;
        }
    }
    std::vector<TensorSite> out;
    for (auto& [key, site] : groups)
        out.push_back(site);
    std::sort(out.begin(), out.end(), [](const TensorSite& a, const TensorSite& b) {
        return a.bytes != b.bytes ? a.bytes > b.bytes : a.stack.value_or(0) < b.stack.value_or(0);
    });
    return out;
}

} // namespace oomscope::report

namespace oomscope::report {

std::vector<DeviceFragmentation> fragmentation(const Report& report)
{
    std::map<int64_t, DeviceFragmentation> byDevice;
    for (const MemoryRow& row : report.memory) {
        if (!row.reservedBytes)
            continue;
        DeviceFragmentation& f = byDevice[row.device];
        f.device = row.device;
        f.reserved = *row.reservedBytes;
        f.allocated = row.allocatedBytes.value_or(0);
        f.largestFree = row.largestFreeBlockBytes.value_or(0);
    }
    for (const Segment& s : report.segments) {
        if (s.blocks.empty())
            continue;
        DeviceFragmentation& f = byDevice[s.device];
        f.device = s.device;
        f.haveBlocks = true;
        ++f.segments;
        bool live = false, free = false;
        for (const Block& b : s.blocks) {
            if (b.state == BlockState::Inactive) {
                free = true;
                ++f.freeBlocks;
                f.largestFree = std::max(f.largestFree, b.size);
            } else {
                live = true;
            }
        }
        f.splitSegments += (live && free) ? 1 : 0;
    }
    std::vector<DeviceFragmentation> out;
    for (auto& [device, f] : byDevice) {
        if (f.reserved == 0 && f.haveBlocks) {  // blocks without counters: add them up
            for (const Segment& s : report.segments) {
                if (s.device != device)
                    continue;
                f.reserved += s.size;
                for (const Block& b : s.blocks)
                    f.allocated += b.state == BlockState::Inactive ? 0 : b.size;
            }
        }
        if (f.reserved == 0 && !f.haveBlocks)
            continue;  // nothing cached (a framework-raised OOM before any segment)
        f.freeInCache = f.reserved > f.allocated ? f.reserved - f.allocated : 0;
        f.external = f.freeInCache ? 1.0 - double(f.largestFree) / double(f.freeInCache) : 0.0;
        if (f.external < 0)
            f.external = 0;
        if (report.trigger.kind == TriggerKind::Oom && report.trigger.device == device && report.trigger.requestedBytes) {
            f.request = report.trigger.requestedBytes;
            f.requestBlockedByFragmentation = *f.request <= f.freeInCache && *f.request > f.largestFree;
        }
        out.push_back(f);
    }
    return out;
}

std::string describeFrame(const Report& r, const Frame& f)
{
    if (f.kind == Frame::Kind::Python && f.file == kBorrowedFrameFile && f.line == 0)
        return "-- " + f.function + " --";
    if (f.kind == Frame::Kind::Python)
        return f.file + ":" + std::to_string(f.line) + "  " + f.function;
    std::string module = "?";
    if (f.module) {
        if (const Module* m = r.findModule(*f.module))
            module = baseName(m->path);
    }
    std::string where = module + "+" + formatHex(f.offset);
    if (const std::string line = nativeLine(f); !line.empty())
        where = line + ", " + where;
    if (f.symbol.empty())
        return "?? (" + where + ")";
    return truncateMiddle(f.symbol, 110) + "  (" + where + ")";
}

std::vector<PoolBytes> bytesByPool(const Report& r, int64_t device)
{
    std::map<std::vector<int64_t>, PoolBytes> pools;
    bool named = false;
    for (const Segment& s : r.segments) {
        if (s.device != device)
            continue;
        named = named || !s.poolId.empty();
        PoolBytes& p = pools[s.poolId];
        p.poolId = s.poolId;
        p.reserved += s.size;
        ++p.segments;
        for (const Block& b : s.blocks)
            if (b.state == BlockState::ActiveAllocated)
                p.allocated += b.size;
    }
    std::vector<PoolBytes> out;
    if (!named)
        return out;
    for (auto& [id, p] : pools)  // the empty id (the default pool) sorts first
        out.push_back(p);
    return out;
}

std::string describeCommunicator(const NcclCommunicator& c)
{
    std::string s = "communicator " + c.id.substr(0, 8);
    if (c.rank >= 0 && c.nranks > 0)
        s += " (rank " + std::to_string(c.rank) + " of " + std::to_string(c.nranks) + ")";
    if (c.destroyedNs)
        s += " (destroyed)";
    s += " " + formatBytes(c.bytes());
    std::string parts;
    const auto part = [&](uint64_t bytes, const char* when) {
        if (bytes)
            parts += (parts.empty() ? ": " : ", ") + formatBytes(bytes) + " " + when;
    };
    part(c.initBytes, c.parent ? "at its split" : "at init");
    part(c.firstCollectiveBytes, "at its first collective");
    part(c.registrationBytes, "at registrations");
    return s + parts;
}

std::string nativeLine(const Frame& f)
{
    if (f.kind != Frame::Kind::Native || f.file.empty() || f.line == 0)
        return {};
    return baseName(f.file) + ":" + std::to_string(f.line);
}

std::string stackLabel(const Report& r, const Stack* stack)
{
    if (!stack || stack->frames.empty())
        return "(no stack)";
    bool borrowed = false;
    if (const Frame* f = programFrame(*stack, &borrowed))
        return f->file + ":" + std::to_string(f->line) + " " + f->function + (borrowed ? " (main thread)" : "");
    for (const Frame& f : stack->frames) {
        const Module* m = f.module ? r.findModule(*f.module) : nullptr;
        const std::string name = m ? baseName(m->path) : "";
        if (name.rfind("libcuda", 0) == 0 || name.rfind("liboomscope", 0) == 0)
            continue;
        return describeFrame(r, f);
    }
    return describeFrame(r, stack->frames.front());
}

Report analyzed(const Report& report, const SourceLine& source)
{
    Report r = report;
    const std::vector<LeakFinding> findings = findLeaks(r);
    r.leaks = leakEntries(r, findings, source);
    r.diagnosis = diagnose(r, findings, source);
    r.analysis = std::string("oomscope ") + OOMSCOPE_VERSION;
    return r;
}

} // namespace oomscope::report
