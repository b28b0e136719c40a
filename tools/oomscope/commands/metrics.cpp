// oomscope metrics [PID|FLIGHT|DIR ...]: the running processes' memory as Prometheus metrics,
// read from their flight-recorder files as `top` reads them (no events, no ptrace, nothing new
// in the program): printed once, written to a textfile for node_exporter's textfile collector
// (rewritten every --interval seconds, write then rename: never half a file), or served at
// GET /metrics (--listen ADDRESS:PORT, a sidecar). Each delivery reads the files anew, so a
// process that ended is gone from the next one. The format: report/render/prometheus.h.
#include "command.h"
#include "flight_target.h"

#include "common/paths.h"
#include "interpret/flight_reader.h"
#include "interpret/recover.h"
#include "report/render/prometheus.h"

#include <CLI/CLI.hpp>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <iostream>
#include <map>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef OOMSCOPE_VERSION
#define OOMSCOPE_VERSION "0.0.0"
#endif

namespace oomscope::cli {
namespace {

volatile sig_atomic_t g_metricsStop = 0;
void onMetricsStop(int) { g_metricsStop = 1; }

double monotonicSeconds()
{
    timespec t{};
    clock_gettime(CLOCK_MONOTONIC, &t);
    return double(t.tv_sec) + double(t.tv_nsec) / 1e9;
}

bool writeAll(int fd, const std::string& text)
{
    size_t at = 0;
    while (at < text.size()) {
        const ssize_t n = ::write(fd, text.data() + at, text.size() - at);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        at += size_t(n);
    }
    return true;
}

// A listening socket on "HOST:PORT" (":PORT": every address); port 0 takes a free one.
int listenOn(const std::string& address, std::string* bound, std::string* error)
{
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos || colon + 1 == address.size()) {
        *error = "--listen " + address + ": not HOST:PORT (127.0.0.1:9464)";
        return -1;
    }
    std::string host = address.substr(0, colon);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']')
        host = host.substr(1, host.size() - 2);
    const std::string port = address.substr(colon + 1);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* found = nullptr;
    if (const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found); rc != 0) {
        *error = "--listen " + address + ": " + gai_strerror(rc);
        return -1;
    }
    int fd = -1;
    std::string why = "no address";
    for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
        fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0)
            continue;
        const int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 16) != 0) {
            why = std::strerror(errno);
            ::close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(found);
    if (fd < 0) {
        *error = "--listen " + address + ": " + why;
        return -1;
    }
    sockaddr_storage name{};
    socklen_t length = sizeof(name);
    char h[NI_MAXHOST] = "", p[NI_MAXSERV] = "";
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&name), &length) == 0 &&
        getnameinfo(reinterpret_cast<sockaddr*>(&name), length, h, sizeof(h), p, sizeof(p), NI_NUMERICHOST | NI_NUMERICSERV) == 0)
        *bound = (std::strchr(h, ':') ? "[" + std::string(h) + "]" : std::string(h)) + ":" + p;
    return fd;
}

class MetricsCommand final : public Command {
public:
    const char* name() const override { return "metrics"; }
    CLI::App* setup(CLI::App& app) override
    {
        CLI::App* c = app.add_subcommand(
            name(), "The running processes' GPU memory as Prometheus metrics, read from their flight-recorder files: "
                    "printed once, written to a textfile for node_exporter, or served at /metrics");
        c->add_option("targets", m_targets,
                      "PIDs, .flight files or folders of them (default: $OOMSCOPE_OUTPUT_DIR, else the working "
                      "directory); folders are read anew for each delivery")
            ->type_name("PID|FLIGHT|DIR");
        c->add_option("--textfile", m_textfile,
                      "Write the metrics to FILE (write, then rename: a reader never sees half of it), every "
                      "--interval seconds: node_exporter's --collector.textfile.directory")
            ->type_name("FILE");
        c->add_option("--listen", m_listen,
                      "Serve GET /metrics on ADDRESS:PORT (127.0.0.1:9464; :9464 for every address; port 0 takes "
                      "a free one, said on stderr)")
            ->type_name("ADDRESS:PORT");
        c->add_option("-n,--interval", m_interval, "Seconds between two writes of --textfile")
            ->check(CLI::Range(0.1, 86400.0));
        c->add_flag("--once", m_once, "Print the metrics (or write --textfile) once and exit");
        addHelpFooter(c, "0 when it ends (--once done, SIGTERM, SIGINT), 2 for a usage error, an address it "
                         "cannot listen on, a textfile it cannot write, or a process named that cannot be read.");
        return c;
    }

