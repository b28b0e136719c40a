#include "report/json_writer.h"

#include "report/huge_pages.h"

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

namespace oomscope::report {
namespace {

size_t validUtf8Length(const unsigned char* p, size_t n)
{
    // Length of the valid UTF-8 sequence at p, or 0.
    if (p[0] < 0x80)
        return 1;
    size_t len;
    uint32_t cp;
    if ((p[0] & 0xE0) == 0xC0) {
        len = 2;
        cp = p[0] & 0x1F;
    } else if ((p[0] & 0xF0) == 0xE0) {
        len = 3;
        cp = p[0] & 0x0F;
    } else if ((p[0] & 0xF8) == 0xF0) {
        len = 4;
        cp = p[0] & 0x07;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; ++i) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

class Writer {
public:
    explicit Writer(JsonSink* sink) : m_sink(sink) { m_out.reserve(kChunk + 4096); }

    bool finish()
    {
        if (m_ok && !m_out.empty() && m_sink)
            m_ok = m_sink->flush(m_out.data(), m_out.size());
        return m_ok;
    }
    std::string& buffer() { return m_out; }

    void beginObject() { open('{'); }
    void endObject() { close('}'); }
    void beginArray() { open('['); }
    void endArray() { close(']'); }

    void key(const char* k)
    {
        comma();
        appendJsonString(m_out, k);
        m_out.push_back(':');
        m_afterKey = true;
    }

    void value(uint64_t v)
    {
        comma();
        char buf[24];
        auto r = std::to_chars(buf, buf + sizeof(buf), v);
        m_out.append(buf, r.ptr);
        maybeFlush();
    }
    void value(int64_t v)
    {
        comma();
        char buf[24];
        auto r = std::to_chars(buf, buf + sizeof(buf), v);
        m_out.append(buf, r.ptr);
        maybeFlush();
    }
    void value(uint32_t v) { value(uint64_t(v)); }
    void value(int32_t v) { value(int64_t(v)); }
    void value(const std::string& s)
    {
        comma();
        appendJsonString(m_out, s);
        maybeFlush();
    }
    void value(const char* s) { value(std::string(s)); }
    void value(bool b)
    {
        comma();
        m_out.append(b ? "true" : "false");
    }
    void null()
    {
        comma();
        m_out.append("null");
    }
    template <class T>
    void value(const std::optional<T>& v)
    {
        if (v)
            value(*v);
        else
            null();
    }

    template <class T>
    void field(const char* k, const T& v)
    {
        key(k);
        value(v);
    }

    // An element of the current array that is already JSON text (the timeline's rows, a
    // million of them: formatted in one go rather than value by value).
    void rawElement(const char* text, size_t size)
    {
        comma();
        m_out.append(text, size);
        maybeFlush();
    }
    // Several elements of the current array already joined by commas, handed to the sink as
    // they are (the buffer is flushed first): a formatted chunk is not copied again.
    void rawElementsDirect(const std::string& text)
    {
        if (text.empty())
            return;
        comma();
        if (!m_sink) {
            m_out += text;
            return;
        }
        if (m_ok && !m_out.empty())
            m_ok = m_sink->flush(m_out.data(), m_out.size());
        m_out.clear();
        if (m_ok)
            m_ok = m_sink->flush(text.data(), text.size());
    }
    // Several elements of the current array already joined by commas.
    void rawElements(const std::string& text)
    {
        if (text.empty())
            return;
        comma();
        size_t done = 0;
        while (done < text.size()) {  // in chunks: the buffer stays bounded
            const size_t n = std::min(text.size() - done, kChunk);
            m_out.append(text, done, n);
            done += n;
            maybeFlush();
        }
    }

private:
    static constexpr size_t kChunk = 1 << 20;
    static constexpr int kMaxDepth = 64;

    void open(char c)
    {
        comma();
        m_out.push_back(c);
        if (m_depth < kMaxDepth)
            m_first[m_depth] = true;
        ++m_depth;
    }
    void close(char c)
    {
        --m_depth;
        m_out.push_back(c);
        maybeFlush();
    }
    void comma()
    {
        if (m_afterKey) {
            m_afterKey = false;
            return;
        }
        if (m_depth == 0)
            return;
        bool& first = m_first[m_depth - 1 < kMaxDepth ? m_depth - 1 : kMaxDepth - 1];
        if (!first)
            m_out.push_back(',');
        first = false;
    }
    void maybeFlush()
    {
        if (m_sink && m_out.size() >= kChunk) {
            if (m_ok)
                m_ok = m_sink->flush(m_out.data(), m_out.size());
            m_out.clear();
        }
    }

    JsonSink* m_sink;
    std::string m_out;
    bool m_first[kMaxDepth] = {};
    int m_depth = 0;
    bool m_afterKey = false;
    bool m_ok = true;
};

void writeMemoryRow(Writer& w, const MemoryRow& row)
{
    w.beginObject();
    w.field("device", row.device);
    w.field("tracked_bytes", row.trackedBytes);
    w.field("peak_tracked_bytes", row.peakTrackedBytes);
    w.field("allocated_bytes", row.allocatedBytes);
    w.field("reserved_bytes", row.reservedBytes);
    w.field("fragmented_bytes", row.fragmentedBytes);
    w.field("largest_free_block_bytes", row.largestFreeBlockBytes);
    w.field("untracked_bytes", row.untrackedBytes);
    for (const auto* map : {&row.bySource, &row.byKind}) {
        w.key(map == &row.bySource ? "by_source" : "by_kind");
        w.beginObject();
        for (const auto& [name, bytes] : *map)
            w.field(name.c_str(), bytes);
        w.endObject();
    }
    w.endObject();
}

void writeMemoryRows(Writer& w, const std::vector<MemoryRow>& rows)
{
    w.beginArray();
    for (const MemoryRow& row : rows)
        writeMemoryRow(w, row);
    w.endArray();
}

void writeStringArray(Writer& w, const std::vector<std::string>& values)
{
    w.beginArray();
    for (const std::string& v : values)
        w.value(v);
    w.endArray();
}

// Timeline rows from the parallel formatting: chunks of this many rows, this many helper
// threads at most, and none below kParallelRows rows.
constexpr size_t kRowsPerChunk = 32768;
constexpr size_t kMaxWorkers = 8;
constexpr size_t kParallelRows = 131072;

// Rows [begin, end) as JSON text joined by commas, into *out (replaced).
void formatRows(const Timeline& tl, const std::vector<std::string>& quoted, size_t begin, size_t end, std::string* out)
{
    static const std::string kUnknown = "\"unknown\"";
    auto nameText = [&](uint16_t index) -> const std::string& { return index < quoted.size() ? quoted[index] : kUnknown; };
    std::string& line = *out;
    line.clear();
    if (line.capacity() < (end - begin) * 96) {
        line.reserve((end - begin) * 96);
        adviseHugePages(line.data(), line.capacity());
    }
    auto number = [&line](auto v) {
        char digits[24];
        line.append(digits, std::to_chars(digits, digits + sizeof(digits), v).ptr);
    };
    for (size_t i = begin; i < end; ++i) {
        const TimelineRow& row = tl.rows[i];
        if (i != begin)
            line += ',';
        line += '[';
        number(row.timeNs);
        line += ',';
        line += nameText(row.kind);
        line += ',';
        number(int64_t(row.device));
        line += ',';
        number(row.address);
        line += ',';
        number(row.size);
        line += ',';
        number(row.stream);
        line += ',';
        line += nameText(row.api);
        line += ',';
        number(row.stack);
        line += ',';
        number(row.thread);
        line += ',';
        number(int64_t(row.error));
        line += ']';
    }
}

// The pipeline of writeAll's rows: chunk i is formatted into buffer i % inFlight by whichever
// helper claims it, and written by the calling thread once it is done, in chunk order.
void writeRowsPipelined(Writer& w, const Timeline& tl, const std::vector<std::string>& quoted)
{
    const size_t n = tl.rows.size();
    const size_t chunks = (n + kRowsPerChunk - 1) / kRowsPerChunk;
    const size_t hardware = std::max(1u, std::thread::hardware_concurrency());
    const size_t helpersWanted = n < kParallelRows ? 0 : std::min<size_t>(hardware, kMaxWorkers);
    if (helpersWanted == 0) {
        std::string text;
        for (size_t c = 0; c < chunks; ++c) {
            formatRows(tl, quoted, c * kRowsPerChunk, std::min(n, (c + 1) * kRowsPerChunk), &text);
            w.rawElementsDirect(text);
        }
        return;
    }
    const size_t inFlight = 2 * helpersWanted;
    std::vector<std::string> buffers(inFlight);
    std::vector<size_t> done(inFlight, 0);  // chunk index + 1 when buffer k holds it formatted
    std::mutex mutex;
    std::condition_variable changed;
    size_t next = 0;     // the next chunk to claim
    size_t written = 0;  // chunks written
    auto helper = [&] {
        std::unique_lock<std::mutex> lock(mutex);
        for (;;) {
            changed.wait(lock, [&] { return next >= chunks || next < written + inFlight; });
            if (next >= chunks)
                return;
            const size_t c = next++;
            lock.unlock();
            formatRows(tl, quoted, c * kRowsPerChunk, std::min(n, (c + 1) * kRowsPerChunk), &buffers[c % inFlight]);
            lock.lock();
            done[c % inFlight] = c + 1;
            changed.notify_all();
        }
    };
    std::vector<std::thread> helpers;
    for (size_t k = 0; k < helpersWanted; ++k) {
        try {
            helpers.emplace_back(helper);
        } catch (...) {
            break;  // fewer helpers; none: this thread formats each chunk itself below
        }
    }
    for (size_t c = 0; c < chunks; ++c) {
        const size_t k = c % inFlight;
        if (helpers.empty()) {
            formatRows(tl, quoted, c * kRowsPerChunk, std::min(n, (c + 1) * kRowsPerChunk), &buffers[k]);
        } else {
            std::unique_lock<std::mutex> lock(mutex);
            changed.wait(lock, [&] { return done[k] == c + 1; });
        }
        w.rawElementsDirect(buffers[k]);
        std::lock_guard<std::mutex> lock(mutex);
        done[k] = 0;
        written = c + 1;
        changed.notify_all();
    }
    for (std::thread& h : helpers)
        h.join();
}

void writeAll(Writer& w, const Report& r)
{
    w.beginObject();
    w.field("schema", r.schema);

    w.key("tool");
    w.beginObject();
    w.field("name", r.tool.name);
    w.field("version", r.tool.version);
    w.key("options");
    w.beginObject();
    for (const auto& [k, v] : r.tool.options)
        w.field(k.c_str(), v);
    w.endObject();
    w.endObject();

    const Trigger& t = r.trigger;
    w.key("trigger");
    w.beginObject();
    w.field("kind", t.kind);
    w.field("time_ns", t.timeNs);
    w.field("device", t.device);
    w.field("requested_bytes", t.requestedBytes);
    w.field("api", t.api);
    w.field("error", t.error);
    w.field("error_name", t.errorName);
    w.field("stack", t.stack);
    w.field("framework", t.framework);
    w.field("message", t.message);
    w.endObject();

    const Process& p = r.process;
    w.key("process");
    w.beginObject();
    w.field("pid", p.pid);
    w.field("ppid", p.ppid);
    w.field("hostname", p.hostname);
    w.key("cmdline");
    writeStringArray(w, p.cmdline);
    w.field("cwd", p.cwd);
    w.field("start_time_unix_ns", p.startUnixNs);
    w.field("start_time_ns", p.startNs);
    w.field("rank", p.rank);
    w.field("local_rank", p.localRank);
    w.field("world_size", p.worldSize);
    w.endObject();

    w.key("devices");
    w.beginArray();
    for (const Device& d : r.devices) {
        w.beginObject();
        w.field("index", d.index);
        w.field("name", d.name);
        w.field("uuid", d.uuid);
        w.field("total_bytes", d.totalBytes);
        w.field("free_bytes", d.freeBytes);
        w.field("driver_version", d.driverVersion);
        w.field("runtime_version", d.runtimeVersion);
        w.endObject();
    }
    w.endArray();

    w.key("memory");
    writeMemoryRows(w, r.memory);
    w.key("at_first_failure");
    if (r.atFirstFailure)
        writeMemoryRows(w, *r.atFirstFailure);
    else
        w.null();

    w.key("segments");
    w.beginArray();
    for (const Segment& s : r.segments) {
        w.beginObject();
        w.field("device", s.device);
        w.field("address", s.address);
        w.field("size", s.size);
        w.field("kind", s.kind);
        w.field("stream", s.stream);
        w.key("blocks");
        w.beginArray();
        for (const Block& b : s.blocks) {
            w.beginObject();
            w.field("offset", b.offset);
            w.field("size", b.size);
            w.field("state", b.state);
            w.field("stack", b.stack);
            w.endObject();
        }
        w.endArray();
        w.endObject();
    }
    w.endArray();

    w.key("pools");
    w.beginArray();
    for (const Pool& pool : r.pools) {
        w.beginObject();
        w.field("device", pool.device);
        w.field("handle", pool.handle);
        w.field("role", pool.role);
        w.field("reserved_bytes", pool.reservedBytes);
        w.field("used_bytes", pool.usedBytes);
        w.field("reserved_high_bytes", pool.reservedHighBytes);
        w.field("used_high_bytes", pool.usedHighBytes);
        w.field("release_threshold_bytes", pool.releaseThresholdBytes);
        w.endObject();
    }
    w.endArray();

    w.key("sites");
    w.beginArray();
    for (const Site& s : r.sites) {
        w.beginObject();
        w.field("stack", s.stack);
        w.field("device", s.device);
        w.field("kind", s.kind);
        w.field("count", s.count);
        w.field("bytes", s.bytes);
        w.field("first_ns", s.firstNs);
        w.field("last_ns", s.lastNs);
        w.endObject();
    }
    w.endArray();

    const Timeline& tl = r.timeline;
    w.key("timeline");
    w.beginObject();
    w.key("columns");
    w.beginArray();
    for (const char* c : Timeline::kColumns)
        w.value(c);
    w.endArray();
    w.key("rows");
    w.beginArray();
    // Each name once as JSON text, then the rows formatted in chunks by helper threads while
    // this one writes the chunks done so far, in order (a million rows are most of an OOM
    // dump's time: formatting and writing overlap). At most kInFlight chunks are held at
    // once, in buffers that are reused (no page faults after the first lap).
    std::vector<std::string> quoted;
    for (const std::string& name : tl.names) {
        std::string q;
        appendJsonString(q, name);
        quoted.push_back(std::move(q));
    }
    writeRowsPipelined(w, tl, quoted);
    w.endArray();
    w.field("capacity", tl.capacity);
    w.field("pushed", tl.pushed);
    w.field("dropped", tl.dropped);
    w.endObject();

    w.key("steps");
    w.beginArray();
    for (const Step& s : r.steps) {
        w.beginObject();
        w.field("index", s.index);
        w.field("time_ns", s.timeNs);
        w.field("source", s.source);
        w.key("devices");
        w.beginArray();
        for (const StepDevice& d : s.devices) {
            w.beginObject();
            w.field("device", d.device);
            w.field("tracked_bytes", d.trackedBytes);
            w.field("allocated_bytes", d.allocatedBytes);
            w.field("reserved_bytes", d.reservedBytes);
            w.field("inactive_split_bytes", d.inactiveSplitBytes);
            w.field("peak_allocated_bytes", d.peakAllocatedBytes);
            w.field("expandable_segments", d.expandableSegments);
            w.field("segment_count", d.segmentCount);
            w.field("largest_free_block_bytes", d.largestFreeBlockBytes);
            w.endObject();
        }
        w.endArray();
        for (const auto& [name, list] : {std::pair<const char*, const std::vector<StepSite>*>{"sites", &s.sites},
                                         {"tensors", &s.tensors}}) {
            w.key(name);
            w.beginArray();
            for (const StepSite& site : *list) {
                w.beginArray();
                w.value(uint64_t(site.stack));
                w.value(site.device);
                w.value(site.bytes);
                w.endArray();
            }
            w.endArray();
        }
        w.endObject();
    }
    w.endArray();

    w.key("leaks");
    w.beginArray();
    for (const Leak& l : r.leaks) {
        w.beginObject();
        w.field("stack", l.stack);
        w.field("pattern", l.pattern);
        w.field("bytes_per_step", l.bytesPerStep);
        w.field("steps_observed", l.stepsObserved);
        w.field("evidence", l.evidence);
        w.endObject();
    }
    w.endArray();

    w.key("diagnosis");
    w.beginArray();
    for (const Diagnosis& d : r.diagnosis) {
        w.beginObject();
        w.field("code", d.code);
        w.field("severity", d.severity);
        w.field("message", d.message);
        w.field("suggestion", d.suggestion);
        w.endObject();
    }
    w.endArray();

    w.key("stacks");
    w.beginArray();
    for (const Stack& s : r.stacks) {
        w.beginObject();
        w.field("id", s.id);
        w.key("frames");
        w.beginArray();
        for (const Frame& f : s.frames) {
            w.beginObject();
            if (f.kind == Frame::Kind::Python) {
                w.field("kind", "python");
                w.field("file", f.file);
                w.field("line", f.line);
                w.field("function", f.function);
            } else {
                w.field("kind", "native");
                w.field("module", f.module);
                w.field("offset", f.offset);
                w.field("symbol", f.symbol);
            }
            w.endObject();
        }
        w.endArray();
        w.endObject();
    }
    w.endArray();

    w.key("modules");
    w.beginArray();
    for (const Module& m : r.modules) {
        w.beginObject();
        w.field("id", m.id);
        w.field("path", m.path);
        w.field("build_id", m.buildId);
        w.field("load_address", m.loadAddress);
        w.endObject();
    }
    w.endArray();

    const Capture& c = r.capture;
    w.key("capture");
    w.beginObject();
    w.key("backends");
    writeStringArray(w, c.backends);
    w.field("events_pushed", c.eventsPushed);
    w.field("events_recorded", c.eventsRecorded);
    w.field("events_dropped", c.eventsDropped);
    w.field("live_allocations", c.liveAllocations);
    w.field("distinct_stacks", c.distinctStacks);
    w.field("ring_bytes", c.ringBytes);
    w.field("live_map_bytes", c.liveMapBytes);
    w.field("stack_table_bytes", c.stackTableBytes);
    w.field("unknown_frees", c.unknownFrees);
    w.field("unwinder", c.unwinder);
    w.key("notes");
    writeStringArray(w, c.notes);
    if (c.coverage) {
        const Coverage& cov = *c.coverage;
        w.key("coverage");
        w.beginObject();
        w.field("cupti", cov.cupti);
        w.field("library", cov.library);
        w.field("confirmed", cov.confirmed);
        w.field("missed", cov.missed);
        w.field("missed_bytes", cov.missedBytes);
        w.key("missed_allocations");
        w.beginArray();
        for (const MissedAllocation& m : cov.missedAllocations) {
            w.beginObject();
            w.field("api", m.api);
            w.field("size", m.size);
            w.field("device", int64_t(m.device));
            w.field("address", m.address);
            w.field("time_ns", m.timeNs);
            w.field("stack", m.stack);
            w.endObject();
        }
        w.endArray();
        w.endObject();
    }
    w.endObject();

    w.endObject();
    w.buffer().push_back('\n');
}

} // namespace

void appendJsonString(std::string& out, const std::string& s)
{
    static const char digits[] = "0123456789abcdef";
    out.push_back('"');
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const size_t n = s.size();
    for (size_t i = 0; i < n;) {
        const unsigned char c = p[i];
        if (c == '"' || c == '\\') {
            out.push_back('\\');
            out.push_back(char(c));
            ++i;
        } else if (c < 0x20) {
            switch (c) {
            case '\n': out.append("\\n"); break;
            case '\t': out.append("\\t"); break;
            case '\r': out.append("\\r"); break;
            default:
                out.append("\\u00");
                out.push_back(digits[c >> 4]);
                out.push_back(digits[c & 15]);
            }
            ++i;
        } else if (c < 0x80) {
            out.push_back(char(c));
            ++i;
        } else if (const size_t len = validUtf8Length(p + i, n - i)) {
            out.append(reinterpret_cast<const char*>(p + i), len);
            i += len;
        } else {
            out.append("\xEF\xBF\xBD");  // U+FFFD for a byte that is not valid UTF-8
            ++i;
        }
    }
    out.push_back('"');
}

bool writeReport(const Report& report, JsonSink& sink)
{
    Writer w(&sink);
    writeAll(w, report);
    return w.finish();
}

std::string reportToJson(const Report& report)
{
    Writer w(nullptr);
    writeAll(w, report);
    return std::move(w.buffer());
}

} // namespace oomscope::report
