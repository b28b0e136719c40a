// Byte counts for people: "512 B", "1.50 KiB", "2.00 MiB", "79.10 GiB" (powers of 1024, as the
// size grammar reads them: common/size.h). Any thread; allocates (std::string).
#pragma once

#include <cstdint>
#include <string>

namespace oomscope::common {

std::string formatBytes(uint64_t bytes);
std::string formatSignedBytes(int64_t bytes);  // "+1.00 GiB", "-12.00 MiB", "0 B"

} // namespace oomscope::common
