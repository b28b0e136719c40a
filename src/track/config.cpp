#include "track/config.h"

#include "common/dump_signal.h"
#include "common/size.h"
#include "track/event_slot.h"
#include "track/flight_writer.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <csignal>
#include <cstring>
#include <strings.h>
#include <new>

namespace oomscope::track {



size_t flightMiBFrom(const char* text, size_t fallback)
{
    if (!text || !*text)
        return fallback;
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || text[0] == '-')
        return fallback;  // garbage: the default, not a budget of 0 or 1 MiB
    return v < 1 ? 1 : v > 16384 ? 16384 : size_t(v);
}

size_t ringEventsFor(size_t mib)
{
    // The header page, the counters' page, the facts and the growing regions' first chunks.
    constexpr size_t kFixed = 2 * 4096 + flight::kFactsBytes + FlightFile::kRegionCount * FlightFile::kReserveChunk;
    const size_t budget = mib << 20;
    const size_t slots = budget > kFixed ? (budget - kFixed) / slot::kBytes : 0;
    size_t events = 1024;
    while (events * 2 <= slots && events * 2 <= slot::kMaxCapacity)
        events *= 2;
    return events;
}

const Config& Config::get()
{
    // Built once and leaked on purpose: no destructor runs at exit under a hook's feet.
    static const Config* config = [] {
        auto* c = new (std::nothrow) Config();
        if (!c) {
            static Config fallback;
            return static_cast<const Config*>(&fallback);
        }
        c->disabled = envFlag("OOMSCOPE_DISABLE", false);
        uint64_t n = 0;
        c->flightMiB = flightMiBFrom(std::getenv("OOMSCOPE_FLIGHT_MIB"), c->flightMiB);
        c->ringEvents = ringEventsFor(c->flightMiB);
        if (const char* ring = std::getenv("OOMSCOPE_RING_EVENTS"); ring && common::parseSize(ring, &n) && n > 0 && n <= (uint64_t(1) << 28))
            c->ringEvents = size_t(n);
        if (const char* d = std::getenv("OOMSCOPE_STACK_DEPTH"); d && *d) {
            const long depth = std::strtol(d, nullptr, 10);
            c->stackDepth = depth < 0 ? 0 : depth > 256 ? 256 : int(depth);
        }
        if (const char* dir = std::getenv("OOMSCOPE_OUTPUT_DIR"); dir && *dir)
            c->outputDir = dir;
        c->pythonFrames = envFlag("OOMSCOPE_PYTHON_FRAMES", true);
        c->exitReport = envFlag("OOMSCOPE_EXIT_REPORT", true);
        c->flight = envFlag("OOMSCOPE_FLIGHT", true);
        c->signalReports = envFlag("OOMSCOPE_SIGNALS", true);
        c->dumpSignal = common::parseDumpSignal(std::getenv("OOMSCOPE_DUMP_SIGNAL"));
        c->quiet = envFlag("OOMSCOPE_QUIET", false);
        if (const char* ms = std::getenv("OOMSCOPE_OOM_EPISODE_MS"); ms && *ms)
            c->oomEpisodeMs = uint32_t(std::strtoul(ms, nullptr, 10));
        if (const char* most = std::getenv("OOMSCOPE_MAX_OOM_REPORTS"); most && *most)
            c->maxOomReports = uint32_t(std::strtoul(most, nullptr, 10));
        if (const char* mode = std::getenv("OOMSCOPE_CUPTI"); mode && *mode) {
            const std::string m = mode;
            c->cupti = m == "0" || m == "off" || m == "no" ? "off" : m == "1" || m == "on" || m == "yes" ? "on" : "auto";
        }
        if (const char* lib = std::getenv("OOMSCOPE_CUPTI_LIB"); lib && *lib)
            c->cuptiLib = lib;
        if (const char* ms = std::getenv("OOMSCOPE_SAMPLE_MS"); ms && *ms)
            c->sampleMs = uint32_t(std::strtoul(ms, nullptr, 10));
        return static_cast<const Config*>(c);
    }();
    return *config;
}

} // namespace oomscope::track
