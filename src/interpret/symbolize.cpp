#include "interpret/symbolize.h"

#include <algorithm>
#include <cstring>
#include <cxxabi.h>
#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace oomscope::interpret {
namespace {

// A read-only mapping of a whole file, released on scope exit.
class MappedFile {
public:
    explicit MappedFile(const std::string& path)
    {
        const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return;
        struct stat st {};
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
            void* p = mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
            if (p != MAP_FAILED) {
                m_data = static_cast<const unsigned char*>(p);
                m_size = size_t(st.st_size);
            }
        }
        close(fd);
    }
    ~MappedFile()
    {
        if (m_data)
            munmap(const_cast<unsigned char*>(m_data), m_size);
    }
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    const unsigned char* data() const { return m_data; }
    size_t size() const { return m_size; }
    bool contains(uint64_t offset, uint64_t length) const { return offset <= m_size && length <= m_size - offset; }

private:
    const unsigned char* m_data = nullptr;
    size_t m_size = 0;
};

// The file's ELF header, when it is a 64-bit ELF file.
bool elfHeader(const MappedFile& file, Elf64_Ehdr* eh)
{
    const unsigned char* data = file.data();
    if (!data || !file.contains(0, sizeof(Elf64_Ehdr)) || std::memcmp(data, ELFMAG, SELFMAG) != 0 ||
        data[EI_CLASS] != ELFCLASS64)
        return false;
    std::memcpy(eh, data, sizeof(*eh));
    return true;
}

} // namespace

std::string demangle(const char* name)
{
    if (!name || !*name)
        return {};
    int status = 0;
    char* out = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    if (status == 0 && out) {
        std::string result(out);
        std::free(out);
        return result;
    }
    std::free(out);
    return name;
}

bool ElfSymbols::read(const std::string& path)
{
    MappedFile file(path);
    Elf64_Ehdr eh;
    if (!elfHeader(file, &eh))
        return false;
    const unsigned char* data = file.data();
    if (eh.e_shentsize != sizeof(Elf64_Shdr) || !file.contains(eh.e_shoff, uint64_t(eh.e_shnum) * sizeof(Elf64_Shdr)))
        return false;
    std::vector<Elf64_Shdr> sections(eh.e_shnum);
    std::memcpy(sections.data(), data + eh.e_shoff, sections.size() * sizeof(Elf64_Shdr));
    bool haveSymtab = false;
    for (const Elf64_Shdr& sh : sections) {
        if (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM)
            continue;
        if (sh.sh_link >= sections.size() || sh.sh_entsize != sizeof(Elf64_Sym))
            continue;
        const Elf64_Shdr& strtab = sections[sh.sh_link];
        if (!file.contains(sh.sh_offset, sh.sh_size) || !file.contains(strtab.sh_offset, strtab.sh_size))
            continue;
        haveSymtab = haveSymtab || sh.sh_type == SHT_SYMTAB;
        const size_t count = sh.sh_size / sizeof(Elf64_Sym);
        for (size_t i = 0; i < count; ++i) {
            Elf64_Sym sym;
            std::memcpy(&sym, data + sh.sh_offset + i * sizeof(Elf64_Sym), sizeof(sym));
            const int type = ELF64_ST_TYPE(sym.st_info);
            if ((type != STT_FUNC && type != STT_GNU_IFUNC) || sym.st_shndx == SHN_UNDEF || sym.st_value == 0 ||
                sym.st_name >= strtab.sh_size)
                continue;
            const char* name = reinterpret_cast<const char*>(data + strtab.sh_offset + sym.st_name);
            const size_t maxLen = strtab.sh_size - sym.st_name;
            const size_t len = strnlen(name, maxLen);
            if (len == 0 || len == maxLen)
                continue;
            m_symbols.push_back(Symbol{sym.st_value, sym.st_size, uint32_t(m_names.size())});
            m_names.append(name, len);
            m_names.push_back('\0');
            if (m_names.size() > UINT32_MAX - 4096)
                break;
        }
    }
    return haveSymtab;
}

