#include "track/event.h"

#include <cstring>

namespace oomscope::track {
namespace {
constexpr const char* kEventKindNames[] = {"alloc",          "free",      "alloc_failed", "segment_map", "segment_unmap",
                                           "pool_trim",      "step",      "oom",          "marker"};
constexpr const char* kMemKindNames[] = {"device", "managed", "host_pinned"};
static_assert(sizeof(kEventKindNames) / sizeof(kEventKindNames[0]) == size_t(EventKind::Count));
static_assert(sizeof(kMemKindNames) / sizeof(kMemKindNames[0]) == size_t(MemKind::Count));
} // namespace

const char* eventKindName(EventKind kind)
{
    return size_t(kind) < size_t(EventKind::Count) ? kEventKindNames[size_t(kind)] : "unknown";
}

const char* memKindName(MemKind kind)
{
    return size_t(kind) < size_t(MemKind::Count) ? kMemKindNames[size_t(kind)] : "unknown";
}

bool parseEventKind(const char* name, EventKind* out)
{
    for (size_t i = 0; i < size_t(EventKind::Count); ++i) {
        if (std::strcmp(name, kEventKindNames[i]) == 0) {
            *out = EventKind(i);
            return true;
        }
    }
    return false;
}

bool parseMemKind(const char* name, MemKind* out)
{
    for (size_t i = 0; i < size_t(MemKind::Count); ++i) {
        if (std::strcmp(name, kMemKindNames[i]) == 0) {
            *out = MemKind(i);
            return true;
        }
    }
    return false;
}

} // namespace oomscope::track
