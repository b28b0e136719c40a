#include "report/analysis.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>

namespace oomscope::report {

namespace {

// A framework's own Python code (PyTorch, JAX, CuPy): its package right under site-packages
// (a virtualenv may itself be called torch), or its folder anywhere for a package not
// installed there. Model libraries (transformers) are the user's model: not skipped.
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
    for (const char* package : kPackages) {
        if (file.find(std::string("/") + package) != std::string::npos)
            return true;
    }
    return false;
}

} // namespace

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
            if (b.state.rfind("active", 0) != 0)
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
