#include "track/vmm_table.h"

#include "track/flight_writer.h"

#include <algorithm>

namespace oomscope::track {

void VmmTable::setFlight(flight::VmmEntry* entries, size_t capacity, uint64_t* full, FlightFile* file) noexcept
{
    std::lock_guard<std::mutex> lock(m_mutex);
    m_file = file;
    m_fileEntries = entries;
    m_fileCapacity = entries ? capacity : 0;
    m_fileFull = full;
}

void VmmTable::fileFill(Handle& h)
{
    if (!m_fileEntries)
        return;
    if (h.fileSlot < 0) {
        if (!m_fileFree.empty()) {
            h.fileSlot = int64_t(m_fileFree.back());
            m_fileFree.pop_back();
        } else if (m_fileNext < m_fileCapacity &&
                   (!m_file || m_file->reserve(FlightFile::kVmm, (m_fileNext + 1) * sizeof(flight::VmmEntry)))) {
            h.fileSlot = int64_t(m_fileNext++);
        } else {
            if (m_fileFull)
                __atomic_fetch_add(m_fileFull, 1, __ATOMIC_RELAXED);
            return;
        }
    }
    flight::VmmEntry& e = m_fileEntries[h.fileSlot];
    __atomic_store_n(&e.state, uint64_t(0), __ATOMIC_RELEASE);
    e.handle = h.allocation.address;
    e.allocation = h.allocation;
    e.allocation.address = h.firstMapped;
    // Whole before it counts: a reader (the file after a kill) takes only live-marked slots.
    __atomic_store_n(&e.state, flight::kVmmLive, __ATOMIC_RELEASE);
}

void VmmTable::fileUpdate(const Handle& h)
{
    if (!m_fileEntries || h.fileSlot < 0)
        return;
    flight::VmmEntry& e = m_fileEntries[h.fileSlot];
    __atomic_store_n(&e.allocation.address, h.firstMapped, __ATOMIC_RELAXED);
    __atomic_store_n(&e.allocation.stack, h.allocation.stack, __ATOMIC_RELAXED);
}

void VmmTable::fileEmpty(Handle& h)
{
    if (!m_fileEntries || h.fileSlot < 0)
        return;
    __atomic_store_n(&m_fileEntries[h.fileSlot].state, uint64_t(0), __ATOMIC_RELEASE);
    const size_t slot = size_t(h.fileSlot);
    h.fileSlot = -1;
    m_fileFree.push_back(slot);  // may throw: the slot is then never reused, nothing else
}

uint64_t VmmTable::lowestMapping(uint64_t handle) const
{
    uint64_t lowest = 0;
    for (const auto& [address, mapping] : m_mappings)
        if (mapping.handle == handle && (lowest == 0 || address < lowest))
            lowest = address;
    return lowest;
}

bool VmmTable::create(const LiveAllocation& handle)
{
    std::lock_guard<std::mutex> lock(m_mutex);
    auto found = m_handles.find(handle.address);
    const bool inserted = found == m_handles.end();
    Handle entry{handle, false, 0, inserted ? -1 : found->second.fileSlot, 0};
    Handle& h = inserted ? m_handles.emplace(handle.address, entry).first->second : (found->second = entry);
    fileFill(h);
    return inserted;
}

std::optional<LiveAllocation> VmmTable::endIfDone(std::unordered_map<uint64_t, Handle>::iterator it)
{
    if (!it->second.released || it->second.mappings > 0)
        return std::nullopt;
    const LiveAllocation ended = it->second.allocation;
    fileEmpty(it->second);
    m_handles.erase(it);
    return ended;
}

std::optional<LiveAllocation> VmmTable::release(uint64_t handle)
{
    std::lock_guard<std::mutex> lock(m_mutex);
    auto it = m_handles.find(handle);
    if (it == m_handles.end() || it->second.released)
        return std::nullopt;
    it->second.released = true;
    return endIfDone(it);
}

std::map<uint64_t, VmmPaused>::iterator VmmTable::reservationOf(uint64_t address)
{
    auto r = m_reservations.upper_bound(address);
    if (r == m_reservations.begin())
        return m_reservations.end();
    --r;
    return address - r->second.address < r->second.size ? r : m_reservations.end();
}

void VmmTable::reserve(uint64_t address, uint64_t size, uint32_t stack)
{
    std::lock_guard<std::mutex> lock(m_mutex);
    VmmPaused r;
    r.address = address;
    r.size = size;
    r.stack = stack;
    m_reservations[address] = r;
}

void VmmTable::addressFree(uint64_t address)
{
    std::lock_guard<std::mutex> lock(m_mutex);
    m_reservations.erase(address);
}

std::vector<VmmPaused> VmmTable::paused() const
{
    std::lock_guard<std::mutex> lock(m_mutex);
    std::vector<VmmPaused> out;
    for (const auto& [address, r] : m_reservations)
        if (r.pausedBytes > 0)
            out.push_back(r);
    return out;
}

std::optional<int> VmmTable::map(uint64_t address, uint64_t size, uint64_t handle)
{
    std::lock_guard<std::mutex> lock(m_mutex);
    auto it = m_handles.find(handle);
    if (it == m_handles.end())
        return std::nullopt;
    if (auto r = reservationOf(address); r != m_reservations.end())  // resumed, as far as it goes
        r->second.pausedBytes -= std::min(r->second.pausedBytes, size);
    ++it->second.mappings;
    m_mappings[address] = Mapping{address, size, handle, it->second.allocation.device};
    if (it->second.firstMapped == 0 || address < it->second.firstMapped) {
        it->second.firstMapped = address;
        fileUpdate(it->second);
    }
    return it->second.allocation.device;
}

std::optional<LiveAllocation> VmmTable::unmap(uint64_t address, Mapping* unmapped)
{
    std::lock_guard<std::mutex> lock(m_mutex);
    auto m = m_mappings.find(address);
    if (m == m_mappings.end())
        return std::nullopt;
    const uint64_t handle = m->second.handle;
    if (unmapped)
        *unmapped = m->second;
    if (auto r = reservationOf(address); r != m_reservations.end()) {  // paused while the range stays reserved
        r->second.pausedBytes += m->second.size;
        r->second.device = m->second.device;
    }
    m_mappings.erase(m);
    auto it = m_handles.find(handle);
    if (it == m_handles.end())
        return std::nullopt;
    if (it->second.mappings > 0)
        --it->second.mappings;
    if (it->second.firstMapped == address) {
        it->second.firstMapped = it->second.mappings > 0 ? lowestMapping(handle) : 0;
        fileUpdate(it->second);
    }
    return endIfDone(it);
}

std::vector<LiveAllocation> VmmTable::snapshot() const
{
    std::lock_guard<std::mutex> lock(m_mutex);
    std::vector<LiveAllocation> out;
    out.reserve(m_handles.size());
    for (const auto& [handle, h] : m_handles) {
        LiveAllocation a = h.allocation;
        a.address = h.firstMapped;
        out.push_back(a);
    }
    return out;
}

std::vector<VmmTable::Mapping> VmmTable::mappings() const
{
    std::lock_guard<std::mutex> lock(m_mutex);
    std::vector<Mapping> out;
    out.reserve(m_mappings.size());
    for (const auto& [address, mapping] : m_mappings)
        out.push_back(mapping);
    return out;
}

uint32_t VmmTable::stackAt(uint64_t address) const
{
    std::lock_guard<std::mutex> lock(m_mutex);
    auto m = m_mappings.find(address);
    if (m == m_mappings.end())
        return 0;
    auto it = m_handles.find(m->second.handle);
    return it == m_handles.end() ? 0 : it->second.allocation.stack;
}

bool VmmTable::setStackAt(uint64_t address, uint32_t stack)
{
    std::lock_guard<std::mutex> lock(m_mutex);
    auto m = m_mappings.find(address);
    if (m == m_mappings.end())
        return false;
    auto it = m_handles.find(m->second.handle);
    if (it == m_handles.end())
        return false;
    it->second.allocation.stack = stack;
    fileUpdate(it->second);
    return true;
}

size_t VmmTable::size() const
{
    std::lock_guard<std::mutex> lock(m_mutex);
    return m_handles.size();
}

} // namespace oomscope::track
