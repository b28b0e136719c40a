// The OOM dump at scale: a recorder holding 1 Mi timeline events, 100 k live allocations and
// 10 k distinct native stacks writes its report; the time from the trigger to the report on
// disk, and the report's size. The stacks are real (captured by the unwinder from 100 leaf
// functions at 100 depths), so symbolization is part of the figure.
//
//   OOMSCOPE_OUTPUT_DIR=DIR bench_dump        (prints the path of the report it wrote)
#include "interpret/report_builder.h"
#include "preload/report_writer.h"
#include "track/recorder.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sys/stat.h>
#include <utility>
#include <vector>

using namespace oomscope::track;
using oomscope::ApiId;
using oomscope::StackId;

namespace {

Recorder* g_recorder = nullptr;
std::vector<StackId> g_stacks;

template <int Leaf>
__attribute__((noinline)) void captureAt(int depth)
{
    if (depth > 0) {
        captureAt<Leaf>(depth - 1);
        asm volatile("" ::: "memory");
        return;
    }
    g_stacks.push_back(g_recorder->captureStack());
}

template <int... Leaves>
void captureAll(std::integer_sequence<int, Leaves...>, int depth)
{
    (captureAt<Leaves>(depth), ...);
}

double ms(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b)
{
    return std::chrono::duration<double, std::milli>(b - a).count();
}

} // namespace

int main(int argc, char** argv)
{
    // The alloc/free pairs after the live allocations: 480 000 (a ring of 1 Mi events full), or
    // as many as the first argument says (10 Mi events: 5 000 000 with OOMSCOPE_RING_EVENTS=16Mi).
    const uint64_t pairs = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 480000;
    setenv("OOMSCOPE_EXIT_REPORT", "0", 1);
    setenv("OOMSCOPE_QUIET", "1", 1);
    setenv("OOMSCOPE_STACK_DEPTH", "128", 0);  // deep enough that the 100 depths stay apart: 10 k stacks
    // As in the preload: the unwinder set up, the triggers installed, the preload's writer.
    Recorder& r = *Recorder::start([](Recorder& recorder) {
        static oomscope::preload::PreloadReportWriter writer;
        recorder.setWriter(&writer);
    });
    g_recorder = &r;
    // The recorder is linked into this program: its module is the whole program, whose frames
    // would all be cut as the capture layer's own (every stack the same three frames of libc).
    // In the preload it is liboomscope.so alone; here nothing is cut.
    r.setOwnModule(0, 0);
    const ApiId alloc = r.registerApi("cudaMalloc");
    const ApiId freeApi = r.registerApi("cudaFree");
    const auto t0 = std::chrono::steady_clock::now();
    for (int depth = 0; depth < 100; ++depth)
        captureAll(std::make_integer_sequence<int, 100>{}, depth);
    const auto t1 = std::chrono::steady_clock::now();
    // 100 k live allocations over the 10 k stacks, then alloc/free pairs until the ring has
    // seen more than its 1 Mi events.
    Allocation rec;
    rec.api = alloc;
    rec.device = 0;
    rec.size = 1 << 20;
    for (uint64_t i = 0; i < 100000; ++i) {
        rec.address = (uint64_t(1) << 40) + i * 4096;
        rec.stack = g_stacks[i % g_stacks.size()];
        r.recordAlloc(rec);
    }
    for (uint64_t i = 0; i < pairs; ++i) {
        rec.address = (uint64_t(2) << 40) + i * 4096;
        rec.stack = g_stacks[(i * 7) % g_stacks.size()];
        r.recordAlloc(rec);
        r.recordFree(freeApi, rec.address, 0);
    }
    TriggerInfo trigger;
    trigger.kind = oomscope::report::TriggerKind::Oom;
    Allocation failed = rec;
    failed.size = uint64_t(80) << 30;
    trigger.failed = failed;
    trigger.error = 2;
    // The dump first, cold, as a process's first OOM is; then the model alone again, for the
    // split (warm: an upper bound of the model's share).
    const auto t2 = std::chrono::steady_clock::now();
    const std::string path = r.dump(trigger);
    const auto t3 = std::chrono::steady_clock::now();
    const oomscope::track::TrackImage image = r.snapshot();
    const auto t4 = std::chrono::steady_clock::now();
    const size_t rows = oomscope::interpret::buildReport(image, trigger, {}).timeline.rows.size();
    const auto t5 = std::chrono::steady_clock::now();
    std::printf("dump: the snapshot takes %.0f ms of it and building the model of %zu rows %.0f ms (warm)\n",
                ms(t3, t4), rows, ms(t4, t5));
    struct stat st {};
    stat(path.c_str(), &st);
    std::printf("dump: %.0f ms from trigger to report on disk (%zu distinct stacks, %zu live allocations, %llu "
                "events pushed, ring of %zu); report %.1f MiB at %s; stacks captured in %.0f ms\n",
                ms(t2, t3), g_stacks.size(), r.liveMap().size(), (unsigned long long)r.ring().snapshot(0).pushed,
                r.ring().capacity(), double(st.st_size) / (1 << 20), path.c_str(), ms(t0, t1));
    return path.empty() ? 1 : 0;
}
