#include "track/triggers.h"

#include "track/config.h"
#include "track/flight_writer.h"
#include "track/process_info.h"
#include "track/recorder.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <string>
#include <sys/syscall.h>
#include <unistd.h>

namespace oomscope::track {
namespace {

constexpr int kSignals[] = {SIGTERM, SIGINT, SIGABRT};
constexpr int kMaxSignal = 65;

struct sigaction g_previous[kMaxSignal];
std::atomic<bool> g_installed[kMaxSignal];
std::atomic<bool> g_reported[kMaxSignal];

// Agent: a thread that writes reports on behalf of signal handlers, which must not allocate.
int g_requestPipe[2] = {-1, -1};
int g_donePipe[2] = {-1, -1};
std::atomic<bool> g_agentRunning{false};
std::atomic<bool> g_active{false};
// Set once by the thread that starts the recorder, read by the agent, at exit and around fork
// on any thread: published with release, read with acquire.
std::atomic<Recorder*> g_recorder{nullptr};
// OOMSCOPE_DUMP_SIGNAL (SIGUSR2 by default; 0: none): a report on request, the program goes on.
std::atomic<int> g_dumpSignal{0};
// Dump-signal requests handed to the agent, and those it has written: the exit waits for the
// ones in flight (a program that ends right after the signal still gets its report).
std::atomic<uint64_t> g_requestsAsked{0};
std::atomic<uint64_t> g_requestsDone{0};

Recorder* recorderOrNull()
{
    return g_recorder.load(std::memory_order_acquire);
}

const char* signalName(int sig)
{
    switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGABRT: return "SIGABRT";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    default: return "signal";
    }
}

void* agentMain(void*)
{
    for (;;) {
        unsigned char sig = 0;
        const ssize_t n = read(g_requestPipe[0], &sig, 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return nullptr;
        Recorder* recorder = recorderOrNull();
        if (sig == g_dumpSignal.load(std::memory_order_relaxed)) {
            // Asked for while the program goes on: nobody waits for it, the flight file stays.
            if (recorder && processActive()) {
                TriggerInfo trigger;
                trigger.kind = report::TriggerKind::Request;
                trigger.reason = std::string("received ") + signalName(sig) + " (OOMSCOPE_DUMP_SIGNAL)";
                recorder->dump(trigger);
            }
            g_requestsDone.fetch_add(1, std::memory_order_release);
            continue;
        }
        if (recorder && processActive()) {
            TriggerInfo trigger;
            trigger.kind = report::TriggerKind::Signal;
            trigger.reason = std::string("received ") + signalName(sig);
            // The report holds what the file would: the file goes once the report is there.
            if (!recorder->dump(trigger).empty())
                if (FlightFile* flight = FlightFile::active())
                    flight->remove();
        }
        const unsigned char done = sig;
        while (write(g_donePipe[1], &done, 1) < 0 && errno == EINTR) {
        }
    }
}

bool startAgent()
{
    if (pipe2(g_requestPipe, O_CLOEXEC) != 0)
        return false;
    if (pipe2(g_donePipe, O_CLOEXEC) != 0) {
        close(g_requestPipe[0]);
        close(g_requestPipe[1]);
        return false;
    }
    // The agent blocks every signal: a process-directed signal is never handled on the thread
    // that has to write its report.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    const bool ok = pthread_create(&thread, &attr, agentMain, nullptr) == 0;
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (ok) {
        pthread_setname_np(thread, "oomscope-agent");
        g_agentRunning.store(true, std::memory_order_release);
    }
    return ok;
}

// The thread whose signal's report the agent is writing; 0 when none. A second fatal signal
// meanwhile (the same one sent twice: a launcher that signals the process group and forwards
// the signal as well, as `torchrun --no-python oomscope run …` does) is handled on another
// thread, where SIGTERM is not blocked: it waits for that report instead of ending the process
// in the middle of it.
std::atomic<long> g_reportingThread{0};

// Asks the agent for the report of sig and waits for it, at most the configured time.
void reportAndWait(int sig)
{
    const unsigned char byte = static_cast<unsigned char>(sig);
    if (write(g_requestPipe[1], &byte, 1) != 1)
        return;
    pollfd pfd{g_donePipe[0], POLLIN, 0};
    const int timeout = int(Config::get().signalTimeoutMs);
    int rc;
    do {
        rc = poll(&pfd, 1, timeout);
    } while (rc < 0 && errno == EINTR);
    unsigned char done;
    if (rc > 0)
        (void)!read(g_donePipe[0], &done, 1);
}

void waitForOtherReport(long self)
{
    const uint32_t timeoutMs = Config::get().signalTimeoutMs;
    for (uint32_t waited = 0; waited < timeoutMs; waited += 5) {
        const long reporting = g_reportingThread.load(std::memory_order_acquire);
        if (reporting == 0 || reporting == self)
            return;  // done, or this very thread is the one waiting for it (a nested signal)
        poll(nullptr, 0, 5);
    }
}

// Chains to the handler the program had before ours; false when it had none (default).
bool chainToPrevious(int sig, siginfo_t* info, void* context, int savedErrno)
{
    const struct sigaction& previous = g_previous[sig];
    if (previous.sa_flags & SA_SIGINFO) {
        if (previous.sa_sigaction) {
            errno = savedErrno;
            previous.sa_sigaction(sig, info, context);
            return true;
        }
    } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        errno = savedErrno;
        previous.sa_handler(sig);
        return true;
    }
    return false;
}

// Async-signal-safe: only write, poll, read, syscall, sigaction and raise.
void onSignal(int sig, siginfo_t* info, void* context)
{
    const int savedErrno = errno;
    if (sig == g_dumpSignal.load(std::memory_order_relaxed)) {
        // The agent writes the report; this thread goes straight back to the program. The
        // default action (ending the process) is what this signal no longer does.
        if (g_agentRunning.load(std::memory_order_acquire) && processActive()) {
            const unsigned char byte = static_cast<unsigned char>(sig);
            g_requestsAsked.fetch_add(1, std::memory_order_acq_rel);
            if (write(g_requestPipe[1], &byte, 1) != 1)
                g_requestsDone.fetch_add(1, std::memory_order_release);  // never asked after all
        }
        chainToPrevious(sig, info, context, savedErrno);
        errno = savedErrno;
        return;
    }
    if (sig > 0 && sig < kMaxSignal && g_agentRunning.load(std::memory_order_acquire) && processActive()) {
        const long self = syscall(SYS_gettid);
        long idle = 0;
        if (g_reportingThread.compare_exchange_strong(idle, self, std::memory_order_acq_rel)) {
            if (!g_reported[sig].exchange(true))
                reportAndWait(sig);
            g_reportingThread.store(0, std::memory_order_release);
        } else {
            waitForOtherReport(self);
        }
    }
    if (chainToPrevious(sig, info, context, savedErrno))
        return;
    const struct sigaction& previous = g_previous[sig];
    // Default disposition: put it back and let the signal do what it would have done. The
    // signal is blocked while this handler runs, so it is delivered when we return.
    sigaction(sig, &previous, nullptr);
    raise(sig);
    errno = savedErrno;
}

void installSignalHandlers()
{
    const int dumpSignal = Config::get().dumpSignal;
    if (dumpSignal > 0 && dumpSignal < kMaxSignal)
        g_dumpSignal.store(dumpSignal, std::memory_order_relaxed);
    int signals[4] = {kSignals[0], kSignals[1], kSignals[2], g_dumpSignal.load(std::memory_order_relaxed)};
    for (int sig : signals) {
        if (sig <= 0)
            continue;
        struct sigaction current {};
        if (sigaction(sig, nullptr, &current) != 0)
            continue;
        // An ignored signal stays ignored: installing a handler would change what it does.
        if (!(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_IGN)
            continue;
        g_previous[sig] = current;
        struct sigaction ours {};
        ours.sa_sigaction = onSignal;
        ours.sa_flags = SA_SIGINFO | SA_RESTART | (current.sa_flags & SA_ONSTACK);
        sigemptyset(&ours.sa_mask);
        if (sigaction(sig, &ours, nullptr) == 0)
            g_installed[sig].store(true);
    }
}

// At exit, the dump-signal requests the agent has not written yet: waited for, at most the
// signal timeout.
void waitForRequests()
{
    const uint32_t timeoutMs = Config::get().signalTimeoutMs;
    for (uint32_t waited = 0; waited < timeoutMs; waited += 5) {
        if (g_requestsDone.load(std::memory_order_acquire) >= g_requestsAsked.load(std::memory_order_acquire))
            return;
        poll(nullptr, 0, 5);
    }
}

void onExit()
{
    waitForRequests();
    Recorder* recorder = recorderOrNull();
    if (recorder && processActive() && Config::get().exitReport) {
        TriggerInfo trigger;
        trigger.kind = report::TriggerKind::Exit;
        trigger.reason = "normal exit";
        recorder->dump(trigger);
    }
    // A clean end: the flight-recorder file is not evidence of anything.
    if (FlightFile* flight = FlightFile::active())
        flight->remove();
}


void forkPrepare()
{
    if (Recorder* recorder = recorderOrNull())
        recorder->lockAllForFork();
}

void forkParent()
{
    if (Recorder* recorder = recorderOrNull())
        recorder->unlockAllAfterFork();
}

void forkChild()
{
    resetThreadIdAfterFork();
    if (Recorder* recorder = recorderOrNull())
        recorder->unlockAllInChild();
    // The child has no agent thread and did not make the parent's allocations: it writes
    // nothing unless it records CUDA activity of its own, and its signals go straight on.
    g_agentRunning.store(false, std::memory_order_release);
    g_active.store(false, std::memory_order_release);
    for (int fd : {g_requestPipe[0], g_requestPipe[1], g_donePipe[0], g_donePipe[1]}) {
        if (fd >= 0)
            close(fd);
    }
    g_requestPipe[0] = g_requestPipe[1] = g_donePipe[0] = g_donePipe[1] = -1;
}

} // namespace

bool processActive()
{
    return g_active.load(std::memory_order_acquire);
}

void markProcessActive()
{
    if (!g_active.load(std::memory_order_relaxed))
        g_active.store(true, std::memory_order_release);
}

void installTriggers(Recorder& recorder)
{
    g_recorder.store(&recorder, std::memory_order_release);
    pthread_atfork(forkPrepare, forkParent, forkChild);
    std::atexit(onExit);
    if (Config::get().signalReports && startAgent())
        installSignalHandlers();
}

const char* requestDump(const char* reason)
{
    static thread_local std::string last;
    Recorder* recorder = Recorder::get();
    if (!recorder)
        return "";
    TriggerInfo trigger;
    trigger.kind = report::TriggerKind::Request;
    trigger.reason = reason && *reason ? reason : "requested";
    last = recorder->dump(trigger);
    return last.c_str();
}

} // namespace oomscope::track
