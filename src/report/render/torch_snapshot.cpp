// exportTorchSnapshot: the report as torch.cuda.memory._snapshot() would give it, pickled.
//  - segments: PyTorch's own (a framework OOM report's segments with their blocks); then, but
//    with --torch-only, each live allocation outside PyTorch's allocator (or every live
//    allocation, in a report without PyTorch's view) as a segment of one block, the frames of
//    memory that is not PyTorch's headed by a frame naming its source: the one view where both
//    are seen;
//  - device_traces: the timeline's allocations and frees as segment_alloc/alloc and
//    free_requested/free_completed/segment_free (PyTorch's own segments as segment events
//    only: its tensors are the blocks), and each out-of-memory failure as an oom entry.
#include "report/render/export.h"

#include "report/analysis/memory_over_time.h"
#include "report/render/pickle_writer.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace oomscope::report {
namespace {

bool torchSegment(const Segment& s)
{
    return s.kind == SegmentKind::Large || s.kind == SegmentKind::Small || s.kind == SegmentKind::Expandable;
}

struct LiveRow {
    uint64_t address;
    uint64_t size;
    uint64_t stream;
    uint32_t stack;
    int64_t device;
};

class SnapshotWriter {
public:
    SnapshotWriter(const Report& r, const TorchSnapshotOptions& o, std::string& out) : m_r(r), m_o(o), m_p(out)
    {
        m_framework = std::any_of(r.segments.begin(), r.segments.end(), torchSegment);
        for (const Stack& s : r.stacks)
            m_stacks[s.id] = &s;
    }
    void write();

private:
    bool isTorch(uint32_t stack) const { return stackSource(m_r, stack) == Source::Torch; }
    bool keepOutside(uint32_t stack) const { return !m_o.torchOnly && (!m_framework || !isTorch(stack)); }
    void key(const char* k) { m_p.str(k); }
    void frames(uint32_t stack, bool labelled);
    void framesOfBlock(const std::optional<uint32_t>& stack);
    void torchSegments();
    void outsideSegments();
    void segmentHead(int64_t device, uint64_t address, uint64_t size, uint64_t allocated, uint64_t active,
                     uint64_t stream, SegmentKind kind, const std::vector<int64_t>& poolId = {});
    void traces();
    void traceEntry(const char* action, const TimelineRow& row, bool labelled);
    std::vector<LiveRow> liveOutside() const;

