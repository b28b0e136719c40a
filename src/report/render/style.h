// Terminal styling for the text views: bold, red and dim where colour is on, plain otherwise.
#pragma once

#include <string>

namespace oomscope::report {

struct Style {
    bool color = false;
    std::string bold(const std::string& s) const { return color ? "\033[1m" + s + "\033[0m" : s; }
    std::string red(const std::string& s) const { return color ? "\033[1;31m" + s + "\033[0m" : s; }
    std::string dim(const std::string& s) const { return color ? "\033[2m" + s + "\033[0m" : s; }
};

} // namespace oomscope::report
