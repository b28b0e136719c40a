#include "interpret/flight_reader.h"

#include "interpret/symbolize.h"
#include "track/flight_format.h"
#include "track/peak_compose.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <unordered_set>
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

// A running process's file is read twice (readFlightFile with `live`): what changed between the
// two reads was being written and is left out. `second` is null for a file no one writes.
struct Copies {
    const unsigned char* first;
    const unsigned char* second;
    bool same(uint64_t offset, size_t length) const
    {
        return !second || std::memcmp(first + offset, second + offset, length) == 0;
    }
    const unsigned char* latest() const { return second ? second : first; }
};

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
    if (bytes < flight::kHeaderBytes || !powerOfTwo(h->ringCapacity) || h->ringCapacity > (uint64_t(1) << 32) ||
        !inside(bytes, h->ringOffset, h->ringCapacity * flight::kSlotBytes) ||
        !inside(bytes, h->journalOffset, h->journalBytes) || !inside(bytes, h->liveOffset, h->liveBytes) ||
        (h->vmmOffset != 0 && (h->vmmCapacity > (uint64_t(1) << 32) ||
                               !inside(bytes, h->vmmOffset, h->vmmCapacity * sizeof(flight::VmmEntry)))) ||
        (h->countersOffset != 0 && !inside(bytes, h->countersOffset, flight::kCounterSlots * sizeof(int64_t)))) {
        *error = "flight-recorder file is truncated or damaged (regions outside the file)";
        return false;
    }
    if (h->factsOffset != 0 &&
        (!inside(bytes, h->factsOffset, flight::kFactsBytes) || h->stepCapacity > (uint64_t(1) << 20) ||
         !inside(bytes, h->stepsOffset, h->stepCapacity * flight::kStepRecordBytes))) {
        *error = "flight-recorder file is truncated or damaged (regions outside the file)";
        return false;
    }
    h->hostname[sizeof(h->hostname) - 1] = '\0';
    h->cwd[sizeof(h->cwd) - 1] = '\0';
    h->cmdline[sizeof(h->cmdline) - 1] = '\0';
    return true;
}

// The ring's head (slots claimed so far) in a copy of the header page.
uint64_t firstHead(const unsigned char* header)
{
    uint64_t head = 0;
    std::memcpy(&head, header + flight::kRingHeadOffset, sizeof(head));
    return head;
}

// The ring's slot positions read for the newest `events` events: [from, from + count) modulo
// the capacity, below the head the file's first read gave. Producers claim slot::kBlock slots
// at a time per thread, so the newest events by time can sit up to a block per thread below the
// head: the window is wider than `events` by 64 threads' blocks (a thread that writes rarely
// fills a block claimed long before, and its newest events can fall outside: a snapshot's short
// timeline is the newest of the window). The whole ring when the window would not be smaller.
struct RingWindow {
    uint64_t from = 0, count = 0;
};
RingWindow ringWindow(const flight::Header& h, uint64_t head, size_t events)
{
    constexpr uint64_t kSlack = slot::kBlock * 64;
    if (events == 0)
        return {};
    const uint64_t width = events >= h.ringCapacity ? h.ringCapacity : std::min<uint64_t>(h.ringCapacity, events + kSlack);
    if (width >= h.ringCapacity || width >= head)
        return {0, h.ringCapacity};
    return {(head - width) & (h.ringCapacity - 1), width};
}

