// The composition of a device's live memory: bytes by stack, the largest PeakSites::kStacks
// kept. The tracker takes it at a peak (peak_sites.cpp); the flight reader takes it from a
// file's live entries. Header-only: the interpreter links nothing of the hot path.
#pragma once

#include "track/image.h"

#include <algorithm>
#include <unordered_map>
#include <vector>

namespace oomscope::track {

// `live` plus `ending` (an entry just taken out of it, or nullptr).
inline PeakSites composePeak(int device, const std::vector<LiveAllocation>& live, const LiveAllocation* ending)
{
    PeakSites p;
    p.device = device;
    std::unordered_map<uint32_t, uint64_t> byStack;
    const auto add = [&](const LiveAllocation& a) {
        if (a.device != device || a.memKind != MemKind::Device)
            return;
        p.bytes += a.size;
        byStack[a.stack] += a.size;
    };
    for (const LiveAllocation& a : live)
        add(a);
    if (ending)
        add(*ending);
    p.stacks.assign(byStack.begin(), byStack.end());
    const auto larger = [](const auto& a, const auto& b) { return a.second != b.second ? a.second > b.second : a.first < b.first; };
    const size_t kept = std::min(p.stacks.size(), PeakSites::kStacks);
    std::partial_sort(p.stacks.begin(), p.stacks.begin() + ptrdiff_t(kept), p.stacks.end(), larger);
    for (size_t i = kept; i < p.stacks.size(); ++i)
        p.otherBytes += p.stacks[i].second;
    p.stacks.resize(kept);
    return p;
}

} // namespace oomscope::track
