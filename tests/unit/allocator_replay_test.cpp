#include "report/analysis/allocator_replay.h"
#include "report/analysis/fit.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <unistd.h>

using namespace oomscope::report;

namespace {
constexpr uint64_t MiB = uint64_t(1) << 20;

// A trace written as actions: alloc(bytes) returns the allocation's index; release(index).
struct Builder {
    TorchTrace t;
    uint64_t next = 0;
    uint64_t alloc(uint64_t bytes, uint64_t stream = 0)
    {
        t.actions.push_back({true, next, bytes, stream});
        return next++;
    }
    void release(uint64_t index) { t.actions.push_back({false, index, 0, 0}); }
};

ScaledTrace scaled(const std::vector<std::pair<uint64_t, TorchTrace>>& runs)
{
    std::vector<std::pair<uint64_t, const TorchTrace*>> in;
    for (const auto& [n, t] : runs)
        in.emplace_back(n, &t);
    ScaledTrace s;
    std::string why;
    REQUIRE(alignTraces(in, &s, &why));
    return s;
}

// 100 MiB of weights; per step three activations of 30·n MiB and logits of 40·n MiB, a 1000
// byte scalar kept, the rest freed newest first.
TorchTrace training(uint64_t n, int steps = 3)
{
    Builder b;
    b.alloc(100 * MiB);
    for (int s = 0; s < steps; ++s) {
        std::vector<uint64_t> live;
        for (int k = 0; k < 3; ++k)
            live.push_back(b.alloc(30 * MiB * n));
        live.push_back(b.alloc(40 * MiB * n));
        b.alloc(1000);
        for (auto it = live.rbegin(); it != live.rend(); ++it)
            b.release(*it);
    }
    return b.t;
}

// Each step: logits of 40·n MiB, freed; then a 3 MiB tensor kept, which the allocator puts in
// the logits' free block (best fit in the large pool) and so strands the rest of that segment.
TorchTrace stranding(uint64_t n)
{
    Builder b;
    for (int s = 0; s < 2; ++s) {
        b.release(b.alloc(40 * MiB * n));
        b.alloc(3 * MiB);
    }
    return b.t;
}
} // namespace

TEST_CASE("replay: the allocator's peaks and the largest size of a plain training loop", "[replay]")
{
    const ScaledTrace s = scaled({{1, training(1)}, {2, training(2)}, {4, training(4)}});
    CHECK(s.offLine == 0);
    const ReplayResult r = replay(s, 4, ~uint64_t(0));
    REQUIRE(r.fits);
    // 100 + 3·120 + 160 MiB allocated at once beside the three steps' scalars (1024 bytes
    // each, rounded up to 512s), in one 2 MiB small segment.
    CHECK(r.peakAllocated == 620 * MiB + 3 * 1024);
    CHECK(r.peakReserved == 622 * MiB);
    // 100 + 130·n + 2 <= 1024 MiB: 7. Sizes never traced: the line through 2 and 4.
    CHECK(largestByReplay(s, [](uint64_t) { return 1024 * MiB; }) == 7);
    CHECK(replay(s, 8, 1024 * MiB).fits == false);
    CHECK(replay(s, 8, 1024 * MiB).failedBytes > 0);
    CHECK(largestByReplay(s, [](uint64_t) { return 50 * MiB; }) == 0);
}

TEST_CASE("replay: a segment stranded by a small live block is memory the peak does not show", "[replay]")
{
    const ScaledTrace s = scaled({{1, stranding(1)}, {2, stranding(2)}, {4, stranding(4)}});
    const ReplayResult roomy = replay(s, 4, ~uint64_t(0));
    // Allocated at most 160 + 3 MiB; reserved two segments of 160 MiB (the first holds the 3 MiB
    // block, so the second logits cannot use it) and nothing else.
    CHECK(roomy.peakAllocated == 163 * MiB);
    CHECK(roomy.peakReserved == 320 * MiB);
    // Under 1024 MiB: 80·n <= 1024, 12; the allocated peak alone would say 25.
    CHECK(largestByReplay(s, [](uint64_t) { return 1024 * MiB; }) == 12);
}

