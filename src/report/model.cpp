#include "report/model.h"

namespace oomscope::report {

uint16_t Timeline::intern(const std::string& value)
{
    for (size_t i = 0; i < names.size(); ++i) {
        if (names[i] == value)
            return uint16_t(i);
    }
    names.push_back(value);
    return uint16_t(names.size() - 1);
}

const std::string& Timeline::name(uint16_t index) const
{
    static const std::string kUnknown = "unknown";
    return index < names.size() ? names[index] : kUnknown;
}

Timeline::Flags Timeline::flags(const std::function<bool(const std::string&)>& test) const
{
    Flags out;
    out.byIndex.resize(names.size());
    for (size_t i = 0; i < names.size(); ++i)
        out.byIndex[i] = test(names[i]);
    return out;
}

bool Timeline::operator==(const Timeline& other) const
{
    if (capacity != other.capacity || pushed != other.pushed || dropped != other.dropped || rows.size() != other.rows.size())
        return false;
    for (size_t i = 0; i < rows.size(); ++i) {
        const TimelineRow& a = rows[i];
        const TimelineRow& b = other.rows[i];
        if (a.timeNs != b.timeNs || a.address != b.address || a.size != b.size || a.stream != b.stream ||
            a.handle != b.handle || a.stack != b.stack || a.thread != b.thread || a.error != b.error || a.device != b.device ||
            name(a.kind) != other.name(b.kind) || name(a.api) != other.name(b.api))
            return false;
    }
    return true;
}

bool Timeline::hasHandles() const
{
    for (const TimelineRow& row : rows) {
        if (row.handle)
            return true;
    }
    return false;
}

const Stack* Report::findStack(uint32_t id) const
{
    for (const Stack& stack : stacks) {
        if (stack.id == id)
            return &stack;
    }
    return nullptr;
}

const Module* Report::findModule(uint32_t id) const
{
    for (const Module& module : modules) {
        if (module.id == id)
            return &module;
    }
    return nullptr;
}

const Device* Report::findDevice(int64_t index) const
{
    for (const Device& device : devices) {
        if (device.index == index)
            return &device;
    }
    return nullptr;
}

const MemoryRow* Report::findMemory(int64_t device) const
{
    for (const MemoryRow& row : memory) {
        if (row.device == device)
            return &row;
    }
    return nullptr;
}

const GraphPoolUse* Report::findGraphPool(const std::vector<int64_t>& poolId) const
{
    if (!cudaGraphs)
        return nullptr;
    for (const GraphPoolUse& p : cudaGraphs->pools)
        if (p.poolId == poolId)
            return &p;
    return nullptr;
}

PoolKind poolKind(const Report& report, const std::vector<int64_t>& poolId)
{
    const PoolKind kind = poolKind(poolId);
    return kind == PoolKind::MemPool && report.findGraphPool(poolId) ? PoolKind::Graph : kind;
}

std::string poolName(const Report& report, const std::vector<int64_t>& poolId)
{
    if (poolKind(report, poolId) == PoolKind::Graph && poolKind(poolId) != PoolKind::Graph)
        return "CUDA graph pool (" + std::to_string(poolId[0]) + ", " + std::to_string(poolId[1]) + ")";
    return poolName(poolId);
}

PoolKind poolKind(const std::vector<int64_t>& poolId)
{
    if (poolId.size() != 2 || (poolId[0] == 0 && poolId[1] == 0))
        return PoolKind::Default;
    return poolId[0] == 0 ? PoolKind::MemPool : PoolKind::Graph;
}

std::string poolName(const std::vector<int64_t>& poolId)
{
    const PoolKind kind = poolKind(poolId);
    if (kind == PoolKind::Default)
        return "default pool";
    const std::string id = "(" + std::to_string(poolId[0]) + ", " + std::to_string(poolId[1]) + ")";
    return (kind == PoolKind::MemPool ? "MemPool " : "CUDA graph pool ") + id;
}

} // namespace oomscope::report
