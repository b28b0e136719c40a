// Metrics, leak patterns and the playbook's rules on hand-built reports: each rule is shown
// firing and not firing.
#include "report/analysis/analysis.h"
#include "report/analysis/diagnosis.h"
#include "report/analysis/leaks.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

using namespace oomscope::report;

namespace {

constexpr uint64_t MiB = 1ull << 20;
constexpr uint64_t GiB = 1ull << 30;

Report base()
{
    Report r;
    r.trigger.kind = TriggerKind::Exit;
    Device d;
    d.index = 0;
    d.totalBytes = 16 * GiB;
    r.devices.push_back(d);
    MemoryRow row;
    row.device = 0;
    r.memory.push_back(row);
    return r;
}

Frame py(const std::string& file, uint32_t line, const std::string& function)
{
    Frame f;
    f.kind = Frame::Kind::Python;
    f.file = file;
    f.line = line;
    f.function = function;
    return f;
}

void addStack(Report& r, uint32_t id, std::vector<Frame> frames)
{
    r.stacks.push_back(Stack{id, std::move(frames)});
}

Segment segment(uint64_t address, std::vector<std::pair<uint64_t, BlockState>> blocks)
{
    Segment s;
    s.address = address;
    s.kind = SegmentKind::Large;
    uint64_t offset = 0;
    for (auto [size, state] : blocks) {
        s.blocks.push_back(Block{offset, size, state, std::nullopt});
        offset += size;
    }
    s.size = offset;
    return s;
}

// A PyTorch-style OOM: 10 GiB reserved in two segments, 6 GiB allocated, free pieces of 1 + 3 GiB.
Report torchOom(uint64_t request)
{
    Report r = base();
    r.trigger.kind = TriggerKind::Oom;
    r.trigger.framework = "torch";
    r.trigger.device = 0;
    r.trigger.requestedBytes = request;
    r.memory[0].reservedBytes = 10 * GiB;
    r.memory[0].allocatedBytes = 6 * GiB;
    r.segments.push_back(segment(1ull << 40, {{2 * GiB, BlockState::ActiveAllocated}, {1 * GiB, BlockState::Inactive}, {3 * GiB, BlockState::ActiveAllocated}}));
    r.segments.push_back(segment(2ull << 40, {{1 * GiB, BlockState::ActiveAllocated}, {3 * GiB, BlockState::Inactive}}));
    return r;
}

bool has(const std::vector<Diagnosis>& found, const std::string& code, const std::string& severity = "")
{
    return std::any_of(found.begin(), found.end(), [&](const Diagnosis& d) {
        return d.code == code && (severity.empty() || enumName(d.severity) == severity);
    });
}

const Diagnosis& get(const std::vector<Diagnosis>& found, const std::string& code)
{
    return *std::find_if(found.begin(), found.end(), [&](const Diagnosis& d) { return d.code == code; });
}

// Steps with one site (stack 7) on device 0 whose bytes follow `bytes`.
Report withSteps(const std::vector<uint64_t>& bytes, bool tensors = false)
{
    Report r = base();
    addStack(r, 7, {py("/home/user/train.py", 31, "Net.forward"), py("/home/user/train.py", 52, "train")});
    for (size_t i = 0; i < bytes.size(); ++i) {
        Step s;
        s.index = i + 1;
        StepDevice d;
        d.device = 0;
        d.trackedBytes = bytes[i] + 100 * MiB;
        s.devices.push_back(d);
        (tensors ? s.tensors : s.sites).push_back(StepSite{7, 0, bytes[i]});
        (tensors ? s.sites : s.tensors).clear();
        r.steps.push_back(s);
    }
    return r;
}

std::vector<uint64_t> linear(size_t n, uint64_t start, uint64_t perStep)
{
    std::vector<uint64_t> v;
    for (size_t i = 0; i < n; ++i)
        v.push_back(start + i * perStep);
    return v;
}

SourceLine sourceOf(std::map<std::pair<std::string, uint32_t>, std::string> lines)
{
    return [lines](const std::string& file, uint32_t line) {
        auto it = lines.find({file, line});
        return it == lines.end() ? std::string() : it->second;
    };
}

} // namespace

