// Fuzz target: a flight-recorder file as `oomscope recover` reads it. Whatever the bytes, the
// reader gives an image or one error line, an image's counts stay within the file, and the
// report builder turns the image into a report (its modules left out: the fuzzer's paths are
// not files to open).
#include "interpret/flight_reader.h"
#include "interpret/report_builder.h"
#include "track/flight_format.h"

#include <cstddef>
#include <cstdint>
#include <string>

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
    if (image.events.size() > image.ringCapacity || image.live.size() * sizeof(track::LiveAllocation) > size)
        __builtin_trap();
    image.modules.clear();
    track::TriggerInfo trigger;
    trigger.kind = report::TriggerKind::Recovered;
    const report::Report report = interpret::buildReport(image, trigger, {});
    if (report.timeline.rows.size() != image.events.size())
        __builtin_trap();
    return 0;
}
