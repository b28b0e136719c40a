// The recorder's parts, each on its own (track/api_names, live_counters, oom_episodes,
// step_sampler), and the recorder's OOM episodes with a writer plugged in.
#include "track/api_names.h"
#include "track/live_counters.h"
#include "track/oom_episodes.h"
#include "track/recorder.h"
#include "track/step_sampler.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace oomscope;
using namespace oomscope::track;

namespace {
constexpr uint64_t kMs = 1000000;
constexpr int64_t kMiB = int64_t(1) << 20;
} // namespace

TEST_CASE("API names keep their ids, copy their strings and say unknown past the table", "[parts][apinames]")
{
    ApiNames names;
    CHECK(std::string(names.name(ApiId())) == "unknown");
    char label[32];
    std::strcpy(label, "eval");
    const ApiId eval = names.add(label);
    std::strcpy(label, "XXXX");  // the caller's buffer changes: the name must not
    CHECK(eval.value() == 1);
    CHECK(std::string(names.name(eval)) == "eval");
    CHECK(names.add("eval") == eval);
    const ApiId step = names.add("step");
    CHECK(step.value() == 2);
    CHECK(std::string(names.name(ApiId(77))) == "unknown");
    CHECK(names.all() == std::vector<std::string>{"unknown", "eval", "step"});
    for (size_t i = names.all().size(); i < ApiNames::kMax; ++i)
        names.add(("api" + std::to_string(i)).c_str());
    CHECK(!names.add("one too many"));
}

TEST_CASE("live counters add up per device and kind across threads, exactly", "[parts][counters]")
{
    LiveCounters counters;
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&counters, t] {
            for (int i = 0; i < 1000; ++i) {
                counters.add(t % 2, MemKind::Device, 4096);
                counters.add(t % 2, MemKind::HostPinned, 512);
            }
            for (int i = 0; i < 500; ++i)
                counters.add(t % 2, MemKind::Device, -4096);
        });
    }
    for (std::thread& t : threads)
        t.join();
    CHECK(counters.live(0, MemKind::Device) == 2 * 500 * 4096);
    CHECK(counters.live(1, MemKind::Device) == 2 * 500 * 4096);
    CHECK(counters.live(0, MemKind::HostPinned) == 2 * 1000 * 512);
    CHECK(counters.live(0, MemKind::Managed) == 0);
    const std::vector<DeviceCounters> snapshot = counters.snapshot();
    REQUIRE(snapshot.size() == 2);
    CHECK(snapshot[0].device == 0);
    CHECK(snapshot[0].tracked() == 2 * 500 * 4096);
    CHECK(snapshot[1].bytes[size_t(MemKind::HostPinned)] == 2 * 1000 * 512);
}

TEST_CASE("the peak is exact for large allocations and at most a batch low for small ones", "[parts][counters]")
{
    int64_t peaks[LiveCounters::kMaxDevices + 1] = {};
    LiveCounters counters(peaks);  // the peaks kept where the caller says (the flight file)
    counters.add(0, MemKind::Device, 10 * kMiB);
    counters.add(0, MemKind::Device, 6 * kMiB);
    counters.add(0, MemKind::Device, -16 * kMiB);
    CHECK(counters.peak(0) == uint64_t(16 * kMiB));
    CHECK(peaks[1] == 16 * kMiB);  // slot 0 is for devices out of range
    for (int i = 0; i < 100; ++i)
        counters.add(1, MemKind::Device, 100 * 1024);  // 9.8 MiB in small pieces
    CHECK(counters.peak(1) <= uint64_t(100 * 100 * 1024));
    CHECK(counters.peak(1) + uint64_t(LiveCounters::kPeakBatch) > uint64_t(100 * 100 * 1024));
    // The snapshot's peak is never below what is live.
    for (const DeviceCounters& d : counters.snapshot())
        CHECK(d.peakDeviceBytes >= d.tracked());
    counters.add(200, MemKind::Device, kMiB);  // no such device slot: counted, not shown
    CHECK(counters.snapshot().size() == 2);
}

TEST_CASE("an OOM episode is a window from the last out-of-memory error or the end of its report", "[parts][episodes]")
{
    OomEpisodes episodes(2000 * kMs);
    CHECK(episodes.opens(1000 * kMs));
    CHECK_FALSE(episodes.opens(1500 * kMs));  // the allocator's retry: the same OOM
    CHECK_FALSE(episodes.opens(3400 * kMs));  // within 2 s of the previous error, not of the first
    CHECK(episodes.opens(5500 * kMs));        // 2.1 s later: a second OOM
    episodes.reported(9000 * kMs);            // its report took until 9 s
    CHECK_FALSE(episodes.opens(10500 * kMs));
    CHECK(episodes.opens(13000 * kMs));
}