// The ring: every slot of the window whose sequence word says it holds its event whole, in
// time order.
void readRing(const Copies& c, const flight::Header& h, TrackImage* image, RingWindow window)
{
    const unsigned char* data = c.first;
    uint64_t changed = 0;
    // The slots claimed so far (producers claim slot::kBlock at a time): each slot's 32-bit state names
    // its event's index modulo 2^31, the head gives the rest.
    uint64_t head = 0;  // the later read's: slots claimed after it would be skipped
    std::memcpy(&head, c.latest() + flight::kRingHeadOffset, sizeof(head));
    std::vector<std::pair<uint64_t, Event>> slots;
    uint64_t pushedAtLeast = 0;  // the highest slot index seen + 1
    for (uint64_t k = 0; k < window.count; ++k) {
        const uint64_t i = (window.from + k) & (h.ringCapacity - 1);
        uint64_t words[slot::kWords];
        std::memcpy(words, data + h.ringOffset + i * flight::kSlotBytes, sizeof(words));
        const uint32_t state = slot::stateOf(words[0]);
        if (state == 0 || (state & 1) != 0 || head == 0)
            continue;
        if (!c.same(h.ringOffset + i * flight::kSlotBytes, sizeof(words))) {
            ++changed;
            continue;
        }
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
    // A window (part of the ring read) counts by claimed slots too: the slots below it were not read.
    const bool wrapped = pushedAtLeast > h.ringCapacity;
    const bool whole = window.count == h.ringCapacity;
    image->pushed = wrapped || !whole ? pushedAtLeast : image->events.size();
    image->dropped = image->pushed - image->events.size();
    image->ringCapacity = h.ringCapacity;
    image->ringBytes = h.ringCapacity * flight::kSlotBytes;
    if (wrapped || !whole)
        image->notes.push_back(std::string(whole ? "the ring had wrapped" : "only the ring's newest slots were read") +
                               ": events pushed and dropped are counted by claimed slots");
    if (changed > 0)
        image->notes.push_back(std::to_string(changed) + " ring slots were rewritten while the file was read: left out");
}

// The live map's published tables, then the VMM table's live slots, then the peaks.
bool readLive(const Copies& c, size_t bytes, const flight::Header& h, TrackImage* image, std::string* error)
{
    const unsigned char* data = c.first;
    size_t inMemoryOnly = 0;
    uint64_t changed = 0;
    std::unordered_set<uint64_t> seen;  // an entry being moved inside its table shows twice
    const auto take = [&](const LiveAllocation& a, uint64_t offset, size_t length) {
        // Not the same in both reads, or not whole (a writer stopped between its stores: the
        // writer puts the address last, so this is damage or an older writer's file).
        if (!c.same(offset, length) || a.size == 0 ||
            size_t(a.memKind) >= size_t(track::MemKind::Count)) {
            ++changed;
            return;
        }
        if (c.second && !seen.insert(a.address).second)
            return;
        image->live.push_back(a);
    };
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
            const uint64_t at = shard.offset + i * sizeof(LiveAllocation);
            std::memcpy(&a, data + at, sizeof(a));
            if (a.address != 0)
                take(a, at, sizeof(a));
        }
    }
    if (inMemoryOnly > 0)
        image->notes.push_back(std::to_string(inMemoryOnly) +
                               " live-map tables outgrew the file's arena: their allocations are missing");
    for (uint64_t i = 0; h.vmmOffset != 0 && i < h.vmmCapacity; ++i) {
        flight::VmmEntry e;
        const uint64_t at = h.vmmOffset + i * sizeof(e);
        std::memcpy(&e, data + at, sizeof(e));
        if (e.state == flight::kVmmLive && e.allocation.size != 0) {
            if (!c.same(at, sizeof(e)))
                ++changed;
            else
                image->live.push_back(e.allocation);
        }
    }
    if (changed > 0)
        image->notes.push_back(std::to_string(changed) + " live entries changed while the file was read: left out");
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

// A record under its sequence word (flight_format.h): whole (even, not zero) and, in a running
// process's file, the same in both reads.
template <class Record>
bool readSeqRecord(const Copies& c, uint64_t offset, Record* out)
{
    std::memcpy(out, c.first + offset, sizeof(Record));
    return out->seq != 0 && (out->seq & 1) == 0 && c.same(offset, sizeof(Record));
}

report::StepSite siteOf(const flight::SiteWord& w)
{
    return report::StepSite{w.stack, w.device, w.bytes};
}

