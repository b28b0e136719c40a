// Which out-of-memory errors write a report. An episode is a time window, not "until the next
// success": PyTorch with expandable segments answers a failed cuMemCreate by releasing and
// re-creating hundreds of handles before it fails again (H200: two reports for one OOM), so
// out-of-memory errors less than the window after the previous one (or after the end of its
// report) are one episode, one report. With a framework adapter that reports its own OOMs,
// the framework's failures only open an episode: the moment of the first one is kept
// (FirstFailure) and handed to the framework's OOM report, which comes after its cache flush.
// Any thread; a mutex guards the framework state (OOM paths only).
#pragma once

#include "track/trigger_info.h"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

namespace oomscope::track {

class OomEpisodes {
public:
    // windowNs: OOMSCOPE_OOM_EPISODE_MS. A first failure is handed to a framework's OOM up to
    // kHandoverNs after the window (a slow cache flush).
    static constexpr uint64_t kHandoverNs = 60ull * 1000000000ull;
    explicit OomEpisodes(uint64_t windowNs) : m_windowNs(windowNs) {}

    // An out-of-memory error at nowNs: true when it opens an episode.
    bool opens(uint64_t nowNs) noexcept;
    // A report of the episode was written (or given up) at nowNs: the window runs from here, so
    // that writing it never splits one episode in two.
    void reported(uint64_t nowNs) noexcept { m_lastNs.store(nowNs, std::memory_order_release); }

    void attachFramework(const std::string& name, bool reportsOom);
    std::string framework() const;
    bool frameworkReportsOom() const noexcept { return m_reportsOom.load(std::memory_order_acquire); }

    void keepFirstFailure(FirstFailure first);
    // The kept first failure when it belongs to an OOM the framework raises at nowNs; emptied.
    std::optional<FirstFailure> takeFirstFailure(uint64_t nowNs);

private:
    const uint64_t m_windowNs;
    std::atomic<uint64_t> m_lastNs{0};
    mutable std::mutex m_mutex;
    std::string m_framework;
    std::atomic<bool> m_reportsOom{false};
    std::optional<FirstFailure> m_first;
};

} // namespace oomscope::track
