// What a trigger knows when it asks for a report: its kind, the request that failed, the
// framework's view of its allocator, the counters at the first failure of an OOM episode.
// Made by the tracker (OOM episodes, signals, exit, requests) and read by the report builder.
// Plain data, header-only.
#pragma once

#include "report/enums.h"
#include "report/model.h"
#include "track/event.h"
#include "track/image.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace oomscope::track {

struct FrameworkState;

// The moment the first out-of-memory error of an episode happened, kept while the framework
// decides whether it becomes an OOM (PyTorch flushes its cache and retries first).
struct FirstFailure {
    uint64_t timeNs = 0;
    Allocation alloc;
    int error = 0;
    std::vector<DeviceCounters> counters;
    std::vector<report::Device> devices;  // the driver's view then (free memory)
};

struct TriggerInfo {
    report::TriggerKind kind = report::TriggerKind::Request;
    std::string reason;                  // free text: the signal name, the dump() argument…
    std::optional<Allocation> failed;    // oom: the request that failed
    std::optional<int> error;
    uint32_t stack = 0;                  // the trigger's stack, when not the failed request's
    const FrameworkState* framework = nullptr;  // an OOM raised by a framework: its allocator's view
    std::optional<FirstFailure> firstFailure;
};

} // namespace oomscope::track
