#include "report/analysis/live_tree.h"

#include "report/analysis/analysis.h"
#include "report/format.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

namespace oomscope::report {
namespace {

std::string moduleName(const Report& r, const Frame& f)
{
    const Module* m = f.module ? r.findModule(*f.module) : nullptr;
    return m ? baseName(m->path) : "?";
}

// A node under construction: children found by kind and name.
struct Building {
    LiveNode node;
    std::vector<Building> children;
    std::map<std::pair<int, std::string>, size_t> index;

    Building& child(LiveNode::Kind kind, const std::string& name)
    {
        auto [it, inserted] = index.emplace(std::make_pair(int(kind), name), children.size());
        if (inserted) {
            children.emplace_back();
            children.back().node.kind = kind;
            children.back().node.name = name;
        }
        return children[it->second];
    }
};

// Adds bytes along a stack's frames, root first, native frames folded per library.
void addStack(const Report& r, const Stack* stack, uint64_t bytes, size_t maxDetail, Building* at)
{
    at->node.bytes += bytes;
    if (!stack || stack->frames.empty()) {
        at->child(LiveNode::Kind::NoStack, "(no stack)").node.bytes += bytes;
        return;
    }
    const std::vector<Frame>& frames = stack->frames;
    for (size_t i = frames.size(); i-- > 0;) {
        const Frame& f = frames[i];
        if (f.kind == FrameKind::Python) {
            const bool marker = f.file == kBorrowedFrameFile && f.line == 0;
            const std::string name = marker ? "-- " + f.function + " --"
                                            : f.function + "  " + baseName(f.file) + ":" + std::to_string(f.line);
            at = &at->child(LiveNode::Kind::Python, name);
            if (at->node.detail.empty() && !marker)
                at->node.detail.push_back(f.file + ":" + std::to_string(f.line));
            at->node.bytes += bytes;
            continue;
        }
        const std::string library = moduleName(r, f);
        std::vector<std::string> symbols;
        size_t j = i + 1;
        while (j-- > 0 && frames[j].kind == FrameKind::Native && moduleName(r, frames[j]) == library) {
            std::string symbol = frames[j].symbol.empty() ? library + "+" + formatHex(frames[j].offset) : frames[j].symbol;
            if (const std::string line = nativeLine(frames[j]); !line.empty())
                symbol += "  " + line;
            symbols.push_back(std::move(symbol));
            i = j;
        }
        const std::string name = library + (symbols.size() > 1 ? "  (" + std::to_string(symbols.size()) + " frames)" : "");
        at = &at->child(LiveNode::Kind::Native, name);
        if (at->node.detail.empty()) {
            for (size_t k = 0; k < symbols.size() && k < maxDetail; ++k)
                at->node.detail.push_back(truncateMiddle(symbols[k], 200));
            if (symbols.size() > maxDetail)
                at->node.detail.push_back("... " + std::to_string(symbols.size() - maxDetail) + " more");
        }
        at->node.bytes += bytes;
    }
}

// The finished node: children largest first, those below the threshold merged.
LiveNode finish(Building& b, uint64_t threshold)
{
    LiveNode out = std::move(b.node);
    std::sort(b.children.begin(), b.children.end(),
              [](const Building& x, const Building& y) { return x.node.bytes > y.node.bytes; });
    uint64_t smallBytes = 0;
    size_t smallCount = 0;
    for (Building& c : b.children) {
        if (c.node.bytes < threshold) {
            smallBytes += c.node.bytes;
            ++smallCount;
            continue;
        }
        out.children.push_back(finish(c, threshold));
    }
    if (smallCount > 0) {
        LiveNode smaller;
        smaller.kind = LiveNode::Kind::Smaller;
        smaller.name = std::to_string(smallCount) + (smallCount == 1 ? " smaller stack" : " smaller stacks");
        smaller.bytes = smallBytes;
        out.children.push_back(std::move(smaller));
    }
    return out;
}

std::set<int64_t> devicesWithMemory(const Report& r)
{
    std::set<int64_t> devices;
    for (const Site& s : r.sites) {
        if (s.kind == MemKind::Device && s.bytes > 0)
            devices.insert(s.device);
    }
    return devices;
}

struct Entry {
    int64_t device = 0;
    std::optional<uint32_t> stack;  // none: the rest of a device's bytes, stacks not kept
    uint64_t bytes = 0;
};

// The tree of entries (a device level when they span several devices).
LiveNode treeOf(const Report& report, const std::vector<Entry>& entries, const std::string& rootName,
                const LiveTreeOptions& options)
{
    std::unordered_map<uint32_t, const Stack*> stacks;
    for (const Stack& s : report.stacks)
        stacks[s.id] = &s;
    std::set<int64_t> devices;
    for (const Entry& e : entries) {
        if (e.bytes > 0)
            devices.insert(e.device);
    }
    const bool perDevice = devices.size() > 1;
    Building root;
    root.node.kind = LiveNode::Kind::Root;
    root.node.name = rootName;
    for (const Entry& e : entries) {
        Building* at = &root;
        if (perDevice) {
            root.node.bytes += e.bytes;
            at = &root.child(LiveNode::Kind::Device, "device " + std::to_string(e.device));
        }
        if (!e.stack) {
            at->node.bytes += e.bytes;
            at->child(LiveNode::Kind::Smaller, "other sites").node.bytes += e.bytes;
            continue;
        }
        auto it = stacks.find(*e.stack);
        addStack(report, it == stacks.end() ? nullptr : it->second, e.bytes, options.maxDetail, at);
    }
    const uint64_t threshold = uint64_t(double(root.node.bytes) * options.minShare);
    return finish(root, threshold);
}

} // namespace

LiveNode liveTree(const Report& report, const LiveTreeOptions& options)
{
    std::vector<Entry> entries;
    for (const Site& site : report.sites) {
        if (site.kind == MemKind::Device)
            entries.push_back(Entry{site.device, site.stack, site.bytes});
    }
    return treeOf(report, entries, "live device memory", options);
}

std::optional<LiveNode> peakTree(const Report& report, const LiveTreeOptions& options)
{
    std::vector<Entry> entries;
    for (const MemoryRow& row : report.memory) {
        if (!row.peak)
            continue;
        uint64_t inSites = 0;
        for (const PeakSite& site : row.peak->sites) {
            entries.push_back(Entry{row.device, site.stack, site.bytes});
            inSites += site.bytes;
        }
        if (row.peak->bytes > inSites)
            entries.push_back(Entry{row.device, std::nullopt, row.peak->bytes - inSites});
    }
    if (entries.empty())
        return std::nullopt;
    return treeOf(report, entries, "device memory at the peak", options);
}

std::string foldedFrameName(const Report& report, const Frame& f)
{
    std::string name;
    if (f.kind == FrameKind::Python)
        name = f.function + " (" + baseName(f.file) + ":" + std::to_string(f.line) + ")";
    else if (f.symbol.empty())
        name = moduleName(report, f) + "+" + formatHex(f.offset);
    else if (const std::string line = nativeLine(f); !line.empty())
        name = f.symbol + " (" + line + ")";  // as Python frames: function (file:line)
    else
        name = f.symbol + " (" + moduleName(report, f) + ")";
    std::replace(name.begin(), name.end(), ';', ',');
    std::replace(name.begin(), name.end(), '\n', ' ');
    return name;
}

std::vector<std::pair<std::string, uint64_t>> foldedStacks(const Report& report)
{
    std::unordered_map<uint32_t, const Stack*> stacks;
    for (const Stack& s : report.stacks)
        stacks[s.id] = &s;
    const bool perDevice = devicesWithMemory(report).size() > 1;
    std::map<std::string, uint64_t> lines;
    for (const Site& site : report.sites) {
        if (site.kind != MemKind::Device || site.bytes == 0)
            continue;
        std::string line = perDevice ? "device " + std::to_string(site.device) : "";
        auto it = stacks.find(site.stack);
        if (it == stacks.end() || it->second->frames.empty()) {
            line += (line.empty() ? "" : ";") + std::string("(no stack)");
        } else {
            const std::vector<Frame>& frames = it->second->frames;
            for (size_t i = frames.size(); i-- > 0;)
                line += (line.empty() ? "" : ";") + foldedFrameName(report, frames[i]);
        }
        lines[line] += site.bytes;
    }
    return {lines.begin(), lines.end()};
}

} // namespace oomscope::report
