#include "interpret/source_lines.h"

#include "common/paths.h"
#include "common/size.h"
#include "interpret/symbolize.h"

#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#ifdef OOMSCOPE_HAVE_LIBDW
#include <elfutils/libdwfl.h>
#endif

namespace oomscope::interpret {

#ifdef OOMSCOPE_HAVE_LIBDW
namespace {

// The functions of libdwfl this file calls, from the dlopen()ed library.
struct Libdw {
    decltype(&dwfl_begin) begin = nullptr;
    decltype(&dwfl_end) end = nullptr;
    decltype(&dwfl_report_begin) reportBegin = nullptr;
    decltype(&dwfl_report_elf) reportElf = nullptr;
    decltype(&dwfl_report_end) reportEnd = nullptr;
    decltype(&dwfl_module_info) moduleInfo = nullptr;
    decltype(&dwfl_module_getelf) moduleGetElf = nullptr;
    decltype(&dwfl_module_build_id) moduleBuildId = nullptr;
    decltype(&dwfl_module_getsrc) getSrc = nullptr;
    decltype(&dwfl_lineinfo) lineInfo = nullptr;
    decltype(&dwfl_build_id_find_elf) findElf = nullptr;
    decltype(&dwfl_build_id_find_debuginfo) findDebuginfoByBuildId = nullptr;
    decltype(&dwfl_offline_section_address) sectionAddress = nullptr;
    bool ok = false;
};

// The bundled copy first (beside the preload, or the CLI's lib/oomscope), its libelf.so.1
// loaded before it so that libdw's DT_NEEDED binds to that copy; else the system's.
void* openLibdw()
{
    const int flags = RTLD_NOW | RTLD_LOCAL;
    const std::string here = common::moduleDirectory(reinterpret_cast<const void*>(&openLibdw));
    if (!here.empty()) {
        for (const std::string& dir : {here, here + "/../lib/oomscope"}) {
            if (!common::isFile(dir + "/libdw.so.1"))
                continue;
            if (common::isFile(dir + "/libelf.so.1"))
                dlopen((dir + "/libelf.so.1").c_str(), flags);
            if (void* handle = dlopen((dir + "/libdw.so.1").c_str(), flags))
                return handle;
        }
    }
    return dlopen("libdw.so.1", flags);
}

template <class F>
bool load(void* handle, F& fn, const char* name)
{
    fn = reinterpret_cast<F>(dlsym(handle, name));
    return fn != nullptr;
}

const Libdw& libdw()
{
    static const Libdw lib = [] {
        Libdw l;
        void* h = openLibdw();
        if (!h)
            return l;
        l.ok = load(h, l.begin, "dwfl_begin") && load(h, l.end, "dwfl_end") &&
               load(h, l.reportBegin, "dwfl_report_begin") && load(h, l.reportElf, "dwfl_report_elf") &&
               load(h, l.reportEnd, "dwfl_report_end") && load(h, l.moduleInfo, "dwfl_module_info") &&
               load(h, l.moduleGetElf, "dwfl_module_getelf") && load(h, l.moduleBuildId, "dwfl_module_build_id") &&
               load(h, l.getSrc, "dwfl_module_getsrc") && load(h, l.lineInfo, "dwfl_lineinfo") &&
               load(h, l.findElf, "dwfl_build_id_find_elf") &&
               load(h, l.findDebuginfoByBuildId, "dwfl_build_id_find_debuginfo") &&
               load(h, l.sectionAddress, "dwfl_offline_section_address");
        return l;
    }();
    return lib;
}

std::string hex(const unsigned char* bits, int length)
{
    static const char digits[] = "0123456789abcdef";
    std::string out;
    for (int i = 0; i < length; ++i) {
        out.push_back(digits[bits[i] >> 4]);
        out.push_back(digits[bits[i] & 15]);
    }
    return out;
}

struct ModuleFacts {
    std::string buildId;  // of the loaded image, as the report has it; may be empty
};

// Where the separate debug file is: by build id under the debug folders (libdwfl's own search,
// /usr/lib/debug/.build-id/xx/yyyy.debug), else by .gnu_debuglink beside the module, in its
// .debug/ folder and under /usr/lib/debug, as gdb looks. A candidate with another build id
// than the module's is not its debug file. Never debuginfod.
int findDebuginfo(Dwfl_Module* mod, void** userdata, const char* modname, Dwarf_Addr base, const char* fileName,
                  const char* debuglink, GElf_Word crc, char** debuginfoFileName)
{
    const Libdw& l = libdw();
    const int fd = l.findDebuginfoByBuildId(mod, userdata, modname, base, fileName, debuglink, crc, debuginfoFileName);
    if (fd >= 0 || !debuglink || !*debuglink || !fileName)
        return fd;
    const auto* facts = userdata ? static_cast<const ModuleFacts*>(*userdata) : nullptr;
    const std::string dir = common::dirName(fileName);
    for (const std::string& candidate :
         {dir + "/" + debuglink, dir + "/.debug/" + debuglink, "/usr/lib/debug" + dir + "/" + debuglink}) {
        if (candidate == fileName || !common::isFile(candidate))
            continue;
        if (facts && !facts->buildId.empty()) {
            ElfFileFacts candidateFacts;
            if (readElfFileFacts(candidate, &candidateFacts) && !candidateFacts.buildId.empty() &&
                candidateFacts.buildId != facts->buildId)
                continue;
        }
        const int opened = open(candidate.c_str(), O_RDONLY | O_CLOEXEC);
        if (opened >= 0) {
            *debuginfoFileName = strdup(candidate.c_str());
            return opened;
        }
    }
    return -1;
}

const Dwfl_Callbacks kCallbacks = [] {
    Dwfl_Callbacks c{};
    c.find_elf = [](Dwfl_Module* mod, void** userdata, const char* modname, Dwarf_Addr base, char** fileName,
                    Elf** elf) { return libdw().findElf(mod, userdata, modname, base, fileName, elf); };
    c.find_debuginfo = findDebuginfo;
    c.section_address = [](Dwfl_Module* mod, void** userdata, const char* modname, Dwarf_Addr base,
                           const char* secname, GElf_Word shndx, const GElf_Shdr* shdr, Dwarf_Addr* addr) {
        return libdw().sectionAddress(mod, userdata, modname, base, secname, shndx, shdr, addr);
    };
    c.debuginfo_path = nullptr;  // libdwfl's default: ":.debug:/usr/lib/debug"
    return c;
}();

} // namespace

struct SourceLines::Module {
    Dwfl* dwfl = nullptr;
    Dwfl_Module* module = nullptr;
    Dwarf_Addr bias = 0;
    ModuleFacts facts;

