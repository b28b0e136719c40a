#include "report/report_file.h"

#include "common/paths.h"

#include "report/json_writer.h"

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <csignal>
#include <ctime>
#include <fcntl.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace oomscope::report {
namespace {

class FdSink : public JsonSink {
public:
    explicit FdSink(int fd) : m_fd(fd) {}
    bool flush(const char* data, size_t size) override
    {
        while (size > 0) {
            const ssize_t n = ::write(m_fd, data, size);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                m_errno = errno;
                return false;
            }
            data += n;
            size -= size_t(n);
        }
        return true;
    }
    int error() const { return m_errno; }

private:
    int m_fd;
    int m_errno = 0;
};

std::atomic<unsigned> g_tempCounter{0};

// A write past RLIMIT_FSIZE raises SIGXFSZ, whose default action ends the process with a core
// dump: the program would die of our report. The signal is blocked on this thread while the
// report is written, and one that our writes raised is taken off before it is unblocked (the
// write itself fails with EFBIG and the report is given up, as on a full disk).
class FileSizeSignalGuard {
public:
    FileSizeSignalGuard()
    {
        sigemptyset(&m_set);
        sigaddset(&m_set, SIGXFSZ);
        sigset_t pending;
        m_wasPending = sigpending(&pending) == 0 && sigismember(&pending, SIGXFSZ) == 1;
        m_blocked = pthread_sigmask(SIG_BLOCK, &m_set, &m_old) == 0;
    }
    ~FileSizeSignalGuard()
    {
        if (!m_blocked)
            return;
        sigset_t pending;
        if (!m_wasPending && sigpending(&pending) == 0 && sigismember(&pending, SIGXFSZ) == 1) {
            const timespec now{0, 0};
            sigtimedwait(&m_set, nullptr, &now);
        }
        pthread_sigmask(SIG_SETMASK, &m_old, nullptr);
    }
    FileSizeSignalGuard(const FileSizeSignalGuard&) = delete;
    FileSizeSignalGuard& operator=(const FileSizeSignalGuard&) = delete;

private:
    sigset_t m_set;
    sigset_t m_old;
    bool m_wasPending = false;
    bool m_blocked = false;
};
constexpr unsigned kRenameNoReplace = 1;  // RENAME_NOREPLACE of <linux/fs.h>

template <class WriteFn>
WriteResult writeAtomically(const std::string& dir, const std::string& stem, const std::string& suffix, WriteFn&& write)
{
    WriteResult result;
    FileSizeSignalGuard fileSizeGuard;
    const std::string base = (dir.empty() ? std::string(".") : dir) + "/";
    const std::string temp = base + "." + stem + ".tmp." + std::to_string(getpid()) + "." +
                             std::to_string(g_tempCounter.fetch_add(1));
    if (const std::string unsafe = common::unsafeFolder(dir); !unsafe.empty()) {
        result.error = unsafe;
        return result;
    }
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, common::reportMode());
    if (fd < 0) {
        result.error = "cannot create " + temp + ": " + std::strerror(errno);
        return result;
    }
    int writeErrno = 0;
    const bool written = write(fd, &writeErrno);
    const bool closed = ::close(fd) == 0;
    if (!written || !closed) {
        ::unlink(temp.c_str());
        result.error = "cannot write " + temp + ": " + std::strerror(writeErrno ? writeErrno : errno);
        return result;
    }
    for (int attempt = 1; attempt < 1000; ++attempt) {
        const std::string path = base + stem + (attempt == 1 ? "" : "-" + std::to_string(attempt)) + suffix;
        if (::link(temp.c_str(), path.c_str()) == 0) {
            ::unlink(temp.c_str());
            result.ok = true;
            result.path = path;
            return result;
        }
        // Filesystems without hard links: the same no-replace guarantee from renameat2.
        if ((errno == EPERM || errno == EOPNOTSUPP) &&
            ::syscall(SYS_renameat2, AT_FDCWD, temp.c_str(), AT_FDCWD, path.c_str(), kRenameNoReplace) == 0) {
            result.ok = true;
            result.path = path;
            return result;
        }
        if (errno != EEXIST) {
            result.error = "cannot create " + path + ": " + std::strerror(errno);
            ::unlink(temp.c_str());
            return result;
        }
    }
    ::unlink(temp.c_str());
    result.error = "no free file name for " + base + stem + suffix;
    return result;
}

} // namespace

WriteResult writeReportFile(const Report& report, const std::string& dir, const std::string& stem)
{
    return writeAtomically(dir, stem, ".json", [&](int fd, int* err) {
        FdSink sink(fd);
        const bool ok = writeReport(report, sink);
        *err = sink.error();
        return ok;
    });
}

std::string reportStem(const Report& report)
{
    std::string host = report.process.hostname.empty() ? "host" : report.process.hostname;
    for (char& c : host) {
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_')
            c = '_';
    }
    // The rank first where there is one, so that a job's reports sort by rank.
    const std::string rank = report.process.rank ? "r" + std::to_string(*report.process.rank) + "-" : "";
    return "oomscope-" + host + "-" + rank + std::to_string(report.process.pid) + "-" + enumName(report.trigger.kind);
}

} // namespace oomscope::report
