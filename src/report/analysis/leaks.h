// Leak patterns across steps: a stack whose live bytes keep growing after warm-up, from the
// per-step samples of a report (steps[].tensors: PyTorch's tensors by Python stack, when its
// history was on; otherwise steps[].sites: what the capture sees); without any, the device
// counters (allocated or tracked bytes) growing, pointed at the captured site that grows with
// them where one does (a caching allocator's segments); and, in programs without a caching
// allocator, memory never freed at exit. Pure functions: the source text of a line is handed
// in by the caller (the CLI reads files; tests pass strings).
#pragma once

#include "report/model.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace oomscope::report {

struct LeakOptions {
    uint64_t minBytes = 1ull << 20;  // growth below this is not a leak
    size_t minSteps = 6;             // steps after warm-up needed for a verdict
    double warmupFraction = 0.25;    // the first quarter of the steps (at least minWarmup) is warm-up
    size_t minWarmup = 2;
};

enum class LeakLevel { Tensors, Sites, Device, Exit };

struct LeakFinding {
    LeakLevel level = LeakLevel::Sites;
    std::optional<uint32_t> stack;  // none at device level
    int64_t device = 0;
    uint64_t firstBytes = 0;        // after warm-up
    uint64_t lastBytes = 0;
    double bytesPerStep = 0;
    size_t steps = 0;               // steps the growth was observed over
    uint64_t firstStep = 0;         // step indexes of the observation window
    uint64_t lastStep = 0;
    // Device level only: the captured site (a caching allocator's segments, by the stack that
    // made it reserve them) that grew steadily over the same window by at least half the
    // device's growth per step: the line where the allocator has to reserve more every step,
    // which without the framework's history is the nearest the capture comes to the line that
    // keeps memory alive.
    std::optional<uint32_t> reservedStack;
    double reservedPerStep = 0;
};

// Returns the source text of file:line, or "" when unknown.
using SourceLine = std::function<std::string(const std::string& file, uint32_t line)>;

// The growing stacks and counters, largest growth first. A steady loop (cache warm-up,
// optimizer state created at the first step, library workspaces) is not flagged: only growth
// that continues after warm-up, with the late steps above every early one, is.
std::vector<LeakFinding> findLeaks(const Report& report, const LeakOptions& options = {});

// Where to point the user: the frame that keeps the memory, its source text, and the pattern.
struct LeakBlame {
    const Frame* frame = nullptr;  // a Python frame of the program, else the first native frame outside CUDA
    std::string text;              // the source line, trimmed, when known
    std::string pattern;           // "tensors accumulated in a list across steps", …
    std::string remedy;
};
LeakBlame blameLeak(const Report& report, const LeakFinding& leak, const SourceLine& source);

// Findings blamed on the same line with the same pattern (the tensors one appending line keeps,
// allocated at several lines of a forward) as one: bytes summed, the longest observation.
struct BlamedLeak {
    LeakFinding leak;   // combined
    LeakBlame blame;
    size_t stacks = 1;  // findings merged
    // What keeps it alive, where the step samples' censuses tell (steps[].retainers): the
    // retainer that grew most between the first and the last census (one allocated at the
    // leak's own stack first).
    std::optional<Retainer> heldBy;
};

// "held by NAME (KIND: CONTAINER, N tensors, BYTES)".
std::string describeRetainer(const Retainer& r);

// "+X per step over N steps (A -> B, device D[, K allocation sites])", or "X never freed
// before exit": the growth as check, the diagnosis and the HTML say it.
std::string describeGrowth(const BlamedLeak& b);
std::vector<BlamedLeak> blameLeaks(const Report& report, const std::vector<LeakFinding>& findings,
                                   const SourceLine& source);

// The findings as the report's `leaks` entries.
std::vector<Leak> leakEntries(const Report& report, const std::vector<LeakFinding>& findings, const SourceLine& source);

} // namespace oomscope::report
