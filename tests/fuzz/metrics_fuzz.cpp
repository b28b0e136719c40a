// Fuzz target: a flight-recorder file as `oomscope metrics` reads it in a folder scan (without
// its events, as `top` reads): an image or one error line; an image becomes a snapshot report
// and the Prometheus exposition of it. Nothing may crash, hang or fail a sanitizer, and every
// line of the exposition is a comment, a sample or empty.
#include "interpret/flight_reader.h"
#include "interpret/report_builder.h"
#include "report/render/prometheus.h"

#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    using namespace oomscope;
    track::TrackImage image;
    std::string error;
    if (!interpret::readFlightImage(data, size, &image, &error)) {
        if (error.empty() || error.find('\n') != std::string::npos)
            __builtin_trap();
        return 0;
    }
    image.modules.clear();
    image.events.clear();  // as metrics reads: no events
    track::TriggerInfo trigger;
    trigger.kind = report::TriggerKind::Snapshot;
    std::vector<report::Report> snapshots;
    snapshots.push_back(interpret::buildReport(image, trigger, {}));
    const std::string text = report::renderPrometheus(snapshots, "0.0.0");
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line))
        if (!line.empty() && line[0] != '#' && line.rfind("oomscope_", 0) != 0)
            __builtin_trap();
    return 0;
}
