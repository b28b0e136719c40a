// The HTML page's own files (src/report/render/html/: the template, its stylesheet and its
// script), compiled in by the build (cmake/EmbedFiles.cmake), so that `oomscope html` writes
// one self-contained file and reads nothing at run time.
#pragma once

namespace oomscope::report {

const char* htmlPageTemplate();
const char* htmlPageStyle();
const char* htmlPageScript();

} // namespace oomscope::report
