#include "track/api_names.h"

#include "track/flight_writer.h"

#include <cstring>

namespace oomscope::track {

ApiNames::ApiNames()
{
    m_names[0].store("unknown", std::memory_order_relaxed);
}

ApiId ApiNames::add(const char* name)
{
    std::lock_guard<std::mutex> lock(m_mutex);
    const uint16_t count = m_count.load(std::memory_order_relaxed);
    for (uint16_t i = 1; i < count; ++i) {
        if (std::strcmp(m_names[i].load(std::memory_order_relaxed), name) == 0)
            return ApiId(i);
    }
    if (count >= kMax)
        return ApiId();
    // Our own copy, kept for the life of the process: a caller's string may be a temporary
    // (a framework's name, a program's label).
    const char* copy = strdup(name);
    if (!copy)
        return ApiId();
    m_names[count].store(copy, std::memory_order_release);
    m_count.store(uint16_t(count + 1), std::memory_order_release);
    if (m_flight)
        m_flight->apiName(count, copy);
    return ApiId(count);
}

const char* ApiNames::name(ApiId id) const noexcept
{
    if (id.value() >= m_count.load(std::memory_order_acquire))
        return "unknown";
    const char* name = m_names[id.value()].load(std::memory_order_acquire);
    return name ? name : "unknown";
}

std::vector<std::string> ApiNames::all() const
{
    const uint16_t count = m_count.load(std::memory_order_acquire);
    std::vector<std::string> out;
    out.reserve(count);
    for (uint16_t i = 0; i < count; ++i)
        out.emplace_back(name(ApiId(i)));
    return out;
}

} // namespace oomscope::track