std::unique_ptr<ElfSymbols> ElfSymbols::load(const std::string& path, const std::string& buildId)
{
    auto symbols = std::make_unique<ElfSymbols>();
    const bool haveSymtab = symbols->read(path);
    // Debian/Ubuntu -dbg packages put the full symbol table beside the build id.
    if (!haveSymtab && buildId.size() > 2)
        symbols->read("/usr/lib/debug/.build-id/" + buildId.substr(0, 2) + "/" + buildId.substr(2) + ".debug");
    auto& syms = symbols->m_symbols;
    // Prefer, at equal addresses, the sized symbol (and .symtab before .dynsym duplicates).
    std::stable_sort(syms.begin(), syms.end(), [](const Symbol& a, const Symbol& b) {
        return a.address != b.address ? a.address < b.address : a.size > b.size;
    });
    syms.erase(std::unique(syms.begin(), syms.end(), [](const Symbol& a, const Symbol& b) { return a.address == b.address; }),
               syms.end());
    return symbols;
}

std::string ElfSymbols::lookup(uint64_t vaddr) const
{
    auto it = std::upper_bound(m_symbols.begin(), m_symbols.end(), vaddr,
                               [](uint64_t v, const Symbol& s) { return v < s.address; });
    if (it == m_symbols.begin())
        return {};
    --it;
    if (it->size != 0 && vaddr >= it->address + it->size)
        return {};
    return demangle(m_names.c_str() + it->name);
}

Symbolizer::Symbolizer(std::vector<LoadedModule> modules) : m_modules(std::move(modules)) {}

ResolvedFrame Symbolizer::resolve(uint64_t pc)
{
    if (auto it = m_cache.find(pc); it != m_cache.end())
        return it->second;
    ResolvedFrame frame;
    frame.module = findModule(m_modules, pc);
    if (frame.module >= 0) {
        const LoadedModule& module = m_modules[size_t(frame.module)];
        frame.offset = pc - module.base;
        auto& symbols = m_symbols[frame.module];
        if (!symbols && !module.path.empty() && module.path[0] == '/')
            symbols = ElfSymbols::load(module.path, module.buildId);
        // A return address points after the call: look up the call instruction itself.
        if (symbols && frame.offset > 0)
            frame.symbol = symbols->lookup(frame.offset - 1);
        if (frame.offset > 0)
            m_lines.lookup(module.path, module.buildId, frame.offset - 1, &frame.file, &frame.line);
    } else {
        frame.offset = pc;
    }
    m_cache.emplace(pc, frame);
    return frame;
}

bool readElfFileFacts(const std::string& path, ElfFileFacts* facts)
{
    MappedFile file(path);
    Elf64_Ehdr eh;
    if (!elfHeader(file, &eh))
        return false;
    const unsigned char* data = file.data();
    facts->fixedAddress = eh.e_type == ET_EXEC;
    if (eh.e_phentsize != sizeof(Elf64_Phdr) || !file.contains(eh.e_phoff, uint64_t(eh.e_phnum) * sizeof(Elf64_Phdr)))
        return true;
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < eh.e_phnum; ++i) {
        Elf64_Phdr ph;
        std::memcpy(&ph, data + eh.e_phoff + i * sizeof(Elf64_Phdr), sizeof(ph));
        if (ph.p_type != PT_NOTE || !file.contains(ph.p_offset, ph.p_filesz))
            continue;
        uint64_t at = ph.p_offset;
        const uint64_t end = ph.p_offset + ph.p_filesz;
        while (end - at >= sizeof(Elf64_Nhdr)) {
            Elf64_Nhdr note;
            std::memcpy(&note, data + at, sizeof(note));
            const uint64_t name = at + sizeof(note);
            const uint64_t desc = name + ((uint64_t(note.n_namesz) + 3) & ~uint64_t(3));
            const uint64_t next = desc + ((uint64_t(note.n_descsz) + 3) & ~uint64_t(3));
            if (next > end)
                break;
            if (note.n_type == NT_GNU_BUILD_ID && note.n_namesz == 4 && std::memcmp(data + name, "GNU", 4) == 0) {
                facts->buildId.clear();
                for (uint64_t b = desc; b < desc + note.n_descsz; ++b) {
                    facts->buildId.push_back(digits[data[b] >> 4]);
                    facts->buildId.push_back(digits[data[b] & 15]);
                }
                return true;
            }
            at = next;
        }
    }
    return true;
}

int findModule(const std::vector<LoadedModule>& modules, uint64_t address)
{
    for (size_t i = 0; i < modules.size(); ++i) {
        for (const auto& [begin, end] : modules[i].ranges) {
            if (address >= begin && address < end)
                return int(i);
        }
    }
    return -1;
}

} // namespace oomscope::interpret
