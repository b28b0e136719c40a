// A report with every field filled, for round-trip, schema and renderer tests.
#pragma once

#include "report/model.h"

namespace oomscope::test {

report::Report sampleReport();

} // namespace oomscope::test