    int run() override
    {
        if (m_targets.empty()) {
            const char* dir = std::getenv("OOMSCOPE_OUTPUT_DIR");
            m_targets.push_back(dir && *dir ? dir : ".");
        }
        for (const std::string& t : m_targets) {  // a PID or file that names nothing: now, not later
            std::string path, error;
            if (!common::isDir(t) && !flightFileOf(t, &path, &error)) {
                logError("metrics: " + error);
                return kExitUsage;
            }
            report::Report probe;  // a file named outright must be a flight file this user may read
            if (!common::isDir(t) && !interpret::snapshotReport(path, &probe, &error, 0)) {
                logError("metrics: " + error);
                return kExitUsage;
            }
        }
        if (m_once && !m_listen.empty()) {
            logError("metrics: --once goes with --textfile (or alone: stdout), not with --listen");
            return kExitUsage;
        }
        m_source = sourceReader();
        if (m_listen.empty() && m_textfile.empty()) {  // alone: once, to stdout
            std::cout << exposition() << std::flush;
            return kExitOk;
        }
        if (!m_textfile.empty() && !writeTextfile())
            return kExitUsage;
        if (m_once)
            return kExitOk;
        struct sigaction sa {};
        sa.sa_handler = onMetricsStop;  // no SA_RESTART: poll() returns at once
        for (int sig : {SIGINT, SIGTERM, SIGHUP})
            sigaction(sig, &sa, nullptr);
        signal(SIGPIPE, SIG_IGN);  // a scraper that hangs up is no reason to die
        int server = -1;
        if (!m_listen.empty()) {
            std::string bound, error;
            server = listenOn(m_listen, &bound, &error);
            if (server < 0) {
                logError("metrics: " + error);
                return kExitUsage;
            }
            logInfo("metrics on http://" + bound + "/metrics");
        }
        double nextWrite = monotonicSeconds() + m_interval;
        while (!g_metricsStop) {
            int timeout = -1;
            if (!m_textfile.empty())
                timeout = std::max(0, int((nextWrite - monotonicSeconds()) * 1000) + 1);
            pollfd p{server, POLLIN, 0};
            const int ready = ::poll(server >= 0 ? &p : nullptr, server >= 0 ? 1 : 0, timeout);
            if (ready > 0 && (p.revents & POLLIN))
                serveOne(server);
            if (!m_textfile.empty() && monotonicSeconds() >= nextWrite) {
                writeTextfile();  // a failure is said; the next try may succeed
                nextWrite = monotonicSeconds() + m_interval;
            }
        }
        if (server >= 0)
            ::close(server);
        return kExitOk;
    }

private:
    // The metrics of the processes the targets name now.
    std::string exposition() const
    {
        std::vector<std::string> files, notOurs;
        for (const std::string& t : m_targets) {
            if (common::isDir(t)) {
                for (std::string& f : liveFlightFiles(t, &notOurs))
                    files.push_back(std::move(f));
                continue;
            }
            std::string path, error;
            if (flightFileOf(t, &path, &error))
                files.push_back(path);
        }
        std::vector<report::Report> snapshots;
        // By reason, every reason a series (0 where none: an alert on it needs no absent()).
        std::map<std::string, uint64_t> unreadable;
        using interpret::FlightProblem;
        for (FlightProblem p : {FlightProblem::Permission, FlightProblem::Version, FlightProblem::Damaged})
            unreadable[interpret::flightProblemName(p)] = 0;
        unreadable[interpret::flightProblemName(FlightProblem::Permission)] += notOurs.size();
        for (const std::string& f : files) {
            report::Report r;
            std::string error;
            if (interpret::snapshotReport(f, &r, &error, 0)) {  // without the events: as top reads
                snapshots.push_back(std::move(r));
                continue;
            }
            struct stat st {};
            if (::stat(f.c_str(), &st) == 0)  // a process that ended meanwhile drops out
                ++unreadable[interpret::flightProblemName(interpret::flightFileProblem(f))];
        }
        return report::renderPrometheus(snapshots, OOMSCOPE_VERSION, m_source, unreadable);
    }

    bool writeTextfile() const
    {
        std::string error;
        if (!writeTextFileAtomically(m_textfile, exposition(), &error)) {
            logError("metrics: " + error);
            return false;
        }
        return true;
    }

    // One request on a fresh connection: GET /metrics, else 404 (405 for another method).
    void serveOne(int server) const
    {
        const int fd = ::accept4(server, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0)
            return;
        timeval limit{5, 0};  // a client that sends nothing does not hold the scrapes up
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
        std::string request;
        char buf[2048];
        while (request.find("\r\n\r\n") == std::string::npos && request.size() < 16384) {
            const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            request.append(buf, size_t(n));
        }
        const std::string line = request.substr(0, request.find("\r\n"));
        const size_t space = line.find(' ');
        const std::string method = line.substr(0, space);
        std::string target = space == std::string::npos ? "" : line.substr(space + 1, line.find(' ', space + 1) - space - 1);
        target = target.substr(0, target.find('?'));
        std::string status = "200 OK", type = "text/plain; version=0.0.4; charset=utf-8", body;
        if (method != "GET" && method != "HEAD") {
            status = "405 Method Not Allowed";
            body = "GET /metrics\n";
        } else if (target == "/metrics") {
            body = exposition();
        } else if (target == "/") {
            type = "text/html; charset=utf-8";
            body = "<html><body><a href=\"/metrics\">/metrics</a></body></html>\n";
        } else {
            status = "404 Not Found";
            body = "not found: the metrics are at /metrics\n";
        }
        const std::string head = "HTTP/1.1 " + status + "\r\nContent-Type: " + type +
                                 "\r\nContent-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
        writeAll(fd, method == "HEAD" ? head : head + body);
        ::close(fd);
    }

    std::vector<std::string> m_targets;
    std::string m_textfile;
    std::string m_listen;
    double m_interval = 15.0;
    bool m_once = false;
    report::SourceLine m_source;
};

} // namespace

std::unique_ptr<Command> makeMetricsCommand()
{
    return std::make_unique<MetricsCommand>();
}

} // namespace oomscope::cli
