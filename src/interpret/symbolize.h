// Dump-time symbolization: return address → module, offset and demangled function name, read
// from the ELF symbol tables on disk (.symtab as well as .dynsym, so that static functions of
// an unstripped program are named; dladdr sees only exported symbols), and the source file
// and line where DWARF says (source_lines.h). Never on a hot path.
// Not thread-safe: one Symbolizer per dump.
#pragma once

#include "interpret/source_lines.h"
#include "track/image.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace oomscope::interpret {

using track::LoadedModule;

// Index into modules of the module holding address, or -1.
int findModule(const std::vector<LoadedModule>& modules, uint64_t address);


class ElfSymbols {
public:
    // Reads path (and, when it has no .symtab, its separate debug file found by build id).
    static std::unique_ptr<ElfSymbols> load(const std::string& path, const std::string& buildId);
    // ELF virtual address (pc - load base) → demangled name, or empty.
    std::string lookup(uint64_t vaddr) const;
    size_t size() const { return m_symbols.size(); }

private:
    struct Symbol {
        uint64_t address;
        uint64_t size;
        uint32_t name;  // offset into m_names
    };
    bool read(const std::string& path);
    std::vector<Symbol> m_symbols;  // sorted by address
    std::string m_names;
};

struct ResolvedFrame {
    int module = -1;        // index into the Symbolizer's modules, -1 = unknown
    uint64_t offset = 0;    // pc - module base (the ELF virtual address of the return address)
    std::string symbol;     // demangled, empty when unknown
    std::string file;       // the call's source file, from DWARF; empty when unknown
    uint32_t line = 0;      // its line, 0 when unknown
};

class Symbolizer {
public:
    explicit Symbolizer(std::vector<LoadedModule> modules);
    ResolvedFrame resolve(uint64_t pc);
    const std::vector<LoadedModule>& modules() const { return m_modules; }

private:
    std::vector<LoadedModule> m_modules;
    std::map<int, std::unique_ptr<ElfSymbols>> m_symbols;
    SourceLines m_lines;
    std::map<uint64_t, ResolvedFrame> m_cache;
};

std::string demangle(const char* name);

// What a module's file on disk says of itself: whether it is a fixed-address executable
// (ET_EXEC: its load base is 0) and its build id (hex of NT_GNU_BUILD_ID, empty when absent).
// For images read from a flight file, whose mappings name files but not their build ids.
struct ElfFileFacts {
    bool fixedAddress = false;
    std::string buildId;
};
bool readElfFileFacts(const std::string& path, ElfFileFacts* facts);

} // namespace oomscope::interpret
