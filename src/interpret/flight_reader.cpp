#include "interpret/flight_reader.h"

#include "track/flight_format.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <elf.h>
#include <fcntl.h>
#include <map>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace oomscope::interpret {
namespace {

namespace flight = track::flight;
namespace slot = track::slot;
using track::Event;
using track::LiveAllocation;
using track::TrackImage;

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
uint64_t roundUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

struct FileMapping {
    uint64_t start, end, offset;
    std::string path;
};

// What the file holds besides the image.
struct Extra {
    std::vector<FileMapping> mappings;
    bool journalCut = false;
};

bool readHeader(const unsigned char* data, size_t bytes, flight::Header* h, std::string* error)
{
    if (!readAt(data, bytes, 0, h) || std::memcmp(h->magic, flight::kMagic, sizeof(h->magic)) != 0) {
        *error = "not an oomscope flight-recorder file";
        return false;
    }
    if (h->version != flight::kVersion) {
        *error = "flight-recorder file version " + std::to_string(h->version) + " (this oomscope reads " +
                 std::to_string(flight::kVersion) + ")";
        return false;
    }
    if (h->headerBytes != flight::kHeaderBytes || h->eventBytes != sizeof(Event) || h->slotBytes != flight::kSlotBytes ||
        h->liveEntryBytes != sizeof(LiveAllocation) || h->liveShards != flight::kLiveShards) {
        *error = "flight-recorder file from an incompatible oomscope (record sizes differ)";
        return false;
    }
    if (!powerOfTwo(h->ringCapacity) || h->ringCapacity > (uint64_t(1) << 32) ||
        !inside(bytes, h->ringOffset, h->ringCapacity * flight::kSlotBytes) ||
        !inside(bytes, h->journalOffset, h->journalBytes) || !inside(bytes, h->liveOffset, h->liveBytes) ||
        (h->vmmOffset != 0 && (h->vmmCapacity > (uint64_t(1) << 32) ||
                               !inside(bytes, h->vmmOffset, h->vmmCapacity * sizeof(flight::VmmEntry)))) ||
        (h->countersOffset != 0 && !inside(bytes, h->countersOffset, flight::kCounterSlots * sizeof(int64_t)))) {
        *error = "flight-recorder file is truncated or damaged (regions outside the file)";
        return false;
    }
    h->hostname[sizeof(h->hostname) - 1] = '\0';
    h->cwd[sizeof(h->cwd) - 1] = '\0';
    h->cmdline[sizeof(h->cmdline) - 1] = '\0';
    return true;
}

// The ring: every slot whose sequence word says it holds its event whole, in time order.
void readRing(const unsigned char* data, const flight::Header& h, TrackImage* image)
{
    // The slots claimed so far (producers claim slot::kBlock at a time): each slot's 32-bit state names
    // its event's index modulo 2^31, the head gives the rest.
    uint64_t head = 0;
    std::memcpy(&head, data + flight::kRingHeadOffset, sizeof(head));
    std::vector<std::pair<uint64_t, Event>> slots;
    uint64_t pushedAtLeast = 0;  // the highest slot index seen + 1
    for (uint64_t i = 0; i < h.ringCapacity; ++i) {
        uint64_t words[slot::kWords];
        std::memcpy(words, data + h.ringOffset + i * flight::kSlotBytes, sizeof(words));
        const uint32_t state = slot::stateOf(words[0]);
        if (state == 0 || (state & 1) != 0 || head == 0)
            continue;
        const uint64_t low = (state / 2 - 1) & 0x7fffffffu;
        const uint64_t back = ((head - 1) - low) & 0x7fffffffu;
        if (back > head - 1)
            continue;  // an index below zero: damage
        const uint64_t s = head - 1 - back;
        if ((s & (h.ringCapacity - 1)) != i || s + h.ringCapacity + slot::kBlock * 1024 < head)
            continue;  // not this slot's, or from laps the head has long passed: damage
        slots.emplace_back(s, slot::unpack(words));
        pushedAtLeast = std::max(pushedAtLeast, s + 1);
    }
    std::stable_sort(slots.begin(), slots.end(), [](const auto& a, const auto& b) {
        return a.second.timeNs != b.second.timeNs ? a.second.timeNs < b.second.timeNs : a.first < b.first;
    });
    image->events.reserve(slots.size());
    for (const auto& [s, e] : slots)
        image->events.push_back(e);
    // Slots are claimed slot::kBlock at a time per thread: below the ring's capacity no event was
    // overwritten and the missing indices are claimed slots never filled. Past it, the count of
    // claimed slots stands in for the count of events (the per-thread counts are not in the file).
    const bool wrapped = pushedAtLeast > h.ringCapacity;
    image->pushed = wrapped ? pushedAtLeast : image->events.size();
    image->dropped = image->pushed - image->events.size();
    image->ringCapacity = h.ringCapacity;
    image->ringBytes = h.ringCapacity * flight::kSlotBytes;
    if (wrapped)
        image->notes.push_back("the ring had wrapped: events pushed and dropped are counted by claimed slots");
}

// The live map's published tables, then the VMM table's live slots, then the peaks.
bool readLive(const unsigned char* data, size_t bytes, const flight::Header& h, TrackImage* image, std::string* error)
{
    size_t inMemoryOnly = 0;
    for (const flight::ShardEntry& shard : h.shards) {
        if (shard.offset == 0)
            continue;
        if (shard.offset == flight::kOutside) {
            ++inMemoryOnly;
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
    if (inMemoryOnly > 0)
        image->notes.push_back(std::to_string(inMemoryOnly) +
                               " live-map tables outgrew the file's arena: their allocations are missing");
    for (uint64_t i = 0; h.vmmOffset != 0 && i < h.vmmCapacity; ++i) {
        flight::VmmEntry e;
        std::memcpy(&e, data + h.vmmOffset + i * sizeof(e), sizeof(e));
        if (e.state == flight::kVmmLive && e.allocation.size != 0)
            image->live.push_back(e.allocation);
    }
    if (h.vmmFull > 0)
        image->notes.push_back(std::to_string(h.vmmFull) + " VMM allocations did not fit the file's table: they are missing");
    return true;
}

// Each device's live bytes from the live entries, and its peak from the counters' region.
void readCounters(const unsigned char* data, const flight::Header& h, TrackImage* image)
{
    std::map<int, track::DeviceCounters> byDevice;
    for (const LiveAllocation& a : image->live) {
        if (a.device < 0 || size_t(a.memKind) >= size_t(track::MemKind::Count))
            continue;
        track::DeviceCounters& d = byDevice[a.device];
        d.device = a.device;
        d.bytes[size_t(a.memKind)] += a.size;
    }
    if (h.countersOffset != 0) {
        int64_t peaks[flight::kCounterSlots];
        std::memcpy(peaks, data + h.countersOffset, sizeof(peaks));
        for (size_t s = 1; s < flight::kCounterSlots; ++s) {
            if (peaks[s] <= 0)
                continue;
            track::DeviceCounters& d = byDevice[int(s - 1)];
            d.device = int(s - 1);
            d.peakDeviceBytes = uint64_t(peaks[s]);
        }
    }
    for (auto& [device, d] : byDevice) {
        d.peakDeviceBytes = std::max(d.peakDeviceBytes, d.tracked());
        image->counters.push_back(d);
    }
}

void readRecord(uint32_t type, const unsigned char* p, uint64_t payload, TrackImage* image, Extra* extra)
{
    switch (type) {
    case flight::kApiName:
        if (payload >= 4) {
            uint32_t id;
            std::memcpy(&id, p, 4);
            if (id <= UINT16_MAX) {
                if (id >= image->apiNames.size())
                    image->apiNames.resize(size_t(id) + 1);
                image->apiNames[id].assign(reinterpret_cast<const char*>(p + 4), payload - 4);
            }
        }
        return;
    case flight::kStack:
        if (payload >= 8) {
            uint32_t head[2];
            std::memcpy(head, p, 8);
            if (uint64_t(head[1]) * 8 == payload - 8) {
                std::vector<uint64_t> frames(head[1]);
                if (!frames.empty())
                    std::memcpy(frames.data(), p + 8, payload - 8);
                image->stacks[head[0]] = std::move(frames);
            }
        }
        return;
    case flight::kPythonCode:
        if (payload >= 4) {
            track::PythonCode code;
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
        return;
    case flight::kMapping:
        if (payload >= 24) {
            uint64_t words[3];
            std::memcpy(words, p, sizeof(words));
            FileMapping m{words[0], words[1], words[2], std::string(reinterpret_cast<const char*>(p + 24), payload - 24)};
            if (m.start < m.end)
                extra->mappings.push_back(std::move(m));
        }
        return;
    default:
        return;  // a newer record type: skipped
    }
}

// The journal, up to its first record that is not whole.
void readJournal(const unsigned char* data, const flight::Header& h, TrackImage* image, Extra* extra)
{
    const uint64_t used = std::min(h.journalUsed, h.journalBytes);
    uint64_t at = 0;
    while (at + 8 <= used) {
        uint64_t head;
        std::memcpy(&head, data + h.journalOffset + at, sizeof(head));
        const uint32_t type = uint32_t(head);
        const uint64_t payload = head >> 32;
        if (type == 0 || payload > used - at - 8) {
            extra->journalCut = true;
            break;
        }
        readRecord(type, data + h.journalOffset + at + 8, payload, image, extra);
        at += 8 + roundUp(payload, 8);
    }
    if (h.journalFull > 0)
        image->notes.push_back("the file's journal was full: " + std::to_string(h.journalFull) + " records are missing");
}

void readProcess(const flight::Header& h, TrackImage* image)
{
    report::Process& p = image->process;
    p.pid = int64_t(h.pid);
    p.ppid = int64_t(h.ppid);
    p.hostname = h.hostname;
    p.cwd = h.cwd;
    p.startNs = h.startNs;
    p.startUnixNs = h.startUnixNs;
    for (const char* arg = h.cmdline; *arg && arg < h.cmdline + sizeof(h.cmdline); arg += std::strlen(arg) + 1)
        p.cmdline.emplace_back(arg);
    std::optional<int64_t>* job[flight::kJobCount] = {&p.rank, &p.localRank, &p.worldSize, &p.localWorldSize,
                                                      &p.groupRank};
    for (unsigned i = 0; i < flight::kJobCount; ++i) {
        if (h.jobFields & (1ull << i))
            *job[i] = h.jobValues[i];
    }
    if (h.runId[0])
        p.runId = std::string(h.runId, strnlen(h.runId, sizeof(h.runId)));
    if (h.slurmJobId[0])
        p.slurmJobId = std::string(h.slurmJobId, strnlen(h.slurmJobId, sizeof(h.slurmJobId)));
    image->timeNs = image->events.empty() ? h.startNs : image->events.back().timeNs;
    image->options["ring_events"] = std::to_string(h.ringCapacity);
    image->distinctStacks = image->stacks.size();
}

// The files the process had mapped, as the symbolizer's modules: one per path, its load base
// from the mapping of the lowest file offset (0 for a program that is not position-independent,
// which only the file itself can tell: openFiles).
std::vector<track::LoadedModule> modulesOf(const std::vector<FileMapping>& mappings, bool openFiles)
{
    std::map<std::string, track::LoadedModule> byPath;
    std::map<std::string, uint64_t> lowestOffset;
    for (const FileMapping& m : mappings) {
        track::LoadedModule& module = byPath[m.path];
        module.path = m.path;
        module.ranges.emplace_back(m.start, m.end);
        auto it = lowestOffset.find(m.path);
        if (it == lowestOffset.end() || m.offset < it->second) {
            lowestOffset[m.path] = m.offset;
            module.base = m.start >= m.offset ? m.start - m.offset : 0;
        }
    }
    std::vector<track::LoadedModule> out;
    for (auto& [path, module] : byPath) {
        const int fd = openFiles ? ::open(path.c_str(), O_RDONLY | O_CLOEXEC) : -1;
        if (fd >= 0) {
            Elf64_Ehdr ehdr{};
            if (::read(fd, &ehdr, sizeof(ehdr)) == ssize_t(sizeof(ehdr)) && std::memcmp(ehdr.e_ident, ELFMAG, SELFMAG) == 0 &&
                ehdr.e_type == ET_EXEC)
                module.base = 0;
            ::close(fd);
        }
        out.push_back(std::move(module));
    }
    return out;
}

bool readFlight(const unsigned char* data, size_t bytes, TrackImage* image, Extra* extra, std::string* error)
{
    flight::Header h;
    if (!readHeader(data, bytes, &h, error))
        return false;
    readRing(data, h, image);
    if (!readLive(data, bytes, h, image, error))
        return false;
    readCounters(data, h, image);
    readJournal(data, h, image, extra);
    readProcess(h, image);
    return true;
}

} // namespace

bool readFlightImage(const unsigned char* data, size_t bytes, TrackImage* image, std::string* error)
{
    Extra extra;
    if (!readFlight(data, bytes, image, &extra, error))
        return false;
    image->modules = modulesOf(extra.mappings, false);
    return true;
}

namespace {

bool readFully(int fd, unsigned char* out, size_t offset, size_t length, std::string* error)
{
    while (length > 0) {
        const ssize_t n = ::pread(fd, out + offset, length, off_t(offset));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            *error = n < 0 ? std::string("cannot read: ") + std::strerror(errno) : "cannot read: the file shrank";
            return false;
        }
        offset += size_t(n);
        length -= size_t(n);
    }
    return true;
}

bool copyDataExtents(int fd, unsigned char* out, size_t bytes, std::string* error)
{
    const size_t head = std::min(bytes, flight::kHeaderBytes);
    if (!readFully(fd, out, 0, head, error))
        return false;
    if (head < sizeof(flight::kMagic) || std::memcmp(out, flight::kMagic, sizeof(flight::kMagic)) != 0)
        return true;  // readFlight says what it is not
    size_t at = head;
    while (at < bytes) {
        const off_t data = ::lseek(fd, off_t(at), SEEK_DATA);
        if (data < 0 && errno == ENXIO)
            break;  // holes to the end
        if (data < 0)  // no SEEK_DATA here: all of it
            return readFully(fd, out, at, bytes - at, error);
        if (size_t(data) >= bytes)
            break;
        off_t hole = ::lseek(fd, data, SEEK_HOLE);
        if (hole < 0 || size_t(hole) > bytes)
            hole = off_t(bytes);
        if (!readFully(fd, out, size_t(data), size_t(hole) - size_t(data), error))
            return false;
        at = size_t(hole);
    }
    return true;
}

} // namespace

bool readFlightFile(const std::string& path, TrackImage* image, std::string* error)
{
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *error = "cannot open " + path + ": " + std::strerror(errno);
        return false;
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
        ::close(fd);
        *error = path + " is not an oomscope flight-recorder file (not a regular, non-empty file)";
        return false;
    }
    const size_t bytes = size_t(st.st_size);
    void* mem = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) {
        ::close(fd);
        *error = "cannot map " + path + ": " + std::strerror(errno);
        return false;
    }
    // Read, not mapped: the file is sparse, and on a tmpfs a page fault on a hole allocates a
    // page (host memory) or, when the tmpfs is full, raises SIGBUS; read() gives holes as
    // zeros without either. Only the file's data extents are read into the zeroed buffer,
    // the header's magic first (a large file that is not a flight file is not read whole).
    const bool copied = copyDataExtents(fd, static_cast<unsigned char*>(mem), bytes, error);
    ::close(fd);
    if (!copied) {
        ::munmap(mem, bytes);
        *error = path + ": " + *error;
        return false;
    }
    Extra extra;
    std::string why;
    const bool ok = readFlight(static_cast<const unsigned char*>(mem), bytes, image, &extra, &why);
    ::munmap(mem, bytes);
    if (!ok) {
        *error = path + ": " + why;
        return false;
    }
    image->modules = modulesOf(extra.mappings, true);
    return true;
}

} // namespace oomscope::interpret
