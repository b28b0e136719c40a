// The objects loaded into the process (dl_iterate_phdr), for turning return addresses into
// module + offset. Dump time only: allocates freely.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace oomscope::track {

struct LoadedModule {
    std::string path;      // absolute where known; the main program via /proc/self/exe
    std::string buildId;   // hex of NT_GNU_BUILD_ID, empty when absent
    uint64_t base = 0;     // dlpi_addr: ELF virtual address 0 maps here
    std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [begin, end) of PT_LOAD segments
};

std::vector<LoadedModule> loadedModules();

// Index into modules of the module holding address, or -1.
int findModule(const std::vector<LoadedModule>& modules, uint64_t address);

// The [begin, end) address range of the loaded object that contains `address`, or {0, 0}.
std::pair<uint64_t, uint64_t> moduleRangeOf(const void* address);

} // namespace oomscope::track
