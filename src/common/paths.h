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

// Files only their owner reads (docs/environment.md): reports are created with mode 0600, or
// OOMSCOPE_REPORT_MODE (octal, at least u+rw, at most 0777; the umask applies as to any
// file); flight files 0600 (they hold what a process's memory map shows); folders oomscope
// makes 0700, with r-x for group and others where the report mode gives them read.
unsigned reportMode();
unsigned folderMode();
// Makes a folder and its missing parents with folderMode(); true when it exists after.
bool makeFolders(const std::string& path);
// "" when oomscope may write into dir; else one line that says why not: a folder that others
// may write into without the sticky bit (anyone there could replace or plant a file).
std::string unsafeFolder(const std::string& dir);

} // namespace oomscope::common
