// Will it fit, by replaying PyTorch's caching allocator: the allocator's own trace of a run
// (every block asked for and freed, as torch.cuda.memory._record_memory_history records it;
// the Python adapter writes it for `oomscope fit`'s runs), taken at a few small sizes, aligned
// action by action, each block's size scaled to another size along the line through the runs,
// and replayed through a model of the allocator under the memory it would have there. The
// replay finds what the peak-bytes model cannot: the memory the allocator strands in segments
// that still hold a live block when a large request comes (docs/ARCHITECTURE.md, "Will it
// fit"). The approach is xMem's (Middleware '25): trace small, simulate large.
// Pure functions; no I/O except readTorchTrace.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace oomscope::report {

// One run's actions on one device: allocations (the bytes asked for) and the frees that
// completed, each free naming the allocation it ends by its index among the allocations.
struct TorchTrace {
    struct Action {
        bool alloc = false;
        uint64_t index = 0;   // the allocation's index (its own for an allocation)
        uint64_t bytes = 0;   // asked for (an allocation)
        uint64_t stream = 0;  // the stream it was asked on (the allocator pools blocks by stream)
    };
    std::vector<Action> actions;
    std::string unusable;  // why it cannot be replayed (another allocator, settings, a dropped event)
};

// Reads the adapter's file (src/python/oomscope/_torch_adapter.py _write_fit_trace) for one
// device. false with *error for a file that is not one; a trace of settings the model does not
// follow (PYTORCH_CUDA_ALLOC_CONF, another backend) or that dropped events reads, with
// `unusable` said.
bool readTorchTrace(const std::string& path, int64_t device, TorchTrace* out, std::string* error);

// The traces of runs at several sizes as one trace of any size: the same actions in the same
// order at every size, each allocation's bytes on the line through the two largest runs.
struct ScaledTrace {
    std::vector<TorchTrace::Action> actions;  // the largest run's, bytes replaced by bytesAt()
    std::vector<int64_t> slope;               // per action: bytes per unit of size (0 for a free)
    uint64_t at = 0;                          // the size of the largest run
    uint64_t offLine = 0;                     // allocations whose bytes are not on one line through every run
    uint64_t bytesAt(size_t i, uint64_t n) const;
};
// false with *why where the runs' actions differ (counts, kinds, which allocation a free ends).
bool alignTraces(const std::vector<std::pair<uint64_t, const TorchTrace*>>& runs, ScaledTrace* out, std::string* why);
// The runs (sorted by size) from the smallest that aligns with all the larger ones, two at
// least, aligned into *out: that run's index, or runs.size() where none does (*why: the two
// largest runs' difference, the last tried). A library can pick another algorithm, with other
// workspaces, past a size, and the smallest sizes take paths of their own.
size_t alignFromSmallest(const std::vector<std::pair<uint64_t, const TorchTrace*>>& runs, ScaledTrace* out,
                         std::string* why);

// PyTorch's native caching allocator with its default settings (c10/cuda/CUDACachingAllocator
// .cpp): requests rounded to 512 bytes; up to 1 MiB from 2 MiB segments of a small pool, the
// rest from a large pool (segments of 20 MiB below 10 MiB, else rounded to 2 MiB); the best-
// fitting free block of the same stream and pool, split where more than 512 bytes (small) or 1
// MiB (large) would remain; a freed block merged with its free neighbours; a new segment when no
// block fits, and where the memory is short, every free whole segment released and the segment
// asked for again; then out of memory.
struct ReplayResult {
    bool fits = false;
    uint64_t peakReserved = 0, peakAllocated = 0;
    uint64_t failedBytes = 0;     // the request that ran out of memory (rounded), where it did
    uint64_t reservedAtFailure = 0;
};
// The trace replayed at size n, the allocator's segments kept within `limit` bytes.
ReplayResult replay(const ScaledTrace& trace, uint64_t n, uint64_t limit);

// The largest n in [1, most] whose replay fits within limit(n) (0: not even 1), by doubling and
// bisection (the replay needs more memory as n grows).
uint64_t largestByReplay(const ScaledTrace& trace, const std::function<uint64_t(uint64_t)>& limit,
                         uint64_t most = uint64_t(1) << 20);

} // namespace oomscope::report
