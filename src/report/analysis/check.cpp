#include "report/analysis/check.h"

#include "common/size.h"

#include "report/analysis/analysis.h"
#include "report/format.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

namespace oomscope::report {
namespace {

std::string percentText(double p)
{
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f%%", p);
    return buf;
}

} // namespace

Peak peakOf(const Report& r)
{
    std::map<int64_t, uint64_t> peak;
    for (const MemoryRow& row : r.memory) {
        uint64_t& p = peak[row.device];
        p = std::max({p, row.peakTrackedBytes, row.trackedBytes, row.reservedBytes.value_or(0)});
    }
    for (const Step& s : r.steps) {
        for (const StepDevice& d : s.devices) {
            uint64_t& p = peak[d.device];
            p = std::max({p, d.trackedBytes, d.reservedBytes.value_or(0)});
        }
    }
    Peak out;
    for (const auto& [device, bytes] : peak) {
        if (bytes > out.bytes || (out.bytes == 0 && device == 0))
            out = Peak{device, bytes};
    }
    return out;
}

double fragmentationPercent(const Report& r, int64_t* device, uint64_t* bytes)
{
    constexpr uint64_t kMinReserved = 64ull << 20;  // a nearly empty cache says nothing
    double worst = 0;
    auto consider = [&](int64_t d, uint64_t split, uint64_t reserved) {
        if (reserved < kMinReserved)
            return;
        const double p = 100.0 * double(split) / double(reserved);
        if (p > worst) {
            worst = p;
            if (device)
                *device = d;
            if (bytes)
                *bytes = split;
        }
    };
    for (const DeviceFragmentation& f : fragmentation(r)) {
        if (!f.haveBlocks)
            continue;
        uint64_t split = 0;  // free blocks inside segments that also hold live ones
        for (const Segment& s : r.segments) {
            if (s.device != f.device)
                continue;
            uint64_t free = 0;
            bool live = false;
            for (const Block& b : s.blocks) {
                if (b.state == BlockState::Inactive)
                    free += b.size;
                else
                    live = true;
            }
            split += live ? free : 0;
        }
        consider(f.device, split, f.reserved);
    }
    for (const Step& s : r.steps) {
        for (const StepDevice& d : s.devices) {
            if (d.inactiveSplitBytes && d.reservedBytes)
                consider(d.device, *d.inactiveSplitBytes, *d.reservedBytes);
        }
    }
    return worst;
}

std::vector<CheckResult> checkReport(const Report& r, const CheckOptions& o, const SourceLine& source)
{
    std::vector<CheckResult> out;
    if (o.failOn.count("leak")) {
        CheckResult c;
        c.rule = "leak";
        const std::vector<LeakFinding> leaks = findLeaks(r, o.leaks);
        if (leaks.empty()) {
            c.summary = r.steps.size() >= o.leaks.minWarmup + o.leaks.minSteps
                            ? "no growth across " + std::to_string(r.steps.size()) + " steps"
                            : "no leak pattern (" + std::to_string(r.steps.size()) + " steps: too few to follow growth)";
        } else {
            c.passed = false;
            const std::vector<BlamedLeak> blamed = blameLeaks(r, leaks, source);
            c.summary = std::to_string(blamed.size()) + (blamed.size() == 1 ? " leak" : " leaks");
            for (const BlamedLeak& b : blamed) {
                const std::string what = describeGrowth(b);
                c.details.push_back(what + " — " + b.blame.pattern);
                if (b.heldBy)
                    c.details.push_back("  " + describeRetainer(*b.heldBy));
                if (b.blame.frame)
                    c.details.push_back(std::string(b.heldBy ? "  allocated at " : "  at ") + describeFrame(r, *b.blame.frame) +
                                        (b.blame.text.empty() ? "" : "   " + b.blame.text));
                c.details.push_back("  -> " + b.blame.remedy);
            }
        }
        out.push_back(std::move(c));
    }
    if (o.failOn.count("peak") && o.maxPeak) {
        CheckResult c;
        c.rule = "peak";
        const Peak p = peakOf(r);
        c.passed = p.bytes <= *o.maxPeak;
        c.measuredBytes = int64_t(p.bytes);
        c.limitBytes = *o.maxPeak;
        c.summary = "peak " + formatBytes(p.bytes) + " on device " + std::to_string(p.device) +
                    (c.passed ? " <= " : " > ") + formatBytes(*o.maxPeak);
        out.push_back(std::move(c));
    }
    if (o.failOn.count("fragmentation") && o.maxFragmentationPercent) {
        CheckResult c;
        c.rule = "fragmentation";
        int64_t device = 0;
        uint64_t bytes = 0;
        const double p = fragmentationPercent(r, &device, &bytes);
        c.passed = p <= *o.maxFragmentationPercent;
        c.summary = p > 0 ? percentText(p) + " of reserved memory in split free blocks (" + formatBytes(bytes) +
                                " on device " + std::to_string(device) + ")" + (c.passed ? " <= " : " > ") +
                                percentText(*o.maxFragmentationPercent)
                          : "no split free blocks in a framework's cache";
        if (!c.passed)
            c.details.push_back("-> PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, or max_split_size_mb:<MiB>");
        out.push_back(std::move(c));
    }
    if (o.failOn.count("growth") && o.baseline && o.maxGrowth) {
        CheckResult c;
        c.rule = "growth";
        const Peak now = peakOf(r);
        const Peak before = peakOf(*o.baseline);
        const int64_t growth = int64_t(now.bytes) - int64_t(before.bytes);
        c.passed = growth <= int64_t(*o.maxGrowth);
        c.measuredBytes = growth;
        c.limitBytes = *o.maxGrowth;
        c.summary = "peak " + formatBytes(now.bytes) + " vs baseline " + formatBytes(before.bytes) + " (" +
                    formatSignedBytes(growth) + (c.passed ? ", within " : ", more than ") +
                    formatBytes(*o.maxGrowth) + ")";
        out.push_back(std::move(c));
    }
    return out;
}

namespace {

// Where run A's Python files are in run B: two checkouts of one program (CI's baseline and the
// change), two virtualenvs. Each file of A that B lacks is paired with B's file of the longest
// common path suffix (a unique one); the folders in front of the suffixes are a prefix pair, and
// for each prefix of A the pair most files agree on maps A's paths into B's.
class PathMap {
public:
    PathMap(const Report& a, const Report& b)
    {
        const std::set<std::string> filesA = pythonFiles(a), filesB = pythonFiles(b);
        std::map<std::string, std::vector<const std::string*>> byBaseName;
        for (const std::string& f : filesB)
            byBaseName[baseName(f)].push_back(&f);
        std::map<std::string, std::map<std::string, size_t>> votes;
        for (const std::string& fa : filesA) {
            if (filesB.count(fa))
                continue;
            auto it = byBaseName.find(baseName(fa));
            if (it == byBaseName.end())
                continue;
            size_t best = 0, bestCount = 0;
            const std::string* match = nullptr;
            for (const std::string* fb : it->second) {
                const size_t n = commonSuffix(fa, *fb);
                if (n > best) {
                    best = n;
                    bestCount = 1;
                    match = fb;
                } else if (n == best) {
                    ++bestCount;
                }
            }
            if (!match || bestCount != 1 || best >= fa.size() || best >= match->size())
                continue;
            ++votes[fa.substr(0, fa.size() - best)][match->substr(0, match->size() - best)];
        }
        for (const auto& [prefixA, candidates] : votes) {
            const auto top = std::max_element(candidates.begin(), candidates.end(),
                                              [](const auto& x, const auto& y) { return x.second < y.second; });
            m_prefixes.emplace_back(prefixA, top->first);
        }
        m_filesB = filesB;
        std::sort(m_prefixes.begin(), m_prefixes.end(),
                  [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });
    }

