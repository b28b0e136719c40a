// The event clock: CLOCK_MONOTONIC nanoseconds for the allocation path, read from the CPU's
// time-stamp counter where it is invariant (CPUID 0x80000007 EDX bit 8) once calibrated
// against clock_gettime (after the first 20 ms; re-based every second against it, never
// going backwards). clock_gettime through the vDSO costs 15-20 ns in the VMs we measured
// (kvm-clock), two per allocation pair; the counter a few. Elsewhere, or before calibration,
// it is clock_gettime. Any thread, never blocks, never allocates.
#pragma once

#include <cstdint>

namespace oomscope::track {

uint64_t eventNs() noexcept;

// For tests: true once the counter is in use.
bool eventClockCalibrated() noexcept;

} // namespace oomscope::track
