// The device memory the driver counts for this process, per device: NVML's per-process used
// memory (what nvidia-smi lists under "Processes"). The driver's free memory is the whole
// device's, so "used − tracked" counts every other process on the card as this one's untracked
// memory (a second job, a run of `oomscope fit` beside another); this is the process's own.
//
// libnvidia-ml.so.1 is opened at the first question (the driver's package installs it beside
// libcuda) and kept; only asked for devices where the process already has a context. Absent
// (nullopt) wherever NVML cannot say: no library, a PID namespace that hides our pid from the
// driver's list (containers), MIG instances, an error. Any thread; serialised inside.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace oomscope::interpose {

std::optional<uint64_t> processDeviceBytes(const std::string& uuid) noexcept;

} // namespace oomscope::interpose