TEST_CASE("fragmentation metrics from segments and blocks", "[diagnosis]")
{
    const Report r = torchOom(3 * GiB + 1);
    const auto f = fragmentation(r);
    REQUIRE(f.size() == 1);
    CHECK(f[0].reserved == 10 * GiB);
    CHECK(f[0].allocated == 6 * GiB);
    CHECK(f[0].freeInCache == 4 * GiB);
    CHECK(f[0].largestFree == 3 * GiB);
    CHECK(f[0].external == Approx(0.25));
    CHECK(f[0].segments == 2);
    CHECK(f[0].splitSegments == 2);
    CHECK(f[0].freeBlocks == 2);
    CHECK(f[0].requestBlockedByFragmentation);  // 3 GiB + 1 fits in 4 GiB free, not in 3 GiB
    CHECK_FALSE(fragmentation(torchOom(5 * GiB))[0].requestBlockedByFragmentation);  // more than is free
    CHECK_FALSE(fragmentation(torchOom(2 * GiB))[0].requestBlockedByFragmentation);  // fits in one block
    CHECK(fragmentation(base()).empty());  // no framework: nothing cached
}

TEST_CASE("rule fragmentation: a request blocked by split free blocks", "[diagnosis]")
{
    const auto fired = diagnose(torchOom(3 * GiB + 1), {}, nullptr);
    REQUIRE(has(fired, "fragmentation", "error"));
    CHECK(get(fired, "fragmentation").message.find("largest free block is 3.00 GiB") != std::string::npos);
    CHECK(get(fired, "fragmentation").suggestion.find("expandable_segments:True") != std::string::npos);
    CHECK_FALSE(has(diagnose(torchOom(5 * GiB), {}, nullptr), "fragmentation"));
}

TEST_CASE("rule fragmentation: split blocks late in the run", "[diagnosis]")
{
    auto steps = [](uint64_t allocated, uint64_t split) {
        Report r = base();
        for (int i = 0; i < 8; ++i) {
            Step s;
            s.index = uint64_t(i + 1);
            StepDevice d;
            d.reservedBytes = 4 * GiB;
            d.allocatedBytes = allocated;
            d.inactiveSplitBytes = split;
            s.devices.push_back(d);
            r.steps.push_back(s);
        }
        return r;
    };
    CHECK(has(diagnose(steps(3 * GiB, 1 * GiB), {}, nullptr), "fragmentation", "warning"));  // split blocks
    // A training loop's cache at a step boundary: the freed activations idle in whole segments.
    CHECK_FALSE(has(diagnose(steps(1 * GiB, 100 * MiB), {}, nullptr), "fragmentation"));
    CHECK_FALSE(has(diagnose(steps(3500 * MiB, 100 * MiB), {}, nullptr), "fragmentation"));
    // Reserved far beyond the most ever allocated at once: the cache grew for want of fitting pieces.
    Report grown = steps(1 * GiB, 100 * MiB);
    for (Step& s : grown.steps)
        s.devices[0].peakAllocatedBytes = 2 * GiB;
    const auto found = diagnose(grown, {}, nullptr);
    REQUIRE(has(found, "fragmentation", "warning"));
    CHECK(get(found, "fragmentation").message.find("most it ever allocated at once is 2.00 GiB") != std::string::npos);
    for (Step& s : grown.steps)
        s.devices[0].peakAllocatedBytes = 3500 * MiB;  // reserved close to the peak: a warm cache
    CHECK_FALSE(has(diagnose(grown, {}, nullptr), "fragmentation"));
    for (Step& s : grown.steps) {
        s.devices[0].peakAllocatedBytes = 2 * GiB;
        s.devices[0].expandableSegments = true;  // the remedy is in force already
    }
    CHECK_FALSE(has(diagnose(grown, {}, nullptr), "fragmentation"));
}

