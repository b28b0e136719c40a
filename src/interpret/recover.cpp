#include "interpret/recover.h"

#include "interpret/flight_reader.h"
#include "interpret/report_builder.h"

namespace oomscope::interpret {

bool recoverReport(const std::string& flightPath, report::Report* out, std::string* error)
{
    track::TrackImage image;
    if (!readFlightFile(flightPath, &image, error))
        return false;
    image.options["recovered_from"] = flightPath;
    track::TriggerInfo trigger;
    trigger.kind = report::TriggerKind::Recovered;
    trigger.reason = "pid " + std::to_string(image.process.pid);
    if (!image.process.cmdline.empty()) {
        std::string cmdline;
        for (const std::string& arg : image.process.cmdline)
            cmdline += (cmdline.empty() ? "" : " ") + arg;
        trigger.reason += " (" + cmdline + ")";
    }
    trigger.reason += " ended without writing a report (SIGKILL, the OOM killer or a crash); recovered from its "
                      "flight-recorder file";
    TriggerFacts facts;
    facts.capture.backends.push_back("flight-recorder");
    facts.devices = image.devices;
    facts.capture.notes.push_back("recovered from " + flightPath +
                                  ": no free memory or framework counters at the end (the driver was not asked)");
    *out = buildReport(image, trigger, std::move(facts));
    return true;
}

} // namespace oomscope::interpret
