#include "report/analysis/diagnosis.h"

#include "report/analysis/analysis.h"
#include "report/analysis/memory_over_time.h"
#include "report/format.h"

#include <algorithm>
#include <bitset>
#include <cctype>
#include <cmath>
#include <map>

namespace oomscope::report {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

std::string percent(double fraction)
{
    return std::to_string(int(std::lround(fraction * 100))) + "%";
}

std::string dev(int64_t device)
{
    return "device " + std::to_string(device);
}

std::optional<uint64_t> totalOf(const Report& r, int64_t device)
{
    for (const Device& d : r.devices) {
        if (d.index == device)
            return d.totalBytes;
    }
    return std::nullopt;
}

bool stackHas(const Report& r, uint32_t id, bool (*test)(const Frame&))
{
    if (const Stack* s = r.findStack(id)) {
        for (const Frame& f : s->frames) {
            if (f.kind == Frame::Kind::Python && test(f))
                return true;
        }
    }
    return false;
}

bool isForward(const Frame& f)
{
    const std::string& fn = f.function;
    return fn.size() >= 7 && fn.compare(fn.size() - 7, 7, "forward") == 0 && f.file != kBorrowedFrameFile;
}

bool isOptimizer(const Frame& f)
{
    return f.file.find("/torch/optim/") != std::string::npos;
}

constexpr const char* kFragmentationRemedy =
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets PyTorch grow segments instead of splitting them; "
    "or max_split_size_mb:<MiB> keeps large blocks from being split";

// PyTorch's allocator settings from the report's process (PYTORCH_ALLOC_CONF): what the rules
// need of them.
struct AllocatorSettings {
    bool expandable = false;
    std::optional<uint64_t> maxSplitMiB;
};

AllocatorSettings allocatorSettings(const Report& r)
{
    AllocatorSettings a;
    std::string conf;
    for (char c : r.process.allocatorConfig.value_or(""))
        if (c != ' ')
            conf.push_back(char(std::tolower(static_cast<unsigned char>(c))));
    size_t at = 0;
    while (at <= conf.size()) {
        const size_t comma = std::min(conf.find(',', at), conf.size());
        const std::string item = conf.substr(at, comma - at);
        if (item == "expandable_segments:true")
            a.expandable = true;
        else if (item.rfind("max_split_size_mb:", 0) == 0) {
            const std::string n = item.substr(18);
            if (!n.empty() && n.size() < 12 && n.find_first_not_of("0123456789") == std::string::npos)
                a.maxSplitMiB = std::stoull(n);
        }
        at = comma + 1;
    }
    return a;
}

// max_split_size_mb together with expandable_segments:True (pytorch#123548): reserved memory
// grows far beyond what is ever allocated at once. With step samples, late in the run; without,
// at the trigger.
constexpr const char* kMaxSplitWithExpandableRemedy =
    "drop max_split_size_mb: expandable segments already avoid the fragmentation it works around (or drop "
    "expandable_segments:True and keep max_split_size_mb)";

void fragmentationRules(const Report& r, std::vector<Diagnosis>& out)
{
    const AllocatorSettings settings = allocatorSettings(r);
    const std::string both = settings.maxSplitMiB ? "max_split_size_mb:" + std::to_string(*settings.maxSplitMiB) +
                                                        " together with expandable_segments:True"
                                                  : "";
    if (settings.maxSplitMiB && settings.expandable && r.steps.empty()) {
        for (const MemoryRow& row : r.memory) {
            if (row.reservedBytes && row.allocatedBytes && double(*row.reservedBytes) >= 1.5 * double(*row.allocatedBytes) &&
                *row.reservedBytes - *row.allocatedBytes >= kGiB)
                out.push_back({"max_split_with_expandable", Severity::Info,
                               dev(row.device) + ": PyTorch reserves " + formatBytes(*row.reservedBytes) + " for " +
                                   formatBytes(*row.allocatedBytes) + " allocated, with " + both +
                                   ", which lets reserved memory grow beyond what is allocated (pytorch#123548)",
                               kMaxSplitWithExpandableRemedy});
        }
    }
    bool fired = false;
    for (const DeviceFragmentation& f : fragmentation(r)) {
        if (f.requestBlockedByFragmentation) {
            out.push_back({"fragmentation", Severity::Error,
                           dev(f.device) + ": the request of " + formatBytes(*f.request) + " fits in the " +
                               formatBytes(f.freeInCache) + " free inside reserved memory taken together, but the "
                               "largest free block is " + formatBytes(f.largestFree) + " (external fragmentation " +
                               percent(f.external) + ", " + std::to_string(f.splitSegments) + " of " +
                               std::to_string(f.segments) + " segments split)",
                           kFragmentationRemedy});
            fired = true;
        } else if (f.freeInCache >= kGiB && double(f.freeInCache) >= 0.25 * double(f.reserved) && f.haveBlocks &&
                   f.external >= 0.5) {
            out.push_back({"fragmentation", Severity::Warning,
                           dev(f.device) + ": " + formatBytes(f.freeInCache) + " (" +
                               percent(double(f.freeInCache) / double(f.reserved)) +
                               " of reserved) sits free in the cache in pieces; the largest is " +
                               formatBytes(f.largestFree),
                           kFragmentationRemedy});
            fired = true;
        }
    }
    if (fired || r.steps.empty())
        return;
    // Over the run: split, unused blocks late in the run (after warm-up). Idle whole segments
    // are no sign: at a step boundary a training loop's cache holds the activations it just
    // freed and will reuse.
    std::map<int64_t, std::vector<const StepDevice*>> samples;
    const size_t late = std::min(r.steps.size(), std::max<size_t>(2, r.steps.size() / 4));
    for (size_t i = r.steps.size() - late; i < r.steps.size(); ++i) {
        for (const StepDevice& d : r.steps[i].devices) {
            if (d.reservedBytes && *d.reservedBytes)
                samples[d.device].push_back(&d);
        }
    }
    for (auto& [device, list] : samples) {
        if (list.size() < 2)
            continue;
        auto share = [](const StepDevice* d) {
            return double(d->inactiveSplitBytes.value_or(0)) / double(*d->reservedBytes);
        };
        std::sort(list.begin(), list.end(), [&](const StepDevice* a, const StepDevice* b) { return share(a) < share(b); });
        const StepDevice& d = *list[list.size() / 2];  // the median sample of the late steps
        const uint64_t split = d.inactiveSplitBytes.value_or(0);
        // Reserved memory beyond the most ever allocated at once exists only because free
        // memory was in pieces that fitted no request (rounding aside).
        uint64_t peak = 0;
        bool expandable = false;
        for (const StepDevice* sample : list) {
            peak = std::max(peak, sample->peakAllocatedBytes.value_or(0));
            expandable |= sample->expandableSegments.value_or(false);
        }
        const uint64_t reserved = *d.reservedBytes;
        if (peak && (expandable || settings.expandable) && settings.maxSplitMiB && double(reserved) >= 1.5 * double(peak) &&
            reserved - peak >= kGiB) {
            uint64_t first = 0;
            for (const Step& step : r.steps) {
                for (const StepDevice& sd : step.devices)
                    if (sd.device == device && sd.reservedBytes && !first)
                        first = *sd.reservedBytes;
            }
            out.push_back({"max_split_with_expandable", Severity::Warning,
                           dev(device) + ": late in the run PyTorch reserves " + formatBytes(reserved) + " (" +
                               formatBytes(first) + " at the first step) while the most it ever allocated at once is " +
                               formatBytes(peak) + ": with " + both +
                               " its segments keep growing instead of reusing their free space (pytorch#123548)",
                           kMaxSplitWithExpandableRemedy});
            continue;
        }
        if (peak && !expandable && double(reserved) >= 1.5 * double(peak) && reserved - peak >= kGiB) {
            out.push_back({"fragmentation", Severity::Warning,
                           dev(device) + ": late in the run PyTorch reserves " + formatBytes(reserved) +
                               " while the most it ever allocated at once is " + formatBytes(peak) + ": " +
                               formatBytes(reserved - peak) + " of cache exists only because free memory was in "
                               "pieces of the wrong sizes (requests of varying sizes)",
                           kFragmentationRemedy});
            continue;
        }
        if (split >= 512 * kMiB && share(&d) >= 0.2)
            out.push_back({"fragmentation", Severity::Warning,
                           dev(device) + ": late in the run " + formatBytes(split) + " (" + percent(share(&d)) +
                               " of " + formatBytes(*d.reservedBytes) + " reserved) sits in split, unused blocks "
                               "(median of the last " + std::to_string(list.size()) + " steps; allocated " +
                               formatBytes(d.allocatedBytes.value_or(0)) + "): requests of varying sizes carve "
                               "segments into pieces that fit nothing",
                           kFragmentationRemedy});
    }
}

void requestRule(const Report& r, std::vector<Diagnosis>& out)
{
    if (r.trigger.kind != TriggerKind::Oom || !r.trigger.requestedBytes || !r.trigger.device)
        return;
    const auto total = totalOf(r, *r.trigger.device);
    const uint64_t request = *r.trigger.requestedBytes;
    if (!total || *total == 0 || double(request) < 0.25 * double(*total))
        return;
    const std::string what = request > *total ? " is larger than the whole device (" + formatBytes(*total) + ")"
                                              : " is " + percent(double(request) / double(*total)) +
                                                    " of the device's " + formatBytes(*total);
    out.push_back({"request_too_large", Severity::Error, "one request of " + formatBytes(request) + what,
                   "a smaller batch, or micro-batches with gradient accumulation (the same effective batch in k "
                   "steps of 1/k); for one huge tensor, shard or chunk it"});
}

const char* const kActivationsRemedy =
    "activation checkpointing (torch.utils.checkpoint; model.gradient_checkpointing_enable() in transformers); bf16 "
    "autocast (torch.autocast(\"cuda\", dtype=torch.bfloat16)) halves fp32 activations; a smaller micro-batch";
const char* const kOptimizerRemedy =
    "an 8-bit optimizer (bitsandbytes AdamW8bit keeps a quarter of Adam's state), or shard the state across ranks: "
    "FSDP or ZeRO (DeepSpeed)";

// From the memory by role the adapter measured (memory[].by_role): exact, and the shares add
// up, so the two verdicts cannot contradict each other.
bool roleRules(const Report& r, std::vector<Diagnosis>& out)
{
    const MemoryRow* row = r.trigger.device ? r.findMemory(*r.trigger.device) : nullptr;
    if (!row || !row->byRole)
        return false;
    const RoleBytes& b = *row->byRole;
    const uint64_t allocated = b.parameters + b.gradients + b.optimizerState + b.activations;
    if (allocated == 0)
        return true;
    auto share = [&](uint64_t v) { return formatBytes(v) + " (" + percent(double(v) / double(allocated)) + ")"; };
    if (double(b.activations) >= 0.5 * double(allocated))
        out.push_back({"activations", Severity::Warning,
                       share(b.activations) + " of what PyTorch allocated is activations and temporaries (parameters " +
                           formatBytes(b.parameters) + ", gradients " + formatBytes(b.gradients) + ", optimizer state " +
                           formatBytes(b.optimizerState) + ")",
                       kActivationsRemedy});
    if (double(b.optimizerState) >= 0.25 * double(allocated))
        out.push_back({"optimizer_state", Severity::Warning,
                       share(b.optimizerState) + " of what PyTorch allocated is optimizer state (parameters " +
                           formatBytes(b.parameters) + ")",
                       kOptimizerRemedy});
    return true;
}

void compositionRules(const Report& r, std::vector<Diagnosis>& out)
{
    if (!r.trigger.framework || r.trigger.kind != TriggerKind::Oom)
        return;
    if (roleRules(r, out))
        return;
    // Without roles (an older adapter, another framework): guessed from the allocation stacks.
    uint64_t total = 0, forward = 0;
    for (const Site& s : r.sites) {
        if (s.kind != MemKind::Device)
            continue;
        total += s.bytes;
        if (stackHas(r, s.stack, isForward))
            forward += s.bytes;
    }
    if (total && double(forward) >= 0.5 * double(total))
        out.push_back({"activations", Severity::Warning,
                       formatBytes(forward) + " (" + percent(double(forward) / double(total)) +
                           " of the memory PyTorch reserved) was allocated under forward(): activations kept "
                           "for backward",
                       kActivationsRemedy});
    // Optimizer state: by tensor where blocks carry stacks, else by segment.
    uint64_t optimizer = 0, allocated = 0;
    if (hasBlockStacks(r)) {
        for (const Segment& seg : r.segments) {
            for (const Block& b : seg.blocks) {
                if (b.state == BlockState::Inactive)
                    continue;
                allocated += b.size;
                if (b.stack && stackHas(r, *b.stack, isOptimizer) && !stackHas(r, *b.stack, isForward))
                    optimizer += b.size;
            }
        }
    } else {
        allocated = total;
        for (const Site& s : r.sites) {
            if (s.kind == MemKind::Device && stackHas(r, s.stack, isOptimizer) && !stackHas(r, s.stack, isForward))
                optimizer += s.bytes;  // under forward() inside step(closure): an activation
        }
    }
    if (allocated && double(optimizer) >= 0.25 * double(allocated))
        out.push_back({"optimizer_state", Severity::Warning,
                       formatBytes(optimizer) + " (" + percent(double(optimizer) / double(allocated)) +
                           ") is optimizer state, allocated in torch.optim",
                       kOptimizerRemedy});
}

// NCCL's part of outside_framework's remedy: the communicator that took the most on this
// device and the variables that bound what it takes, by when it took it.
std::string ncclRemedy(const Report& r, int64_t device)
{
    const NcclCommunicator* largest = nullptr;
    size_t count = 0;
    if (r.nccl)
        for (const NcclCommunicator& c : r.nccl->communicators)
            if (c.device == device && c.bytes()) {
                ++count;
                if (!largest || c.bytes() > largest->bytes())
                    largest = &c;
            }
    std::string s = "NCCL: ";
    if (largest) {
        s += (count > 1 ? "of " + std::to_string(count) + " communicators, " : std::string()) + describeCommunicator(*largest) +
             "; ";
        if (largest->firstCollectiveBytes > largest->initBytes)
            s += "what a communicator connects at its first collective grows with channels and peers: "
                 "NCCL_MAX_NCHANNELS (or NCCL_MAX_CTAS), NCCL_BUFFSIZE (4 MiB per channel by default), "
                 "NCCL_NVLS_ENABLE=0 bound it";
        else
            s += "NCCL_BUFFSIZE (4 MiB per channel by default), NCCL_MAX_NCHANNELS and NCCL_NVLS_ENABLE=0 bound its "
                 "buffers";
        if (count > 1)
            s += "; destroy the communicators (process groups) no longer used: torch.distributed.destroy_process_group(group)";
    } else {
        s += "NCCL_BUFFSIZE (4 MiB per channel by default) and NCCL_NVLS_ENABLE=0 bound its buffers";
    }
    if (r.nccl && r.nccl->symmetricBytes)
        s += "; " + formatBytes(r.nccl->symmetricBytes) + " of it is symmetric memory (ncclMemAlloc), sized by its owner";
    return s;
}

void outsideRule(const Report& r, std::vector<Diagnosis>& out)
{
    for (const MemoryRow& row : r.memory) {
        if (!row.reservedBytes)
            continue;
        std::map<std::string, uint64_t> parts;
        for (const auto& [source, bytes] : byName(row.bySource)) {
            if (source != "torch" && source != "untracked" && bytes)
                parts[source] = bytes;
        }
        if (row.untrackedBytes && *row.untrackedBytes)
            parts["untracked"] = *row.untrackedBytes;
        uint64_t outside = 0;
        for (const auto& [source, bytes] : parts)
            outside += bytes;
        const auto total = totalOf(r, row.device);
        if (outside < 2 * kGiB && !(total && double(outside) >= 0.1 * double(*total)))
            continue;
        std::string list, remedy;
        for (const auto& [source, bytes] : parts) {
            list += (list.empty() ? "" : ", ") + source + " " + formatBytes(bytes);
            if (double(bytes) < 0.1 * double(outside))
                continue;
            const std::string sep = remedy.empty() ? "" : "; ";
            if (source == "nccl")
                remedy += sep + ncclRemedy(r, row.device);
            else if (source == "cublas")
                remedy += sep + "cuBLAS: CUBLAS_WORKSPACE_CONFIG=:4096:8 bounds its workspaces";
            else if (source == "cudnn")
                remedy += sep + "cuDNN: torch.backends.cudnn.benchmark=False avoids large trial workspaces";
            else if (source == "untracked")
                remedy += sep + "the CUDA context and eagerly loaded kernels: CUDA_MODULE_LOADING=LAZY; fewer "
                                "processes per GPU";
            else
                remedy += sep + source + ": its own memory settings";
        }
        out.push_back({"outside_framework", Severity::Info,
                       dev(row.device) + ": " + formatBytes(outside) + " outside PyTorch's allocator (" + list + ")",
                       remedy.empty() ? "the libraries' own memory settings" : remedy});
    }
}

// An out-of-memory error raised inside torch.cuda.use_mem_pool (trigger.pool_id): the pool's
// allocator could not give the request; when the device had room, the pool was full, not the
// device (pytorch#159674: a MemPool over a bounded allocator, NCCL's symmetric memory).
void poolRule(const Report& r, std::vector<Diagnosis>& out)
{
    if (r.trigger.kind != TriggerKind::Oom || r.trigger.poolId.empty() || !r.trigger.device)
        return;
    const int64_t device = *r.trigger.device;
    uint64_t held = 0;
    for (const Segment& s : r.segments)
        if (s.device == device && s.poolId == r.trigger.poolId)
            held += s.size;
    const Device* d = r.findDevice(device);
    const bool freeKnown = d && d->freeBytes;
    const uint64_t free = freeKnown ? *d->freeBytes : 0;
    const uint64_t request = r.trigger.requestedBytes.value_or(0);
    const bool roomOnDevice = freeKnown && request && free >= request;
    std::string message = "the failed request" + (request ? " of " + formatBytes(request) : std::string()) +
                          " was made inside torch.cuda.use_mem_pool(" + poolName(r, r.trigger.poolId) + "), which holds " +
                          formatBytes(held) + " on " + dev(device);
    if (roomOnDevice)
        message += ": the pool could not grow while the device had " + formatBytes(free) +
                   " free — the pool was full, not the device";
    else if (freeKnown)
        message += "; the device was full too (" + formatBytes(free) + " free)";
    out.push_back({"pool_full", Severity::Error, message,
                   roomOnDevice ? "raise the limit of the pool's allocator, or allocate this tensor outside the "
                                  "use_mem_pool block"
                                : "free memory inside the pool and outside it: what is allocated in a MemPool stays in "
                                  "it until the pool's tensors are gone"});
}

// The stack of the allocation that made a segment: the newest "alloc" row of the timeline at
// its address (PyTorch's cudaMalloc of it: without PyTorch's history, the best name of what
// was put there first).
std::optional<uint32_t> segmentStack(const Report& r, const Segment& s)
{
    const Timeline::Flags isAlloc = r.timeline.flags("alloc");
    for (auto row = r.timeline.rows.rbegin(); row != r.timeline.rows.rend(); ++row)
        if (row->address == s.address && row->device == s.device && isAlloc(row->kind))
            return row->stack ? std::optional<uint32_t>(row->stack) : std::nullopt;
    return std::nullopt;
}

// A CUDA graph's pool that no graph holds (cuda_graphs: the adapter followed the captures) and
// that still holds segments: tensors made during a capture outlive the graph that was dropped,
// or a capture failed and PyTorch keeps its pool held for the life of the process
// (pytorch#190348: empty_cache() and an out-of-memory error leave it alone).
void orphanedGraphPoolRule(const Report& r, std::vector<Diagnosis>& out)
{
    if (!r.cudaGraphs)
        return;
    const CudaGraphs& g = *r.cudaGraphs;
    for (const MemoryRow& row : r.memory) {
        for (const PoolBytes& p : bytesByPool(r, row.device)) {
            if (poolKind(r, p.poolId) != PoolKind::Graph || p.reserved == 0)
                continue;
            if (const GraphPoolUse* use = r.findGraphPool(p.poolId); use && use->graphs > 0)
                continue;
            std::string message = dev(row.device) + ": " + poolName(r, p.poolId) + " holds " + formatBytes(p.reserved) +
                                  " (" + formatBytes(p.allocated) + " allocated) and no CUDA graph uses it";
            std::string remedy;
            if (p.allocated > 0) {
                std::string site;
                for (const Segment& s : r.segments) {
                    if (s.device != row.device || s.poolId != p.poolId || !site.empty())
                        continue;
                    for (const Block& b : s.blocks)
                        if (b.state == BlockState::ActiveAllocated && site.empty()) {
                            const std::optional<uint32_t> stack = b.stack ? b.stack : segmentStack(r, s);
                            if (stack)
                                site = stackLabel(r, r.findStack(*stack));
                        }
                }
                message += ": tensors made during a capture outlive their graph and keep the pool" +
                           (site.empty() ? std::string() : " (one allocated at " + site + ")");
                remedy = "drop a graph's outputs with the graph (del them), or copy what must outlive it out of the pool; "
                         "its free segments go back at torch.cuda.empty_cache()";
            } else if (g.aborted > 0) {
                message += ": " + std::to_string(g.aborted) + " of " + std::to_string(g.captures) +
                           " captures failed, and a failed capture keeps its pool for the life of the process "
                           "(torch.cuda.empty_cache() and an out-of-memory error do not free it)";
                remedy = "fix what broke the capture (a synchronisation, .item() or a copy to the CPU inside it); until "
                         "PyTorch releases it (pytorch#190348), torch._C._cuda_releasePool(device, pool_id) after the "
                         "failed capture, then torch.cuda.empty_cache()";
            } else {
                message += ": its graphs are gone and its segments are cached";
                remedy = "torch.cuda.empty_cache() gives the pool's segments back";
            }
            out.push_back({"orphaned_graph_pool", Severity::Warning, message, remedy});
        }
    }
}

// Paused memory (paused[]): not in use and not a leak, but mapping it again needs it back.
void pausedRule(const Report& r, std::vector<Diagnosis>& out)
{
    for (const MemoryRow& row : r.memory) {
        if (!row.pausedBytes || *row.pausedBytes == 0)
            continue;
        const uint64_t paused = *row.pausedBytes;
        std::string by;
        for (const PausedRange& p : r.paused)
            if (p.device == row.device && p.stack && by.empty())
                by = ", reserved by " + stackLabel(r, r.findStack(*p.stack));
        std::string message = dev(row.device) + ": " + formatBytes(paused) +
                              " paused (unmapped with its address ranges kept" + by +
                              "): not in use and not a leak, but resuming maps it again";
        const Device* d = r.findDevice(row.device);
        const bool short_ = d && d->freeBytes && *d->freeBytes < paused;
        if (short_)
            message += "; " + formatBytes(*d->freeBytes) + " is free now, less than resuming needs";
        out.push_back({"paused_memory", short_ ? Severity::Warning : Severity::Info, message,
                       "free as much before resuming (what runs while it is paused must give it back), or release "
                       "what will not be resumed (cuMemAddressFree)"});
    }
}

void growthRule(const Report& r, const std::vector<LeakFinding>& leaks, const SourceLine& source,
                std::vector<Diagnosis>& out)
{
    for (const BlamedLeak& b : blameLeaks(r, leaks, source)) {
        std::string where = b.heldBy ? " " + describeRetainer(*b.heldBy) + (b.blame.frame ? "," : "") : "";
        if (b.blame.frame)
            where += (b.heldBy ? " allocated at " : " at ") + describeFrame(r, *b.blame.frame);
        if (!b.blame.text.empty())
            where += ": " + b.blame.text;
        const std::string what = describeGrowth(b);
        out.push_back({"growth", Severity::Warning, what + where + " — " + b.blame.pattern, b.blame.remedy});
    }
}

// Where a run's refills fall (churnRule): eight equal slices of the analysed span and, when the
// run has step samples there, the intervals between steps.
class RefillPlaces {
public:
    RefillPlaces(const Report& r, uint64_t first, uint64_t last) : m_first(first), m_width((last - first) / 8 + 1)
    {
        for (const Step& s : r.steps)
            if (s.timeNs >= first && s.timeNs <= last)
                m_steps.push_back(s.timeNs);
        std::sort(m_steps.begin(), m_steps.end());
        m_intervals.assign(m_steps.size() > 1 ? m_steps.size() - 1 : 0, false);
    }
    void mark(uint64_t timeNs)
    {
        m_slices |= 1u << unsigned(std::min<uint64_t>(7, (timeNs > m_first ? timeNs - m_first : 0) / m_width));
        const auto after = std::upper_bound(m_steps.begin(), m_steps.end(), timeNs);
        const size_t index = size_t(after - m_steps.begin());
        if (index > 0 && index - 1 < m_intervals.size())
            m_intervals[index - 1] = true;
    }
    // A step loop (four step intervals or more): refills in at least half of them — the cache
    // emptied in the loop, not once per trial of a batch-size finder. Without steps: refills in
    // at least 5 of the 8 slices.
    bool persistent() const
    {
        if (m_intervals.size() >= 4)
            return 2 * size_t(std::count(m_intervals.begin(), m_intervals.end(), true)) >= m_intervals.size();
        return std::bitset<8>(m_slices).count() >= 5;
    }

private:
    uint64_t m_first, m_width;
    unsigned m_slices = 0;
    std::vector<uint64_t> m_steps;
    std::vector<bool> m_intervals;
};

void churnRule(const Report& r, std::vector<Diagnosis>& out)
{
    // Up to the first failed allocation: what follows is the OOM's own cache flush.
    const Timeline::Flags failed = r.timeline.flags("alloc_failed"), isFree = r.timeline.flags("free"),
                          isAlloc = r.timeline.flags("alloc"), deviceApi = r.timeline.flags(deviceMemoryApi);
    size_t end = 0;
    while (end < r.timeline.rows.size() && !failed(r.timeline.rows[end].kind))
        ++end;
    if (end == 0)
        return;
    // Churn is device memory given back and taken again, over and over: a refill is a free that an
    // allocation follows. Frees after the last allocation are teardown (a pool handed back at
    // exit), not churn; start-up (module loading, autotuning scratch, a JIT's warm-up, the first
    // calls of a short program) allocates and frees in bursts. So the refills must persist
    // (RefillPlaces), over the run to the first failure, or to the trigger when nothing failed
    // (an exit long after a start-up burst).
    const uint64_t first = r.timeline.rows.front().timeNs;
    uint64_t last = r.timeline.rows[end - 1].timeNs;
    if (end == r.timeline.rows.size() && r.trigger.timeNs > last)
        last = r.trigger.timeNs;
    RefillPlaces places(r, first, std::max(last, first));
    // One pass (a million rows): the frees since the last allocation wait until an allocation
    // makes them refills.
    uint64_t allocs = 0, frees = 0;
    std::vector<uint64_t> waiting;
    for (size_t i = 0; i < end; ++i) {
        const TimelineRow& row = r.timeline.rows[i];
        if (row.device < 0 || !deviceApi(row.api))  // pinned host and managed memory are not device churn
            continue;
        if (isFree(row.kind)) {
            waiting.push_back(row.timeNs);
        } else if (isAlloc(row.kind)) {
            ++allocs;
            frees += waiting.size();
            for (uint64_t t : waiting)
                places.mark(t);
            waiting.clear();
        }
    }
    if (frees < 10 || frees * 4 < allocs || !places.persistent())
        return;
    const bool torch = r.trigger.framework || std::find(r.capture.backends.begin(), r.capture.backends.end(),
                                                        "torch") != r.capture.backends.end();
    if (torch)
        out.push_back({"cache_churn", Severity::Warning,
                       std::to_string(frees) + " segments given back to CUDA and " + std::to_string(allocs) +
                           " taken again, all through the run: PyTorch's cache is being emptied and refilled (each cudaFree "
                           "synchronizes the device)",
                       "remove torch.cuda.empty_cache() from the step loop, or call it rarely; "
                       "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"});
    else
        out.push_back({"cache_churn", Severity::Warning,
                       std::to_string(allocs) + " allocations and " + std::to_string(frees) +
                           " frees of device memory, refilled all through the run (each cudaFree synchronizes the "
                           "device)",
                       "reuse buffers across iterations, or allocate stream-ordered (cudaMallocAsync) from a pool"});
}

int severityRank(Severity s)
{
    return s == Severity::Error ? 0 : s == Severity::Warning ? 1 : 2;
}

} // namespace

