// The capture layer's link to the recorder: starting it on the first CUDA call with our API
// names and device probe, and the family-specific facts (current device, error names).
#pragma once

#include "interpose/hooks.h"
#include "track/recorder.h"

namespace oomscope::interpose {

// The recorder, started on first use. Null only when it cannot be built (out of memory).
track::Recorder* recorder() noexcept;

ApiId apiOf(HookId id) noexcept;
Family familyOfApi(ApiId api) noexcept;

// The device current on this thread for a call of this family, or -1.
int currentDevice(Family family) noexcept;

bool isOutOfMemory(Family family, int error) noexcept;

// A stream-ordered pool the program allocates from explicitly (runtime or driver handle):
// its statistics go into every report.
void notePool(const void* pool) noexcept;

} // namespace oomscope::interpose
