// A test-and-test-and-set lock for critical sections of a few dozen instructions (a live-map
// shard's probe, a ring's registry): half the cost of an uncontended pthread mutex on the
// allocation path, and no syscall. Spins with `pause`, then yields the CPU, so that a holder
// preempted mid-section is not starved by its waiters. Satisfies Lockable (std::lock_guard).
#pragma once

#include <atomic>
#include <sched.h>

namespace oomscope::track {

class SpinLock {
public:
    void lock() noexcept
    {
        for (int spins = 0;; ++spins) {
            if (!m_locked.exchange(true, std::memory_order_acquire))
                return;
            while (m_locked.load(std::memory_order_relaxed)) {
                if (spins++ < 64)
                    __builtin_ia32_pause();
                else
                    sched_yield();
            }
        }
    }
    bool try_lock() noexcept { return !m_locked.load(std::memory_order_relaxed) && !m_locked.exchange(true, std::memory_order_acquire); }
    void unlock() noexcept { m_locked.store(false, std::memory_order_release); }

private:
    std::atomic<bool> m_locked{false};
};

} // namespace oomscope::track
