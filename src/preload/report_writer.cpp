#include "preload/report_writer.h"

#include "interpret/attribution.h"
#include "interpret/report_builder.h"
#include "report/report_file.h"
#include "track/config.h"
#include "track/python_frames.h"

#include <dlfcn.h>
#include <unistd.h>

namespace oomscope::preload {
namespace {

// What the report needs beyond the snapshot: the driver's view now and the backends' words.
interpret::TriggerFacts triggerFacts(track::Recorder& recorder, const track::TriggerInfo& trigger,
                                     const std::vector<uint64_t>& pools)
{
    interpret::TriggerFacts facts;
    for (track::CaptureSource* source : recorder.captureSources())
        source->describe(facts.capture);
    track::DeviceProbe* probe = recorder.deviceProbe();
    if (!probe) {
        facts.capture.notes.push_back("no device probe: device facts unknown");
        return facts;
    }
    facts.devices = probe->probeDevices();
    facts.pools = probe->probePools(pools);
    if (trigger.failed && trigger.error)
        facts.errorName = probe->errorName(trigger.failed->api, *trigger.error);
    return facts;
}

} // namespace

std::string PreloadReportWriter::write(track::Recorder& recorder, const track::TriggerInfo& trigger)
{
    const track::Config& config = track::Config::get();
    std::string error;
    try {
        const track::TrackImage image = recorder.snapshot();
        const report::Report report =
            interpret::buildReport(image, trigger, triggerFacts(recorder, trigger, image.pools));
        const report::WriteResult written = report::writeReportFile(report, config.outputDir, report::reportStem(report));
        if (written.ok) {
            if (!config.quiet)
                dprintf(2, "oomscope: %s report written to %s\n", report::enumName(trigger.kind), written.path.c_str());
            return written.path;
        }
        error = written.error;
    } catch (const std::exception& e) {
        error = e.what();
    } catch (...) {
        error = "unknown error";
    }
    dprintf(2, "oomscope: could not write the %s report: %s\n", report::enumName(trigger.kind), error.c_str());
    return {};
}

bool PreloadReportWriter::madeBy(const track::Recorder& recorder, StackId stack, const std::string& framework)
{
    // Decided as by_source is, with the loader's view of the modules.
    const report::Source source = interpret::sourceOfFrames(
        recorder.stacks().frames(stack),
        [](uint64_t pc) {
            Dl_info info{};
            return dladdr(reinterpret_cast<void*>(pc), &info) && info.dli_fname ? std::string(info.dli_fname) : std::string();
        },
        [](uint64_t word) { return track::PythonFrames::resolve(word).module; });
    return framework == report::enumName(source);
}

} // namespace oomscope::preload
