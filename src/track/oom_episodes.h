// Which out-of-memory errors write a report. An episode is a time window, not "until the next
// success": PyTorch with expandable segments answers a failed cuMemCreate by releasing and
// re-creating hundreds of handles before it fails again (H200: two reports for one OOM), so
// out-of-memory errors less than the window after the previous one (or after the end of its
// report) are one episode, one report. With a framework adapter that reports its own OOMs,
// the framework's failures only open an episode: the moment of the first one is kept
// (FirstFailure) and handed to the framework's OOM report, which comes after its cache flush.
// Only the first maxReports episodes get a report of their own: a program that catches OOMs
// on purpose (a batch-size finder) would otherwise write one per try. Later episodes are
// counted, the first SkippedOoms::kKept of them kept, and every later report carries them.
// Any thread; a mutex guards the framework state and the skipped list (OOM paths only).
#pragma once

#include "report/model.h"
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
    // maxReports 0: no limit.
    explicit OomEpisodes(uint64_t windowNs, uint64_t maxReports = 0) : m_windowNs(windowNs), m_maxReports(maxReports) {}

    // An out-of-memory error at nowNs: true when it opens an episode.
    bool opens(uint64_t nowNs) noexcept;
    // A report of the episode was written (or given up) at nowNs: the window runs from here, so
    // that writing it never splits one episode in two.
    void reported(uint64_t nowNs) noexcept { m_lastNs.store(nowNs, std::memory_order_release); }

    void attachFramework(const std::string& name, bool reportsOom);
    std::string framework() const;
    bool frameworkReportsOom() const noexcept { return m_reportsOom.load(std::memory_order_acquire); }

    // An episode that opens: true when it may have a report (and it is counted as one), false
    // when the reports are used up (then skip() it).
    bool takeReport() noexcept;
    bool reportLeft() const noexcept
    {
        return m_maxReports == 0 || m_reports.load(std::memory_order_acquire) < m_maxReports;
    }
    void skip(report::SkippedOom episode);
    // What was skipped so far; empty when nothing was.
    std::optional<report::SkippedOoms> skipped() const;

    void keepFirstFailure(FirstFailure first);
    // The kept first failure when it belongs to an OOM the framework raises at nowNs; emptied.
    std::optional<FirstFailure> takeFirstFailure(uint64_t nowNs);

private:
    const uint64_t m_windowNs;
    const uint64_t m_maxReports;
    std::atomic<uint64_t> m_lastNs{0};
    std::atomic<uint64_t> m_reports{0};
    mutable std::mutex m_mutex;
    std::string m_framework;
    std::atomic<bool> m_reportsOom{false};
    std::optional<FirstFailure> m_first;
    report::SkippedOoms m_skipped;
};

} // namespace oomscope::track
