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

struct TorchSnapshotOptions {
    // Only PyTorch's own segments: then memory_viz's totals are PyTorch's reserved and
    // allocated bytes exactly. By default memory outside its allocator is there too.
    bool torchOnly = false;
};

std::string exportTorchSnapshot(const Report& report, const TorchSnapshotOptions& options = {});
std::string exportChromeTrace(const Report& report);
std::string exportFolded(const Report& report);

} // namespace oomscope::report
