#include "flight_target.h"

#include "command.h"
#include "launch.h"

#include "report/report_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <strings.h>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <iostream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace oomscope::cli {
namespace {

bool allDigits(const std::string& s)
{
    return !s.empty() && s.size() < 10 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool endsWith(const std::string& s, const std::string& end)
{
    return s.size() >= end.size() && s.compare(s.size() - end.size(), end.size(), end) == 0;
}

// The value of name in the process's environment, or nullopt-ish "" with *found false.
std::string environValue(const std::string& pid, const std::string& name, bool* found)
{
    *found = false;
    std::ifstream in("/proc/" + pid + "/environ", std::ios::binary);
    std::string entry;
    while (std::getline(in, entry, '\0')) {
        if (entry.compare(0, name.size() + 1, name + "=") == 0) {
            *found = true;
            return entry.substr(name.size() + 1);
        }
    }
    return {};
}

// The PID in a flight file's name (oomscope-HOST-PID.flight), 0 when there is none.
long pidOfName(const std::string& name)
{
    if (!endsWith(name, ".flight"))
        return 0;
    const std::string stem = name.substr(0, name.size() - 7);
    const size_t dash = stem.rfind('-');
    if (dash == std::string::npos || !allDigits(stem.substr(dash + 1)))
        return 0;
    return std::stol(stem.substr(dash + 1));
}

} // namespace

bool flightFileOf(const std::string& target, std::string* path, std::string* error)
{
    if (!allDigits(target)) {
        *path = target;
        return true;  // a file: the reader says what it is not
    }
    const std::string proc = "/proc/" + target;
    struct stat st {};
    if (::stat(proc.c_str(), &st) != 0) {
        *error = "no process " + target + " is running here";
        return false;
    }
    std::ifstream maps(proc + "/maps");
    if (!maps) {
        *error = "cannot read " + proc + "/maps: " + std::strerror(errno) + " (a process of another user: run as that user)";
        return false;
    }
    std::string line;
    bool preload = false;
    while (std::getline(maps, line)) {
        const size_t slash = line.find('/');
        if (slash == std::string::npos)
            continue;
        std::string file = line.substr(slash);
        const bool deleted = endsWith(file, " (deleted)");
        if (deleted)
            file.resize(file.size() - 10);
        const std::string base = file.substr(file.rfind('/') + 1);
        if (base.rfind("liboomscope", 0) == 0)
            preload = true;
        if (endsWith(base, ".flight") && base.rfind("oomscope-", 0) == 0 && std::to_string(pidOfName(base)) == target) {
            if (deleted) {
                *error = "process " + target + "'s flight-recorder file " + file + " was removed while it runs";
                return false;
            }
            *path = file;
            return true;
        }
    }
    if (!preload) {
        *error = "process " + target + " is not running under oomscope (no liboomscope.so in its maps)";
        return false;
    }
    const auto off = [](const std::string& v) {
        return v == "0" || strcasecmp(v.c_str(), "off") == 0 || strcasecmp(v.c_str(), "false") == 0 ||
               strcasecmp(v.c_str(), "no") == 0;
    };
    bool found = false;
    const std::string disable = environValue(target, "OOMSCOPE_DISABLE", &found);
    if (found && !disable.empty() && !off(disable)) {
        *error = "process " + target + " runs oomscope switched off (OOMSCOPE_DISABLE=" + disable + "): nothing is recorded";
        return false;
    }
    const std::string flight = environValue(target, "OOMSCOPE_FLIGHT", &found);
    if (found && off(flight))
        *error = "process " + target + " runs oomscope without a flight-recorder file (OOMSCOPE_FLIGHT=" + flight +
                 "): nothing to read while it runs";
    else
        *error = "process " + target + " runs oomscope but has no flight-recorder file yet (it has made no CUDA "
                 "allocation, or the file could not be made: see its stderr)";
    return false;
}

std::vector<std::string> liveFlightFiles(const std::string& dir, std::vector<std::string>* notOurs)
{
    std::vector<std::string> out;
    DIR* d = ::opendir(dir.c_str());
    if (!d)
        return out;
    while (const dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        const long pid = pidOfName(name);
        if (name.rfind("oomscope-", 0) != 0 || pid <= 0)
            continue;
        // Running here means: the process of that PID has this very file mapped. A PID alone
        // would take in a file left by a killed process whose PID was given to another, or a
        // rank's file on another node of a shared folder whose PID happens to run here too.
        const std::string file = dir + "/" + name;
        std::string mapped, error;
        struct stat listed {}, held {};
        if (!flightFileOf(std::to_string(pid), &mapped, &error)) {
            if (notOurs) {  // the maps' mode lets anyone read; opening them checks whose they are
                const int fd = ::open(("/proc/" + std::to_string(pid) + "/maps").c_str(), O_RDONLY | O_CLOEXEC);
                if (fd >= 0)
                    ::close(fd);
                else if (errno == EACCES || errno == EPERM)
                    notOurs->push_back(file);
            }
            continue;  // gone (`oomscope recover` reads its file), or not under oomscope
        }
        if (::stat(file.c_str(), &listed) != 0 || ::stat(mapped.c_str(), &held) != 0 || listed.st_dev != held.st_dev ||
            listed.st_ino != held.st_ino)
            continue;  // not this file's process
        out.push_back(file);
    }
    ::closedir(d);
    std::sort(out.begin(), out.end());
    return out;
}

int writeReportBeside(const report::Report& r, const std::string& flightFile, const std::string& outputDir,
                      const std::string& command)
{
    std::string dir = outputDir;
    if (!dir.empty() && !makeDirs(dir)) {  // -o DIR is made as `run -o` makes it
        logError(command + ": cannot create the output folder " + dir + ": " + std::strerror(errno));
        return kExitUsage;
    }
    if (dir.empty()) {
        const size_t slash = flightFile.rfind('/');
        dir = slash == std::string::npos ? "." : slash == 0 ? "/" : flightFile.substr(0, slash);
    }
    const report::WriteResult written = report::writeReportFile(r, dir, report::reportStem(r));
    if (!written.ok) {
        logError(command + ": " + written.error);
        return kExitUsage;
    }
    std::cout << written.path << "\n";
    return kExitOk;
}

} // namespace oomscope::cli
