#include "interpret/recover.h"

#include "interpret/flight_reader.h"
#include "interpret/report_builder.h"

#include <algorithm>
#include <time.h>

namespace oomscope::interpret {
namespace {

std::string processLabel(const track::TrackImage& image)
{
    std::string label = "pid " + std::to_string(image.process.pid);
    if (!image.process.cmdline.empty()) {
        std::string cmdline;
        for (const std::string& arg : image.process.cmdline)
            cmdline += (cmdline.empty() ? "" : " ") + arg;
        label += " (" + cmdline + ")";
    }
    return label;
}

} // namespace

bool recoverReport(const std::string& flightPath, report::Report* out, std::string* error)
{
    track::TrackImage image;
    if (!readFlightFile(flightPath, &image, error))
        return false;
    image.options["recovered_from"] = flightPath;
    track::TriggerInfo trigger;
    trigger.kind = report::TriggerKind::Recovered;
    trigger.reason = processLabel(image) +
                     " ended without writing a report (SIGKILL, the OOM killer or a crash); recovered from its "
                     "flight-recorder file";
    TriggerFacts facts;
    facts.capture.backends.push_back("flight-recorder");
    facts.devices = image.devices;
    facts.capture.notes.push_back("recovered from " + flightPath +
                                  ": no free memory or framework counters at the end (the driver was not asked)");
    *out = buildReport(image, trigger, std::move(facts));
    return true;
}

bool snapshotReport(const std::string& flightPath, report::Report* out, std::string* error, size_t events)
{
    track::TrackImage image;
    FlightRead how;
    how.live = true;
    how.events = events;
    if (!readFlightFile(flightPath, &image, error, how))
        return false;
    if (events < image.events.size()) {
        // The newest ones: the older are dropped, as the ring drops them when it wraps.
        const size_t older = image.events.size() - events;
        image.events.erase(image.events.begin(), image.events.begin() + ptrdiff_t(older));
        image.dropped += older;
        image.notes.push_back("the newest " + std::to_string(events) + " events only (--events)");
    }
    // Now, on the clock the process stamps its events with (CLOCK_MONOTONIC: one per machine).
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    image.timeNs = std::max<uint64_t>(image.timeNs, uint64_t(now.tv_sec) * 1000000000ull + uint64_t(now.tv_nsec));
    image.options["snapshot_of"] = flightPath;
    track::TriggerInfo trigger;
    trigger.kind = report::TriggerKind::Snapshot;
    trigger.reason = processLabel(image) + " is running; read from its flight-recorder file without stopping it";
    TriggerFacts facts;
    facts.capture.backends.push_back("flight-recorder");
    facts.devices = image.devices;
    facts.capture.notes.push_back("a snapshot of " + flightPath +
                                  ": no free memory or framework counters now (the process was not asked)");
    if (events == 0)
        facts.capture.notes.push_back("the events were not read (the timeline is empty)");
    *out = buildReport(image, trigger, std::move(facts));
    return true;
}

} // namespace oomscope::interpret