    // A's path in B's terms; unchanged when B has it too or no prefix fits.
    std::string map(const std::string& path) const
    {
        if (m_prefixes.empty() || m_filesB.count(path))
            return path;
        for (const auto& [prefixA, prefixB] : m_prefixes) {
            if (path.compare(0, prefixA.size(), prefixA) == 0)
                return prefixB + path.substr(prefixA.size());
        }
        return path;
    }

private:
    static std::set<std::string> pythonFiles(const Report& r)
    {
        std::set<std::string> files;
        for (const Stack& stack : r.stacks) {
            for (const Frame& f : stack.frames) {
                if (f.kind == Frame::Kind::Python && !f.file.empty() && f.file[0] == '/')
                    files.insert(f.file);
            }
        }
        return files;
    }

    // Length of the longest common suffix of whole path components (from a '/' on).
    static size_t commonSuffix(const std::string& x, const std::string& y)
    {
        size_t n = 0, whole = 0;
        while (n < x.size() && n < y.size() && x[x.size() - 1 - n] == y[y.size() - 1 - n]) {
            ++n;
            if (x[x.size() - n] == '/')
                whole = n - 1;  // the suffix after this '/'
        }
        return whole;
    }

    std::vector<std::pair<std::string, std::string>> m_prefixes;  // longest prefix of A first
    std::set<std::string> m_filesB;
};

std::string siteKey(const Report& r, const Stack& stack)
{
    std::string key;
    size_t n = 0;
    for (const Frame& f : stack.frames) {
        if (++n > 32)
            break;
        if (f.kind == Frame::Kind::Python) {
            key += f.file + ":" + std::to_string(f.line) + " " + f.function;
        } else {
            const Module* m = f.module ? r.findModule(*f.module) : nullptr;
            key += (m ? baseName(m->path) : "?") + "!" + (f.symbol.empty() ? formatHex(f.offset) : f.symbol);
        }
        key += '\n';
    }
    return key;
}

// Sites by their frames' text (and device): {key: {label, bytes}}; A's paths put in B's terms.
std::map<std::pair<std::string, int64_t>, std::pair<std::string, uint64_t>> sitesByKey(const Report& r, bool byDevice,
                                                                                     const PathMap* paths)
{
    std::map<std::pair<std::string, int64_t>, std::pair<std::string, uint64_t>> out;
    Stack mapped;
    for (const Site& s : r.sites) {
        const Stack* stack = r.findStack(s.stack);
        if (stack && paths) {
            mapped = *stack;
            for (Frame& f : mapped.frames) {
                if (f.kind == Frame::Kind::Python)
                    f.file = paths->map(f.file);
            }
            stack = &mapped;
        }
        auto& entry = out[{stack ? siteKey(r, *stack) : std::string(), byDevice ? s.device : -1}];
        if (entry.first.empty())
            entry.first = stackLabel(r, stack);
        entry.second += s.bytes;
    }
    return out;
}

} // namespace

ReportDiff diffReports(const Report& a, const Report& b, bool byDevice)
{
    ReportDiff d;
    std::map<int64_t, DeviceDelta> devices;
    for (const auto& [report, isA] : {std::pair<const Report*, bool>{&a, true}, {&b, false}}) {
        for (const MemoryRow& row : report->memory) {
            DeviceDelta& dd = devices[row.device];
            dd.device = row.device;
            (isA ? dd.trackedA : dd.trackedB) = row.trackedBytes;
            (isA ? dd.peakA : dd.peakB) = row.peakTrackedBytes;
            (isA ? dd.allocatedA : dd.allocatedB) = row.allocatedBytes;
            (isA ? dd.reservedA : dd.reservedB) = row.reservedBytes;
        }
    }
    for (auto& [device, dd] : devices)
        d.devices.push_back(dd);
    const PathMap paths(a, b);
    const auto sitesA = sitesByKey(a, byDevice, &paths);
    const auto sitesB = sitesByKey(b, byDevice, nullptr);
    std::map<std::pair<std::string, int64_t>, SiteDelta> merged;
    for (const auto& [key, v] : sitesA) {
        SiteDelta& s = merged[key];
        s.label = v.first;
        s.device = key.second;
        s.bytesA = v.second;
    }
    for (const auto& [key, v] : sitesB) {
        SiteDelta& s = merged[key];
        if (s.label.empty())
            s.label = v.first;
        s.device = key.second;
        s.bytesB = v.second;
    }
    // Sites that render as the same line (one line reached by several callers) are one row.
    std::map<std::pair<std::string, int64_t>, SiteDelta> byLabel;
    for (auto& [key, s] : merged) {
        SiteDelta& row = byLabel[{s.label, s.device}];
        row.label = s.label;
        row.device = s.device;
        row.bytesA += s.bytesA;
        row.bytesB += s.bytesB;
    }
    for (auto& [key, s] : byLabel) {
        if (s.delta() != 0)
            d.sites.push_back(s);
    }
    std::stable_sort(d.sites.begin(), d.sites.end(), [](const SiteDelta& x, const SiteDelta& y) {
        return x.delta() != y.delta() ? x.delta() > y.delta() : x.label < y.label;
    });
    return d;
}

namespace {

bool parsePercent(std::string text, double* out)
{
    if (!text.empty() && text.back() == '%')
        text.pop_back();
    char* end = nullptr;
    const double value = std::strtod(text.c_str(), &end);
    if (end == text.c_str() || *end != '\0' || !(value >= 0) || value > 100)
        return false;
    *out = value;
    return true;
}

} // namespace

bool parseCheckArguments(const CheckArguments& a, CheckOptions* out, std::string* error)
{
    CheckOptions options;
    if (a.maxPeak) {
        uint64_t v = 0;
        if (!common::parseSize(*a.maxPeak, &v)) {
            *error = "--max-peak wants a size (" + std::string(common::kSizeGrammar) + "), got \"" + *a.maxPeak + "\"";
            return false;
        }
        options.maxPeak = v;
    }
    if (a.maxFragmentation) {
        double v = 0;
        if (!parsePercent(*a.maxFragmentation, &v)) {
            *error = "--max-fragmentation wants a percentage from 0 to 100, got \"" + *a.maxFragmentation + "\"";
            return false;
        }
        options.maxFragmentationPercent = v;
    }
    if (a.maxGrowth) {
        uint64_t v = 0;
        if (!common::parseSize(*a.maxGrowth, &v)) {
            *error = "--max-growth wants a size (" + std::string(common::kSizeGrammar) + "), got \"" + *a.maxGrowth + "\"";
            return false;
        }
        options.maxGrowth = v;
    }
    if (a.haveBaseline != a.maxGrowth.has_value()) {
        *error = "--baseline and --max-growth go together";
        return false;
    }
    // The rules: as asked, or leak plus those whose limits were given.
    options.failOn.clear();
    if (a.failOn.empty()) {
        options.failOn.insert("leak");
        options.failOn.insert("job");
        if (options.maxPeak)
            options.failOn.insert("peak");
        if (options.maxFragmentationPercent)
            options.failOn.insert("fragmentation");
        if (options.maxGrowth)
            options.failOn.insert("growth");
    } else {
        size_t start = 0;
        while (start <= a.failOn.size()) {
            size_t comma = a.failOn.find(',', start);
            if (comma == std::string::npos)
                comma = a.failOn.size();
            const std::string rule = a.failOn.substr(start, comma - start);
            start = comma + 1;
            if (rule.empty())
                continue;
            if (rule != "leak" && rule != "peak" && rule != "fragmentation" && rule != "growth" && rule != "job") {
                *error = "unknown rule \"" + rule + "\" in --fail-on (leak, peak, fragmentation, growth, job)";
                return false;
            }
            options.failOn.insert(rule);
        }
        if (options.failOn.count("peak") && !options.maxPeak) {
            *error = "--fail-on peak needs --max-peak SIZE";
            return false;
        }
        if (options.failOn.count("growth") && !options.maxGrowth) {
            *error = "--fail-on growth needs --baseline REPORT --max-growth SIZE";
            return false;
        }
        if (options.failOn.count("fragmentation") && !options.maxFragmentationPercent)
            options.maxFragmentationPercent = 30.0;
    }
    *out = std::move(options);
    return true;
}

} // namespace oomscope::report
