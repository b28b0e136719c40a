#include "report/analysis/leaks.h"

#include "report/analysis/analysis.h"
#include "report/analysis/memory_over_time.h"
#include "report/format.h"

#include <algorithm>
#include <map>
#include <set>

namespace oomscope::report {
namespace {

// A caching allocator keeps memory on purpose: live memory at exit is its cache, not a leak.
bool hasCachingAllocator(const Report& r)
{
    if (r.trigger.framework)
        return true;
    for (const std::string& b : r.capture.backends) {
        if (b == "torch" || b == "cupy" || b == "jax")
            return true;
    }
    for (const MemoryRow& row : r.memory) {
        if (row.reservedBytes)
            return true;
        for (Source source : {Source::Torch, Source::Cupy, Source::Jax}) {
            auto it = row.bySource.find(source);
            if (it != row.bySource.end() && it->second > 0)
                return true;
        }
    }
    return false;
}

// Growth over the last run of consecutive samples: the late quarter above every sample of the
// early quarter, few decreases, at least minBytes in all.
std::optional<LeakFinding> growth(const std::vector<std::optional<uint64_t>>& values, const std::vector<uint64_t>& steps,
                                  const LeakOptions& o)
{
    const size_t end = values.size();
    if (end == 0 || !values[end - 1])
        return std::nullopt;  // gone at the last step: not growing
    size_t start = end;
    while (start > 0 && values[start - 1])
        --start;
    const size_t m = end - start;
    if (m < o.minSteps)
        return std::nullopt;
    std::vector<uint64_t> run;
    for (size_t i = start; i < end; ++i)
        run.push_back(*values[i]);
    const size_t q = std::max<size_t>(1, m / 4);
    const uint64_t maxEarly = *std::max_element(run.begin(), run.begin() + long(q));
    const uint64_t minLate = *std::min_element(run.end() - long(q), run.end());
    if (run.back() <= run.front() || minLate <= maxEarly || run.back() - run.front() < o.minBytes)
        return std::nullopt;
    size_t decreases = 0;
    for (size_t i = 1; i < m; ++i)
        decreases += run[i] < run[i - 1] ? 1 : 0;
    if (decreases * 4 > m)
        return std::nullopt;
    LeakFinding f;
    f.firstBytes = run.front();
    f.lastBytes = run.back();
    f.steps = m;
    f.bytesPerStep = double(run.back() - run.front()) / double(m - 1);
    f.firstStep = steps[start];
    f.lastStep = steps[end - 1];
    return f;
}

bool isCudaLibrary(const std::string& path)
{
    const std::string name = baseName(path);
    for (const char* prefix : {"libcuda.", "libcudart", "liboomscope", "libcupti"}) {
        if (name.rfind(prefix, 0) == 0)
            return true;
    }
    return false;
}

std::string trim(const std::string& s)
{
    const size_t a = s.find_first_not_of(" \t\r\n");
    if (a == std::string::npos)
        return {};
    const size_t b = s.find_last_not_of(" \t\r\n");
    return s.substr(a, b - a + 1);
}

struct Pattern {
    const char* pattern;
    const char* remedy;
};

// What the line that holds the memory does, from its text.
std::optional<Pattern> patternOfLine(const std::string& text)
{
    if (text.find(".append(") != std::string::npos || text.find(".extend(") != std::string::npos ||
        text.find(".insert(") != std::string::npos)
        return Pattern{"tensors accumulated in a list across steps",
                       "keep a plain number or a detached copy instead (loss.item(), t.detach().cpu()), run "
                       "evaluation under torch.no_grad(), or clear the list each step"};
    if (text.find("+=") != std::string::npos)
        return Pattern{"a running total that keeps each step's tensor (and its autograd graph) alive",
                       "accumulate loss.item() or loss.detach() instead of the tensor"};
    const size_t self = text.find("self.");
    if (self != std::string::npos && text.find('=', self) != std::string::npos &&
        text.find("==", self) == std::string::npos)
        return Pattern{"state stored on a module or object across steps",
                       "store a detached copy (t.detach()), or drop the reference at the end of the step"};
    return std::nullopt;
}

// The samples after warm-up, and their step indexes.
struct Window {
    std::vector<const Step*> steps;
    std::vector<uint64_t> index;
};

// Each (stack, device)'s bytes at every step of the window (none where it was not sampled):
// the framework's tensors, or the sites the capture sees.
using Series = std::map<std::pair<uint32_t, int64_t>, std::vector<std::optional<uint64_t>>>;
Series seriesOf(const Window& w, bool tensors)
{
    Series series;
    for (size_t i = 0; i < w.steps.size(); ++i) {
        for (const StepSite& site : tensors ? w.steps[i]->tensors : w.steps[i]->sites) {
            auto& values = series[{site.stack, site.device}];
            values.resize(w.index.size());
            values[i] = site.bytes;
        }
    }
    for (auto& [key, values] : series)
        values.resize(w.index.size());
    return series;
}

// Growing stacks: the framework's tensors (with its history) or the sites the capture sees;
// each device they explain goes into explained.
void stackLeaks(const Report& r, const Window& w, const LeakOptions& o, std::set<int64_t>& explained,
                std::vector<LeakFinding>& out)
{
    bool tensors = false;
    for (const Step* s : w.steps)
        tensors |= !s->tensors.empty();
    // A caching allocator's segments are its cache: they grow in steps as it warms up to the
    // sizes asked for, which is no leak. Its tensors (with history) or its allocated bytes
    // (device level) are followed instead.
    if (!tensors && hasCachingAllocator(r))
        return;
    for (const auto& [key, values] : seriesOf(w, tensors)) {
        if (auto f = growth(values, w.index, o)) {
            f->level = tensors ? LeakLevel::Tensors : LeakLevel::Sites;
            if (key.first != 0)
                f->stack = key.first;
            f->device = key.second;
            explained.insert(key.second);
            out.push_back(*f);
        }
    }
}

// The allocator's allocated bytes (or the tracked bytes) growing, where no stack explains it.
void deviceLeaks(const Window& w, const LeakOptions& o, const std::set<int64_t>& explained,
                 std::vector<LeakFinding>& out)
{
    std::map<int64_t, std::vector<std::optional<uint64_t>>> devices;
    for (size_t i = 0; i < w.steps.size(); ++i) {
        for (const StepDevice& d : w.steps[i]->devices) {
            auto& values = devices[d.device];
            values.resize(w.index.size());
            values[i] = d.allocatedBytes.value_or(d.trackedBytes);
        }
    }
    for (auto& [device, values] : devices) {
        values.resize(w.index.size());
        if (explained.count(device))
            continue;
        if (auto f = growth(values, w.index, o)) {
            f->level = LeakLevel::Device;
            f->device = device;
            out.push_back(*f);
        }
    }
}

// A device-level finding's captured site: the step samples' sites on its device (segments, for
// a caching allocator, whose warm-up growth is over by the window) that grew steadily with it,
// the one that grew most, when that is at least half the device's growth per step.
void reservedSites(const Window& w, const LeakOptions& o, std::vector<LeakFinding>& out)
{
    const bool any = std::any_of(out.begin(), out.end(), [](const LeakFinding& f) { return f.level == LeakLevel::Device; });
    if (!any)
        return;
    std::vector<std::pair<std::pair<uint32_t, int64_t>, LeakFinding>> growing;
    for (const auto& [key, values] : seriesOf(w, false)) {
        if (key.first == 0)
            continue;
        if (auto g = growth(values, w.index, o))
            growing.emplace_back(key, *g);
    }
    for (LeakFinding& f : out) {
        if (f.level != LeakLevel::Device)
            continue;
        for (const auto& [key, g] : growing) {
            if (key.second == f.device && g.bytesPerStep >= 0.5 * f.bytesPerStep && g.bytesPerStep > f.reservedPerStep) {
                f.reservedStack = key.first;
                f.reservedPerStep = g.bytesPerStep;
            }
        }
    }
}

// Never freed at exit, in a program without a caching allocator.
void exitLeaks(const Report& r, const LeakOptions& o, std::vector<LeakFinding>& out)
{
    if (r.trigger.kind != TriggerKind::Exit || hasCachingAllocator(r))
        return;
    std::set<uint32_t> seen;
    for (const LeakFinding& f : out) {
        if (f.stack)
            seen.insert(*f.stack);
    }
    for (const Site& s : r.sites) {
        if (s.bytes < o.minBytes || seen.count(s.stack))
            continue;
        // Libraries keep their workspaces and pools until exit by design (cuBLAS/cuBLASLt and
        // cuDNN handles, NCCL's buffers, XLA's and CuPy's pools, PyTorch's cache): only the
        // program's own allocations can be forgotten. (Growth across steps is found above,
        // whoever allocates.)
        if (stackSource(r, s.stack) != Source::Other)
            continue;
        LeakFinding f;
        f.level = LeakLevel::Exit;
        if (s.stack)
            f.stack = s.stack;
        f.device = s.device;
        f.firstBytes = 0;
        f.lastBytes = s.bytes;
        out.push_back(f);
    }
}

} // namespace

std::vector<LeakFinding> findLeaks(const Report& r, const LeakOptions& o)
{
    // Step events when the program has them; periodic samples only in programs without.
    const bool haveSteps = std::any_of(r.steps.begin(), r.steps.end(), [](const Step& s) { return s.source == StepSource::Step; });
    std::vector<const Step*> steps;
    for (const Step& s : r.steps) {
        if (!haveSteps || s.source == StepSource::Step)
            steps.push_back(&s);
    }
    std::vector<LeakFinding> out;
    const size_t n = steps.size();
    if (n >= o.minWarmup + o.minSteps) {
        const size_t warmup = std::max(o.minWarmup, size_t(double(n) * o.warmupFraction));
        Window w;
        w.steps.assign(steps.begin() + ptrdiff_t(warmup), steps.end());
        for (const Step* s : w.steps)
            w.index.push_back(s->index);
        std::set<int64_t> explained;  // devices with a leak found at stack level
        stackLeaks(r, w, o, explained, out);
        deviceLeaks(w, o, explained, out);
        reservedSites(w, o, out);
    }
    exitLeaks(r, o, out);
    std::stable_sort(out.begin(), out.end(), [](const LeakFinding& a, const LeakFinding& b) {
        return a.lastBytes - std::min(a.lastBytes, a.firstBytes) > b.lastBytes - std::min(b.lastBytes, b.firstBytes);
    });
    return out;
}

LeakBlame blameLeak(const Report& r, const LeakFinding& leak, const SourceLine& source)
{
    LeakBlame blame;
    const std::optional<uint32_t> id = leak.stack ? leak.stack : leak.reservedStack;
    const Stack* stack = id ? r.findStack(*id) : nullptr;
    if (stack) {
        // The program's own frames, innermost first: the first whose line accumulates.
        for (const Frame& f : stack->frames) {
            if (f.kind != Frame::Kind::Python || (f.file == kBorrowedFrameFile && f.line == 0) ||
                inFrameworkPackage(f.file))
                continue;
            const std::string text = source ? trim(source(f.file, f.line)) : "";
            if (const auto p = patternOfLine(text)) {
                blame.frame = &f;
                blame.text = text;
                blame.pattern = p->pattern;
                blame.remedy = p->remedy;
                return blame;
            }
        }
        blame.frame = programFrame(*stack);
        if (!blame.frame) {
            for (const Frame& f : stack->frames) {
                const Module* m = f.module ? r.findModule(*f.module) : nullptr;
                if (f.kind == Frame::Kind::Native && m && !isCudaLibrary(m->path)) {
                    blame.frame = &f;
                    break;
                }
            }
        }
        if (blame.frame && blame.frame->kind == Frame::Kind::Python && source)
            blame.text = trim(source(blame.frame->file, blame.frame->line));
    }
    switch (leak.level) {
    case LeakLevel::Exit:
        blame.pattern = "memory never freed before exit";
        blame.remedy = "free it when done (cudaFree); memory meant to live until exit is no leak: check with "
                       "--fail-on peak instead";
        break;
    case LeakLevel::Device:
        blame.pattern = blame.frame ? "the allocator's live memory grows every step, and it reserves more at this "
                                      "line every step"
                                    : "the allocator's live memory grows every step";
        blame.remedy = "rerun with OOMSCOPE_TORCH_HISTORY=1 (oomscope run --check does) to name the line that "
                       "allocates what stays alive";
        break;
    case LeakLevel::Tensors:
        blame.pattern = "tensors kept alive across steps";
        blame.remedy = "drop the references to them at the end of each step (the line above allocates them)";
        break;
    case LeakLevel::Sites:
        if (leak.device < 0) {
            blame.pattern = "pinned host memory growing across steps";
            blame.remedy = "reuse pinned buffers instead of allocating new ones each step (cudaHostAlloc, "
                           "tensor.pin_memory())";
        } else {
            blame.pattern = "allocations not freed across steps";
            blame.remedy = "free each step's allocations or reuse them";
        }
        break;
    }
    return blame;
}

namespace {

std::optional<Retainer> heldBy(const Report& r, const LeakFinding& f)
{
    // The first and the last census of the step samples: what grew between them on the leak's
    // device. A retainer whose tensor came from the leak's own stack wins; else the one that grew most.
    const Step* first = nullptr;
    const Step* last = nullptr;
    for (const Step& s : r.steps) {
        if (!s.retainers)
            continue;
        if (!first)
            first = &s;
        last = &s;
    }
    if (!first || first == last)
        return std::nullopt;
    std::map<std::string, uint64_t> before;
    for (const Retainer& x : *first->retainers)
        if (x.device == f.device)
            before[x.name] = x.bytes;
    const Retainer* best = nullptr;
    uint64_t bestGrowth = 0;
    bool bestMatches = false;
    for (const Retainer& x : *last->retainers) {
        if (x.device != f.device)
            continue;
        const uint64_t was = before.count(x.name) ? before[x.name] : 0;
        if (x.bytes < was + (1u << 20))
            continue;  // did not grow by a MiB
        const uint64_t growth = x.bytes - was;
        const bool matches = f.stack && x.stack == *f.stack;
        if (!best || (matches && !bestMatches) || (matches == bestMatches && growth > bestGrowth)) {
            best = &x;
            bestGrowth = growth;
            bestMatches = matches;
        }
    }
    return best ? std::optional<Retainer>(*best) : std::nullopt;
}

} // namespace

std::string describeRetainer(const Retainer& x)
{
    return "held by " + x.name + " (" + x.kind + ": " + x.container + ", " + std::to_string(x.tensors) +
           (x.tensors == 1 ? " tensor, " : " tensors, ") + formatBytes(x.bytes) + ")";
}

std::string describeGrowth(const BlamedLeak& b)
{
    const LeakFinding& leak = b.leak;
    if (leak.level == LeakLevel::Exit)
        return formatBytes(leak.lastBytes) + " never freed before exit";
    return "+" + formatBytes(uint64_t(std::max(0.0, leak.bytesPerStep))) + " per step over " +
           std::to_string(leak.steps) + " steps (" + formatBytes(leak.firstBytes) + " -> " +
           formatBytes(leak.lastBytes) + ", device " + std::to_string(leak.device) +
           (b.stacks > 1 ? ", " + std::to_string(b.stacks) + " allocation sites" : "") + ")";
}

std::vector<BlamedLeak> blameLeaks(const Report& r, const std::vector<LeakFinding>& findings, const SourceLine& source)
{
    std::vector<BlamedLeak> out;
    std::map<std::string, size_t> index;
    for (const LeakFinding& f : findings) {
        LeakBlame blame = blameLeak(r, f, source);
        // Stack-less findings (device level) and exit leaks stay one per finding.
        const bool mergeable = blame.frame && f.level != LeakLevel::Exit && f.level != LeakLevel::Device;
        const std::string key = mergeable ? describeFrame(r, *blame.frame) + "\n" + blame.pattern + "\n" +
                                                std::to_string(f.device)
                                          : std::string();
        auto it = mergeable ? index.find(key) : index.end();
        if (it == index.end()) {
            if (mergeable)
                index.emplace(key, out.size());
            out.push_back(BlamedLeak{f, std::move(blame), 1});
            continue;
        }
        BlamedLeak& b = out[it->second];
        b.leak.firstBytes += f.firstBytes;
        b.leak.lastBytes += f.lastBytes;
        b.leak.bytesPerStep += f.bytesPerStep;
        if (f.steps > b.leak.steps) {
            b.leak.steps = f.steps;
            b.leak.firstStep = f.firstStep;
            b.leak.lastStep = f.lastStep;
        }
        ++b.stacks;
    }
    std::stable_sort(out.begin(), out.end(), [](const BlamedLeak& a, const BlamedLeak& b) {
        return a.leak.bytesPerStep > b.leak.bytesPerStep;
    });
    for (BlamedLeak& b : out)
        if (b.leak.level == LeakLevel::Tensors || b.leak.level == LeakLevel::Device)
            b.heldBy = heldBy(r, b.leak);
    return out;
}


std::vector<Leak> leakEntries(const Report& r, const std::vector<LeakFinding>& findings, const SourceLine& source)
{
    std::vector<Leak> out;
    for (const BlamedLeak& b : blameLeaks(r, findings, source)) {
        const LeakFinding& f = b.leak;
        const LeakBlame& blame = b.blame;
        Leak leak;
        leak.stack = f.stack.value_or(f.reservedStack.value_or(0));
        leak.pattern = blame.pattern;
        leak.bytesPerStep = int64_t(f.bytesPerStep);
        leak.stepsObserved = f.steps;
        std::string evidence;
        if (f.level == LeakLevel::Exit)
            evidence = formatBytes(f.lastBytes) + " live at exit";
        else
            evidence = formatBytes(f.firstBytes) + " at step " + std::to_string(f.firstStep) + " -> " +
                       formatBytes(f.lastBytes) + " at step " + std::to_string(f.lastStep) + " (device " +
                       std::to_string(f.device) + ")";
        if (b.stacks > 1)
            evidence += ", " + std::to_string(b.stacks) + " allocation sites";
        leak.heldBy = b.heldBy;
        if (leak.heldBy)
            evidence += "; " + describeRetainer(*leak.heldBy);
        if (blame.frame && !f.stack && f.reservedStack)
            evidence += "; the allocator reserves " + formatBytes(uint64_t(f.reservedPerStep)) + " more per step at " +
                        describeFrame(r, *blame.frame);
        else if (blame.frame)
            evidence += std::string(leak.heldBy ? "; allocated at " : "; ") + describeFrame(r, *blame.frame);
        if (!blame.text.empty())
            evidence += ": " + blame.text;
        leak.evidence = evidence;
        out.push_back(std::move(leak));
    }
    return out;
}

} // namespace oomscope::report