TEST_CASE("replay: pools, rounding, splitting and streams as PyTorch's allocator has them", "[replay]")
{
    Builder b;
    b.alloc(1000);                  // small pool: a 2 MiB segment
    b.alloc(1000);                  // the same segment
    b.alloc(MiB + 1);               // large pool, below 10 MiB: a 20 MiB segment
    b.alloc(19 * MiB + MiB / 2);    // no block of 19.5 MiB: its own 20 MiB segment, unsplit (0.5 MiB left)
    const uint64_t a = b.alloc(12 * MiB + 1, 7);  // 12 MiB + 512: a 14 MiB segment on stream 7
    b.release(a);
    b.alloc(12 * MiB, 8);           // stream 8 cannot use stream 7's free block: a new segment
    ScaledTrace s;
    s.actions = b.t.actions;
    s.slope.assign(s.actions.size(), 0);
    const ReplayResult r = replay(s, 1, ~uint64_t(0));
    REQUIRE(r.fits);
    CHECK(r.peakReserved == (2 + 20 + 20 + 14 + 12) * MiB);
    // The unsplit 19.5 MiB request holds its whole segment; the others their rounded bytes.
    CHECK(r.peakAllocated == 2 * 1024 + (MiB + 512) + 20 * MiB + (12 * MiB + 512));
    // Short of memory, whole free segments (stream 7's) go back before the request fails.
    CHECK(replay(s, 1, (2 + 20 + 20 + 14) * MiB - 1).fits == false);
    CHECK(replay(s, 1, (2 + 20 + 20 + 14) * MiB).fits);  // 14 released, 12 asked for
}

TEST_CASE("replay: runs whose actions differ are not aligned; bytes off the line are said", "[replay]")
{
    std::string why;
    ScaledTrace s;
    const TorchTrace one = training(1), two = training(2, 4);
    CHECK_FALSE(alignTraces({{1, &one}, {2, &two}}, &s, &why));
    CHECK(why.find("actions differ") != std::string::npos);
    CHECK_FALSE(alignTraces({{1, &one}}, &s, &why));
    // A workspace picked by size: 8, 8, 24 MiB at 1, 2, 4 is no line: the steepest rise (8 MiB
    // per unit) from the largest run's 24 MiB.
    std::vector<std::pair<uint64_t, TorchTrace>> runs;
    for (auto [n, w] : {std::pair<uint64_t, uint64_t>{1, 8}, {2, 8}, {4, 24}}) {
        Builder b;
        b.alloc(10 * MiB * n);
        b.alloc(w * MiB);
        runs.emplace_back(n, b.t);
    }
    const ScaledTrace w = scaled(runs);
    CHECK(w.offLine == 1);
    CHECK(w.bytesAt(0, 10) == 100 * MiB);
    CHECK(w.bytesAt(1, 10) == 72 * MiB);
    TorchTrace other = runs[0].second;
    other.unusable = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True";
    CHECK_FALSE(alignTraces({{1, &other}, {2, &runs[1].second}}, &s, &why));
    CHECK(why.find("expandable_segments") != std::string::npos);
}

TEST_CASE("replay: the adapter's trace file", "[replay]")
{
    char path[] = "/tmp/oomscope-trace-XXXXXX";
    const int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    {
        std::ofstream f(path);
        f << "oomscope-torch-trace 1 events 6 max 4000000 conf - backend native\n"
             "s 0 4096 2097152 0\n"
             "a 0 4096 1000 0\n"
             "a 1 8192 5000 0\n"  // another device
             "f 0 12288 0 0\n"    // allocated before the trace: nothing to end
             "f 0 4096 1024 0\n"
             "a 0 4096 2000 0\n";
    }
    TorchTrace t;
    std::string error;
    REQUIRE(readTorchTrace(path, 0, &t, &error));
    CHECK(t.unusable.empty());
    REQUIRE(t.actions.size() == 3);
    CHECK((t.actions[0].alloc && t.actions[0].index == 0 && t.actions[0].bytes == 1000));
    CHECK((!t.actions[1].alloc && t.actions[1].index == 0));
    CHECK((t.actions[2].alloc && t.actions[2].index == 1 && t.actions[2].bytes == 2000));
    {
        std::ofstream f(path);
        f << "oomscope-torch-trace 1 events 2 max 2 conf expandable_segments:True backend native\n";
    }
    REQUIRE(readTorchTrace(path, 0, &t, &error));
    CHECK(t.unusable.find("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True") != std::string::npos);
    {
        std::ofstream f(path);
        f << "oomscope-torch-trace 1 events 2 max 4000000 conf - backend native\n"
             "m 0 4096 2097152 0\n"
             "a 0 4096 1000 0\n";
    }
    REQUIRE(readTorchTrace(path, 0, &t, &error));
    CHECK(t.unusable.find("expandable segments") != std::string::npos);
    {
        std::ofstream f(path);
        f << "not a trace\n";
    }
    CHECK_FALSE(readTorchTrace(path, 0, &t, &error));
    CHECK(error.find("not an allocator trace") != std::string::npos);
    std::remove(path);
}