TEST_CASE("the first failure is handed to the framework's OOM only while it is recent", "[parts][episodes]")
{
    OomEpisodes episodes(2000 * kMs);
    CHECK(episodes.framework().empty());
    CHECK_FALSE(episodes.frameworkReportsOom());
    episodes.attachFramework("torch", true);
    CHECK(episodes.framework() == "torch");
    CHECK(episodes.frameworkReportsOom());
    FirstFailure first;
    first.timeNs = 1000 * kMs;
    first.error = 2;
    episodes.keepFirstFailure(first);
    const auto taken = episodes.takeFirstFailure(1500 * kMs);
    REQUIRE(taken);
    CHECK(taken->error == 2);
    CHECK_FALSE(episodes.takeFirstFailure(1600 * kMs));  // taken once
    episodes.keepFirstFailure(first);
    CHECK_FALSE(episodes.takeFirstFailure(first.timeNs + 2000 * kMs + OomEpisodes::kHandoverNs + 1));
}

TEST_CASE("steps are numbered from 1, the first step event drops the periodic samples", "[parts][steps]")
{
    StepSampler sampler(1000 * kMs, 3);
    CHECK_FALSE(sampler.claimPeriodic(100 * kMs));   // the first allocation starts the clock
    CHECK_FALSE(sampler.claimPeriodic(600 * kMs));   // not due yet
    CHECK(sampler.claimPeriodic(1200 * kMs));
    CHECK_FALSE(sampler.claimPeriodic(1200 * kMs));  // one caller takes it
    sampler.addPeriodic(report::Step{});
    REQUIRE(sampler.steps().size() == 1);
    CHECK(sampler.steps()[0].source == report::StepSource::Sample);
    CHECK(sampler.addStep(report::Step{}) == 1);  // model loading's samples give way
    CHECK(sampler.steps().size() == 1);
    CHECK(sampler.steps()[0].source == report::StepSource::Step);
    CHECK_FALSE(sampler.claimPeriodic(9000 * kMs));  // a program with step events is not sampled
    sampler.addPeriodic(report::Step{});
    CHECK(sampler.steps().size() == 1);
    for (int i = 0; i < 5; ++i)
        sampler.addStep(report::Step{});
    const auto steps = sampler.steps();
    REQUIRE(steps.size() == 3);  // bounded: the oldest dropped
    CHECK(steps.front().index == 4);
    CHECK(steps.back().index == 6);
}

TEST_CASE("a sample holds each device, the largest sites and the framework's tensors", "[parts][steps]")
{
    LiveCounters counters;
    counters.add(0, MemKind::Device, 64 * kMiB);
    std::vector<LiveAllocation> live;
    for (uint32_t i = 1; i <= 40; ++i)
        live.push_back(LiveAllocation{0x1000 * i, uint64_t(i) * kMiB / 8, 0, 0, i, 1, 0, MemKind::Device});
    FrameworkState state;
    state.devices.push_back(FrameworkDevice{0, 48 * kMiB, 64 * kMiB});
    state.tensorGroups.push_back(TensorGroup{0, 32 * kMiB, {{"train.py", 10, "step"}}});
    const report::Step step =
        StepSampler::sample(7, counters, live, &state, [](const TensorGroup& g) { return g.frames[0].line == 10 ? 99u : 0u; });
    CHECK(step.timeNs == 7);
    REQUIRE(step.devices.size() == 1);
    CHECK(step.devices[0].trackedBytes == uint64_t(64 * kMiB));
    CHECK(step.devices[0].allocatedBytes == uint64_t(48 * kMiB));
    REQUIRE(step.sites.size() == report::kStepSitesMax);
    CHECK(step.sites[0].stack == 40);  // the largest first
    REQUIRE(step.tensors.size() == 1);
    CHECK(step.tensors[0].stack == 99);
    CHECK(step.tensors[0].bytes == uint64_t(32 * kMiB));
}

namespace {

// A writer that keeps what it was asked for, and says the framework made every allocation whose
// stack is `frameworkStack`.
struct RecordingWriter final : ReportWriter {
    std::vector<TriggerInfo> triggers;
    std::vector<TrackImage> images;
    StackId frameworkStack;
    std::string write(Recorder& recorder, const TriggerInfo& trigger) override
    {
        triggers.push_back(trigger);
        images.push_back(recorder.snapshot());
        return "report-" + std::to_string(triggers.size());
    }
    bool madeBy(const Recorder&, StackId stack, const std::string& framework) override
    {
        return framework == "torch" && stack == frameworkStack;
    }
};

Allocation request(uint64_t size, uint32_t stack)
{
    Allocation a;
    a.api = ApiId(1);
    a.device = 0;
    a.size = size;
    a.stack = StackId(stack);
    return a;
}

} // namespace

