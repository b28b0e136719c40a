// The HTML pages' own files (src/report/render/html/: the single report's template, stylesheet
// and script; the job page's template and its added rules), compiled in by the build
// (cmake/EmbedFiles.cmake), so that `oomscope html` writes one self-contained file and reads
// nothing at run time.
#pragma once

#include <map>
#include <string>

namespace oomscope::report {

const char* htmlPageTemplate();
const char* htmlPageStyle();
const char* htmlPageScript();
const char* htmlJobTemplate();
const char* htmlJobStyle();

// The template with each {{name}} replaced, in one pass over the template (a value is never
// searched for markers: a command line may hold "{{js}}"); unknown markers stay as they are.
std::string fillTemplate(const std::string& page, const std::map<std::string, std::string>& values);

} // namespace oomscope::report