    ~Module()
    {
        if (dwfl)
            libdw().end(dwfl);
    }

    // One Dwfl per module, the module reported at its ELF addresses (bias 0 for a shared
    // object), so that a lookup takes the ELF virtual address the report has.
    void open(const std::string& path, const std::string& buildId)
    {
        const Libdw& l = libdw();
        facts.buildId = buildId;
        dwfl = l.begin(&kCallbacks);
        if (!dwfl)
            return;
        l.reportBegin(dwfl);
        Dwfl_Module* mod = l.reportElf(dwfl, path.c_str(), path.c_str(), -1, 0, true);
        l.reportEnd(dwfl, nullptr, nullptr);
        if (!mod)
            return;
        void** userdata = nullptr;
        l.moduleInfo(mod, &userdata, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
        if (userdata)
            *userdata = &facts;
        // The file on disk must be the image that was loaded (a package upgraded under a
        // running job would give other lines).
        const unsigned char* bits = nullptr;
        GElf_Addr noteAddress = 0;
        const int length = l.moduleBuildId(mod, &bits, &noteAddress);
        if (!buildId.empty() && length > 0 && hex(bits, length) != buildId)
            return;
        if (!l.moduleGetElf(mod, &bias))
            return;
        module = mod;
    }
};

SourceLines::SourceLines() = default;
SourceLines::~SourceLines() = default;

bool SourceLines::available()
{
    static const bool wanted = common::envFlag("OOMSCOPE_SOURCE_LINES", true);
    return wanted && libdw().ok;
}

bool SourceLines::lookup(const std::string& path, const std::string& buildId, uint64_t vaddr, std::string* file,
                         uint32_t* line)
{
    if (path.empty() || path[0] != '/' || !available())
        return false;
    std::unique_ptr<Module>& m = m_modules[path];
    if (!m) {
        m = std::make_unique<Module>();
        m->open(path, buildId);
    }
    if (!m->module)
        return false;
    Dwfl_Line* found = libdw().getSrc(m->module, Dwarf_Addr(vaddr) + m->bias);
    if (!found)
        return false;
    int lineNumber = 0;
    const char* name = libdw().lineInfo(found, nullptr, &lineNumber, nullptr, nullptr, nullptr);
    if (!name || !*name || lineNumber <= 0)
        return false;
    *file = name;
    *line = uint32_t(lineNumber);
    return true;
}

#else  // no libdw at build time

struct SourceLines::Module {};
SourceLines::SourceLines() = default;
SourceLines::~SourceLines() = default;
bool SourceLines::available()
{
    return false;
}
bool SourceLines::lookup(const std::string&, const std::string&, uint64_t, std::string*, uint32_t*)
{
    return false;
}

#endif

} // namespace oomscope::interpret
