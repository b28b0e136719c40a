// A report in the formats other viewers open (oomscope export):
//   torch-snapshot  a pickle in the shape of torch.cuda.memory._snapshot(), for PyTorch's
//                   memory_viz (trace_plot, segment_plot, stats); memory outside PyTorch's
//                   allocator (cuBLAS, NCCL, plain cudaMalloc, JAX) comes as segments of its
//                   own, each labelled by its source
//   chrome-trace    trace-event JSON for Perfetto, chrome://tracing and speedscope: memory
//                   counters per device and source, PyTorch's allocated/reserved, a slice per
//                   step, instants for failed allocations, labels and the OOM
//   folded          Brendan Gregg's folded stacks of the live bytes at the trigger
// Model in, bytes out; no I/O besides the string.
#pragma once

#include "report/model.h"

#include <string>

namespace oomscope::report {

enum class ExportFormat { TorchSnapshot, ChromeTrace, Folded };

// "torch-snapshot", "chrome-trace", "folded"; false for anything else.
bool parseExportFormat(const std::string& name, ExportFormat* out);
const char* exportFormatNames();  // for help and errors: "torch-snapshot, chrome-trace, folded"

// The part of the timeline an export keeps: events from fromNs (the process's CLOCK_MONOTONIC, as
// the timeline's times) to toNs, then only the newest `last` of them (0: all). What was left out
// is counted in `leftOut` (the exports fill it).
struct ExportWindow {
    uint64_t fromNs = 0;
    uint64_t toNs = UINT64_MAX;
    size_t last = 0;
    mutable size_t leftOut = 0;
    mutable size_t kept = 0;
};

// memory_viz hides the events of a trace past about 600 000 entries and browsers give up on
// pickles past about 1 GB (pytorch#158364, #176290): a torch-snapshot keeps the newest 300 000
// events by default (an event is one or two trace entries), about 70 MB.
inline constexpr size_t kTorchSnapshotLast = 300000;

struct TorchSnapshotOptions {
    // Only PyTorch's own segments: then memory_viz's totals are PyTorch's reserved and
    // allocated bytes exactly. By default memory outside its allocator is there too.
    bool torchOnly = false;
    // Of the trace (the segments are the state at the trigger whatever the window: memory_viz
    // replays the trace back from them, so a window ends at the trigger).
    ExportWindow window;
};

std::string exportTorchSnapshot(const Report& report, const TorchSnapshotOptions& options = {});
// The counters are the memory over time in at most 20 000 spans a device (10 000 buckets of two
// values), the steps and the markers at most 2 000 a kind: bounded whatever the report's size.
std::string exportChromeTrace(const Report& report, const ExportWindow& window = {});
std::string exportFolded(const Report& report);

struct JobView;
// One trace for a whole job: every rank its own process track (named by rank, host and pid) on
// the job's clock (the wall clock, from the first rank's start), the first failure an instant
// across the whole trace. The window's times are on the job's clock (ns since its start). Fewer
// spans a rank where there are many ranks (at most about 400 000 counter samples in all).
std::string exportJobChromeTrace(const JobView& job, const ExportWindow& window = {});

} // namespace oomscope::report
