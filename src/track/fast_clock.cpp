#include "track/fast_clock.h"

#include <atomic>
#include <cpuid.h>
#include <ctime>
#include <x86intrin.h>

namespace oomscope::track {
namespace {

constexpr uint64_t kCalibrateNs = 20'000'000;   // counter ticks against ns over this long first
constexpr uint64_t kRebaseNs = 1'000'000'000;   // then a fresh base each second

enum State : int { Unknown, Calibrating, Busy, Ready, Unusable };
std::atomic<int> g_state{Unknown};
std::atomic<uint64_t> g_startTsc{0}, g_startNs{0};
// The base, behind a sequence lock: ns = baseNs + (tsc - baseTsc) * mult / 2^32.
std::atomic<uint32_t> g_seq{0};
std::atomic<uint64_t> g_baseTsc{0}, g_baseNs{0}, g_mult{0}, g_rebaseTicks{0};

uint64_t clockNs()
{
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

bool invariantTsc()
{
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u)
        return false;
    __get_cpuid(0x80000007u, &a, &b, &c, &d);
    return (d & (1u << 8)) != 0;
}

uint64_t scale(uint64_t ticks, uint64_t mult)
{
    return uint64_t((unsigned __int128)ticks * mult >> 32);
}

// A new base from clock_gettime now, its rate from the whole span since the start. Called by
// one thread at a time (the one that took the sequence lock or the Busy state).
void setBase(bool keepMonotonic)
{
    const uint64_t tsc = __rdtsc();
    const uint64_t ns = clockNs();
    const uint64_t startTsc = g_startTsc.load(std::memory_order_relaxed);
    const uint64_t startNs = g_startNs.load(std::memory_order_relaxed);
    if (tsc <= startTsc || ns <= startNs)
        return;
    const uint64_t mult = uint64_t(((unsigned __int128)(ns - startNs) << 32) / (tsc - startTsc));
    uint64_t base = ns;
    if (keepMonotonic) {
        const uint64_t old = g_baseNs.load(std::memory_order_relaxed) +
                             scale(tsc - g_baseTsc.load(std::memory_order_relaxed), g_mult.load(std::memory_order_relaxed));
        if (old > base)
            base = old;  // never backwards: the counter ran a little fast
    }
    g_baseTsc.store(tsc, std::memory_order_relaxed);
    g_baseNs.store(base, std::memory_order_relaxed);
    g_mult.store(mult, std::memory_order_relaxed);
    if (mult)
        g_rebaseTicks.store(uint64_t(((unsigned __int128)kRebaseNs << 32) / mult), std::memory_order_relaxed);
}

uint64_t slowPath()
{
    const uint64_t ns = clockNs();
    int state = g_state.load(std::memory_order_acquire);
    if (state == Unknown) {
        if (!g_state.compare_exchange_strong(state, Busy, std::memory_order_acq_rel))
            return ns;
        if (!invariantTsc()) {
            g_state.store(Unusable, std::memory_order_release);
            return ns;
        }
        g_startTsc.store(__rdtsc(), std::memory_order_relaxed);
        g_startNs.store(clockNs(), std::memory_order_relaxed);
        g_state.store(Calibrating, std::memory_order_release);
        return ns;
    }
    if (state == Calibrating && ns - g_startNs.load(std::memory_order_relaxed) >= kCalibrateNs &&
        g_state.compare_exchange_strong(state, Busy, std::memory_order_acq_rel)) {
        setBase(false);
        g_state.store(g_mult.load(std::memory_order_relaxed) ? Ready : Unusable, std::memory_order_release);
    }
    return ns;
}

} // namespace

uint64_t eventNs() noexcept
{
    if (__builtin_expect(g_state.load(std::memory_order_acquire) != Ready, 0))
        return slowPath();
    const uint32_t seq = g_seq.load(std::memory_order_acquire);
    if (__builtin_expect((seq & 1) == 0, 1)) {
        const uint64_t baseTsc = g_baseTsc.load(std::memory_order_relaxed);
        const uint64_t baseNs = g_baseNs.load(std::memory_order_relaxed);
        const uint64_t mult = g_mult.load(std::memory_order_relaxed);
        const uint64_t rebase = g_rebaseTicks.load(std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_acquire);
        if (g_seq.load(std::memory_order_relaxed) == seq) {
            const uint64_t ticks = __rdtsc() - baseTsc;  // wraps to huge if the base is newer
            if (__builtin_expect(ticks < rebase, 1))
                return baseNs + scale(ticks, mult);
            uint32_t expected = seq;
            if (g_seq.compare_exchange_strong(expected, seq + 1, std::memory_order_acquire)) {
                setBase(true);
                g_seq.store(seq + 2, std::memory_order_release);
            }
        }
    }
    return clockNs();
}

bool eventClockCalibrated() noexcept
{
    return g_state.load(std::memory_order_acquire) == Ready;
}

} // namespace oomscope::track
