// The CUPTI backend: libcupti loaded at run time, one subscriber with the memory callback ids
// only, every allocation it reports that no hook recorded counted (capture.coverage) and
// recorded once from the callback. Loaded through CUDA_INJECTION64_PATH alone it is the
// capture. It never keeps the user's profiler from CUPTI: CUDA 13 allows one subscriber per
// process, so a program that subscribes (Kineto, through the cuptiSubscribe hook) gets the
// slot and we step aside.
//
// Threading: start() and programSubscribes() take one mutex (cold paths); the callback takes
// none.
#pragma once

namespace oomscope::cupti {

// Starts CUPTI once per process, after the recorder started (OOMSCOPE_CUPTI=auto|on|off).
// Any failure is one notice on stderr; nothing throws.
void start() noexcept;

// The library was loaded through CUDA_INJECTION64_PATH (InitializeInjection): CUPTI is the
// capture. Called before start().
void markInjected() noexcept;

// The program is about to subscribe to CUPTI: unsubscribe ours first (or never start).
void programSubscribes() noexcept;

} // namespace oomscope::cupti
