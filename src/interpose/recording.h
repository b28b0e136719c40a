// The capture layer's link to the recorder: the recorder itself (started on the first CUDA
// call by the preload, src/preload/preload_main.cpp), API ids of the hooks, and the
// family-specific facts a hook needs (current device, what counts as out of memory).
#pragma once

#include "interpose/hooks.h"
#include "track/recorder.h"

namespace oomscope::interpose {

// The recorder, started on first use. Null only when it cannot be built (out of memory).
// Defined by the preload, which wires the recorder to its report writer and CUPTI.
track::Recorder* recorder() noexcept;

// API ids are registered in hook order right after the recorder's reserved id 0.
inline constexpr uint16_t kFirstApi = 1;
ApiId apiOf(HookId id) noexcept;
Family familyOfApi(ApiId api) noexcept;

bool isOutOfMemory(Family family, int error) noexcept;

// A stream-ordered pool the program allocates from explicitly (runtime or driver handle):
// its statistics go into every report.
void notePool(const void* pool) noexcept;

} // namespace oomscope::interpose
