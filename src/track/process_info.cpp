#include "track/process_info.h"

#include "common/redact.h"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <sys/syscall.h>
#include <unistd.h>

namespace oomscope::track {
namespace {

thread_local uint32_t t_tid __attribute__((tls_model("initial-exec"))) = 0;

std::optional<int64_t> envInt(std::initializer_list<const char*> names)
{
    for (const char* name : names) {
        const char* v = std::getenv(name);
        if (!v || !*v)
            continue;
        char* end = nullptr;
        const long long n = std::strtoll(v, &end, 10);
        if (end && *end == '\0')
            return int64_t(n);
    }
    return std::nullopt;
}

std::optional<std::string> envString(std::initializer_list<const char*> names)
{
    for (const char* name : names) {
        const char* v = std::getenv(name);
        if (v && *v)
            return std::string(v);
    }
    return std::nullopt;
}

uint64_t clockNs(clockid_t clock)
{
    timespec ts{};
    clock_gettime(clock, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// Process start as CLOCK_BOOTTIME ns, from field 22 of /proc/self/stat.
uint64_t startBoottimeNs()
{
    std::ifstream in("/proc/self/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos)
        return 0;
    std::istringstream fields(stat.substr(paren + 2));
    std::string field;
    // Field 3 (state) is the first after the command; starttime is field 22.
    for (int i = 3; i <= 22 && (fields >> field); ++i) {
        if (i == 22) {
            const long ticks = sysconf(_SC_CLK_TCK);
            return ticks > 0 ? std::strtoull(field.c_str(), nullptr, 10) * (1000000000ull / uint64_t(ticks)) : 0;
        }
    }
    return 0;
}

} // namespace

uint64_t monotonicNs()
{
    return clockNs(CLOCK_MONOTONIC);
}

uint32_t currentThreadId() noexcept
{
    if (t_tid == 0)
        t_tid = uint32_t(syscall(SYS_gettid));
    return t_tid;
}

void resetThreadIdAfterFork() noexcept
{
    t_tid = 0;
}

report::Process currentProcess()
{
    report::Process p;
    p.pid = getpid();
    p.ppid = getppid();
    char host[HOST_NAME_MAX + 1] = {};
    if (gethostname(host, sizeof(host) - 1) == 0)
        p.hostname = host;
    std::ifstream in("/proc/self/cmdline", std::ios::binary);
    std::string arg;
    while (std::getline(in, arg, '\0'))
        p.cmdline.push_back(arg);
    p.redactedValues = common::Redactor::fromEnvironment().arguments(p.cmdline);
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof(cwd)))
        p.cwd = cwd;
    const uint64_t bootNow = clockNs(CLOCK_BOOTTIME);
    const uint64_t monoNow = clockNs(CLOCK_MONOTONIC);
    const uint64_t unixNow = clockNs(CLOCK_REALTIME);
    const uint64_t startBoot = startBoottimeNs();
    if (startBoot > 0 && startBoot <= bootNow) {
        const uint64_t age = bootNow - startBoot;
        p.startNs = monoNow > age ? monoNow - age : 0;
        p.startUnixNs = unixNow - age;
    }
    p.rank = envInt({"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"});
    p.localRank = envInt({"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"});
    p.worldSize = envInt({"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"});
    p.localWorldSize = envInt({"LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE", "OMPI_COMM_WORLD_LOCAL_SIZE"});
    p.groupRank = envInt({"GROUP_RANK", "SLURM_NODEID"});
    p.runId = envString({"TORCHELASTIC_RUN_ID"});
    p.slurmJobId = envString({"SLURM_JOB_ID"});
    // Read when the report is written: a script that sets it before importing torch is seen.
    p.allocatorConfig = envString({"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"});
    return p;
}

} // namespace oomscope::track
