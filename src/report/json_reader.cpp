#include "report/json_reader.h"

#include "report/json_read_parts.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <string_view>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace oomscope::report {
namespace {

using detail::depthWithin;
using detail::readChecked;
using detail::readFast;

bool readReportText(std::string_view text, Report* out, std::string* error)
{
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
        *error = "empty file";
        return false;
    }
    if (readFast(text, out))
        return true;
    size_t where = 0;
    if (!depthWithin(text, kMaxJsonDepth, &where)) {
        *error = "not a report: nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels at byte " + std::to_string(where);
        return false;
    }
    return readChecked(text, out, error);
}

} // namespace

bool readReport(const std::string& text, Report* out, std::string* error)
{
    return readReportText(text, out, error);
}

bool readReportFile(const std::string& path, Report* out, std::string* error)
{
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) {
        *error = path + ": " + std::strerror(errno);
        return false;
    }
    if (S_ISDIR(st.st_mode)) {
        *error = path + ": is a directory";
        return false;
    }
    // A regular file is mapped, not read: a report of 10 Mi events is 800 MiB, and reading it
    // costs a copy and the zeroing of as many fresh pages (a third of `oomscope html` there).
    if (S_ISREG(st.st_mode) && st.st_size > 0) {
        const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        void* map = fd < 0 ? MAP_FAILED : mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
        if (fd >= 0)
            close(fd);
        if (map != MAP_FAILED) {
            madvise(map, size_t(st.st_size), MADV_SEQUENTIAL);
            std::string why;
            const bool ok = readReportText(std::string_view(static_cast<const char*>(map), size_t(st.st_size)), out, &why);
            munmap(map, size_t(st.st_size));
            if (!ok)
                *error = path + ": " + why;
            return ok;
        }
    }
    // Otherwise (a pipe, /dev/stdin, a file that cannot be mapped) one read into a buffer of
    // the file's size (no per-character stream iteration), then whatever a growing file added.
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        *error = path + ": " + std::strerror(errno);
        return false;
    }
    // Uninitialised storage: zero-filling 70 MiB first costs as much as reading it.
    size_t capacity = size_t(st.st_size > 0 ? st.st_size : 0) + 1;
    std::unique_ptr<char[]> buffer(new char[capacity]);
    size_t size = 0;
    while (in) {
        if (size == capacity) {
            std::unique_ptr<char[]> bigger(new char[capacity * 2]);
            std::memcpy(bigger.get(), buffer.get(), size);
            buffer = std::move(bigger);
            capacity *= 2;
        }
        in.read(buffer.get() + size, std::streamsize(capacity - size));
        size += size_t(in.gcount());
    }
    if (in.bad()) {
        *error = path + ": read error";
        return false;
    }
    std::string why;
    if (!readReportText(std::string_view(buffer.get(), size), out, &why)) {
        *error = path + ": " + why;
        return false;
    }
    return true;
}

} // namespace oomscope::report
