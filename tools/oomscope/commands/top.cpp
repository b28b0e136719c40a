// oomscope top [PID|FILE|DIR …]: a refreshing view of running processes, read from their
// flight-recorder files (oomscope snapshot, once a second): one block per process or rank. A
// plain terminal over ssh does: the frame is drawn in one write from the top-left corner, each
// line cleared to its end (no flicker), in the alternate screen; q (or Ctrl-C) quits and
// gives the terminal back as it was. Without a terminal (a pipe, --once) it prints frames as
// plain text.
#include "command.h"
#include "flight_target.h"

#include "common/paths.h"
#include "interpret/recover.h"
#include "report/render/top.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <ctime>
#include <iostream>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <tuple>
#include <unistd.h>

namespace oomscope::cli {
namespace {

volatile sig_atomic_t g_stop = 0;
void onStop(int) { g_stop = 1; }

// The terminal in the mode top needs (no echo, a key at a time, the alternate screen), and
// back as it was, whatever way top ends.
class Terminal {
public:
    bool enter()
    {
        if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO) || tcgetattr(STDIN_FILENO, &m_saved) != 0)
            return false;
        termios raw = m_saved;
        raw.c_lflag &= ~tcflag_t(ICANON | ECHO);
        raw.c_cc[VMIN] = 0;
        raw.c_cc[VTIME] = 0;
        tcsetattr(STDIN_FILENO, TCSANOW, &raw);
        m_active = true;
        write("\x1b[?1049h\x1b[?25l");  // the alternate screen, the cursor hidden
        return true;
    }
    ~Terminal()
    {
        if (!m_active)
            return;
        write("\x1b[?25h\x1b[?1049l");
        tcsetattr(STDIN_FILENO, TCSANOW, &m_saved);
    }
    static void write(const std::string& s)
    {
        size_t at = 0;
        while (at < s.size()) {
            const ssize_t n = ::write(STDOUT_FILENO, s.data() + at, s.size() - at);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                return;
            at += size_t(n);
        }
    }
    static size_t width()
    {
        winsize ws{};
        return ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 0;
    }
    static size_t height()
    {
        winsize ws{};
        return ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 ? ws.ws_row : 0;
    }

private:
    termios m_saved{};
    bool m_active = false;
};

class TopCommand final : public Command {
public:
    const char* name() const override { return "top"; }
    CLI::App* setup(CLI::App& app) override
    {
        CLI::App* c = app.add_subcommand(name(), "Watch running processes: memory, steps, growth, top sites and "
                                                 "leaks, refreshed from their flight-recorder files");
        c->add_option("targets", m_targets,
                      "PIDs, .flight files or folders of them (default: $OOMSCOPE_OUTPUT_DIR, else the working "
                      "directory)")
            ->type_name("PID|FLIGHT|DIR");
        c->add_option("-n,--interval", m_interval, "Seconds between refreshes")->check(CLI::Range(0.1, 3600.0));
        c->add_option("--steps", m_steps, "Steps the growth per step is measured over")->check(CLI::Range(2, 4096));
        c->add_flag("--once", m_once, "Print one frame as plain text and exit");
        addHelpFooter(c, "0 when it quits (q, Ctrl-C, or after --once), 2 for a usage error or when no process "
                         "named can be read.");
        return c;
    }
    int run() override
    {
        if (m_targets.empty()) {
            const char* dir = std::getenv("OOMSCOPE_OUTPUT_DIR");
            m_targets.push_back(dir && *dir ? dir : ".");
        }
        // A PID or file that names nothing readable is a usage error now, not a line later.
        for (const std::string& t : m_targets) {
            std::string path, error;
            if (common::isDir(t))
                continue;
            if (!flightFileOf(t, &path, &error)) {
                logError("top: " + error);
                return kExitUsage;
            }
            report::Report r;
            if (!interpret::snapshotReport(path, &r, &error, 0)) {
                logError("top: " + error);
                return kExitUsage;
            }
        }
        Terminal terminal;
        const bool screen = !m_once && terminal.enter();
        struct sigaction sa {};
        sa.sa_handler = onStop;  // no SA_RESTART: poll() returns at once
        for (int sig : {SIGINT, SIGTERM, SIGHUP})
            sigaction(sig, &sa, nullptr);
        report::TopOptions options;
        options.growthSteps = size_t(m_steps);
        options.source = sourceReader();
        while (!g_stop) {
            const size_t width = screen ? Terminal::width() : 0;
            std::vector<std::string> lines = frame(options, width);
            if (screen) {
                const size_t height = Terminal::height();
                if (height > 0 && lines.size() > height)
                    lines.resize(height);  // what does not fit is cut, never scrolled
                std::string out = "\x1b[H";
                for (size_t i = 0; i < lines.size(); ++i)
                    out += lines[i] + "\x1b[K" + (i + 1 < lines.size() ? "\r\n" : "");
                out += "\x1b[J";
                Terminal::write(out);
            } else {
                std::string out;
                for (const std::string& l : lines)
                    out += l + "\n";
                Terminal::write(out + "\n");
            }
            if (m_once)
                break;
            if (waitForQuit(screen))
                break;
        }
        return kExitOk;
    }

private:
    // The processes the targets name now (a folder's running processes change as they come and go).
    std::vector<std::string> files() const
    {
        std::vector<std::string> out;
        for (const std::string& t : m_targets) {
            if (common::isDir(t)) {
                for (std::string& f : liveFlightFiles(t))
                    out.push_back(std::move(f));
                continue;
            }
            std::string path, error;
            out.push_back(flightFileOf(t, &path, &error) ? path : "!" + t + ": " + error);
        }
        return out;
    }