// The framework's name, the devices' facts, the peaks' compositions, the step samples.
void readFacts(const Copies& c, const flight::Header& h, TrackImage* image)
{
    if (h.factsOffset == 0)
        return;
    flight::FactsHeader facts;
    std::memcpy(&facts, c.first + h.factsOffset, sizeof(facts));
    image->oomEpisodes = facts.oomEpisodes;
    image->failedAllocations = facts.failedAllocations;
    flight::NameRecord name;
    if (readSeqRecord(c, h.factsOffset + offsetof(flight::FactsHeader, framework), &name))
        image->framework.assign(name.text, strnlen(name.text, sizeof(name.text)));
    for (uint64_t i = 0; i < std::min<uint64_t>(facts.devicesKnown, flight::kFactDevices); ++i) {
        flight::DeviceFacts r;
        if (!readSeqRecord(c, h.factsOffset + flight::kFactsDevicesAt + i * sizeof(r), &r))
            continue;
        report::Device d;
        d.index = r.index;
        d.name.assign(r.name, strnlen(r.name, sizeof(r.name)));
        d.uuid.assign(r.uuid, strnlen(r.uuid, sizeof(r.uuid)));
        if (r.present & 1)
            d.totalBytes = r.totalBytes;
        if (r.present & 2)
            d.driverVersion = r.driverVersion;
        if (r.present & 4)
            d.runtimeVersion = r.runtimeVersion;
        if (r.present & 8)
            d.limitBytes = r.limitBytes;
        image->devices.push_back(std::move(d));
    }
    for (uint64_t dev = 0; dev < flight::kFactDevices; ++dev) {
        flight::PeakRecord r;
        if (!readSeqRecord(c, h.factsOffset + flight::kFactsPeaksAt + dev * sizeof(r), &r) || r.device != int64_t(dev) ||
            r.bytes == 0)
            continue;
        track::PeakSites p;
        p.device = int(r.device);
        p.bytes = r.bytes;
        p.timeNs = r.timeNs;
        p.otherBytes = r.otherBytes;
        for (uint64_t i = 0; i < std::min<uint64_t>(r.count, std::size(r.stacks)); ++i)
            p.stacks.emplace_back(r.stacks[i].stack, r.stacks[i].bytes);
        image->peaks.push_back(std::move(p));
    }
    const uint64_t head = facts.stepHead;
    const uint64_t capacity = h.stepCapacity;
    // A count, not `index <= head`: a damaged head of 2^64 − 1 would wrap the index and never end.
    const uint64_t kept = std::min(head, capacity);
    for (uint64_t k = 0, index = head - kept + 1; k < kept; ++k, ++index) {
        flight::StepRecord r;
        const uint64_t at = h.stepsOffset + ((index - 1) % capacity) * flight::kStepRecordBytes;
        if (!readSeqRecord(c, at, &r) || r.index != index || r.epoch != facts.stepEpoch)
            continue;
        report::Step step;
        step.index = r.index;
        step.timeNs = r.timeNs;
        step.source = r.source == uint32_t(report::StepSource::Sample) ? report::StepSource::Sample : report::StepSource::Step;
        for (uint16_t i = 0; i < std::min<uint16_t>(r.devices, flight::kStepDevices); ++i) {
            const flight::StepDeviceWord& w = r.device[i];
            report::StepDevice d;
            d.device = w.device;
            d.trackedBytes = w.trackedBytes;
            const auto opt = [&](unsigned bit, uint64_t v) { return (w.present >> bit) & 1 ? std::optional<uint64_t>(v) : std::nullopt; };
            d.allocatedBytes = opt(0, w.allocatedBytes);
            d.reservedBytes = opt(1, w.reservedBytes);
            d.inactiveSplitBytes = opt(2, w.inactiveSplitBytes);
            d.peakAllocatedBytes = opt(3, w.peakAllocatedBytes);
            if ((w.present >> 4) & 1)
                d.expandableSegments = ((w.present >> 5) & 1) != 0;
            d.segmentCount = opt(6, w.segmentCount);
            d.largestFreeBlockBytes = opt(7, w.largestFreeBlockBytes);
            step.devices.push_back(d);
        }
        for (uint16_t i = 0; i < std::min<uint16_t>(r.sites, flight::kStepSites); ++i)
            step.sites.push_back(siteOf(r.site[i]));
        for (uint16_t i = 0; i < std::min<uint16_t>(r.tensors, flight::kStepSites); ++i)
            step.tensors.push_back(siteOf(r.tensor[i]));
        image->steps.push_back(std::move(step));
    }
}