std::optional<Diagnosis> wrongDevice(const Report& r)
{
    const std::optional<int64_t> own = r.process.localRank;
    const size_t visible = r.devices.size();
    // Each rank sees only its own GPU (CUDA_VISIBLE_DEVICES per rank), or ranks share GPUs by
    // design: the local rank names no device.
    if (!own || *own < 0 || size_t(*own) >= visible || r.process.localWorldSize.value_or(0) > int64_t(visible))
        return std::nullopt;
    std::vector<std::string> contexts, allocations;
    for (const Device& d : r.devices) {
        if (d.index != *own && d.context.value_or(false))
            contexts.push_back(dev(d.index));
    }
    for (const MemoryRow& m : r.memory) {
        const uint64_t bytes = std::max(m.trackedBytes, m.peakTrackedBytes);
        if (m.device != *own && bytes > 0)
            allocations.push_back(formatBytes(bytes) + " on " + dev(m.device) +
                                  (m.trackedBytes == bytes ? "" : " (at its peak)"));
    }
    if (contexts.empty() && allocations.empty())
        return std::nullopt;
    auto join = [](const std::vector<std::string>& items) {
        std::string out;
        for (size_t i = 0; i < items.size(); ++i)
            out += (i == 0 ? "" : i + 1 == items.size() ? " and " : ", ") + items[i];
        return out;
    };
    std::string message = "local rank " + std::to_string(*own) + " should use " + dev(*own) + ", but it ";
    if (!contexts.empty())
        message += "has a context on " + join(contexts) + (allocations.empty() ? "" : " and ");
    if (!allocations.empty())
        message += "allocated " + join(allocations);
    return Diagnosis{"wrong_device", Severity::Error, message,
                     "call torch.cuda.set_device(local_rank) (or allocate on f\"cuda:{local_rank}\") before any CUDA "
                     "work: a context on another rank's GPU takes about 0.5 GiB there, on top of what it allocates"};
}

std::vector<Diagnosis> diagnose(const Report& r, const std::vector<LeakFinding>& leaks, const SourceLine& source)
{
    std::vector<Diagnosis> out;
    if (std::optional<Diagnosis> d = wrongDevice(r))
        out.push_back(std::move(*d));
    fragmentationRules(r, out);
    requestRule(r, out);
    compositionRules(r, out);
    outsideRule(r, out);
    poolRule(r, out);
    orphanedGraphPoolRule(r, out);
    pausedRule(r, out);
    growthRule(r, leaks, source, out);
    churnRule(r, out);
    std::stable_sort(out.begin(), out.end(), [](const Diagnosis& a, const Diagnosis& b) {
        return severityRank(a.severity) < severityRank(b.severity);
    });
    return out;
}

} // namespace oomscope::report