TEST_CASE("a failure that is not out of memory writes nothing; one that is writes one report", "[parts][recorder]")
{
    Recorder recorder;
    RecordingWriter writer;
    recorder.setWriter(&writer);
    recorder.registerApi("cudaMalloc");
    recorder.recordFailure(request(1 << 20, 0), 800, false);  // PyTorch's fabric-handle probe
    CHECK(writer.triggers.empty());
    recorder.recordFailure(request(80ull << 30, 0), 2, true);
    recorder.recordFailure(request(80ull << 30, 0), 2, true);  // the same episode
    REQUIRE(writer.triggers.size() == 1);
    CHECK(writer.triggers[0].kind == report::TriggerKind::Oom);
    CHECK(writer.triggers[0].error == 2);
    REQUIRE(writer.triggers[0].failed);
    CHECK(writer.triggers[0].failed->size == (80ull << 30));
    // The report's image holds the two failures that came before it.
    CHECK(writer.images[0].events.size() == 2);
    CHECK(writer.images[0].apiName(1) == "cudaMalloc");
}

TEST_CASE("a framework that reports its own OOMs gets the first failure; others still report at once", "[parts][recorder]")
{
    Recorder recorder;
    RecordingWriter writer;
    writer.frameworkStack = StackId(7);
    recorder.setWriter(&writer);
    recorder.registerApi("cudaMalloc");
    recorder.attachFramework("torch", true);
    Allocation live = request(3 << 20, 0);
    live.address = 0x7000;
    recorder.recordAlloc(live);
    recorder.recordFailure(request(6ull << 30, 7), 2, true);  // torch's: kept, no report
    CHECK(writer.triggers.empty());
    FrameworkState state;
    state.name = "torch";
    state.devices.push_back(FrameworkDevice{0, 1 << 20, 3 << 20});
    CHECK(recorder.frameworkOom(state, 0, 6ull << 30) == "report-1");
    REQUIRE(writer.triggers.size() == 1);
    const TriggerInfo& t = writer.triggers[0];
    REQUIRE(t.firstFailure);
    CHECK(t.error == 2);  // the CUDA error of the first failure
    REQUIRE(t.firstFailure->counters.size() == 1);
    CHECK(t.firstFailure->counters[0].tracked() == (3u << 20));
    CHECK(t.framework == &state);
    // An OOM raised by the framework without a failing CUDA call: no first failure, its name
    // as the api.
    CHECK(recorder.frameworkOom(state, 0, 1ull << 40) == "report-2");
    CHECK_FALSE(writer.triggers[1].firstFailure);
    CHECK(std::string(recorder.apiName(writer.triggers[1].failed->api)) == "torch");
}

TEST_CASE("with a framework attached, another library's out-of-memory error still reports at once", "[parts][recorder]")
{
    Recorder recorder;
    RecordingWriter writer;
    writer.frameworkStack = StackId(7);
    recorder.setWriter(&writer);
    recorder.attachFramework("torch", true);
    recorder.recordFailure(request(1ull << 30, 8), 2, true);  // not torch's stack: cuBLAS, say
    REQUIRE(writer.triggers.size() == 1);
    CHECK_FALSE(writer.triggers[0].firstFailure);
}

TEST_CASE("the peak's composition is the live memory by stack when the peak last grew by 1 %", "[parts][recorder]")
{
    Recorder recorder;
    recorder.registerApi("cudaMalloc");
    const uint64_t MiB = 1 << 20;
    uint64_t address = 0x10000;
    auto alloc = [&](uint64_t size, uint32_t stack) {
        Allocation a = request(size, stack);
        a.address = address;
        address += size;
        recorder.recordAlloc(a);
        return a.address;
    };
    alloc(32 * MiB, 1);  // weights, kept
    std::vector<uint64_t> activations;
    for (int i = 0; i < 8; ++i)
        activations.push_back(alloc(32 * MiB, 2));
    for (uint64_t a : activations)
        CHECK(recorder.recordFree(ApiId(1), a, 0));
    alloc(8 * MiB, 3);  // after the peak: below it, no new composition
    const TrackImage image = recorder.snapshot();
    REQUIRE(image.peaks.size() == 1);
    const PeakSites& p = image.peaks[0];
    CHECK(p.device == 0);
    CHECK(p.bytes == 288 * MiB);
    REQUIRE(p.stacks.size() == 2);
    CHECK(p.stacks[0] == std::pair<uint32_t, uint64_t>{2, 256 * MiB});
    CHECK(p.stacks[1] == std::pair<uint32_t, uint64_t>{1, 32 * MiB});
    CHECK(p.otherBytes == 0);
    // Growth of less than 1 % (at least 4 MiB) over the last composition takes none: the next
    // one comes at 292 MiB.
    const uint64_t small = alloc(3 * MiB, 4);
    (void)small;
    alloc(240 * MiB, 5);  // 32 + 8 + 3 + 240 = 283 MiB: below the peak
    CHECK(recorder.snapshot().peaks[0].bytes == 288 * MiB);
    alloc(16 * MiB, 6);  // 299 MiB: a new peak, a new composition
    const TrackImage later = recorder.snapshot();
    CHECK(later.peaks[0].bytes == 299 * MiB);
    CHECK(later.peaks[0].stacks[0] == std::pair<uint32_t, uint64_t>{5, 240 * MiB});
}
