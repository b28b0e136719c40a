#include "interpret/recover.h"

#include "track/flight_file.h"
#include "interpret/report_parts.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <elf.h>
#include <fcntl.h>
#include <map>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace oomscope::track {
namespace {

// The files the process had mapped, as the symbolizer's modules: one per path, its load base
// from the mapping of the lowest file offset (0 for a program that is not position-independent).
std::vector<LoadedModule> modulesOf(const std::vector<FlightImage::Mapping>& mappings)
{
    std::map<std::string, LoadedModule> byPath;
    std::map<std::string, uint64_t> lowestOffset;
    for (const FlightImage::Mapping& m : mappings) {
        LoadedModule& module = byPath[m.path];
        module.path = m.path;
        module.ranges.emplace_back(m.start, m.end);
        auto it = lowestOffset.find(m.path);
        if (it == lowestOffset.end() || m.offset < it->second) {
            lowestOffset[m.path] = m.offset;
            module.base = m.start >= m.offset ? m.start - m.offset : 0;
        }
    }
    std::vector<LoadedModule> out;
    for (auto& [path, module] : byPath) {
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
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

std::string describeProcess(const flight::Header& h)
{
    std::string what = "pid " + std::to_string(h.pid);
    if (h.cmdline[0])
        what += " (" + std::string(h.cmdline) + ")";
    return what;
}

} // namespace

bool recoverReport(const std::string& flightPath, report::Report* out, std::string* error)
{
    const int fd = ::open(flightPath.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *error = "cannot open " + flightPath + ": " + std::strerror(errno);
        return false;
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
        ::close(fd);
        *error = flightPath + " is not an oomscope flight-recorder file (not a regular, non-empty file)";
        return false;
    }
    const size_t bytes = size_t(st.st_size);
    void* mem = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (mem == MAP_FAILED) {
        *error = "cannot map " + flightPath + ": " + std::strerror(errno);
        return false;
    }
    FlightImage image;
    std::string why;
    const bool ok = readFlightImage(static_cast<const unsigned char*>(mem), bytes, &image, &why);
    ::munmap(mem, bytes);
    if (!ok) {
        *error = flightPath + ": " + why;
        return false;
    }
    const flight::Header& h = image.header;

    report::Report r;
    r.tool.version = OOMSCOPE_VERSION;
    r.tool.options["recovered_from"] = flightPath;
    r.tool.options["ring_events"] = std::to_string(h.ringCapacity);

    r.process.pid = int64_t(h.pid);
    r.process.ppid = int64_t(h.ppid);
    r.process.hostname = h.hostname;
    r.process.cwd = h.cwd;
    r.process.startNs = h.startNs;
    r.process.startUnixNs = h.startUnixNs;
    for (const char* arg = h.cmdline; *arg && arg < h.cmdline + sizeof(h.cmdline); arg += std::strlen(arg) + 1)
        r.process.cmdline.emplace_back(arg);

    r.trigger.kind = "recovered";
    r.trigger.timeNs = image.events.empty() ? h.startNs : image.events.back().timeNs;
    r.trigger.message = describeProcess(h) +
                        " ended without writing a report (SIGKILL, the OOM killer or a crash); recovered from its "
                        "flight-recorder file";

    // Live memory by device: what the live tables held when the process ended.
    std::map<int64_t, report::MemoryRow> rows;
    for (const LiveAllocation& a : image.live) {
        report::MemoryRow& row = rows[a.device];
        row.device = a.device;
        row.byKind[memKindName(a.memKind)] += a.size;
        if (a.memKind == MemKind::Device)
            row.trackedBytes += a.size;
    }
    for (auto& [device, row] : rows) {
        for (size_t k = 0; k < size_t(MemKind::Count); ++k)
            row.byKind.emplace(memKindName(MemKind(k)), 0);
        for (const char* source : {"torch", "nccl", "cublas", "cudnn", "jax", "cupy", "other"})
            row.bySource[source] = 0;
        row.peakTrackedBytes = row.trackedBytes;  // the file keeps no peak: at least what was live
        r.memory.push_back(row);
    }
    r.sites = liveSites(image.live);

    // Timeline.
    std::vector<std::string> apiNames(1, "unknown");
    for (const auto& [id, name] : image.apiNames) {
        if (id >= apiNames.size())
            apiNames.resize(size_t(id) + 1, "unknown");
        apiNames[id] = name;
    }
    std::set<uint32_t> referenced;
    r.timeline.capacity = h.ringCapacity;
    r.timeline.rows.reserve(image.events.size());
    for (const Event& e : image.events) {
        report::TimelineRow row;
        row.timeNs = e.timeNs;
        row.kind = r.timeline.intern(size_t(e.kind) < size_t(EventKind::Count) ? eventKindName(e.kind) : "unknown");
        row.device = e.device;
        row.address = e.address;
        row.size = e.size;
        row.stream = e.stream;
        row.api = r.timeline.intern(e.api < apiNames.size() ? apiNames[e.api] : "unknown");
        row.stack = e.stack;
        row.thread = e.thread;
        row.error = e.error;
        r.timeline.rows.push_back(row);
        referenced.insert(e.stack);
    }
    // Slots are claimed 64 at a time per thread: below the ring's capacity no event was
    // overwritten and the missing indices are claimed slots never filled. Past it, the count
    // of claimed slots stands in for the count of events (the per-thread counts are not in
    // the file).
    const bool wrapped = image.pushedAtLeast > h.ringCapacity;
    r.timeline.pushed = wrapped ? image.pushedAtLeast : image.events.size();
    r.timeline.dropped = r.timeline.pushed - image.events.size();

    // Stacks, from the journal; Python frames by the code objects journaled with them.
    std::unordered_map<uint32_t, std::vector<uint64_t>> stacks;
    for (auto& [id, frames] : image.stacks)
        stacks[id] = frames;
    std::unordered_map<uint32_t, const FlightImage::Code*> codes;
    for (const FlightImage::Code& c : image.pythonCodes)
        codes[c.index] = &c;
    for (const report::Site& s : r.sites)
        referenced.insert(s.stack);
    referenced.erase(0);
    size_t missingStacks = 0;
    for (auto it = referenced.begin(); it != referenced.end();) {
        if (stacks.count(*it)) {
            ++it;
        } else {
            ++missingStacks;
            it = referenced.erase(it);  // an id whose journal record was cut: no frames
        }
    }
    Symbolizer symbolizer(modulesOf(image.mappings));
    const auto python = [&](uint64_t word) {
        PythonFrames::Resolved py;
        py.line = uint32_t(word & 0xffffffffu);
        auto it = codes.find(uint32_t((word & ~(uint64_t(1) << 63)) >> 32));
        py.file = it == codes.end() ? "<unknown>" : it->second->file;
        py.function = it == codes.end() ? "<unknown>" : it->second->function;
        py.module = it == codes.end() ? "" : it->second->module;
        return py;
    };
    const auto sourceOfStack = addStacks(
        r, referenced, [&](uint32_t id) { return stacks[id]; }, python, symbolizer);
    attributeBySource(r, image.live, sourceOfStack);

    r.capture.backends.push_back("flight-recorder");
    r.capture.eventsPushed = r.timeline.pushed;
    r.capture.eventsRecorded = r.timeline.rows.size();
    r.capture.eventsDropped = r.timeline.dropped;
    r.capture.liveAllocations = image.live.size();
    r.capture.distinctStacks = image.stacks.size();
    r.capture.ringBytes = h.ringCapacity * flight::kSlotBytes;
    r.capture.notes.push_back("recovered from " + flightPath +
                              ": no device facts, no framework view, no steps; the peak is the live total at the end");
    if (wrapped)
        r.capture.notes.push_back("the ring had wrapped: events pushed and dropped are counted by claimed slots");
    if (image.shardsInMemoryOnly > 0)
        r.capture.notes.push_back(std::to_string(image.shardsInMemoryOnly) +
                                  " live-map tables outgrew the file's arena: their allocations are missing");
    if (!image.vmmRegion)
        r.capture.notes.push_back("the file has no VMM table (an older oomscope made it): allocations by cuMemCreate "
                                  "(PyTorch's expandable segments, XLA) are missing");
    if (image.vmmNotKept > 0)
        r.capture.notes.push_back(std::to_string(image.vmmNotKept) +
                                  " VMM allocations did not fit the file's table: they are missing");
    if (missingStacks > 0)
        r.capture.notes.push_back(std::to_string(missingStacks) + " stacks are not in the file's journal");
    if (h.journalFull > 0)
        r.capture.notes.push_back("the file's journal was full: " + std::to_string(h.journalFull) + " records are missing");
    *out = std::move(r);
    return true;
}

} // namespace oomscope::track
