#include "record/vmm_table.h"

namespace oomscope::record {

bool VmmTable::create(const LiveAllocation& handle)
{
    std::lock_guard<std::mutex> lock(m_mutex);
    auto [it, inserted] = m_handles.insert_or_assign(handle.address, Handle{handle, false, 0});
    (void)it;
    return inserted;
}

std::optional<LiveAllocation> VmmTable::endIfDone(std::unordered_map<uint64_t, Handle>::iterator it)
{
    if (!it->second.released || it->second.mappings > 0)
        return std::nullopt;
    const LiveAllocation ended = it->second.allocation;
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

bool VmmTable::map(uint64_t address, uint64_t size, uint64_t handle)
{
    std::lock_guard<std::mutex> lock(m_mutex);
    auto it = m_handles.find(handle);
    if (it == m_handles.end())
        return false;
    ++it->second.mappings;
    m_mappings[address] = Mapping{address, size, handle, it->second.allocation.device};
    return true;
}

std::optional<LiveAllocation> VmmTable::unmap(uint64_t address, uint64_t* handleOut)
{
    std::lock_guard<std::mutex> lock(m_mutex);
    auto m = m_mappings.find(address);
    if (m == m_mappings.end())
        return std::nullopt;
    const uint64_t handle = m->second.handle;
    m_mappings.erase(m);
    if (handleOut)
        *handleOut = handle;
    auto it = m_handles.find(handle);
    if (it == m_handles.end())
        return std::nullopt;
    if (it->second.mappings > 0)
        --it->second.mappings;
    return endIfDone(it);
}

std::vector<LiveAllocation> VmmTable::snapshot() const
{
    std::lock_guard<std::mutex> lock(m_mutex);
    std::unordered_map<uint64_t, uint64_t> firstMapping;
    for (const auto& [address, mapping] : m_mappings) {
        auto [it, inserted] = firstMapping.emplace(mapping.handle, address);
        if (!inserted && address < it->second)
            it->second = address;
    }
    std::vector<LiveAllocation> out;
    out.reserve(m_handles.size());
    for (const auto& [handle, h] : m_handles) {
        LiveAllocation a = h.allocation;
        auto it = firstMapping.find(handle);
        a.address = it == firstMapping.end() ? 0 : it->second;
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
    return true;
}

size_t VmmTable::size() const
{
    std::lock_guard<std::mutex> lock(m_mutex);
    return m_handles.size();
}

} // namespace oomscope::record
