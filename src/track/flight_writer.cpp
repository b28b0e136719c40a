#include "track/flight_writer.h"

#include "common/paths.h"

#include "track/config.h"
#include "track/process_info.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

namespace oomscope::track {
namespace {

// The regions that grow, at their largest (the file's length: sparse) and reserved a chunk at a
// time as they fill (FlightFile::reserve).
constexpr size_t kJournalBytes = size_t(16) << 20;
constexpr size_t kLiveArenaBytes = size_t(32) << 20;
// 64 Ki physical allocations (3.5 MiB): PyTorch's expandable segments map 20 MiB pages, so
// 1.3 TB of them; XLA makes a few large ones.
constexpr size_t kVmmEntries = size_t(64) << 10;
constexpr size_t kPage = 4096;

std::atomic<FlightFile*> g_active{nullptr};

size_t roundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

void copyText(char* out, size_t size, const std::string& text)
{
    const size_t n = std::min(size - 1, text.size());
    std::memcpy(out, text.data(), n);
    out[n] = '\0';
}

bool isPythonToken(uint64_t word) { return (word >> 63) != 0; }

} // namespace

FlightFile* FlightFile::active() noexcept
{
    return g_active.load(std::memory_order_acquire);
}

namespace {

// Where each region starts: a 4 KiB header, the ring, the journal, the live arena, the VMM
// table, the step samples, the counters, the facts; and the file's size.
struct Layout {
    size_t ringOffset, journalOffset, liveOffset, vmmOffset, stepsOffset, countersOffset, factsOffset, bytes;
};

Layout layoutFor(size_t ringCapacity)
{
    Layout l;
    l.ringOffset = flight::kHeaderBytes;
    l.journalOffset = roundUp(l.ringOffset + ringCapacity * flight::kSlotBytes, kPage);
    l.liveOffset = l.journalOffset + kJournalBytes;
    l.vmmOffset = l.liveOffset + kLiveArenaBytes;
    l.stepsOffset = roundUp(l.vmmOffset + kVmmEntries * sizeof(flight::VmmEntry), kPage);
    l.countersOffset = l.stepsOffset + flight::kStepSlots * flight::kStepRecordBytes;
    l.factsOffset = roundUp(l.countersOffset + flight::kCounterSlots * sizeof(int64_t), kPage);
    l.bytes = l.factsOffset + flight::kFactsBytes;
    return l;
}

void writeHeader(flight::Header* h, const Layout& l, size_t ringCapacity, const report::Process& process)
{
    h->version = flight::kVersion;
    h->headerBytes = flight::kHeaderBytes;
    h->eventBytes = sizeof(Event);
    h->slotBytes = flight::kSlotBytes;
    h->liveEntryBytes = sizeof(LiveAllocation);
    h->liveShards = flight::kLiveShards;
    h->pid = uint64_t(getpid());
    h->ppid = uint64_t(process.ppid);
    h->startNs = process.startNs;
    h->startUnixNs = process.startUnixNs;
    h->fileBytes = l.bytes;
    h->ringOffset = l.ringOffset;
    h->ringCapacity = ringCapacity;
    h->journalOffset = l.journalOffset;
    h->journalBytes = kJournalBytes;
    h->liveOffset = l.liveOffset;
    h->liveBytes = kLiveArenaBytes;
    h->vmmOffset = l.vmmOffset;
    h->vmmCapacity = kVmmEntries;
    h->countersOffset = l.countersOffset;
    h->factsOffset = l.factsOffset;
    h->stepsOffset = l.stepsOffset;
    h->stepCapacity = flight::kStepSlots;
    const std::optional<int64_t>* job[flight::kJobCount] = {&process.rank, &process.localRank, &process.worldSize,
                                                           &process.localWorldSize, &process.groupRank};
    for (unsigned i = 0; i < flight::kJobCount; ++i) {
        if (*job[i]) {
            h->jobFields |= 1ull << i;
            h->jobValues[i] = **job[i];
        }
    }
    copyText(h->runId, sizeof(h->runId), process.runId.value_or(""));
    copyText(h->slurmJobId, sizeof(h->slurmJobId), process.slurmJobId.value_or(""));
    copyText(h->hostname, sizeof(h->hostname), process.hostname);
    copyText(h->cwd, sizeof(h->cwd), process.cwd);
    size_t at = 0;
    for (const std::string& arg : process.cmdline) {
        if (at + arg.size() + 1 >= sizeof(h->cmdline))
            break;
        std::memcpy(h->cmdline + at, arg.c_str(), arg.size() + 1);
        at += arg.size() + 1;
    }
    // The magic last: a reader never takes a half-made header for a file.
    uint64_t magic;
    std::memcpy(&magic, flight::kMagic, sizeof(magic));
    __atomic_store_n(reinterpret_cast<uint64_t*>(h->magic), magic, __ATOMIC_RELEASE);
}

std::string flightPath(const Config& config, const report::Process& process)
{
    std::string host = process.hostname.empty() ? "host" : process.hostname;
    for (char& c : host) {
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_')
            c = '_';
    }
    const std::string dir = config.outputDir.empty() ? "." : config.outputDir;
    return dir + "/oomscope-" + host + "-" + std::to_string(getpid()) + ".flight";
}

} // namespace

FlightFile* FlightFile::create(size_t ringCapacity) noexcept
{
    const Config& config = Config::get();
    if (!config.flight || g_active.load(std::memory_order_acquire))
        return nullptr;
    FlightFile* f = nullptr;
    try {
        if (const std::string unsafe = common::unsafeFolder(config.outputDir); !unsafe.empty()) {
            dprintf(2, "oomscope: %s\n", unsafe.c_str());  // refused, not a notice: OOMSCOPE_QUIET keeps it
            return nullptr;
        }
        f = createAt(flightPath(config, currentProcess()), ringCapacity);
    } catch (...) {
        return nullptr;
    }
    if (f)
        g_active.store(f, std::memory_order_release);
    return f;
}

FlightFile* FlightFile::createAt(const std::string& path, size_t ringCapacity) noexcept
{
    auto* f = new (std::nothrow) FlightFile();
    if (!f)
        return nullptr;
    try {
        const report::Process process = currentProcess();
        f->m_path = path;
        const Layout layout = layoutFor(ringCapacity);
        f->m_bytes = layout.bytes;
        f->m_regions[kJournal] = {layout.journalOffset, kJournalBytes, 0};
        f->m_regions[kArena] = {layout.liveOffset, kLiveArenaBytes, 0};
        f->m_regions[kVmm] = {layout.vmmOffset, kVmmEntries * sizeof(flight::VmmEntry), 0};
        f->m_regions[kSteps] = {layout.stepsOffset, flight::kStepSlots * flight::kStepRecordBytes, 0};
        f->m_fixedBytes = layout.journalOffset;  // the header and the ring
        f->m_countersOffset = layout.countersOffset;
        if (!f->openReserved()) {
            delete f;
            return nullptr;
        }
        f->m_owner = getpid();
        f->m_header = reinterpret_cast<flight::Header*>(f->m_base);
        writeHeader(f->m_header, layout, ringCapacity, process);
    } catch (...) {
        if (f->m_fd >= 0) {
            ::unlink(f->m_path.c_str());
            ::close(f->m_fd);
        }
        delete f;
        return nullptr;
    }
    return f;
}

// The file at m_path, m_bytes long, its blocks reserved, mapped. false with one notice (and
// nothing left on disk) when it cannot be.
bool FlightFile::openReserved()
{
    // A file-size limit below the file: fallocate would raise SIGXFSZ, which kills.
    rlimit limit{};
    if (getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < m_bytes) {
        dprintf(2, "oomscope: no flight-recorder file: %zu MiB exceed the file-size limit (ulimit -f)\n", m_bytes >> 20);
        return false;
    }
    // Never through a symlink, never over an existing file (a pid reused from another run's
    // leftover: that evidence stays).
    m_fd = ::open(m_path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (m_fd < 0) {
        dprintf(2, "oomscope: no flight-recorder file: cannot create %s: %s\n", m_path.c_str(), std::strerror(errno));
        return false;
    }
    auto fail = [&](const char* what, int err) {
        dprintf(2, "oomscope: no flight-recorder file: %s %s: %s\n", what, m_path.c_str(), std::strerror(err));
        ::unlink(m_path.c_str());
        ::close(m_fd);
        m_fd = -1;
        return false;
    };
    // The file at its full length, sparse; blocks reserved now for the header, the ring, the
    // counters and each growing region's first chunk, the rest as the regions fill: a write
    // through the mapping can never find the disk full (SIGBUS).
    if (::ftruncate(m_fd, off_t(m_bytes)) != 0)
        return fail("cannot size", errno);
    if (const int err = ::fallocate(m_fd, 0, 0, off_t(m_fixedBytes)) != 0 ? errno : 0)
        return fail("cannot reserve space for", err);
    if (const int err = ::fallocate(m_fd, 0, off_t(m_countersOffset), off_t(m_bytes - m_countersOffset)) != 0 ? errno : 0)
        return fail("cannot reserve space for", err);
    for (Region& r : m_regions) {
        const size_t first = std::min(kReserveChunk, r.maxBytes);
        if (const int err = ::fallocate(m_fd, 0, off_t(r.offset), off_t(first)) != 0 ? errno : 0)
            return fail("cannot reserve space for", err);
        __atomic_store_n(&r.reserved, first, __ATOMIC_RELEASE);
    }
    void* mem = ::mmap(nullptr, m_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, m_fd, 0);
    if (mem == MAP_FAILED)
        return fail("cannot map", errno);
    m_base = static_cast<char*>(mem);
    // On a tmpfs (a container's /tmp or working folder, /dev/shm) the file is RAM, taken from
    // the host: said once per process, with the ways to size or drop it.
    constexpr decltype(statfs::f_type) kTmpfsMagic = 0x01021994;
    struct statfs fs {};
    if (!Config::get().quiet && ::fstatfs(m_fd, &fs) == 0 && fs.f_type == kTmpfsMagic)
        dprintf(2, "oomscope: the flight-recorder file %s (%.1f MiB) is on a tmpfs: it is host memory "
                   "(OOMSCOPE_FLIGHT_MIB sizes it, OOMSCOPE_FLIGHT=0 turns it off, OOMSCOPE_OUTPUT_DIR moves it)\n",
                m_path.c_str(), double(reservedBytes()) / double(1 << 20));
    return true;
}

size_t FlightFile::reservedBytes() const noexcept
{
    size_t bytes = m_fixedBytes + (m_bytes - m_countersOffset);
    for (const Region& r : m_regions)
        bytes += __atomic_load_n(&r.reserved, __ATOMIC_ACQUIRE);
    return bytes;
}

bool FlightFile::reserve(RegionId id, size_t upTo) noexcept
{
    Region& r = m_regions[id];
    if (upTo <= __atomic_load_n(&r.reserved, __ATOMIC_ACQUIRE))
        return true;
    if (upTo > r.maxBytes)
        return false;
    std::lock_guard<std::mutex> lock(m_reserveMutex);
    const size_t reserved = r.reserved;
    if (upTo <= reserved)
        return true;
    // A forked child's private copy (no descriptor) grows nothing: its first write to a hole
    // would fault the file's page in first, which on a full tmpfs is a SIGBUS. Its own tables
    // stay in memory (the child's reports are made from memory).
    if (m_fd < 0)
        return false;
    // Doubling, in whole chunks: a region that fills steadily costs log(size) fallocate calls.
    const size_t want = std::min(r.maxBytes, std::max(roundUp(upTo, kReserveChunk), 2 * reserved));
    if (::fallocate(m_fd, 0, off_t(r.offset + reserved), off_t(want - reserved)) != 0) {
        // A nearly full disk: what is needed now, if that still fits.
        const size_t need = std::min(r.maxBytes, roundUp(upTo, kPage));
        if (::fallocate(m_fd, 0, off_t(r.offset + reserved), off_t(need - reserved)) != 0)
            return false;
        __atomic_store_n(&r.reserved, need, __ATOMIC_RELEASE);
        return true;
    }
    __atomic_store_n(&r.reserved, want, __ATOMIC_RELEASE);
    return true;
}

flight::VmmEntry* FlightFile::vmmEntries() const noexcept
{
    return reinterpret_cast<flight::VmmEntry*>(m_base + m_header->vmmOffset);
}

int64_t* FlightFile::counters() const noexcept
{
    return reinterpret_cast<int64_t*>(m_base + m_header->countersOffset);
}

void* FlightFile::allocLive(size_t bytes) noexcept
{
    bytes = roundUp(bytes, 64);
    uint64_t used = __atomic_load_n(&m_header->liveUsed, __ATOMIC_RELAXED);
    do {
        if (used + bytes > m_header->liveBytes)
            return nullptr;
    } while (!__atomic_compare_exchange_n(&m_header->liveUsed, &used, used + bytes, true, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    // Claimed, then reserved: bytes claimed by a call whose reservation failed stay unused.
    if (!reserve(kArena, used + bytes))
        return nullptr;
    return m_base + m_header->liveOffset + used;
}

void FlightFile::publishShard(size_t shard, const void* table, size_t capacity) noexcept
{
    if (shard >= flight::kLiveShards)
        return;
    flight::ShardEntry& e = m_header->shards[shard];
    const char* t = static_cast<const char*>(table);
    const bool inFile = t && t >= m_base && t < m_base + m_bytes;
    // The capacity first, the offset last (release): a reader that sees the new offset sees
    // its capacity and the table's contents.
    __atomic_store_n(&e.offset, uint64_t(0), __ATOMIC_RELEASE);
    __atomic_store_n(&e.capacity, uint64_t(capacity), __ATOMIC_RELEASE);
    __atomic_store_n(&e.offset, inFile ? uint64_t(t - m_base) : flight::kOutside, __ATOMIC_RELEASE);
}

bool FlightFile::append(uint32_t type, const void* a, size_t aBytes, const void* b, size_t bBytes) noexcept
{
    const size_t payload = aBytes + bBytes;
    if (payload > UINT32_MAX)
        return false;
    const size_t need = 8 + roundUp(payload, 8);
    const uint64_t used = m_header->journalUsed;
    if (used + need > m_header->journalBytes || !reserve(kJournal, used + need)) {
        __atomic_fetch_add(&m_header->journalFull, 1, __ATOMIC_RELAXED);
        return false;
    }
    char* at = m_base + m_header->journalOffset + used;
    std::memcpy(at + 8, a, aBytes);
    if (bBytes)
        std::memcpy(at + 8 + aBytes, b, bBytes);
    // The head word last: a reader stops at the first head that is still zero.
    __atomic_store_n(reinterpret_cast<uint64_t*>(at), (uint64_t(payload) << 32) | type, __ATOMIC_RELEASE);
    __atomic_store_n(&m_header->journalUsed, used + need, __ATOMIC_RELEASE);
    return true;
}

void FlightFile::apiName(uint16_t id, const char* name) noexcept
{
    if (!name)
        return;
    std::lock_guard<std::mutex> lock(m_journalMutex);
    const uint32_t word = id;
    append(flight::kApiName, &word, sizeof(word), name, std::strlen(name));
}

void FlightFile::pythonCode(uint32_t index, const std::string& file, const std::string& function,
                            const std::string& module) noexcept
{
    try {
        std::string text = file + '\0' + function + '\0' + module;
        std::lock_guard<std::mutex> lock(m_journalMutex);
        append(flight::kPythonCode, &index, sizeof(index), text.data(), text.size());
    } catch (...) {
    }
}

void FlightFile::stack(uint32_t id, const uint64_t* frames, uint32_t count) noexcept
{
    try {
        std::lock_guard<std::mutex> lock(m_journalMutex);
        for (uint32_t i = 0; i < count; ++i) {
            const uint64_t pc = frames[i];
            if (isPythonToken(pc))
                continue;
            const bool known = std::any_of(m_exec.begin(), m_exec.end(),
                                           [pc](const auto& r) { return pc >= r.first && pc < r.second; });
            if (!known && !m_unknownPages.count(pc >> 12))
                recordMappingsLocked(pc);
        }
        const uint32_t head[2] = {id, count};
        append(flight::kStack, head, sizeof(head), frames, size_t(count) * sizeof(uint64_t));
    } catch (...) {
    }
}

// The mapped files from /proc/self/maps (read, not dl_iterate_phdr: no loader lock taken inside
// a hook), each new one journaled once, so that the reader can symbolize after the process is
// gone.
void FlightFile::recordMappingsLocked(uint64_t pc)
{
    const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    std::string text;
    char buffer[16384];
    for (;;) {
        const ssize_t n = ::read(fd, buffer, sizeof(buffer));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        text.append(buffer, size_t(n));
    }
    ::close(fd);
    size_t pos = 0;
    while (pos < text.size()) {
        size_t end = text.find('\n', pos);
        if (end == std::string::npos)
            end = text.size();
        const std::string line = text.substr(pos, end - pos);
        pos = end + 1;
        unsigned long long start = 0, stop = 0, offset = 0;
        char perms[8] = {};
        int pathAt = 0;
        if (std::sscanf(line.c_str(), "%llx-%llx %7s %llx %*s %*s %n", &start, &stop, perms, &offset, &pathAt) < 4 ||
            pathAt <= 0 || size_t(pathAt) >= line.size() || line[size_t(pathAt)] != '/')
            continue;
        const std::string path = line.substr(size_t(pathAt));
        if (perms[2] == 'x' && std::none_of(m_exec.begin(), m_exec.end(), [&](const auto& r) { return r.first == start; }))
            m_exec.emplace_back(start, stop);
        if (!m_journaled.emplace(start, path).second)
            continue;
        const uint64_t words[3] = {start, stop, offset};
        append(flight::kMapping, words, sizeof(words), path.data(), path.size());
    }
    const bool known = std::any_of(m_exec.begin(), m_exec.end(), [pc](const auto& r) { return pc >= r.first && pc < r.second; });
    if (!known)
        m_unknownPages.insert(pc >> 12);
}

flight::FactsHeader* FlightFile::facts() const noexcept
{
    return reinterpret_cast<flight::FactsHeader*>(m_base + m_header->factsOffset);
}

namespace {

// A record under its sequence word: odd while written, even once whole (flight_format.h).
template <class Record>
void writeRecord(Record* at, const Record& value) noexcept
{
    const uint64_t seq = __atomic_load_n(&at->seq, __ATOMIC_RELAXED);
    const uint64_t odd = (seq | 1) + ((seq & 1) ? 2 : 0);  // a record left odd (a fork) stays behind
    __atomic_store_n(&at->seq, odd, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    std::memcpy(reinterpret_cast<char*>(at) + sizeof(uint64_t), reinterpret_cast<const char*>(&value) + sizeof(uint64_t),
                sizeof(Record) - sizeof(uint64_t));
    __atomic_store_n(&at->seq, odd + 1, __ATOMIC_RELEASE);
}

flight::SiteWord siteWord(uint32_t stack, int64_t device, uint64_t bytes)
{
    return flight::SiteWord{stack, int32_t(device), bytes};
}

} // namespace

void FlightFile::framework(const std::string& name) noexcept
{
    std::lock_guard<std::mutex> lock(m_factsMutex);
    flight::NameRecord value{};
    copyText(value.text, sizeof(value.text), name);
    writeRecord(&facts()->framework, value);
}

void FlightFile::countOomEpisode() noexcept
{
    __atomic_fetch_add(&facts()->oomEpisodes, 1, __ATOMIC_RELAXED);
}

void FlightFile::countFailedAllocation() noexcept
{
    __atomic_fetch_add(&facts()->failedAllocations, 1, __ATOMIC_RELAXED);
}

void FlightFile::devices(const std::vector<report::Device>& devices) noexcept
{
    std::lock_guard<std::mutex> lock(m_factsMutex);
    auto* records = reinterpret_cast<flight::DeviceFacts*>(m_base + m_header->factsOffset + flight::kFactsDevicesAt);
    size_t n = 0;
    for (const report::Device& d : devices) {
        if (n == flight::kFactDevices)
            break;
        flight::DeviceFacts r{};
        r.index = d.index;
        r.present = (d.totalBytes ? 1u : 0u) | (d.driverVersion ? 2u : 0u) | (d.runtimeVersion ? 4u : 0u) |
                    (d.limitBytes ? 8u : 0u);
        r.totalBytes = d.totalBytes.value_or(0);
        r.driverVersion = d.driverVersion.value_or(0);
        r.runtimeVersion = d.runtimeVersion.value_or(0);
        r.limitBytes = d.limitBytes.value_or(0);
        copyText(r.name, sizeof(r.name), d.name);
        copyText(r.uuid, sizeof(r.uuid), d.uuid);
        writeRecord(&records[n++], r);
    }
    __atomic_store_n(&facts()->devicesKnown, uint64_t(n), __ATOMIC_RELEASE);
}

void FlightFile::peak(const PeakSites& peak) noexcept
{
    if (peak.device < 0 || size_t(peak.device) >= flight::kFactDevices)
        return;
    std::lock_guard<std::mutex> lock(m_factsMutex);
    auto* records = reinterpret_cast<flight::PeakRecord*>(m_base + m_header->factsOffset + flight::kFactsPeaksAt);
    flight::PeakRecord r{};
    r.device = peak.device;
    r.bytes = peak.bytes;
    r.timeNs = peak.timeNs;
    r.otherBytes = peak.otherBytes;
    r.count = std::min(peak.stacks.size(), std::size(r.stacks));
    for (size_t i = 0; i < r.count; ++i)
        r.stacks[i] = siteWord(peak.stacks[i].first, peak.device, peak.stacks[i].second);
    writeRecord(&records[peak.device], r);
}

void FlightFile::clearPeaks() noexcept
{
    std::lock_guard<std::mutex> lock(m_factsMutex);
    auto* records = reinterpret_cast<flight::PeakRecord*>(m_base + m_header->factsOffset + flight::kFactsPeaksAt);
    for (size_t d = 0; d < flight::kFactDevices; ++d) {
        if (__atomic_load_n(&records[d].seq, __ATOMIC_RELAXED) == 0)
            continue;  // never written: a page never touched
        flight::PeakRecord none{};
        none.device = -1;
        writeRecord(&records[d], none);
    }
}

void FlightFile::step(const report::Step& step) noexcept
{
    if (step.index == 0)
        return;
    std::lock_guard<std::mutex> lock(m_factsMutex);
    const size_t slot = size_t((step.index - 1) % flight::kStepSlots);
    if (!reserve(kSteps, (slot + 1) * flight::kStepRecordBytes))
        return;
    auto* records = reinterpret_cast<flight::StepRecord*>(m_base + m_header->stepsOffset);
    static_assert(flight::kStepRecordBytes % alignof(flight::StepRecord) == 0);
    auto* at = reinterpret_cast<flight::StepRecord*>(reinterpret_cast<char*>(records) + slot * flight::kStepRecordBytes);
    flight::StepRecord r{};
    r.epoch = facts()->stepEpoch;
    r.index = step.index;
    r.timeNs = step.timeNs;
    r.source = uint32_t(step.source);
    for (const report::StepDevice& d : step.devices) {
        if (r.devices == flight::kStepDevices)
            break;
        flight::StepDeviceWord& w = r.device[r.devices++];
        w.device = d.device;
        w.trackedBytes = d.trackedBytes;
        w.present = (d.allocatedBytes ? 1u : 0u) | (d.reservedBytes ? 2u : 0u) | (d.inactiveSplitBytes ? 4u : 0u) |
                    (d.peakAllocatedBytes ? 8u : 0u) | (d.expandableSegments ? 16u : 0u) |
                    (d.expandableSegments.value_or(false) ? 32u : 0u) | (d.segmentCount ? 64u : 0u) |
                    (d.largestFreeBlockBytes ? 128u : 0u);
        w.allocatedBytes = d.allocatedBytes.value_or(0);
        w.reservedBytes = d.reservedBytes.value_or(0);
        w.inactiveSplitBytes = d.inactiveSplitBytes.value_or(0);
        w.peakAllocatedBytes = d.peakAllocatedBytes.value_or(0);
        w.segmentCount = d.segmentCount.value_or(0);
        w.largestFreeBlockBytes = d.largestFreeBlockBytes.value_or(0);
    }
    for (const report::StepSite& s : step.sites) {
        if (r.sites == flight::kStepSites)
            break;
        r.site[r.sites++] = siteWord(s.stack, s.device, s.bytes);
    }
    for (const report::StepSite& s : step.tensors) {
        if (r.tensors == flight::kStepSites)
            break;
        r.tensor[r.tensors++] = siteWord(s.stack, s.device, s.bytes);
    }
    writeRecord(at, r);
    __atomic_store_n(&facts()->stepHead, step.index, __ATOMIC_RELEASE);
}

void FlightFile::dropSteps() noexcept
{
    std::lock_guard<std::mutex> lock(m_factsMutex);
    flight::FactsHeader* f = facts();
    __atomic_store_n(&f->stepHead, uint64_t(0), __ATOMIC_RELEASE);
    __atomic_fetch_add(&f->stepEpoch, 1, __ATOMIC_RELEASE);
}

void FlightFile::remove() noexcept
{
    if (m_owner != 0 && getpid() == m_owner && !m_path.empty())
        ::unlink(m_path.c_str());
    m_owner = 0;
}

void FlightFile::detachInChild() noexcept
{
    new (&m_journalMutex) std::mutex();
    new (&m_reserveMutex) std::mutex();
    new (&m_factsMutex) std::mutex();
    m_owner = 0;
    if (m_base && m_fd >= 0) {
        // The same bytes, private from now on: the child's events never reach the parent's file.
        ::mmap(m_base, m_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, m_fd, 0);
    }
    if (m_fd >= 0)
        ::close(m_fd);
    m_fd = -1;
}

} // namespace oomscope::track