TEST_CASE("rule request_too_large", "[diagnosis]")
{
    Report big = base();
    big.trigger.kind = TriggerKind::Oom;
    big.trigger.device = 0;
    big.trigger.requestedBytes = 20 * GiB;
    const auto fired = diagnose(big, {}, nullptr);
    REQUIRE(has(fired, "request_too_large", "error"));
    CHECK(get(fired, "request_too_large").message.find("larger than the whole device") != std::string::npos);
    big.trigger.requestedBytes = 1 * GiB;
    CHECK_FALSE(has(diagnose(big, {}, nullptr), "request_too_large"));
}

TEST_CASE("rules activations and optimizer_state", "[diagnosis]")
{
    Report r = torchOom(5 * GiB);
    addStack(r, 1, {py("/venv/site-packages/transformers/activations.py", 66, "NewGELUActivation.forward")});
    addStack(r, 2, {py("/venv/site-packages/torch/optim/adamw.py", 400, "_multi_tensor_adamw")});
    r.sites.push_back(Site{1, 0, MemKind::Device, 3, 8 * GiB, 0, 0});
    r.sites.push_back(Site{2, 0, MemKind::Device, 1, 2 * GiB, 0, 0});
    auto found = diagnose(r, {}, nullptr);
    CHECK(has(found, "activations"));
    CHECK_FALSE(has(found, "optimizer_state"));  // 2 of 10 GiB
    CHECK(get(found, "activations").message.find("80%") != std::string::npos);
    // By tensor when blocks carry stacks: the optimizer's state dominates.
    r.segments[0].blocks[0].stack = 2;
    r.segments[0].blocks[2].stack = 2;
    found = diagnose(r, {}, nullptr);
    CHECK(has(found, "optimizer_state"));
    r.sites[0].bytes = 1 * GiB;
    CHECK_FALSE(has(diagnose(r, {}, nullptr), "activations"));
}

TEST_CASE("by role, activations and optimizer_state cannot contradict each other", "[diagnosis]")
{
    // Lightning runs forward inside optimizer.step(closure): every site's stack has both a
    // forward() and torch.optim. Without roles the forward wins (not optimizer state)...
    Report r = torchOom(5 * GiB);
    addStack(r, 1, {py("/venv/site-packages/torch/nn/modules/conv.py", 450, "Conv2d.forward"),
                    py("/venv/site-packages/torch/optim/sgd.py", 120, "SGD.step")});
    r.sites.push_back(Site{1, 0, MemKind::Device, 3, 9 * GiB, 0, 0});
    auto found = diagnose(r, {}, nullptr);
    CHECK(has(found, "activations"));
    CHECK_FALSE(has(found, "optimizer_state"));
    // ... and with the roles measured, they decide: stateless SGD is never optimizer state.
    r.memory[0].byRole = RoleBytes{0, 100 * MiB, 100 * MiB, 0, 5 * GiB, 4 * GiB};
    found = diagnose(r, {}, nullptr);
    CHECK(has(found, "activations"));
    CHECK_FALSE(has(found, "optimizer_state"));
    CHECK(get(found, "activations").message.find("96%") != std::string::npos);
    // AdamW's state, two copies of the parameters: a third of what is allocated.
    r.memory[0].byRole = RoleBytes{0, 1 * GiB, 1 * GiB, 2 * GiB, 2 * GiB, 0};
    found = diagnose(r, {}, nullptr);
    CHECK(has(found, "optimizer_state"));
    CHECK_FALSE(has(found, "activations"));  // 2 of 6 GiB, whatever the stacks say
}

