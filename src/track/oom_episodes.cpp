#include "track/oom_episodes.h"

namespace oomscope::track {

bool OomEpisodes::opens(uint64_t nowNs) noexcept
{
    const uint64_t previous = m_lastNs.exchange(nowNs, std::memory_order_acq_rel);
    return previous == 0 || nowNs - previous > m_windowNs;
}

bool OomEpisodes::takeReport() noexcept
{
    return m_maxReports == 0 || m_reports.fetch_add(1, std::memory_order_acq_rel) < m_maxReports;
}

void OomEpisodes::skip(report::SkippedOom episode)
{
    std::lock_guard<std::mutex> lock(m_mutex);
    ++m_skipped.count;
    m_skipped.maxReports = m_maxReports;
    if (m_skipped.episodes.size() < report::SkippedOoms::kKept)
        m_skipped.episodes.push_back(std::move(episode));
}

std::optional<report::SkippedOoms> OomEpisodes::skipped() const
{
    std::lock_guard<std::mutex> lock(m_mutex);
    if (m_skipped.count == 0)
        return std::nullopt;
    return m_skipped;
}

void OomEpisodes::attachFramework(const std::string& name, bool reportsOom)
{
    std::lock_guard<std::mutex> lock(m_mutex);
    m_framework = name;
    m_reportsOom.store(reportsOom, std::memory_order_release);
}

std::string OomEpisodes::framework() const
{
    std::lock_guard<std::mutex> lock(m_mutex);
    return m_framework;
}

void OomEpisodes::keepFirstFailure(FirstFailure first)
{
    std::lock_guard<std::mutex> lock(m_mutex);
    m_first = std::move(first);
}

std::optional<FirstFailure> OomEpisodes::takeFirstFailure(uint64_t nowNs)
{
    std::optional<FirstFailure> first;
    {
        std::lock_guard<std::mutex> lock(m_mutex);
        first.swap(m_first);
    }
    if (first && nowNs - first->timeNs > m_windowNs + kHandoverNs)
        first.reset();  // an old failure: not this OOM's
    return first;
}

} // namespace oomscope::track
