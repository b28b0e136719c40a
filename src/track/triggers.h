// When reports are written besides an OOM: at normal exit (atexit), on SIGTERM / SIGINT /
// SIGABRT (written by an agent thread, then the signal goes on as it would without us), and
// on request. Installed once, at the first CUDA call, so that processes without CUDA get no
// handler and no thread. Also keeps the recorder's locks consistent across fork().
#pragma once

namespace oomscope::track {

class Recorder;

void installTriggers(Recorder& recorder);

// oomscope_dump(): write a report now, from the calling thread. Returns the path or "".
const char* requestDump(const char* reason);

// True once this process (not a parent before fork) has recorded CUDA activity.
bool processActive();
void markProcessActive();

} // namespace oomscope::track