// Each device whose peak grew since its last composition and still holds it: composed from the
// live entries now, as a running process's snapshot does.
void composeHeldPeaks(TrackImage* image)
{
    for (const track::DeviceCounters& d : image->counters) {
        auto kept = std::find_if(image->peaks.begin(), image->peaks.end(), [&](const auto& p) { return p.device == d.device; });
        if (d.tracked() == 0 || (kept != image->peaks.end() && d.peakDeviceBytes <= kept->bytes))
            continue;
        track::PeakSites now = track::composePeak(d.device, image->live, nullptr);
        if (now.bytes == 0 || (kept != image->peaks.end() && now.bytes < kept->bytes))
            continue;
        now.timeNs = image->timeNs;
        if (kept != image->peaks.end())
            *kept = std::move(now);
        else
            image->peaks.push_back(std::move(now));
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
void readJournal(const unsigned char* data, flight::Header h, TrackImage* image, Extra* extra)
{
    // The later read's journal: every stack an entry or event of the first read names was
    // journaled before it was used.
    std::memcpy(&h.journalUsed, data + offsetof(flight::Header, journalUsed), sizeof(h.journalUsed));
    std::memcpy(&h.journalFull, data + offsetof(flight::Header, journalFull), sizeof(h.journalFull));
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
// which only the file itself can tell: openFiles, which also reads each file's build id).
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
        ElfFileFacts facts;
        if (openFiles && readElfFileFacts(path, &facts)) {
            if (facts.fixedAddress)
                module.base = 0;
            module.buildId = facts.buildId;  // the symbolizer finds a separate debug file by it
        }
        out.push_back(std::move(module));
    }
    return out;
}

bool readFlight(const Copies& c, size_t bytes, TrackImage* image, Extra* extra, std::string* error,
                size_t events = kAllEvents)
{
    flight::Header h;
    if (!readHeader(c.first, bytes, &h, error))
        return false;
    if (events > 0)
        readRing(c, h, image, ringWindow(h, firstHead(c.first), events));
    if (!readLive(c, bytes, h, image, error))
        return false;
    readCounters(c.first, h, image);
    readJournal(c.latest(), h, image, extra);
    readFacts(c, h, image);
    readProcess(h, image);
    composeHeldPeaks(image);
    return true;
}

} // namespace