    const Report& m_r;
    const TorchSnapshotOptions& m_o;
    PickleWriter m_p;
    bool m_framework = false;
    std::unordered_map<uint32_t, const Stack*> m_stacks;
    std::map<std::pair<uint32_t, bool>, uint32_t> m_framesMemo;  // (stack, labelled) → memo index
};

// A stack's frames as PyTorch's {filename, line, name}, innermost first, written once and
// referred to after; `labelled` puts a frame naming the memory's source first.
void SnapshotWriter::frames(uint32_t stack, bool labelled)
{
    auto memo = m_framesMemo.find({stack, labelled});
    if (memo != m_framesMemo.end()) {
        m_p.get(memo->second);
        return;
    }
    m_p.beginList();
    auto frame = [&](const std::string& file, int64_t line, const std::string& name) {
        m_p.beginDict();
        key("filename");
        m_p.str(file);
        key("line");
        m_p.integer(line);
        key("name");
        m_p.str(name);
        m_p.endDict();
    };
    if (labelled)
        frame("<oomscope>", 0, std::string(enumName(stackSource(m_r, stack))) + ": memory outside PyTorch's allocator");
    auto it = m_stacks.find(stack);
    for (size_t i = 0; it != m_stacks.end() && i < it->second->frames.size(); ++i) {
        const Frame& f = it->second->frames[i];
        if (f.kind == FrameKind::Python) {
            frame(f.file, f.line, f.function);
        } else {
            const Module* m = f.module ? m_r.findModule(*f.module) : nullptr;
            if (!f.file.empty())
                frame(f.file, f.line, f.symbol.empty() ? "??" : f.symbol);  // as PyTorch's own C++ frames
            else
                frame(m ? m->path : "??", 0, f.symbol.empty() ? "??" : f.symbol);
        }
    }
    m_p.endList();
    m_framesMemo[{stack, labelled}] = m_p.memoize();
}

void SnapshotWriter::framesOfBlock(const std::optional<uint32_t>& stack)
{
    if (stack) {
        frames(*stack, false);
    } else {
        m_p.beginList();
        m_p.endList();
    }
}

void SnapshotWriter::segmentHead(int64_t device, uint64_t address, uint64_t size, uint64_t allocated, uint64_t active,
                                 uint64_t stream, SegmentKind kind, const std::vector<int64_t>& poolId)
{
    key("device");
    m_p.integer(device);
    key("address");
    m_p.integer(address);
    key("total_size");
    m_p.integer(size);
    key("allocated_size");
    m_p.integer(allocated);
    key("active_size");
    m_p.integer(active);
    key("requested_size");
    m_p.integer(allocated);
    key("stream");
    m_p.integer(stream);
    // An expandable segment is one of PyTorch's large pool, grown in place.
    key("segment_type");
    m_p.str(kind == SegmentKind::Small ? "small" : "large");
    key("segment_pool_id");  // as PyTorch writes it: (0, 0) the default pool
    m_p.integer(poolId.size() == 2 ? poolId[0] : int64_t(0));
    m_p.integer(poolId.size() == 2 ? poolId[1] : int64_t(0));
    m_p.tuple2();
    key("is_expandable");
    m_p.boolean(kind == SegmentKind::Expandable);
    key("frames");
    m_p.beginList();
    m_p.endList();
}

void SnapshotWriter::torchSegments()
{
    for (const Segment& s : m_r.segments) {
        if (!torchSegment(s))
            continue;
        uint64_t allocated = 0, active = 0;
        for (const Block& b : s.blocks) {
            allocated += b.state == BlockState::ActiveAllocated ? b.size : 0;
            active += b.state != BlockState::Inactive ? b.size : 0;
        }
        m_p.beginDict();
        segmentHead(s.device, s.address, s.size, allocated, active, s.stream, s.kind, s.poolId);
        key("blocks");
        m_p.beginList();
        for (const Block& b : s.blocks) {
            m_p.beginDict();
            key("address");
            m_p.integer(s.address + b.offset);
            key("size");
            m_p.integer(b.size);
            key("requested_size");
            m_p.integer(b.state == BlockState::ActiveAllocated ? b.size : uint64_t(0));
            key("state");
            m_p.str(enumName(b.state));
            key("frames");
            framesOfBlock(b.stack);
            m_p.endDict();
            m_p.next(false);
        }
        m_p.endList();
        m_p.endDict();
        m_p.next(false);
    }
}

// The allocations live at the trigger, from the timeline (by address; CUDA VMM memory by its
// handle, at the address it is mapped at).
std::vector<LiveRow> SnapshotWriter::liveOutside() const
{
    const Timeline& tl = m_r.timeline;
    std::map<uint64_t, LiveRow> live;       // by address
    std::map<uint64_t, LiveRow> handles;    // VMM physical memory by handle
    std::map<uint64_t, uint64_t> mappedAt;  // handle → lowest mapped address
    for (const TimelineRow& row : tl.rows) {
        const std::string& kind = tl.name(row.kind);
        if (row.device < 0 || !deviceMemoryApi(tl.name(row.api)))
            continue;
        const bool vmm = row.address == 0 && row.handle != 0;
        if (kind == "alloc")
            (vmm ? handles[row.handle] : live[row.address]) = LiveRow{row.address, row.size, row.stream, row.stack, row.device};
        else if (kind == "free")
            vmm ? (void)handles.erase(row.handle) : (void)live.erase(row.address);
        else if (kind == "segment_map" && row.handle && (!mappedAt.count(row.handle) || row.address < mappedAt[row.handle]))
            mappedAt[row.handle] = row.address;
    }
    std::vector<LiveRow> out;
    for (const auto& [address, row] : live)
        out.push_back(row);
    for (const auto& [handle, row] : handles) {
        if (auto at = mappedAt.find(handle); at != mappedAt.end())
            out.push_back(LiveRow{at->second, row.size, row.stream, row.stack, row.device});
    }
    return out;
}

void SnapshotWriter::outsideSegments()
{
    for (const LiveRow& row : liveOutside()) {
        if (!keepOutside(row.stack))
            continue;
        m_p.beginDict();
        segmentHead(row.device, row.address, row.size, row.size, row.size, row.stream, SegmentKind::CudaMalloc);
        key("oomscope_source");
        m_p.str(enumName(stackSource(m_r, row.stack)));
        key("blocks");
        m_p.beginList();
        m_p.beginDict();
        key("address");
        m_p.integer(row.address);
        key("size");
        m_p.integer(row.size);
        key("requested_size");
        m_p.integer(row.size);
        key("state");
        m_p.str("active_allocated");
        key("frames");
        frames(row.stack, !isTorch(row.stack));
        m_p.endDict();
        m_p.endList();
        m_p.endDict();
        m_p.next(false);
    }
}

void SnapshotWriter::traceEntry(const char* action, const TimelineRow& row, bool labelled)
{
    const uint64_t sinceStart = row.timeNs >= m_r.process.startNs ? row.timeNs - m_r.process.startNs : 0;
    m_p.beginDict();
    key("action");
    m_p.str(action);
    key("addr");
    m_p.integer(row.address);
    key("size");
    m_p.integer(row.size);
    key("stream");
    m_p.integer(row.stream);
    key("time_us");
    m_p.integer((m_r.process.startUnixNs + sinceStart) / 1000);
    key("frames");
    frames(row.stack, labelled);
    if (std::string(action) == "oom") {
        const Device* d = m_r.findDevice(row.device);
        key("device_free");
        m_p.integer(d && d->freeBytes ? *d->freeBytes : uint64_t(0));
    }
    m_p.endDict();
    m_p.next(false);
}

void SnapshotWriter::traces()
{
    const Timeline& tl = m_r.timeline;
    int64_t devices = 0;
    for (const TimelineRow& row : tl.rows)
        devices = std::max<int64_t>(devices, row.device + 1);
    for (const Segment& s : m_r.segments)
        devices = std::max<int64_t>(devices, s.device + 1);
    // The window: rows from fromNs (time order), the newest `last` of them.
    const ExportWindow& w = m_o.window;
    size_t lo = size_t(std::lower_bound(tl.rows.begin(), tl.rows.end(), w.fromNs,
                                        [](const TimelineRow& r, uint64_t t) { return r.timeNs < t; }) -
                       tl.rows.begin());
    if (w.last > 0 && tl.rows.size() - lo > w.last)
        lo = tl.rows.size() - w.last;
    w.leftOut = lo;
    w.kept = tl.rows.size() - lo;
    for (int64_t device = 0; device < devices; ++device) {
        m_p.beginList();
        for (size_t i = lo; i < tl.rows.size(); ++i) {
            const TimelineRow& row = tl.rows[i];
            const std::string& kind = tl.name(row.kind);
            if (row.device != device || !deviceMemoryApi(tl.name(row.api)))
                continue;
            const bool outside = keepOutside(row.stack);
            const bool labelled = outside && !isTorch(row.stack);
            if (m_o.torchOnly && !isTorch(row.stack))
                continue;
            if (kind == "alloc") {
                traceEntry("segment_alloc", row, labelled);
                if (outside)
                    traceEntry("alloc", row, labelled);
            } else if (kind == "free") {
                if (outside) {
                    traceEntry("free_requested", row, labelled);
                    traceEntry("free_completed", row, labelled);
                }
                traceEntry("segment_free", row, labelled);
            } else if (kind == "alloc_failed" && row.error == 2) {
                traceEntry("oom", row, labelled);
            }
        }
        m_p.endList();
        m_p.next(false);
    }
}

void SnapshotWriter::write()
{
    m_p.begin();
    m_p.beginDict();
    key("segments");
    m_p.beginList();
    torchSegments();
    outsideSegments();
    m_p.endList();
    key("device_traces");
    m_p.beginList();
    traces();
    m_p.endList();
    m_p.endDict();
    m_p.end();
}

} // namespace

std::string exportTorchSnapshot(const Report& report, const TorchSnapshotOptions& options)
{
    std::string out;
    SnapshotWriter(report, options, out).write();
    return out;
}

} // namespace oomscope::report
