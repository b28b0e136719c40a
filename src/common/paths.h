// Paths, files and folders, for the CLI and the preload alike, and the install tree's layout:
// where each part of oomscope is found from another (bin/oomscope, the preload, the Python
// adapter), the same in a build tree, `make install`, the Debian package and the wheel.
// Any thread; these allocate (std::string): never on the hot path.
#pragma once

#include <string>

namespace oomscope::common {

// The install tree, relative to its prefix: <prefix>/bin/oomscope, the preload and the
// libunwind it loads in a folder of their own (so that a /usr prefix gets no stray
// libunwind.so.8 in the loader's path), the Python adapter (sitecustomize.py and, outside the
// wheel, the oomscope package).
inline constexpr const char* kPreloadFromPrefix = "lib/oomscope/liboomscope.so";
inline constexpr const char* kPythonFromPrefix = "share/oomscope/python";
// The prefix seen from the preload's folder (lib/oomscope).
inline constexpr const char* kPrefixFromPreloadDir = "/../..";

bool isFile(const std::string& path);   // a regular file (links followed)
bool isDir(const std::string& path);    // a folder (links followed)
std::string dirName(const std::string& path);  // "a/b" of "a/b/c"; "." without a slash
std::string absolute(const std::string& path); // against the working directory; as it is when absolute
// The folder of the shared object (or executable) that holds `symbol`, from dladdr; "" when unknown.
std::string moduleDirectory(const void* symbol);

} // namespace oomscope::common
