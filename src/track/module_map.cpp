#include "track/module_map.h"

#include <climits>
#include <cstring>
#include <elf.h>
#include <link.h>
#include <unistd.h>

namespace oomscope::track {
namespace {

std::string hex(const unsigned char* bytes, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    std::string out;
    out.reserve(n * 2);
    for (size_t i = 0; i < n; ++i) {
        out.push_back(digits[bytes[i] >> 4]);
        out.push_back(digits[bytes[i] & 15]);
    }
    return out;
}

std::string buildIdOf(const dl_phdr_info* info)
{
    for (int i = 0; i < info->dlpi_phnum; ++i) {
        const ElfW(Phdr)& ph = info->dlpi_phdr[i];
        if (ph.p_type != PT_NOTE)
            continue;
        const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
        const char* end = p + ph.p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const auto* note = reinterpret_cast<const ElfW(Nhdr)*>(p);
            const char* name = p + sizeof(ElfW(Nhdr));
            const char* desc = name + ((note->n_namesz + 3) & ~3u);
            const char* next = desc + ((note->n_descsz + 3) & ~3u);
            if (next > end)
                break;
            if (note->n_type == NT_GNU_BUILD_ID && note->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0)
                return hex(reinterpret_cast<const unsigned char*>(desc), note->n_descsz);
            p = next;
        }
    }
    return {};
}

std::string selfExe()
{
    char buf[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

} // namespace

std::vector<LoadedModule> loadedModules()
{
    std::vector<LoadedModule> modules;
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* data) -> int {
            auto* out = static_cast<std::vector<LoadedModule>*>(data);
            LoadedModule module;
            module.path = info->dlpi_name ? info->dlpi_name : "";
            if (module.path.empty() && out->empty())
                module.path = selfExe();
            module.base = info->dlpi_addr;
            for (int i = 0; i < info->dlpi_phnum; ++i) {
                const ElfW(Phdr)& ph = info->dlpi_phdr[i];
                if (ph.p_type == PT_LOAD)
                    module.ranges.emplace_back(info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
            }
            module.buildId = buildIdOf(info);
            if (!module.ranges.empty())
                out->push_back(std::move(module));
            return 0;
        },
        &modules);
    return modules;
}

std::pair<uint64_t, uint64_t> moduleRangeOf(const void* address)
{
    struct Query {
        uint64_t address;
        std::pair<uint64_t, uint64_t> range;
    } query{reinterpret_cast<uint64_t>(address), {0, 0}};
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* data) -> int {
            auto* q = static_cast<Query*>(data);
            uint64_t lo = UINT64_MAX, hi = 0;
            bool contains = false;
            for (int i = 0; i < info->dlpi_phnum; ++i) {
                const ElfW(Phdr)& ph = info->dlpi_phdr[i];
                if (ph.p_type != PT_LOAD)
                    continue;
                const uint64_t begin = info->dlpi_addr + ph.p_vaddr;
                const uint64_t end = begin + ph.p_memsz;
                lo = begin < lo ? begin : lo;
                hi = end > hi ? end : hi;
                contains = contains || (q->address >= begin && q->address < end);
            }
            if (contains) {
                q->range = {lo, hi};
                return 1;
            }
            return 0;
        },
        &query);
    return query.range;
}

} // namespace oomscope::track
