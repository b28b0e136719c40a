// Accounting of CUDA virtual memory management (cuMemCreate & co.): physical memory is a
// handle's size, counted from cuMemCreate to the later of cuMemRelease and the last cuMemUnmap
// of a range mapped to it (the driver frees it only then); mapped ranges are kept for the
// segment view; reserved address space alone is not memory. Reservations are kept too, for
// what is paused: ranges unmapped while their reservation stays, to be mapped again at the same
// addresses (torch_memory_saver, vLLM's sleep mode), until a map in the reservation resumes them
// or cuMemAddressFree ends it.
// Any thread. One mutex: VMM calls are a few thousand per run (PyTorch's expandable segments
// map 20 MiB pages), not the per-tensor path.
#pragma once

#include "track/flight_format.h"
#include "track/image.h"
#include "track/live_map.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

namespace oomscope::track {

class VmmTable {
public:
    using Mapping = VmmMapping;

    // A physical allocation: its handle in the entry's address (it has no address of its own
    // until mapped). Returns false if the handle was already known (then replaced).
    bool create(const LiveAllocation& handle);
    // The handle's allocation when this call ends its life (freed now), else nullopt.
    std::optional<LiveAllocation> release(uint64_t handle);
    // Maps [address, address+size) to handle: the handle's device, nullopt when it is unknown.
    std::optional<int> map(uint64_t address, uint64_t size, uint64_t handle);
    // Unmaps the range at address (*unmapped: the mapping, when there was one); returns the
    // handle's allocation if that ends its life.
    std::optional<LiveAllocation> unmap(uint64_t address, Mapping* unmapped = nullptr);

    // Reserved address space (cuMemAddressReserve / cuMemAddressFree), with the stack that
    // reserved it.
    void reserve(uint64_t address, uint64_t size, uint32_t stack);
    void addressFree(uint64_t address);
    // The reservations with paused bytes: unmapped within them less mapped again since.
    std::vector<VmmPaused> paused() const;

    // Live physical allocations, each with `address` set to its first mapped range (0 while
    // unmapped), for sites and attribution.
    std::vector<LiveAllocation> snapshot() const;
    std::vector<Mapping> mappings() const;
    // The stack of the handle mapped at address (0 when none), and replacing it.
    uint32_t stackAt(uint64_t address) const;
    bool setStackAt(uint64_t address, uint32_t stack);
    size_t size() const;

    // From now on the live physical allocations are also kept in place in the flight file's
    // region of `capacity` entries (before the first create), so that a killed process leaves
    // them; `full` counts those that did not fit. file: the flight file that reserves the
    // region's blocks as it fills (nullptr: the region is reserved whole).
    void setFlight(flight::VmmEntry* entries, size_t capacity, uint64_t* full, class FlightFile* file = nullptr) noexcept;

    void lockForFork() { m_mutex.lock(); }
    void unlockAfterFork() { m_mutex.unlock(); }

private:
    struct Handle {
        LiveAllocation allocation;  // address field holds the handle value
        bool released = false;
        uint32_t mappings = 0;
        int64_t fileSlot = -1;      // its entry in the flight file, -1 when none
        uint64_t firstMapped = 0;   // the lowest address mapped to it, as written to the file
    };
    std::optional<LiveAllocation> endIfDone(std::unordered_map<uint64_t, Handle>::iterator it);
    // The file's entry of a handle: filled, its address or stack changed, emptied.
    void fileFill(Handle& h);
    void fileUpdate(const Handle& h);
    void fileEmpty(Handle& h);
    uint64_t lowestMapping(uint64_t handle) const;

    // The reservation holding address, or end.
    std::map<uint64_t, VmmPaused>::iterator reservationOf(uint64_t address);

    mutable std::mutex m_mutex;
    std::unordered_map<uint64_t, Handle> m_handles;
    std::map<uint64_t, VmmPaused> m_reservations;  // by address; pausedBytes kept in each
    std::unordered_map<uint64_t, Mapping> m_mappings;  // by address
    flight::VmmEntry* m_fileEntries = nullptr;
    size_t m_fileCapacity = 0;
    size_t m_fileNext = 0;               // slots below it have been used
    std::vector<size_t> m_fileFree;      // emptied slots below m_fileNext
    uint64_t* m_fileFull = nullptr;
    class FlightFile* m_file = nullptr;
};

} // namespace oomscope::track
