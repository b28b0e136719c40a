#include "report/analysis.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace oomscope::report {

bool hasBlockStacks(const Report& report)
{
    for (const Segment& s : report.segments) {
        for (const Block& b : s.blocks) {
            if (b.stack)
                return true;
        }
    }
    return false;
}

std::vector<TensorSite> tensorSites(const Report& report)
{
    std::map<std::tuple<int64_t, uint32_t, bool>, TensorSite> groups;
    for (const Segment& s : report.segments) {
        for (const Block& b : s.blocks) {
            if (b.state.rfind("active", 0) != 0)
                continue;
            TensorSite& site = groups[{s.device, b.stack.value_or(0), b.stack.has_value()}];
            site.stack = b.stack;
            site.device = s.device;
            site.bytes += b.size;
            ++site.count;
        }
    }
    std::vector<TensorSite> out;
    for (auto& [key, site] : groups)
        out.push_back(site);
    std::sort(out.begin(), out.end(), [](const TensorSite& a, const TensorSite& b) {
        return a.bytes != b.bytes ? a.bytes > b.bytes : a.stack.value_or(0) < b.stack.value_or(0);
    });
    return out;
}

} // namespace oomscope::report