    std::vector<std::string> frame(const report::TopOptions& options, size_t width) const
    {
        std::vector<std::string> lines;
        const std::vector<std::string> targets = files();
        char clock[16];
        const std::time_t now = std::time(nullptr);
        std::strftime(clock, sizeof(clock), "%H:%M:%S", std::localtime(&now));
        lines.push_back("oomscope top  " + std::string(clock) + "  " + std::to_string(targets.size()) +
                        (targets.size() == 1 ? " process" : " processes") + "  (q quits)");
        if (targets.empty()) {
            std::string where;
            for (const std::string& t : m_targets)
                where += (where.empty() ? "" : ", ") + t;
            lines.push_back("no running process under oomscope has a flight-recorder file in " + where);
        }
        // Read them all, then show them in rank order (a job's ranks as torchrun numbers them),
        // processes without a rank after, by PID; what could not be read says so where it was.
        struct Block {
            report::Report report;
            std::string error;
        };
        std::vector<Block> blocks(targets.size());
        for (size_t i = 0; i < targets.size(); ++i) {
            if (targets[i][0] == '!')
                blocks[i].error = targets[i].substr(1);
            // Without the events: top shows none, and the ring is most of the file.
            else if (!interpret::snapshotReport(targets[i], &blocks[i].report, &blocks[i].error, 0) &&
                     blocks[i].error.empty())
                blocks[i].error = "cannot read " + targets[i];
        }
        const auto key = [](const Block& b) {
            const report::Process& p = b.report.process;
            return std::make_tuple(!b.error.empty(), !p.rank.has_value(), p.rank.value_or(0), p.pid);
        };
        std::stable_sort(blocks.begin(), blocks.end(), [&](const Block& a, const Block& b) { return key(a) < key(b); });
        for (const Block& b : blocks) {
            lines.emplace_back();
            if (!b.error.empty()) {
                lines.push_back(b.error);  // it ended while read, or its file went
                continue;
            }
            for (std::string& l : report::topBlock(b.report, options, width))
                lines.push_back(std::move(l));
        }
        return lines;
    }

    // The interval, or less when q (or a signal) ends it: true to quit.
    bool waitForQuit(bool screen) const
    {
        timespec start{};
        clock_gettime(CLOCK_MONOTONIC, &start);
        const double until = double(start.tv_sec) + double(start.tv_nsec) / 1e9 + m_interval;
        while (!g_stop) {
            timespec t{};
            clock_gettime(CLOCK_MONOTONIC, &t);
            const double left = until - (double(t.tv_sec) + double(t.tv_nsec) / 1e9);
            if (left <= 0)
                return false;
            pollfd in{STDIN_FILENO, POLLIN, 0};
            const int ready = ::poll(&in, screen ? 1 : 0, int(left * 1000) + 1);
            if (ready > 0 && (in.revents & POLLIN)) {
                char c = 0;
                if (::read(STDIN_FILENO, &c, 1) == 1 && (c == 'q' || c == 'Q' || c == 3))
                    return true;
            }
        }
        return true;
    }

    std::vector<std::string> m_targets;
    double m_interval = 1.0;
    int m_steps = 10;
    bool m_once = false;
};

} // namespace

std::unique_ptr<Command> makeTopCommand()
{
    return std::make_unique<TopCommand>();
}

} // namespace oomscope::cli
