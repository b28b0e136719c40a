// Memory samples for the leak analysis: one at each step boundary (an optimizer step,
// oomscope.step(), oomscope_step()), or, in programs without step events, one every
// OOMSCOPE_SAMPLE_MS taken by an allocation. A sample holds each device's live bytes (and the
// framework's counters when it sent them), the largest sites by stack and the framework's
// tensors by Python stack. The first step event drops the periodic samples taken before it
// (model loading), so that steps are one per step event, numbered from 1. At most maxSteps
// are kept, the oldest dropped. Any thread; one mutex (step and sample paths only).
#pragma once

#include "track/framework_state.h"
#include "track/image.h"
#include "track/live_counters.h"

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <vector>

namespace oomscope::track {

class StepSampler {
public:
    static constexpr size_t kMaxSteps = 4096;

    // periodNs: 0 for no periodic samples.
    explicit StepSampler(uint64_t periodNs, size_t maxSteps = kMaxSteps) : m_periodNs(periodNs), m_max(maxSteps) {}

    // A step event's sample. Returns its index.
    uint64_t addStep(report::Step step);
    // True for the one caller that is to take the periodic sample due at nowNs (none before the
    // first step event's absence is known: the first call only starts the clock).
    bool claimPeriodic(uint64_t nowNs) noexcept;
    // A periodic sample; dropped when a step event came while it was taken.
    void addPeriodic(report::Step sample);
    std::vector<report::Step> steps() const;
    // The flight file that keeps a copy of the samples (the last flight::kStepSlots), or none.
    void setFlight(class FlightFile* flight) noexcept { m_flight = flight; }

    // The sample itself: each device's live bytes (with the framework's counters where given),
    // the largest live sites by stack, and the framework's tensors by Python stack
    // (internTensorStack: a group's frames → a StackId value, 0 when it cannot be made).
    static report::Step sample(uint64_t timeNs, const LiveCounters& counters, const std::vector<LiveAllocation>& live,
                               const FrameworkState* state,
                               const std::function<uint32_t(const TensorGroup&)>& internTensorStack);

private:
    const uint64_t m_periodNs;
    const size_t m_max;
    mutable std::mutex m_mutex;
    std::deque<report::Step> m_steps;
    class FlightFile* m_flight = nullptr;
    uint64_t m_index = 0;
    std::atomic<bool> m_sawStep{false};
    std::atomic<uint64_t> m_lastPeriodicNs{0};
};

} // namespace oomscope::track
