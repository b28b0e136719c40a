// The preload's report writer (track::ReportWriter): at a trigger, the recorder's snapshot,
// the driver's view and the capture backends' words go through the one report builder
// (src/interpret) into a file of OOMSCOPE_OUTPUT_DIR, oomscope-<host>-<pid>-<trigger>.json,
// written atomically (src/report/report_file.h), with one line on stderr. Also tells the
// recorder which allocations a framework made (for its OOM episodes). Called on the trigger's
// thread, under the recorder's dump lock; never throws.
#pragma once

#include "track/recorder.h"

namespace oomscope::preload {

class PreloadReportWriter final : public track::ReportWriter {
public:
    std::string write(track::Recorder& recorder, const track::TriggerInfo& trigger) override;
    bool madeBy(const track::Recorder& recorder, StackId stack, const std::string& framework) override;
};

} // namespace oomscope::preload