bool readFlightImage(const unsigned char* data, size_t bytes, TrackImage* image, std::string* error)
{
    Extra extra;
    if (!readFlight(Copies{data, nullptr}, bytes, image, &extra, error))
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

// The file's data extents into out (holes stay zero; the header first: a file that is not a
// flight file is not read further). With `twice`, each 16 KiB piece is read into out and at
// once again into twice: a record that is the same in both was not being written while read
// (the two reads of a piece are microseconds apart, not the whole file's read). A record that
// straddles two pieces would pair one piece's two reads with the other's, later ones (a live
// entry erased between them read as its address with an empty slot's tail, the same in both):
// the tables whose records do not divide a page (live entries, VMM entries, the facts) are read
// again in pieces cut at their records' bounds. Then the header and the journal once more into
// twice: every stack a record of either read names was journaled before that record was
// written, so the later journal names it.
bool copyDataExtents(int fd, unsigned char* out, size_t bytes, std::string* error, unsigned char* twice = nullptr,
                     size_t events = kAllEvents)
{
    const size_t head = std::min(bytes, flight::kHeaderBytes);
    if (!readFully(fd, out, 0, head, error))
        return false;
    if (head < sizeof(flight::kMagic) || std::memcmp(out, flight::kMagic, sizeof(flight::kMagic)) != 0)
        return true;  // readFlight says what it is not
    // The ring's bytes outside the window of the newest events (all of them without events)
    // are left unread (zero): skip, sorted, at most two ranges.
    std::vector<std::pair<size_t, size_t>> skip;
    if (events != kAllEvents && head == flight::kHeaderBytes) {
        flight::Header h;
        std::memcpy(&h, out, sizeof(h));
        const size_t ring = size_t(h.ringOffset), slotBytes = flight::kSlotBytes;
        if (h.ringOffset >= head && h.ringOffset < bytes && h.ringCapacity <= (bytes - h.ringOffset) / slotBytes &&
            (h.ringCapacity & (h.ringCapacity - 1)) == 0) {  // readHeader refuses a capacity not a power of two
            const RingWindow w = ringWindow(h, firstHead(out), events);
            const size_t end = ring + size_t(h.ringCapacity) * slotBytes;
            const size_t from = ring + size_t(w.from) * slotBytes, to = from + size_t(w.count) * slotBytes;
            if (w.count == 0)
                skip = {{ring, end}};
            else if (to <= end)
                skip = {{ring, from}, {to, end}};
            else
                skip = {{to - (end - ring), from}};  // the window wraps past the ring's end
        }
    }
    // A piece whose two reads differ is read twice again, a few times: on a busy machine the
    // reader is often preempted between the reads, which widens the window.
    constexpr size_t kPiece = size_t(16) << 10;
    constexpr int kAttempts = 4;
    const auto copyAll = [&](size_t from, size_t to, size_t record = 1) {
        const size_t piece = std::max<size_t>(1, kPiece / record) * record;
        for (size_t at = from; at < to; at += piece) {
            const size_t n = std::min(piece, to - at);
            for (int attempt = 0; attempt < (twice ? kAttempts : 1); ++attempt) {
                if (!readFully(fd, out, at, n, error) || (twice && !readFully(fd, twice, at, n, error)))
                    return false;
                if (!twice || std::memcmp(out + at, twice + at, n) == 0)
                    break;
            }
        }
        return true;
    };
    const auto copy = [&](size_t from, size_t to, size_t record = 1) {
        for (const auto& [a, b] : skip) {
            if (b <= from || a >= to || a == b)
                continue;
            if (a > from && !copyAll(from, a, record))
                return false;
            from = std::max(from, b);
        }
        return from >= to || copyAll(from, to, record);
    };
    size_t at = head;
    while (at < bytes) {
        const off_t data = ::lseek(fd, off_t(at), SEEK_DATA);
        if (data < 0 && errno == ENXIO)
            break;  // holes to the end
        if (data < 0) {  // no SEEK_DATA here: all of it
            if (!copy(at, bytes))
                return false;
            break;
        }
        if (size_t(data) >= bytes)
            break;
        off_t hole = ::lseek(fd, data, SEEK_HOLE);
        if (hole < 0 || size_t(hole) > bytes)
            hole = off_t(bytes);
        if (!copy(size_t(data), size_t(hole)))
            return false;
        at = size_t(hole);
    }
    if (!twice)
        return true;
    flight::Header h;
    std::memcpy(&h, out, std::min(sizeof(h), head));
    const auto records = [&](uint64_t offset, uint64_t count, size_t record) {
        // Bounds only: readHeader judges the rest.
        const uint64_t length = count * record;
        return offset == 0 || count > bytes / record || offset > bytes || length > bytes - offset ||
               copy(size_t(offset), size_t(offset + length), record);
    };
    for (const flight::ShardEntry& shard : h.shards)
        if (shard.offset != flight::kOutside && !records(shard.offset, shard.capacity, sizeof(LiveAllocation)))
            return false;
    if (!records(h.vmmOffset, h.vmmCapacity, sizeof(flight::VmmEntry)) || !records(h.factsOffset, 1, flight::kFactsBytes))
        return false;
    if (!readFully(fd, twice, 0, head, error))
        return false;
    std::memcpy(&h, twice, std::min(sizeof(h), head));
    const uint64_t used = std::min(h.journalUsed, h.journalBytes);
    if (head == flight::kHeaderBytes && h.journalOffset >= head && h.journalOffset <= bytes && used <= bytes - h.journalOffset)
        return readFully(fd, twice, size_t(h.journalOffset), size_t(used), error);
    return true;
}

} // namespace