TEST_CASE("rule outside_framework", "[diagnosis]")
{
    Report r = torchOom(5 * GiB);
    r.memory[0].bySource = {{Source::Torch, 10 * GiB}, {Source::Nccl, 3 * GiB}, {Source::Cublas, 64 * MiB}};
    r.memory[0].untrackedBytes = 600 * MiB;
    const auto found = diagnose(r, {}, nullptr);
    REQUIRE(has(found, "outside_framework"));
    CHECK(get(found, "outside_framework").suggestion.find("NCCL_BUFFSIZE") != std::string::npos);
    CHECK(get(found, "outside_framework").suggestion.find("CUBLAS") == std::string::npos);  // too small to matter
    r.memory[0].bySource[Source::Nccl] = 100 * MiB;
    CHECK_FALSE(has(diagnose(r, {}, nullptr), "outside_framework"));
}

TEST_CASE("rule cache_churn", "[diagnosis]")
{
    auto churn = [](int cycles, bool failFirst) {
        Report r = base();
        r.capture.backends = {"interpose", "torch"};
        const uint16_t alloc = r.timeline.intern("alloc"), free = r.timeline.intern("free"),
                       failed = r.timeline.intern("alloc_failed");
        if (failFirst)
            r.timeline.rows.push_back(TimelineRow{1, 0, 0, 0, 0, 0, 2, 0, failed, 0});
        for (int i = 0; i < cycles; ++i) {
            r.timeline.rows.push_back(TimelineRow{uint64_t(10 + i), 0x1000, MiB, 0, 0, 0, 0, 0, alloc, 0});
            r.timeline.rows.push_back(TimelineRow{uint64_t(11 + i), 0x1000, MiB, 0, 0, 0, 0, 0, free, 0});
        }
        return r;
    };
    CHECK(has(diagnose(churn(30, false), {}, nullptr), "cache_churn"));
    CHECK_FALSE(has(diagnose(churn(5, false), {}, nullptr), "cache_churn"));
    CHECK_FALSE(has(diagnose(churn(30, true), {}, nullptr), "cache_churn"));  // the OOM's own flush
    // Start-up: a burst of 90 allocations and 81 frees (XLA's warm-up), then a long quiet run up
    // to the exit, is no churn; the same cycles spread over the run are.
    Report startup = churn(0, false);
    startup.capture.backends = {"interpose"};
    const uint16_t alloc = startup.timeline.intern("alloc"), free = startup.timeline.intern("free");
    for (uint64_t i = 0; i < 90; ++i) {
        startup.timeline.rows.push_back(TimelineRow{1000 + 10 * i, 0x1000 + i, MiB, 0, 0, 0, 0, 0, alloc, 0});
        if (i < 81)
            startup.timeline.rows.push_back(TimelineRow{1005 + 10 * i, 0x1000 + i, MiB, 0, 0, 0, 0, 0, free, 0});
    }
    startup.trigger.timeNs = 10'000'000'000;
    CHECK_FALSE(has(diagnose(startup, {}, nullptr), "cache_churn"));
    Report spread = startup;
    for (size_t i = 0; i < spread.timeline.rows.size(); ++i)
        spread.timeline.rows[i].timeNs = 1000 + uint64_t(i) * 50'000'000;
    spread.trigger.timeNs = spread.timeline.rows.back().timeNs + 1;
    CHECK(has(diagnose(spread, {}, nullptr), "cache_churn"));

    // A short program (JAX on the H200: 23 allocations and 24 frees, from its start-up, first
    // calls and the pool handed back at exit): bursts in a few slices, and frees with no
    // allocation after them, are no churn.
    Report shortRun = churn(0, false);
    shortRun.capture.backends = {"interpose"};
    uint64_t when = 0;
    auto burst = [&](uint64_t at, int n, bool refill) {
        for (int i = 0; i < n; ++i) {
            if (refill)
                shortRun.timeline.rows.push_back(TimelineRow{at + 2 * uint64_t(i), 0x1000, MiB, 0, 0, 0, 0, 0, alloc, 0});
            shortRun.timeline.rows.push_back(TimelineRow{at + 2 * uint64_t(i) + 1, 0x1000, MiB, 0, 0, 0, 0, 0, free, 0});
        }
        when = at + 2 * uint64_t(n);
    };
    burst(0, 12, true);                // start-up
    burst(3'000'000'000, 12, true);    // the first call compiles, autotunes
    burst(9'000'000'000, 30, false);   // teardown: frees only, spread to the exit
    for (size_t i = shortRun.timeline.rows.size() - 30; i < shortRun.timeline.rows.size(); ++i)
        shortRun.timeline.rows[i].timeNs = 6'000'000'000 + (i % 30) * 100'000'000;
    shortRun.trigger.timeNs = when + 1;
    CHECK_FALSE(has(diagnose(shortRun, {}, nullptr), "cache_churn"));
    // The same frees, each followed by an allocation (the cache refilled), are churn.
    Report refilled = shortRun;
    for (size_t i = refilled.timeline.rows.size() - 30; i < refilled.timeline.rows.size(); ++i) {
        TimelineRow again = refilled.timeline.rows[i];
        again.kind = alloc;
        again.timeNs += 1;
        refilled.timeline.rows.insert(refilled.timeline.rows.begin() + long(i) + 1, again);
        ++i;
    }
    CHECK(has(diagnose(refilled, {}, nullptr), "cache_churn"));
    // XLA's pinned host flags (cuMemHostAlloc/cuMemFreeHost of 8 bytes, recorded with the current
    // device) all through the run are not device memory: no churn.
    Report pinned = refilled;
    const uint16_t hostAlloc = pinned.timeline.intern("cuMemHostAlloc"), hostFree = pinned.timeline.intern("cuMemFreeHost");
    for (TimelineRow& row : pinned.timeline.rows)
        row.api = pinned.timeline.name(row.kind) == "alloc" ? hostAlloc : hostFree;
    CHECK_FALSE(has(diagnose(pinned, {}, nullptr), "cache_churn"));
}

TEST_CASE("cache_churn in a step loop: the cache emptied in most steps, not once per trial", "[diagnosis]")
{
    // 30 steps 100 ms apart; the cache given back (4 segments) and taken again `every` steps.
    auto loop = [](int every) {
        Report r = base();
        r.capture.backends = {"interpose", "torch"};
        const uint16_t alloc = r.timeline.intern("alloc"), free = r.timeline.intern("free");
        const uint64_t ms = 1'000'000;
        for (int step = 0; step < 30; ++step) {
            Step s;
            s.index = uint64_t(step);
            s.timeNs = 1000 * ms + uint64_t(step) * 100 * ms;
            r.steps.push_back(s);
            if (step % every != 0)
                continue;
            for (uint64_t seg = 0; seg < 4; ++seg) {
                r.timeline.rows.push_back(TimelineRow{s.timeNs + 10 * ms + seg, 0x1000 + seg, 64 * MiB, 0, 0, 0, 0, 0, free, 0});
                r.timeline.rows.push_back(TimelineRow{s.timeNs + 20 * ms + seg, 0x1000 + seg, 64 * MiB, 0, 0, 0, 0, 0, alloc, 0});
            }
        }
        r.trigger.timeNs = r.steps.back().timeNs + 100 * ms;
        return r;
    };
    CHECK(has(diagnose(loop(1), {}, nullptr), "cache_churn"));        // empty_cache() in every step
    CHECK_FALSE(has(diagnose(loop(3), {}, nullptr), "cache_churn"));  // a batch-size finder's trials of 3 steps
}

TEST_CASE("leaks: steady growth after warm-up is found, with bytes per step", "[diagnosis][leaks]")
{
    const Report r = withSteps(linear(40, 10 * MiB, 4 * MiB));
    const auto leaks = findLeaks(r);
    REQUIRE(leaks.size() == 1);
    CHECK(leaks[0].level == LeakLevel::Sites);
    CHECK(leaks[0].stack == 7u);
    CHECK(leaks[0].bytesPerStep == Approx(double(4 * MiB)));
    CHECK(leaks[0].steps == 30);  // 40 steps, the first 10 are warm-up
    CHECK(leaks[0].firstStep == 11);
    CHECK(leaks[0].lastStep == 40);
}

TEST_CASE("leaks: a steady loop is not flagged", "[diagnosis][leaks]")
{
    // Cache warm-up and optimizer state at the first steps, then flat.
    std::vector<uint64_t> warm = {0, 300 * MiB, 900 * MiB, 900 * MiB};
    for (int i = 0; i < 200; ++i)
        warm.push_back(900 * MiB);
    CHECK(findLeaks(withSteps(warm)).empty());
    // Jitter that goes up and down is no leak either.
    std::vector<uint64_t> jitter;
    for (int i = 0; i < 60; ++i)
        jitter.push_back(500 * MiB + uint64_t(i % 3) * 8 * MiB);
    CHECK(findLeaks(withSteps(jitter)).empty());
    // Too few steps for a verdict.
    CHECK(findLeaks(withSteps(linear(5, 0, 10 * MiB))).empty());
    // Growing, then freed at the end: not a leak at the last step.
    auto freed = linear(30, 0, 4 * MiB);
    freed.back() = 0;
    CHECK(findLeaks(withSteps(freed)).empty());
    // Below the minimum growth.
    CHECK(findLeaks(withSteps(linear(30, 0, 1024))).empty());
}

TEST_CASE("leaks: tensors by Python line win over segments; device counters when nothing else", "[diagnosis][leaks]")
{
    Report r = withSteps(linear(30, 0, 2 * MiB), true);
    auto leaks = findLeaks(r);
    REQUIRE(leaks.size() == 1);
    CHECK(leaks[0].level == LeakLevel::Tensors);
    // Only the device counters grow (no history): a device-level finding.
    Report counters = base();
    for (int i = 0; i < 30; ++i) {
        Step s;
        s.index = uint64_t(i + 1);
        StepDevice d;
        d.allocatedBytes = uint64_t(i) * 3 * MiB;
        d.reservedBytes = 2 * GiB;
        s.devices.push_back(d);
        counters.steps.push_back(s);
    }
    leaks = findLeaks(counters);
    REQUIRE(leaks.size() == 1);
    CHECK(leaks[0].level == LeakLevel::Device);
    CHECK_FALSE(leaks[0].stack);
    CHECK(blameLeak(counters, leaks[0], nullptr).remedy.find("OOMSCOPE_TORCH_HISTORY") != std::string::npos);
}

TEST_CASE("leaks: the allocated counter grows; the segment site that grows with it names the line", "[diagnosis][leaks]")
{
    // PyTorch without its history: allocated grows 4 MiB a step; the captured sites are the
    // allocator's segments: stack 7 (train.py:52, an .append) reserves 4 MiB more every step
    // after warm-up, stack 9 warmed up over the first steps and then stays.
    auto loop = [](uint64_t growingPerStep) {
        Report r = base();
        r.capture.backends = {"interpose", "torch"};
        addStack(r, 7, {py("/home/user/train.py", 52, "train")});
        addStack(r, 9, {py("/home/user/train.py", 40, "train")});
        for (int i = 0; i < 40; ++i) {
            Step s;
            s.index = uint64_t(i + 1);
            StepDevice d;
            d.allocatedBytes = 300 * MiB + uint64_t(i) * 4 * MiB;
            d.reservedBytes = 2 * GiB;
            s.devices.push_back(d);
            s.sites.push_back(StepSite{9, 0, std::min<uint64_t>(uint64_t(i), 3) * 256 * MiB});
            s.sites.push_back(StepSite{7, 0, 2 * MiB + uint64_t(i) * growingPerStep});
            r.steps.push_back(s);
        }
        return r;
    };
    const Report r = loop(4 * MiB);
    const auto leaks = findLeaks(r);
    REQUIRE(leaks.size() == 1);
    CHECK(leaks[0].level == LeakLevel::Device);
    CHECK_FALSE(leaks[0].stack);
    REQUIRE(leaks[0].reservedStack);
    CHECK(*leaks[0].reservedStack == 7u);
    CHECK(leaks[0].reservedPerStep == Approx(double(4 * MiB)));
    const auto source = sourceOf({{{"/home/user/train.py", 52}, "        history.append(model(val_x).mean())"}});
    const LeakBlame blame = blameLeak(r, leaks[0], source);
    REQUIRE(blame.frame);
    CHECK(blame.frame->line == 52);
    CHECK(blame.pattern == "tensors accumulated in a list across steps");
    const LeakBlame plain = blameLeak(r, leaks[0], nullptr);
    CHECK(plain.pattern.find("reserves more at this line") != std::string::npos);
    const auto entries = leakEntries(r, leaks, source);
    REQUIRE(entries.size() == 1);
    CHECK(entries[0].stack == 7u);
    CHECK(entries[0].evidence.find("the allocator reserves 4.00 MiB more per step at /home/user/train.py:52") !=
          std::string::npos);
    // A site that grows by less than half the counter's growth is not where it grows.
    const auto slow = findLeaks(loop(1 * MiB));
    REQUIRE(slow.size() == 1);
    CHECK_FALSE(slow[0].reservedStack);
    CHECK_FALSE(blameLeak(loop(1 * MiB), slow[0], nullptr).frame);
}

TEST_CASE("leaks: memory never freed at exit, only without a caching allocator", "[diagnosis][leaks]")
{
    Report r = base();
    addStack(r, 3, {});
    r.sites.push_back(Site{3, 0, MemKind::Device, 2, 64 * MiB, 0, 0});
    auto leaks = findLeaks(r);
    REQUIRE(leaks.size() == 1);
    CHECK(leaks[0].level == LeakLevel::Exit);
    CHECK(blameLeak(r, leaks[0], nullptr).pattern == "memory never freed before exit");
    r.capture.backends = {"interpose", "torch"};
    CHECK(findLeaks(r).empty());
    r.capture.backends.clear();
    r.trigger.kind = TriggerKind::Oom;
    CHECK(findLeaks(r).empty());
    // A library's workspace kept until exit (cuBLAS's, in a JAX program) is no leak; the
    // program's own allocation next to it still is.
    r.trigger.kind = TriggerKind::Exit;
    addStack(r, 4, {});
    r.stacks.back().source = Source::Cublas;
    r.sites.push_back(Site{4, 0, MemKind::Device, 1, 64 * MiB, 0, 0});
    leaks = findLeaks(r);
    REQUIRE(leaks.size() == 1);
    CHECK(leaks[0].stack == 3u);
}

TEST_CASE("leaks are blamed on the line that keeps them, with its pattern", "[diagnosis][leaks]")
{
    const Report r = withSteps(linear(40, 0, 4 * MiB), true);
    const auto leaks = findLeaks(r);
    REQUIRE(leaks.size() == 1);
    // The innermost frame allocates; the loop's line appends: the append is blamed.
    auto blame = blameLeak(r, leaks[0], sourceOf({{{"/home/user/train.py", 31}, "return self.fc(x)"},
                                                  {{"/home/user/train.py", 52}, "    outputs.append(model(x))"}}));
    REQUIRE(blame.frame);
    CHECK(blame.frame->line == 52);
    CHECK(blame.text == "outputs.append(model(x))");
    CHECK(blame.pattern == "tensors accumulated in a list across steps");
    blame = blameLeak(r, leaks[0], sourceOf({{{"/home/user/train.py", 52}, "total_loss += loss"}}));
    CHECK(blame.frame->line == 52);
    CHECK(blame.pattern.find("running total") != std::string::npos);
    blame = blameLeak(r, leaks[0], sourceOf({{{"/home/user/train.py", 31}, "self.cache = x * 2"}}));
    CHECK(blame.frame->line == 31);
    CHECK(blame.pattern == "state stored on a module or object across steps");
    // Nothing recognisable: the innermost program frame.
    blame = blameLeak(r, leaks[0], nullptr);
    CHECK(blame.frame->line == 31);
    CHECK(blame.pattern == "tensors kept alive across steps");
    // The playbook's growth rule carries the evidence and the line.
    const auto found = diagnose(r, leaks, sourceOf({{{"/home/user/train.py", 52}, "outputs.append(model(x))"}}));
    REQUIRE(has(found, "growth"));
    CHECK(get(found, "growth").message.find("+4.00 MiB per step over 30 steps") != std::string::npos);
    CHECK(get(found, "growth").message.find("train.py:52") != std::string::npos);
    CHECK_FALSE(has(diagnose(withSteps(std::vector<uint64_t>(40, 9 * MiB)), {}, nullptr), "growth"));
}

TEST_CASE("leaks kept by one line are one verdict, whatever line allocated them", "[diagnosis][leaks]")
{
    Report r = withSteps(linear(40, 0, 4 * MiB), true);
    addStack(r, 8, {py("/home/user/train.py", 33, "Net.forward"), py("/home/user/train.py", 52, "train")});
    for (size_t i = 0; i < r.steps.size(); ++i)
        r.steps[i].tensors.push_back(StepSite{8, 0, i * 2 * MiB});
    const auto leaks = findLeaks(r);
    REQUIRE(leaks.size() == 2);
    const auto source = sourceOf({{{"/home/user/train.py", 52}, "outputs.append(model(x))"}});
    const auto blamed = blameLeaks(r, leaks, source);
    REQUIRE(blamed.size() == 1);
    CHECK(blamed[0].stacks == 2);
    CHECK(blamed[0].leak.bytesPerStep == Approx(double(6 * MiB)));
    CHECK(blamed[0].blame.frame->line == 52);
    // Without the source line, each allocating line is its own verdict.
    CHECK(blameLeaks(r, leaks, nullptr).size() == 2);
}

TEST_CASE("leaks: periodic samples count only in programs without step events", "[diagnosis][leaks]")
{
    Report samples = withSteps(linear(40, 0, 4 * MiB));
    for (Step& s : samples.steps)
        s.source = StepSource::Sample;
    REQUIRE(findLeaks(samples).size() == 1);  // no steps at all: the samples are followed
    // Steps steady, samples (taken before the first step) growing: the steps decide.
    Report mixed = withSteps(std::vector<uint64_t>(40, 9 * MiB));
    for (size_t i = 0; i < 40; ++i) {
        Step sample = mixed.steps[i];
        sample.source = StepSource::Sample;
        sample.sites[0].bytes = i * 4 * MiB;
        mixed.steps.push_back(sample);
    }
    CHECK(findLeaks(mixed).empty());
}

TEST_CASE("rule paused_memory: info, a warning when less is free than resuming maps", "[diagnosis]")
{
    Report r = base();
    addStack(r, 7, {py("serve.py", 12, "sleep")});
    r.memory[0].pausedBytes = 3 * GiB;
    r.paused.push_back(PausedRange{0, 0x7f0000000000, 4 * GiB, 3 * GiB, 7});
    r.devices[0].freeBytes = 8 * GiB;
    auto fired = diagnose(r, {}, nullptr);
    REQUIRE(has(fired, "paused_memory", "info"));
    CHECK(get(fired, "paused_memory").message.find("3.00 GiB paused") != std::string::npos);
    CHECK(get(fired, "paused_memory").message.find("serve.py:12") != std::string::npos);
    r.devices[0].freeBytes = 1 * GiB;
    fired = diagnose(r, {}, nullptr);
    REQUIRE(has(fired, "paused_memory", "warning"));
    CHECK(get(fired, "paused_memory").message.find("1.00 GiB is free now") != std::string::npos);
    r.memory[0].pausedBytes.reset();
    CHECK_FALSE(has(diagnose(r, {}, nullptr), "paused_memory"));
}
