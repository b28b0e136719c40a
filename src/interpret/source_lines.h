// Native frames' source file and line, from the DWARF line tables of the module or of its
// separate debug file (found by build id under the debug folders, or by .gnu_debuglink beside
// the module, in its .debug/ folder or under /usr/lib/debug), as gdb and heaptrack find them.
//
// Read with elfutils' libdwfl, which is dlopen()ed (RTLD_LOCAL) the first time a report asks:
// the bundled libdw.so.1 beside the preload or the CLI's lib/oomscope, else the system's. Never
// on a hot path, never over the network: debuginfod is not asked, as a report written by a
// failing training job must not wait on a download. Without libdw, lookups answer nothing and
// frames keep their function and module offset; OOMSCOPE_SOURCE_LINES=0 never loads it.
// Not thread-safe: one SourceLines per report (the Symbolizer's).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace oomscope::interpret {

class SourceLines {
public:
    SourceLines();
    ~SourceLines();
    SourceLines(const SourceLines&) = delete;
    SourceLines& operator=(const SourceLines&) = delete;

    // The source line of the instruction at `vaddr`, an ELF virtual address of the module at
    // `path` (whose build id is `buildId`, may be empty). False when there is no line table.
    bool lookup(const std::string& path, const std::string& buildId, uint64_t vaddr, std::string* file, uint32_t* line);

    // Whether lines are wanted (OOMSCOPE_SOURCE_LINES) and libdw could be loaded.
    static bool available();

private:
    struct Module;
    std::map<std::string, std::unique_ptr<Module>> m_modules;
};

} // namespace oomscope::interpret
