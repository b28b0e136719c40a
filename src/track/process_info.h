// Facts about this process for the report header: pid, command line, host, ranks. Dump time.
#pragma once

#include "report/model.h"

#include <cstdint>

namespace oomscope::track {

report::Process currentProcess();
uint64_t monotonicNs();
uint32_t currentThreadId() noexcept;
void resetThreadIdAfterFork() noexcept;

} // namespace oomscope::track
