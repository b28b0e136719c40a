#include "interpret/report_parts.h"

#include "interpret/attribution.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace oomscope::track {

std::string sourceOfFrames(const std::vector<uint64_t>& frames, const std::function<std::string(uint64_t)>& pathOf,
                           const PythonResolver& python)
{
    for (uint64_t pc : frames) {
        if (isPythonFrame(pc))
            return classifyPythonModule(python(pc).module);
        const std::string path = pathOf(pc);
        if (path.empty() || isCudaModule(path))
            continue;
        return classifySource(path);
    }
    return "other";
}

std::vector<report::Site> liveSites(const std::vector<LiveAllocation>& live)
{
    struct SiteKey {
        uint32_t stack;
        int device;
        MemKind kind;
        bool operator<(const SiteKey& o) const
        {
            return std::tie(stack, device, kind) < std::tie(o.stack, o.device, o.kind);
        }
    };
    std::map<SiteKey, report::Site> sites;
    for (const LiveAllocation& a : live) {
        report::Site& site = sites[SiteKey{a.stack, a.device, a.memKind}];
        if (site.count == 0) {
            site.stack = a.stack;
            site.device = a.device;
            site.kind = memKindName(a.memKind);
            site.firstNs = a.timeNs;
        }
        ++site.count;
        site.bytes += a.size;
        site.firstNs = std::min(site.firstNs, a.timeNs);
        site.lastNs = std::max(site.lastNs, a.timeNs);
    }
    std::vector<report::Site> out;
    for (auto& [key, site] : sites)
        out.push_back(site);
    std::sort(out.begin(), out.end(), [](const report::Site& a, const report::Site& b) {
        return a.bytes != b.bytes ? a.bytes > b.bytes : a.stack < b.stack;
    });
    return out;
}

std::unordered_map<uint32_t, std::string> addStacks(report::Report& r, const std::set<uint32_t>& referenced,
                                                    const std::function<std::vector<uint64_t>(uint32_t)>& framesOf,
                                                    const PythonResolver& python, Symbolizer& symbolizer)
{
    std::map<int, uint32_t> moduleIds;  // symbolizer index → report id
    std::unordered_map<uint32_t, std::string> sourceOfStack;
    for (uint32_t id : referenced) {
        report::Stack stack;
        stack.id = id;
        const std::vector<uint64_t> words = framesOf(id);
        for (uint64_t pc : words) {
            if (isPythonFrame(pc)) {
                const PythonFrames::Resolved py = python(pc);
                report::Frame frame;
                frame.kind = report::Frame::Kind::Python;
                frame.file = py.file;
                frame.line = py.line;
                frame.function = py.function;
                stack.frames.push_back(std::move(frame));
                continue;
            }
            const ResolvedFrame resolved = symbolizer.resolve(pc);
            report::Frame frame;
            frame.kind = report::Frame::Kind::Native;
            frame.offset = resolved.offset;
            frame.symbol = resolved.symbol;
            if (resolved.module >= 0) {
                auto [it, inserted] = moduleIds.emplace(resolved.module, uint32_t(moduleIds.size() + 1));
                frame.module = it->second;
            }
            stack.frames.push_back(std::move(frame));
        }
        sourceOfStack[id] = sourceOfFrames(
            words,
            [&](uint64_t pc) {
                const ResolvedFrame resolved = symbolizer.resolve(pc);
                return resolved.module >= 0 ? symbolizer.modules()[size_t(resolved.module)].path : std::string();
            },
            python);
        r.stacks.push_back(std::move(stack));
    }
    for (const auto& [index, id] : moduleIds) {
        const LoadedModule& m = symbolizer.modules()[size_t(index)];
        r.modules.push_back(report::Module{id, m.path, m.buildId, m.base});
    }
    std::sort(r.modules.begin(), r.modules.end(), [](const report::Module& a, const report::Module& b) { return a.id < b.id; });
    return sourceOfStack;
}

void attributeBySource(report::Report& r, const std::vector<LiveAllocation>& live,
                       const std::unordered_map<uint32_t, std::string>& sourceOfStack)
{
    for (const LiveAllocation& a : live) {
        if (a.memKind != MemKind::Device)
            continue;
        for (report::MemoryRow& row : r.memory) {
            if (row.device == a.device) {
                auto it = sourceOfStack.find(a.stack);
                row.bySource[it == sourceOfStack.end() ? "other" : it->second] += a.size;
            }
        }
    }
    for (report::MemoryRow& row : r.memory) {
        if (row.untrackedBytes)
            row.bySource["untracked"] = *row.untrackedBytes;
    }
}

} // namespace oomscope::track
