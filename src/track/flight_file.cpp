#include "track/flight_file.h"

#include "track/config.h"
#include "track/process_info.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

namespace oomscope::track {
namespace {

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

FlightFile* FlightFile::create(size_t ringCapacity) noexcept
{
    const Config& config = Config::get();
    if (!config.flight || g_active.load(std::memory_order_acquire))
        return nullptr;
    auto* f = new (std::nothrow) FlightFile();
    if (!f)
        return nullptr;
    try {
        const report::Process process = currentProcess();
        std::string host = process.hostname.empty() ? "host" : process.hostname;
        for (char& c : host) {
            if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_')
                c = '_';
        }
        const std::string dir = config.outputDir.empty() ? "." : config.outputDir;
        f->m_path = dir + "/oomscope-" + host + "-" + std::to_string(getpid()) + ".flight";
        const size_t ringBytes = ringCapacity * flight::kSlotBytes;
        const size_t ringOffset = flight::kHeaderBytes;
        const size_t journalOffset = roundUp(ringOffset + ringBytes, kPage);
        const size_t liveOffset = journalOffset + kJournalBytes;
        const size_t vmmOffset = liveOffset + kLiveArenaBytes;
        f->m_bytes = roundUp(vmmOffset + kVmmEntries * sizeof(flight::VmmEntry), kPage);
        // A file-size limit below the file: fallocate would raise SIGXFSZ, which kills.
        rlimit limit{};
        if (getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < f->m_bytes) {
            dprintf(2, "oomscope: no flight-recorder file: %zu MiB exceed the file-size limit (ulimit -f)\n",
                    f->m_bytes >> 20);
            delete f;
            return nullptr;
        }
        // Never through a symlink, never over an existing file (a pid reused from another run's
        // leftover: that evidence stays).
        f->m_fd = ::open(f->m_path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (f->m_fd < 0) {
            dprintf(2, "oomscope: no flight-recorder file: cannot create %s: %s\n", f->m_path.c_str(), std::strerror(errno));
            delete f;
            return nullptr;
        }
        auto fail = [&](const char* what, int err) {
            dprintf(2, "oomscope: no flight-recorder file: %s %s: %s\n", what, f->m_path.c_str(), std::strerror(err));
            ::unlink(f->m_path.c_str());
            ::close(f->m_fd);
            delete f;
            return static_cast<FlightFile*>(nullptr);
        };
        // Reserved now: a write through the mapping can never find the disk full (SIGBUS).
        if (const int err = ::fallocate(f->m_fd, 0, 0, off_t(f->m_bytes)) != 0 ? errno : 0)
            return fail("cannot reserve space for", err);
        void* mem = ::mmap(nullptr, f->m_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, f->m_fd, 0);
        if (mem == MAP_FAILED)
            return fail("cannot map", errno);
        f->m_base = static_cast<char*>(mem);
        f->m_owner = getpid();
        flight::Header* h = reinterpret_cast<flight::Header*>(f->m_base);
        f->m_header = h;
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
        h->fileBytes = f->m_bytes;
        h->ringOffset = ringOffset;
        h->ringCapacity = ringCapacity;
        h->journalOffset = journalOffset;
        h->journalBytes = kJournalBytes;
        h->liveOffset = liveOffset;
        h->liveBytes = kLiveArenaBytes;
        h->vmmOffset = vmmOffset;
        h->vmmCapacity = kVmmEntries;
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
    } catch (...) {
        if (f->m_fd >= 0) {
            ::unlink(f->m_path.c_str());
            ::close(f->m_fd);
        }
        delete f;
        return nullptr;
    }
    g_active.store(f, std::memory_order_release);
    return f;
}

flight::VmmEntry* FlightFile::vmmEntries() const noexcept
{
    return reinterpret_cast<flight::VmmEntry*>(m_base + m_header->vmmOffset);
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
    if (used + need > m_header->journalBytes) {
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

void FlightFile::remove() noexcept
{
    if (m_owner != 0 && getpid() == m_owner && !m_path.empty())
        ::unlink(m_path.c_str());
    m_owner = 0;
}

void FlightFile::detachInChild() noexcept
{
    new (&m_journalMutex) std::mutex();
    m_owner = 0;
    if (m_base && m_fd >= 0) {
        // The same bytes, private from now on: the child's events never reach the parent's file.
        ::mmap(m_base, m_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, m_fd, 0);
    }
    if (m_fd >= 0)
        ::close(m_fd);
    m_fd = -1;
}

// ---- Reading ----

namespace {

template <class T>
bool readAt(const unsigned char* data, size_t bytes, uint64_t offset, T* out)
{
    if (offset > bytes || bytes - offset < sizeof(T))
        return false;
    std::memcpy(out, data + offset, sizeof(T));
    return true;
}

bool inside(size_t bytes, uint64_t offset, uint64_t length)
{
    return offset <= bytes && length <= bytes - offset;
}

bool powerOfTwo(uint64_t n) { return n != 0 && (n & (n - 1)) == 0; }

} // namespace

bool readFlightImage(const unsigned char* data, size_t bytes, FlightImage* image, std::string* error)
{
    flight::Header& h = image->header;
    if (!readAt(data, bytes, 0, &h) || std::memcmp(h.magic, flight::kMagic, sizeof(h.magic)) != 0) {
        *error = "not an oomscope flight-recorder file";
        return false;
    }
    if (h.version != flight::kVersion) {
        *error = "flight-recorder file version " + std::to_string(h.version) + " (this oomscope reads " +
                 std::to_string(flight::kVersion) + ")";
        return false;
    }
    if (h.headerBytes != flight::kHeaderBytes || h.eventBytes != sizeof(Event) || h.slotBytes != flight::kSlotBytes ||
        h.liveEntryBytes != sizeof(LiveAllocation) || h.liveShards != flight::kLiveShards) {
        *error = "flight-recorder file from an incompatible oomscope (record sizes differ)";
        return false;
    }
    if (!powerOfTwo(h.ringCapacity) || h.ringCapacity > (uint64_t(1) << 32) ||
        !inside(bytes, h.ringOffset, h.ringCapacity * flight::kSlotBytes) || !inside(bytes, h.journalOffset, h.journalBytes) ||
        !inside(bytes, h.liveOffset, h.liveBytes)) {
        *error = "flight-recorder file is truncated or damaged (regions outside the file)";
        return false;
    }
    h.hostname[sizeof(h.hostname) - 1] = '\0';
    h.cwd[sizeof(h.cwd) - 1] = '\0';
    h.cmdline[sizeof(h.cmdline) - 1] = '\0';

    // The ring: every slot whose sequence word says it holds its event whole.
    std::vector<std::pair<uint64_t, Event>> slots;
    for (uint64_t i = 0; i < h.ringCapacity; ++i) {
        const unsigned char* slot = data + h.ringOffset + i * flight::kSlotBytes;
        uint64_t seq;
        std::memcpy(&seq, slot, sizeof(seq));
        if (seq == 0 || (seq & 1) != 0)
            continue;
        const uint64_t s = seq / 2 - 1;
        if ((s & (h.ringCapacity - 1)) != i)
            continue;  // not this slot's: damage
        Event e;
        std::memcpy(&e, slot + 8, sizeof(Event));
        slots.emplace_back(s, e);
        image->pushedAtLeast = std::max(image->pushedAtLeast, s + 1);
    }
    std::stable_sort(slots.begin(), slots.end(), [](const auto& a, const auto& b) {
        return a.second.timeNs != b.second.timeNs ? a.second.timeNs < b.second.timeNs : a.first < b.first;
    });
    image->events.reserve(slots.size());
    for (const auto& [s, e] : slots)
        image->events.push_back(e);

    // The live map: each shard's published table.
    for (const flight::ShardEntry& shard : h.shards) {
        if (shard.offset == 0)
            continue;
        if (shard.offset == flight::kOutside) {
            ++image->shardsInMemoryOnly;
            continue;
        }
        if (!powerOfTwo(shard.capacity) || shard.offset < h.liveOffset ||
            shard.capacity > h.liveBytes / sizeof(LiveAllocation) ||
            !inside(bytes, shard.offset, shard.capacity * sizeof(LiveAllocation)) ||
            shard.offset + shard.capacity * sizeof(LiveAllocation) > h.liveOffset + h.liveBytes) {
            *error = "flight-recorder file is damaged (a live table outside its region)";
            return false;
        }
        for (uint64_t i = 0; i < shard.capacity; ++i) {
            LiveAllocation a;
            std::memcpy(&a, data + shard.offset + i * sizeof(LiveAllocation), sizeof(a));
            if (a.address != 0)
                image->live.push_back(a);
        }
    }

    // The VMM table's region (files made before it have none: offset 0).
    if (h.vmmOffset != 0) {
        if (h.vmmCapacity > (uint64_t(1) << 32) || !inside(bytes, h.vmmOffset, h.vmmCapacity * sizeof(flight::VmmEntry))) {
            *error = "flight-recorder file is truncated or damaged (regions outside the file)";
            return false;
        }
        image->vmmRegion = true;
        image->vmmNotKept = h.vmmFull;
        for (uint64_t i = 0; i < h.vmmCapacity; ++i) {
            flight::VmmEntry e;
            std::memcpy(&e, data + h.vmmOffset + i * sizeof(e), sizeof(e));
            if (e.state == flight::kVmmLive && e.allocation.size != 0) {
                image->live.push_back(e.allocation);
                ++image->liveVmm;
            }
        }
    }

    // The journal, up to its first record that is not whole.
    const uint64_t used = std::min(h.journalUsed, h.journalBytes);
    uint64_t at = 0;
    while (at + 8 <= used) {
        uint64_t head;
        std::memcpy(&head, data + h.journalOffset + at, sizeof(head));
        const uint32_t type = uint32_t(head);
        const uint64_t payload = head >> 32;
        if (type == 0 || payload > used - at - 8) {
            image->journalCut = true;
            break;
        }
        const unsigned char* p = data + h.journalOffset + at + 8;
        switch (type) {
        case flight::kApiName:
            if (payload >= 4) {
                uint32_t id;
                std::memcpy(&id, p, 4);
                if (id <= UINT16_MAX)
                    image->apiNames.emplace_back(uint16_t(id), std::string(reinterpret_cast<const char*>(p + 4), payload - 4));
            }
            break;
        case flight::kStack:
            if (payload >= 8) {
                uint32_t head2[2];
                std::memcpy(head2, p, 8);
                if (uint64_t(head2[1]) * 8 == payload - 8) {
                    std::vector<uint64_t> frames(head2[1]);
                    if (!frames.empty())
                        std::memcpy(frames.data(), p + 8, payload - 8);
                    image->stacks.emplace_back(head2[0], std::move(frames));
                }
            }
            break;
        case flight::kPythonCode:
            if (payload >= 4) {
                FlightImage::Code code;
                std::memcpy(&code.index, p, 4);
                const std::string text(reinterpret_cast<const char*>(p + 4), payload - 4);
                const size_t a = text.find('\0');
                const size_t b = a == std::string::npos ? std::string::npos : text.find('\0', a + 1);
                if (b != std::string::npos) {
                    code.file = text.substr(0, a);
                    code.function = text.substr(a + 1, b - a - 1);
                    code.module = text.substr(b + 1);
                    image->pythonCodes.push_back(std::move(code));
                }
            }
            break;
        case flight::kMapping:
            if (payload >= 24) {
                FlightImage::Mapping m;
                uint64_t words[3];
                std::memcpy(words, p, sizeof(words));
                m.start = words[0];
                m.end = words[1];
                m.offset = words[2];
                m.path.assign(reinterpret_cast<const char*>(p + 24), payload - 24);
                if (m.start < m.end)
                    image->mappings.push_back(std::move(m));
            }
            break;
        default:
            break;  // a newer record type: skipped
        }
        at += 8 + roundUp(payload, 8);
    }
    return true;
}

} // namespace oomscope::track
