// The one size grammar: what every size oomscope reads means — the CLI's options, the
// preload's environment (OOMSCOPE_DEVICE_LIMIT, OOMSCOPE_RING_EVENTS), and the Python side
// (oomscope.parse_size mirrors this function line by line; tests/fixtures/sizes.tsv holds both
// to one table). docs/sizes.md is the user's page.
//
//   SIZE   := [spaces] NUMBER [spaces] [UNIT] [spaces]
//   NUMBER := DIGITS [ "." DIGITS ]          1, 1.5, 0.25 (at most 18 digits after the point);
//                                            no sign, no exponent, no leading "."
//   UNIT   := any case of  B | K Ki KiB KB | M Mi MiB MB | G Gi GiB GB | T Ti TiB TB
//
// Every unit is a power of 1024: GPU memory is counted that way (an "80 GB" card has 80 GiB;
// nvidia-smi, PyTorch and the CUDA APIs count in MiB and GiB), so `8GB` is 8 GiB here. The
// result is whole bytes, rounded down (0.1KiB = 102); more than 2^64 - 1 is refused.
//
// Any thread; allocates nothing, never throws: the preload reads its environment with it.
#pragma once

#include <cstdint>
#include <string_view>

namespace oomscope::common {

bool parseSize(std::string_view text, uint64_t* out) noexcept;

// A flag of the environment: `0`, `false`, `no`, `off` (any case) are false, anything else set
// is true; unset or empty is the fallback.
bool envFlag(const char* name, bool fallback) noexcept;

// The grammar in one line, for error messages: "a number and an optional unit: ...".
inline constexpr const char* kSizeGrammar =
    "a number and an optional unit, B, KiB, MiB, GiB or TiB (Ki, K and KB alike; powers of 1024), e.g. 1.5GiB";

} // namespace oomscope::common
