// The objects loaded into the process (dl_iterate_phdr), for turning return addresses into
// module + offset. Dump time only: allocates freely.
#pragma once

#include "track/image.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace oomscope::track {

std::vector<LoadedModule> loadedModules();

// The [begin, end) address range of the loaded object that contains `address`, or {0, 0}.
std::pair<uint64_t, uint64_t> moduleRangeOf(const void* address);

} // namespace oomscope::track
