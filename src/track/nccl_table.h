// NCCL's communicators and the windows of time in which NCCL allocated for each: its init (or
// split), its first collective (buffers connected at first use, NCCL_RUNTIME_CONNECT), its
// registrations; and the ranges of its symmetric memory (ncclMemAlloc). The hooks record
// windows, never allocations: NCCL's allocations come through the CUDA doors (from its init
// job's thread and its proxy thread, not only the caller's), and a report attributes each live
// allocation made by NCCL to the communicator whose window holds its time (interpret/).
// Any thread. One mutex, taken by NCCL's own non-hot calls; a collective takes it only while
// some communicator still awaits its first (awaitingFirst()).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace oomscope::track {

enum class NcclPhase : uint8_t { Init, FirstCollective, Registration };

struct NcclComm {
    uint64_t handle = 0;    // ncclComm_t; 0 until its init returned (or when it failed)
    uint64_t id = 0;        // the same on every rank: a hash of the unique id, or of the parent's and the color
    uint64_t parent = 0;    // the communicator it was split from, 0 when none
    int32_t device = -1;
    int32_t rank = -1;
    int32_t nranks = 0;
    uint64_t createdNs = 0;
    uint64_t destroyedNs = 0;  // 0 while it lives
    bool awaitingFirst = true;
};

struct NcclWindow {
    uint32_t comm = 0;  // index into comms
    NcclPhase phase = NcclPhase::Init;
    uint64_t beginNs = 0;
    uint64_t endNs = 0;  // 0 while open
};

struct NcclRange {  // symmetric memory from ncclMemAlloc
    uint64_t address = 0;
    uint64_t size = 0;
    int32_t device = -1;
};

struct NcclState {
    std::vector<NcclComm> comms;
    std::vector<NcclWindow> windows;
    std::vector<NcclRange> symmetric;
    uint64_t dropped = 0;  // communicators, windows or ranges past the table's capacity
    bool empty() const { return comms.empty() && symmetric.empty(); }
};

class NcclTable {
public:
    static constexpr uint32_t kNone = ~0u;
    static constexpr size_t kMaxComms = 256, kMaxWindows = 2048, kMaxRanges = 4096;

    // Before an init or split: a communicator without a handle and its open init window
    // (*window), kNone for both past the table's capacity.
    uint32_t beginComm(uint64_t nowNs, int device, uint32_t* window) noexcept;
    // After it: its facts (success), or forgotten (failure: its window keeps nothing).
    // device: where NCCL made it, when the call began before any CUDA context did (-1: kept).
    void commCreated(uint32_t comm, uint64_t handle, uint64_t id, uint64_t parent, int device, int rank,
                     int nranks) noexcept;
    void commFailed(uint32_t comm) noexcept;
    // The live communicator of a handle, kNone when unknown.
    uint32_t find(uint64_t handle) const noexcept;
    uint64_t idOf(uint32_t comm) const noexcept;
    void destroyed(uint64_t handle, uint64_t nowNs) noexcept;

    uint32_t openWindow(uint32_t comm, NcclPhase phase, uint64_t nowNs) noexcept;
    void closeWindow(uint32_t window, uint64_t nowNs) noexcept;
    // A collective on handle: the window of its first collective (its init window, still open
    // after a non-blocking init, ends now), or kNone when it had one already.
    uint32_t firstCollective(uint64_t handle, uint64_t nowNs) noexcept;
    bool awaitingFirst() const noexcept { return m_awaiting.load(std::memory_order_relaxed) > 0; }

    void memAlloc(uint64_t address, uint64_t size, int device) noexcept;
    void memFree(uint64_t address) noexcept;

    NcclState snapshot() const;
    void lockForFork() { m_mutex.lock(); }
    void unlockAfterFork() { m_mutex.unlock(); }

private:
    mutable std::mutex m_mutex;
    NcclState m_state;
    std::atomic<uint32_t> m_awaiting{0};
};

} // namespace oomscope::track
