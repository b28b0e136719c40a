#include "common/paths.h"

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

namespace oomscope::common {

bool isFile(const std::string& path)
{
    struct stat st {};
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool isDir(const std::string& path)
{
    struct stat st {};
    return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string dirName(const std::string& path)
{
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

std::string absolute(const std::string& path)
{
    if (!path.empty() && path[0] == '/')
        return path;
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof(cwd)))
        return path;
    return path.empty() || path == "." ? std::string(cwd) : std::string(cwd) + "/" + path;
}

std::string moduleDirectory(const void* symbol)
{
    Dl_info info{};
    if (!symbol || !dladdr(symbol, &info) || !info.dli_fname)
        return {};
    const std::string path = info.dli_fname;
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

} // namespace oomscope::common

namespace oomscope::common {

unsigned reportMode()
{
    static const unsigned mode = [] {
        const char* v = std::getenv("OOMSCOPE_REPORT_MODE");
        if (!v || !*v)
            return 0600u;
        char* end = nullptr;
        const unsigned long m = std::strtoul(v, &end, 8);
        if (*end || m > 0777 || (m & 0600) != 0600) {
            std::fprintf(stderr, "oomscope: OOMSCOPE_REPORT_MODE=%s is not an octal mode with u+rw (e.g. 0640): "
                                 "reports keep 0600\n", v);
            return 0600u;
        }
        return unsigned(m);
    }();
    return mode;
}

unsigned folderMode()
{
    const unsigned m = reportMode();
    return 0700u | ((m & 0040) ? 0050u : 0u) | ((m & 0004) ? 0005u : 0u);
}

bool makeFolders(const std::string& path)
{
    if (isDir(path))
        return true;
    const std::string parent = dirName(path);
    if (parent != path && !parent.empty() && parent != "/" && parent != "." && !makeFolders(parent))
        return false;
    return mkdir(path.c_str(), folderMode()) == 0 || errno == EEXIST;
}

std::string unsafeFolder(const std::string& dir)
{
    struct stat st {};
    const std::string d = dir.empty() ? "." : dir;
    if (stat(d.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        return {};  // not there yet or not a folder: whoever makes or opens it says so
    if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX))
        return absolute(d) + " is writable by others without the sticky bit: oomscope writes no report or flight "
                             "file there (chmod o-w it, or choose another folder)";
    return {};
}

} // namespace oomscope::common