TEST_CASE("replay: a burst of frees reads in one order whatever order the program dropped it in", "[replay]")
{
    char path[] = "/tmp/oomscope-trace-XXXXXX";
    const int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    // Three tensors freed together (a dict of grads), in another order at each size; an
    // allocation between two bursts keeps them apart.
    const auto read = [&](uint64_t n, const char* order) {
        {
            std::ofstream f(path);
            f << "oomscope-torch-trace 1 events 9 max 4000000 conf - backend native\n";
            for (int k = 0; k < 3; ++k)
                f << "a 0 " << (k + 1) * 1048576 << " " << 1000 * n << " 0\n";
            for (const char* c = order; *c; ++c)
                f << "f 0 " << (*c - '0' + 1) * 1048576 << " 0 0\n";
            f << "a 0 8388608 512 0\nf 0 8388608 0 0\n";
        }
        TorchTrace t;
        std::string error;
        REQUIRE(readTorchTrace(path, 0, &t, &error));
        return t;
    };
    const TorchTrace a = read(2, "201"), b = read(4, "120");
    REQUIRE(a.actions.size() == 8);
    for (size_t i = 3; i < 6; ++i)
        CHECK((!a.actions[i].alloc && a.actions[i].index == i - 3 && b.actions[i].index == i - 3));
    CHECK((a.actions[6].alloc && !a.actions[7].alloc && a.actions[7].index == 3));
    const ScaledTrace s = scaled({{2, a}, {4, b}});
    CHECK(s.bytesAt(0, 10) == 10000);
    std::remove(path);
}

TEST_CASE("replay: fit's answer from its traced runs, checked against their allocated peaks", "[replay]")
{
    std::vector<FitTrial> trials(3);
    std::vector<std::pair<const FitTrial*, TorchTrace>> traced;
    for (size_t i = 0; i < 3; ++i) {
        const uint64_t n = uint64_t(1) << i;
        trials[i].size = n;
        trials[i].fits = trials[i].torchAllocated = true;
        // PyTorch's allocated peak: 100 + 130·n MiB and three steps' 1024-byte scalars.
        trials[i].peaks[0] = FitPoint{n, {{Source::Torch, (100 + 130 * n) * MiB + 3 * 1024}, {Source::Cublas, 64 * MiB}}};
    }
    for (const FitTrial& t : trials)
        traced.emplace_back(&t, training(t.size));
    FitPrediction p;
    p.capacity = 1024 * MiB + 64 * MiB + 32 * MiB;
    p.context = 32 * MiB;
    p.model[Source::Cublas] = SourceModel{double(64 * MiB), 0, 0, false};
    ReplayOutcome o = replayPrediction(p, traced);
    REQUIRE(o.used);
    // The segments may take the capacity less the context and cuBLAS's 64 MiB: 1024 MiB, 7.
    CHECK(o.largest == 7);
    CHECK(o.runs == 3);
    CHECK(o.limitAtLargest == 1024 * MiB);
    CHECK(o.atLargest.fits);
    CHECK_FALSE(o.atNext.fits);
    // A run whose allocated peak the replay does not give back: not used, said.
    trials[1].peaks[0].bytes[Source::Torch] += 50 * MiB;
    o = replayPrediction(p, traced);
    CHECK_FALSE(o.used);
    CHECK(o.why.find("the replay of size 2 allocates") != std::string::npos);
    // Blocks that do not grow with the size: no answer from the replay.
    trials[1].peaks[0].bytes[Source::Torch] -= 50 * MiB;
    std::vector<std::pair<const FitTrial*, TorchTrace>> flat;
    for (const FitTrial& t : trials)
        flat.emplace_back(&t, training(1));
    o = replayPrediction(p, flat);
    CHECK_FALSE(o.used);
    CHECK(o.why == "no block PyTorch allocates grows with the size");
}