namespace {

// Zeroed anonymous memory for a copy of the file (holes read as zero), or nullptr.
unsigned char* anonymous(size_t bytes, const std::string& path, std::string* error)
{
    void* mem = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mem == MAP_FAILED) {
        *error = "cannot map " + path + ": " + std::strerror(errno);
        return nullptr;
    }
    return static_cast<unsigned char*>(mem);
}

// The file's bytes (and, for a live file, the second read: copyDataExtents).
bool readCopies(int fd, size_t bytes, const std::string& path, std::string* error, unsigned char* first,
                unsigned char* second, size_t events)
{
    // Read, not mapped: the file is sparse, and on a tmpfs a page fault on a hole allocates a
    // page (host memory) or, when the tmpfs is full, raises SIGBUS; read() gives holes as
    // zeros without either. Only the file's data extents are read into the zeroed buffer,
    // the header's magic first (a large file that is not a flight file is not read whole).
    if (!copyDataExtents(fd, first, bytes, error, second, events)) {
        *error = path + ": " + *error;
        return false;
    }
    return true;
}

} // namespace

FlightProblem flightFileProblem(const std::string& path)
{
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == EACCES || errno == EPERM ? FlightProblem::Permission : FlightProblem::Damaged;
    flight::Header h{};
    ssize_t n;
    do
        n = ::pread(fd, &h, sizeof(h), 0);
    while (n < 0 && errno == EINTR);
    ::close(fd);
    if (n != ssize_t(sizeof(h)) || std::memcmp(h.magic, flight::kMagic, sizeof(h.magic)) != 0)
        return FlightProblem::Damaged;
    const bool ours = h.version == flight::kVersion && h.headerBytes == flight::kHeaderBytes &&
                      h.eventBytes == sizeof(Event) && h.slotBytes == flight::kSlotBytes &&
                      h.liveEntryBytes == sizeof(LiveAllocation) && h.liveShards == flight::kLiveShards;
    return ours ? FlightProblem::Damaged : FlightProblem::Version;
}

const char* flightProblemName(FlightProblem p)
{
    switch (p) {
    case FlightProblem::Permission: return "permission";
    case FlightProblem::Version: return "version";
    case FlightProblem::Damaged: return "damaged";
    }
    return "damaged";
}

bool readFlightFile(const std::string& path, TrackImage* image, std::string* error, FlightRead how)
{
    const bool live = how.live;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        const int e = errno;
        *error = "cannot open " + path + ": " + std::strerror(e) +
                 (e == EACCES ? " (a flight file is its owner's alone: run as that user)" : "");
        return false;
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
        ::close(fd);
        *error = path + " is not an oomscope flight-recorder file (not a regular, non-empty file)";
        return false;
    }
    const size_t bytes = size_t(st.st_size);
    unsigned char* first = anonymous(bytes, path, error);
    unsigned char* second = first && live ? anonymous(bytes, path, error) : nullptr;
    bool ok = first && (second || !live) && readCopies(fd, bytes, path, error, first, second, how.events);
    ::close(fd);
    Extra extra;
    std::string why;
    if (ok && !(ok = readFlight(Copies{first, second}, bytes, image, &extra, &why, how.events)))
        *error = path + ": " + why;
    for (unsigned char* copy : {first, second}) {
        if (copy)
            ::munmap(copy, bytes);
    }
    if (!ok)
        return false;
    image->modules = modulesOf(extra.mappings, true);
    return true;
}

} // namespace oomscope::interpret
