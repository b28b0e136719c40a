#include "track/nccl_table.h"

namespace oomscope::track {

uint32_t NcclTable::beginComm(uint64_t nowNs, int device, uint32_t* window) noexcept
{
    std::lock_guard<std::mutex> lock(m_mutex);
    *window = kNone;
    try {
        if (m_state.comms.size() >= kMaxComms || m_state.windows.size() >= kMaxWindows) {
            ++m_state.dropped;
            return kNone;
        }
        NcclComm c;
        c.device = device;
        c.createdNs = nowNs;
        m_state.comms.push_back(c);
        const uint32_t index = uint32_t(m_state.comms.size() - 1);
        m_state.windows.push_back({index, NcclPhase::Init, nowNs, 0});
        *window = uint32_t(m_state.windows.size() - 1);
        return index;
    } catch (...) {
        ++m_state.dropped;
        return kNone;
    }
}

void NcclTable::commCreated(uint32_t comm, uint64_t handle, uint64_t id, uint64_t parent, int device, int rank,
                            int nranks) noexcept
{
    std::lock_guard<std::mutex> lock(m_mutex);
    if (comm >= m_state.comms.size())
        return;
    NcclComm& c = m_state.comms[comm];
    c.handle = handle;
    c.id = id;
    c.parent = parent;
    if (c.device < 0)
        c.device = device;
    c.rank = rank;
    c.nranks = nranks;
    if (handle && c.awaitingFirst)
        m_awaiting.fetch_add(1, std::memory_order_relaxed);
}

void NcclTable::commFailed(uint32_t comm) noexcept
{
    std::lock_guard<std::mutex> lock(m_mutex);
    if (comm < m_state.comms.size()) {
        m_state.comms[comm].handle = 0;
        m_state.comms[comm].awaitingFirst = false;
    }
}

uint32_t NcclTable::find(uint64_t handle) const noexcept
{
    if (!handle)
        return kNone;
    std::lock_guard<std::mutex> lock(m_mutex);
    for (size_t i = m_state.comms.size(); i-- > 0;)  // the newest: a handle's address may be reused
        if (m_state.comms[i].handle == handle && !m_state.comms[i].destroyedNs)
            return uint32_t(i);
    return kNone;
}

uint64_t NcclTable::idOf(uint32_t comm) const noexcept
{
    std::lock_guard<std::mutex> lock(m_mutex);
    return comm < m_state.comms.size() ? m_state.comms[comm].id : 0;
}

void NcclTable::destroyed(uint64_t handle, uint64_t nowNs) noexcept
{
    if (!handle)
        return;
    std::lock_guard<std::mutex> lock(m_mutex);
    for (size_t i = m_state.comms.size(); i-- > 0;) {
        NcclComm& c = m_state.comms[i];
        if (c.handle != handle || c.destroyedNs)
            continue;
        c.destroyedNs = nowNs;
        if (c.awaitingFirst) {
            c.awaitingFirst = false;
            m_awaiting.fetch_sub(1, std::memory_order_relaxed);
        }
        return;
    }
}

uint32_t NcclTable::openWindow(uint32_t comm, NcclPhase phase, uint64_t nowNs) noexcept
{
    std::lock_guard<std::mutex> lock(m_mutex);
    try {
        if (comm >= m_state.comms.size() || m_state.windows.size() >= kMaxWindows) {
            ++m_state.dropped;
            return kNone;
        }
        m_state.windows.push_back({comm, phase, nowNs, 0});
        return uint32_t(m_state.windows.size() - 1);
    } catch (...) {
        ++m_state.dropped;
        return kNone;
    }
}

void NcclTable::closeWindow(uint32_t window, uint64_t nowNs) noexcept
{
    std::lock_guard<std::mutex> lock(m_mutex);
    if (window < m_state.windows.size() && !m_state.windows[window].endNs)
        m_state.windows[window].endNs = nowNs;
}

uint32_t NcclTable::firstCollective(uint64_t handle, uint64_t nowNs) noexcept
{
    if (!handle)
        return kNone;
    std::lock_guard<std::mutex> lock(m_mutex);
    uint32_t comm = kNone;
    for (size_t i = m_state.comms.size(); i-- > 0;)
        if (m_state.comms[i].handle == handle && !m_state.comms[i].destroyedNs) {
            comm = uint32_t(i);
            break;
        }
    if (comm == kNone || !m_state.comms[comm].awaitingFirst)
        return kNone;
    m_state.comms[comm].awaitingFirst = false;
    m_awaiting.fetch_sub(1, std::memory_order_relaxed);
    for (NcclWindow& w : m_state.windows)  // a non-blocking init ends where its first use begins
        if (w.comm == comm && w.phase == NcclPhase::Init && !w.endNs)
            w.endNs = nowNs;
    try {
        if (m_state.windows.size() >= kMaxWindows) {
            ++m_state.dropped;
            return kNone;
        }
        m_state.windows.push_back({comm, NcclPhase::FirstCollective, nowNs, 0});
        return uint32_t(m_state.windows.size() - 1);
    } catch (...) {
        ++m_state.dropped;
        return kNone;
    }
}

void NcclTable::memAlloc(uint64_t address, uint64_t size, int device) noexcept
{
    std::lock_guard<std::mutex> lock(m_mutex);
    try {
        if (m_state.symmetric.size() >= kMaxRanges) {
            ++m_state.dropped;
            return;
        }
        m_state.symmetric.push_back({address, size, device});
    } catch (...) {
        ++m_state.dropped;
    }
}

void NcclTable::memFree(uint64_t address) noexcept
{
    std::lock_guard<std::mutex> lock(m_mutex);
    auto& ranges = m_state.symmetric;
    for (size_t i = 0; i < ranges.size(); ++i)
        if (ranges[i].address == address) {
            ranges[i] = ranges.back();
            ranges.pop_back();
            return;
        }
}

NcclState NcclTable::snapshot() const
{
    std::lock_guard<std::mutex> lock(m_mutex);
    return m_state;
}

} // namespace oomscope::track
