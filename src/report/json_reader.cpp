#include "report/json_reader.h"

#include "report/huge_pages.h"

#include <charconv>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <string_view>
#include <sys/stat.h>

namespace oomscope::report {
namespace {

using Json = nlohmann::json;

struct ReadError {
    std::string message;
};

[[noreturn]] void failAt(const std::string& path, const std::string& what)
{
    throw ReadError{(path.empty() ? std::string("report") : path) + ": " + what};
}

const char* typeName(const Json& j)
{
    switch (j.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    case Json::value_t::string: return "a string";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return "a floating-point number";
    default: return "an unknown value";
    }
}

// A view of one JSON value with its path, for error messages like
// "memory[0].tracked_bytes: expected an unsigned integer, got a string".
class Value {
public:
    Value(const Json& j, std::string path) : m_j(j), m_path(std::move(path)) {}

    const Json& json() const { return m_j; }
    const std::string& path() const { return m_path; }

    Value at(const char* key) const
    {
        expectObject();
        auto it = m_j.find(key);
        if (it == m_j.end())
            failAt(child(key), "missing");
        return Value(*it, child(key));
    }
    Value at(size_t index) const { return Value(m_j[index], m_path + "[" + std::to_string(index) + "]"); }
    bool isNull() const { return m_j.is_null(); }

    void expectObject() const
    {
        if (!m_j.is_object())
            failAt(m_path, std::string("expected an object, got ") + typeName(m_j));
    }
    size_t arraySize() const
    {
        if (!m_j.is_array())
            failAt(m_path, std::string("expected an array, got ") + typeName(m_j));
        return m_j.size();
    }

    uint64_t u64() const
    {
        if (m_j.is_number_unsigned())
            return m_j.get<uint64_t>();
        if (m_j.is_number_integer() && m_j.get<int64_t>() >= 0)
            return uint64_t(m_j.get<int64_t>());
        failAt(m_path, std::string("expected an unsigned integer, got ") + describe());
    }
    uint32_t u32() const
    {
        const uint64_t v = u64();
        if (v > UINT32_MAX)
            failAt(m_path, "value " + std::to_string(v) + " out of range");
        return uint32_t(v);
    }
    int64_t i64() const
    {
        if (m_j.is_number_integer() && !m_j.is_number_unsigned())
            return m_j.get<int64_t>();
        if (m_j.is_number_unsigned() && m_j.get<uint64_t>() <= uint64_t(INT64_MAX))
            return int64_t(m_j.get<uint64_t>());
        failAt(m_path, std::string("expected an integer, got ") + describe());
    }
    int32_t i32() const
    {
        const int64_t v = i64();
        if (v < INT32_MIN || v > INT32_MAX)
            failAt(m_path, "value " + std::to_string(v) + " out of range");
        return int32_t(v);
    }
    std::string str() const
    {
        if (!m_j.is_string())
            failAt(m_path, std::string("expected a string, got ") + typeName(m_j));
        return m_j.get<std::string>();
    }

    bool boolean() const
    {
        if (!m_j.is_boolean())
            failAt(m_path, std::string("expected true or false, got ") + typeName(m_j));
        return m_j.get<bool>();
    }

    std::optional<uint64_t> optU64() const { return isNull() ? std::nullopt : std::optional<uint64_t>(u64()); }
    std::optional<uint32_t> optU32() const { return isNull() ? std::nullopt : std::optional<uint32_t>(u32()); }
    std::optional<int64_t> optI64() const { return isNull() ? std::nullopt : std::optional<int64_t>(i64()); }
    std::optional<std::string> optStr() const { return isNull() ? std::nullopt : std::optional<std::string>(str()); }

    template <class Fn>
    void forEach(Fn&& fn) const
    {
        const size_t n = arraySize();
        for (size_t i = 0; i < n; ++i)
            fn(at(i));
    }

private:
    std::string child(const char* key) const { return m_path.empty() ? key : m_path + "." + key; }
    std::string describe() const
    {
        if (m_j.is_number_float())
            return "a number that is not an integer in range";
        if (m_j.is_number_integer())
            return "a negative integer";
        return typeName(m_j);
    }

    const Json& m_j;
    std::string m_path;
};

std::vector<std::string> readStrings(const Value& v)
{
    std::vector<std::string> out;
    v.forEach([&](const Value& e) { out.push_back(e.str()); });
    return out;
}

std::map<std::string, uint64_t> readCounts(const Value& v)
{
    v.expectObject();
    std::map<std::string, uint64_t> out;
    for (auto it = v.json().begin(); it != v.json().end(); ++it)
        out[it.key()] = Value(it.value(), v.path() + "." + it.key()).u64();
    return out;
}

MemoryRow readMemoryRow(const Value& v)
{
    MemoryRow row;
    row.device = v.at("device").i64();
    row.trackedBytes = v.at("tracked_bytes").u64();
    row.peakTrackedBytes = v.at("peak_tracked_bytes").u64();
    row.allocatedBytes = v.at("allocated_bytes").optU64();
    row.reservedBytes = v.at("reserved_bytes").optU64();
    row.fragmentedBytes = v.at("fragmented_bytes").optU64();
    row.largestFreeBlockBytes = v.at("largest_free_block_bytes").optU64();
    row.untrackedBytes = v.at("untracked_bytes").optU64();
    row.bySource = readCounts(v.at("by_source"));
    row.byKind = readCounts(v.at("by_kind"));
    return row;
}

std::vector<MemoryRow> readMemoryRows(const Value& v)
{
    std::vector<MemoryRow> rows;
    v.forEach([&](const Value& e) { rows.push_back(readMemoryRow(e)); });
    return rows;
}

// One timeline row, checked, into tl (its names interned there). A million rows: the common
// case reads the values directly; the path of a value is only spelled out for an error.
void readTimelineRow(const Json& j, size_t index, Timeline* tl)
{
    constexpr size_t kWidth = sizeof(Timeline::kColumns) / sizeof(Timeline::kColumns[0]);
    auto path = [&] { return "timeline.rows[" + std::to_string(index) + "]"; };
    if (!j.is_array() || j.size() != kWidth)
        failAt(path(), "expected a row of " + std::to_string(kWidth) + " values");
    auto slow = [&](size_t i) { return Value(j[i], path() + "[" + std::to_string(i) + "]"); };
    auto u64 = [&](size_t i) { return j[i].is_number_unsigned() ? j[i].get<uint64_t>() : slow(i).u64(); };
    auto u32 = [&](size_t i) {
        return j[i].is_number_unsigned() && j[i].get<uint64_t>() <= UINT32_MAX ? uint32_t(j[i].get<uint64_t>())
                                                                                  : slow(i).u32();
    };
    auto i32 = [&](size_t i) {
        if (j[i].is_number_integer() && !j[i].is_number_float()) {
            const int64_t v = j[i].get<int64_t>();
            if (v >= INT32_MIN && v <= INT32_MAX && !(j[i].is_number_unsigned() && j[i].get<uint64_t>() > INT32_MAX))
                return int32_t(v);
        }
        return slow(i).i32();
    };
    auto name = [&](size_t i) {
        return j[i].is_string() ? tl->intern(j[i].get_ref<const std::string&>()) : tl->intern(slow(i).str());
    };
    TimelineRow row;
    row.timeNs = u64(0);
    row.kind = name(1);
    row.device = i32(2);
    row.address = u64(3);
    row.size = u64(4);
    row.stream = u64(5);
    row.api = name(6);
    row.stack = u32(7);
    row.thread = u32(8);
    row.error = i32(9);
    if (tl->names.size() > 60000)
        failAt(path(), "too many distinct event and API names");
    tl->rows.push_back(row);
}

// rowsRead: the rows, already taken out of the document while it was parsed (a million rows
// as a DOM cost seconds and half a gigabyte), or null to read them from v.
void readTimeline(const Value& v, Timeline* tl, Timeline* rowsRead)
{
    const Value columns = v.at("columns");
    const std::vector<std::string> names = readStrings(columns);
    constexpr size_t kWidth = sizeof(Timeline::kColumns) / sizeof(Timeline::kColumns[0]);
    if (names.size() != kWidth)
        failAt(columns.path(), "expected " + std::to_string(kWidth) + " columns");
    for (size_t i = 0; i < kWidth; ++i) {
        if (names[i] != Timeline::kColumns[i])
            failAt(columns.path() + "[" + std::to_string(i) + "]",
                   "expected \"" + std::string(Timeline::kColumns[i]) + "\", got \"" + names[i] + "\"");
    }
    if (rowsRead) {
        tl->names = std::move(rowsRead->names);
        tl->rows = std::move(rowsRead->rows);
        if (!v.json().contains("rows") || !v.at("rows").json().is_array())
            failAt(v.path() + ".rows", "expected an array");
    } else {
        const Value rows = v.at("rows");
        tl->rows.reserve(rows.arraySize());
        for (size_t i = 0; i < rows.arraySize(); ++i)
            readTimelineRow(rows.json()[i], i, tl);
    }
    tl->capacity = v.at("capacity").u64();
    tl->pushed = v.at("pushed").u64();
    tl->dropped = v.at("dropped").u64();
}

Frame readFrame(const Value& v)
{
    Frame f;
    const std::string kind = v.at("kind").str();
    if (kind == "python") {
        f.kind = Frame::Kind::Python;
        f.file = v.at("file").str();
        f.line = v.at("line").u32();
        f.function = v.at("function").str();
    } else if (kind == "native") {
        f.kind = Frame::Kind::Native;
        f.module = v.at("module").optU32();
        f.offset = v.at("offset").u64();
        f.symbol = v.at("symbol").str();
    } else {
        failAt(v.path() + ".kind", "expected \"native\" or \"python\", got \"" + kind + "\"");
    }
    return f;
}

void readAll(const Value& root, Report* r, Timeline* rowsRead)
{
    root.expectObject();
    auto schemaIt = root.json().find("schema");
    if (schemaIt == root.json().end())
        throw ReadError{"not an oomscope report (no \"schema\" key)"};
    if (!schemaIt->is_string() || schemaIt->get<std::string>() != kSchema)
        throw ReadError{"unsupported schema " + schemaIt->dump() + " (this oomscope reads " + kSchema + ")"};
    r->schema = kSchema;

    const Value tool = root.at("tool");
    r->tool.name = tool.at("name").str();
    r->tool.version = tool.at("version").str();
    const Value options = tool.at("options");
    options.expectObject();
    for (auto it = options.json().begin(); it != options.json().end(); ++it)
        r->tool.options[it.key()] = Value(it.value(), options.path() + "." + it.key()).str();

    const Value t = root.at("trigger");
    r->trigger.kind = t.at("kind").str();
    if (r->trigger.kind != "oom" && r->trigger.kind != "exit" && r->trigger.kind != "signal" && r->trigger.kind != "request" &&
        r->trigger.kind != "recovered")
        failAt("trigger.kind", "expected oom, exit, signal, request or recovered, got \"" + r->trigger.kind + "\"");
    r->trigger.timeNs = t.at("time_ns").u64();
    r->trigger.device = t.at("device").optI64();
    r->trigger.requestedBytes = t.at("requested_bytes").optU64();
    r->trigger.api = t.at("api").str();
    r->trigger.error = t.at("error").optI64();
    r->trigger.errorName = t.at("error_name").str();
    r->trigger.stack = t.at("stack").optU32();
    r->trigger.framework = t.at("framework").optStr();
    r->trigger.message = t.at("message").str();

    const Value p = root.at("process");
    r->process.pid = p.at("pid").i64();
    r->process.ppid = p.at("ppid").i64();
    r->process.hostname = p.at("hostname").str();
    r->process.cmdline = readStrings(p.at("cmdline"));
    r->process.cwd = p.at("cwd").str();
    r->process.startUnixNs = p.at("start_time_unix_ns").u64();
    r->process.startNs = p.at("start_time_ns").u64();
    r->process.rank = p.at("rank").optI64();
    r->process.localRank = p.at("local_rank").optI64();
    r->process.worldSize = p.at("world_size").optI64();

    root.at("devices").forEach([&](const Value& d) {
        Device dev;
        dev.index = d.at("index").i64();
        dev.name = d.at("name").str();
        dev.uuid = d.at("uuid").str();
        dev.totalBytes = d.at("total_bytes").optU64();
        dev.freeBytes = d.at("free_bytes").optU64();
        dev.driverVersion = d.at("driver_version").optI64();
        dev.runtimeVersion = d.at("runtime_version").optI64();
        r->devices.push_back(std::move(dev));
    });

    r->memory = readMemoryRows(root.at("memory"));
    const Value first = root.at("at_first_failure");
    if (!first.isNull())
        r->atFirstFailure = readMemoryRows(first);

    root.at("segments").forEach([&](const Value& s) {
        Segment seg;
        seg.device = s.at("device").i64();
        seg.address = s.at("address").u64();
        seg.size = s.at("size").u64();
        seg.kind = s.at("kind").str();
        seg.stream = s.at("stream").u64();
        s.at("blocks").forEach([&](const Value& b) {
            Block block;
            block.offset = b.at("offset").u64();
            block.size = b.at("size").u64();
            block.state = b.at("state").str();
            block.stack = b.at("stack").optU32();
            seg.blocks.push_back(std::move(block));
        });
        r->segments.push_back(std::move(seg));
    });

    // Added after the first v1 fixtures: optional.
    if (root.json().contains("pools")) {
        root.at("pools").forEach([&](const Value& entry) {
            Pool pool;
            pool.device = entry.at("device").i64();
            pool.handle = entry.at("handle").u64();
            pool.role = entry.at("role").str();
            pool.reservedBytes = entry.at("reserved_bytes").u64();
            pool.usedBytes = entry.at("used_bytes").u64();
            pool.reservedHighBytes = entry.at("reserved_high_bytes").u64();
            pool.usedHighBytes = entry.at("used_high_bytes").u64();
            pool.releaseThresholdBytes = entry.at("release_threshold_bytes").optU64();
            r->pools.push_back(std::move(pool));
        });
    }

    root.at("sites").forEach([&](const Value& s) {
        Site site;
        site.stack = s.at("stack").u32();
        site.device = s.at("device").i64();
        site.kind = s.at("kind").str();
        site.count = s.at("count").u64();
        site.bytes = s.at("bytes").u64();
        site.firstNs = s.at("first_ns").u64();
        site.lastNs = s.at("last_ns").u64();
        r->sites.push_back(std::move(site));
    });

    readTimeline(root.at("timeline"), &r->timeline, rowsRead);

    root.at("steps").forEach([&](const Value& s) {
        Step step;
        step.index = s.at("index").u64();
        step.timeNs = s.at("time_ns").u64();
        if (s.json().contains("source")) {
            step.source = s.at("source").str();
            if (step.source != "step" && step.source != "sample")
                failAt(s.path() + ".source", "expected \"step\" or \"sample\"");
        }
        s.at("devices").forEach([&](const Value& d) {
            StepDevice sd;
            sd.device = d.at("device").i64();
            sd.trackedBytes = d.at("tracked_bytes").u64();
            sd.allocatedBytes = d.at("allocated_bytes").optU64();
            sd.reservedBytes = d.at("reserved_bytes").optU64();
            sd.inactiveSplitBytes = d.at("inactive_split_bytes").optU64();
            if (d.json().contains("peak_allocated_bytes"))
                sd.peakAllocatedBytes = d.at("peak_allocated_bytes").optU64();
            if (d.json().contains("expandable_segments") && !d.at("expandable_segments").isNull())
                sd.expandableSegments = d.at("expandable_segments").boolean();
            sd.segmentCount = d.at("segment_count").optU64();
            sd.largestFreeBlockBytes = d.at("largest_free_block_bytes").optU64();
            step.devices.push_back(sd);
        });
        // Added after the first v1 fixtures: optional.
        for (auto [name, list] : {std::pair<const char*, std::vector<StepSite>*>{"sites", &step.sites},
                                  {"tensors", &step.tensors}}) {
            if (!s.json().contains(name))
                continue;
            std::vector<StepSite>* const target = list;  // a structured binding cannot be captured before C++20 in clang 14
            s.at(name).forEach([&](const Value& row) {
                if (row.arraySize() != 3)
                    failAt(row.path(), "expected [stack, device, bytes]");
                StepSite site;
                site.stack = row.at(size_t(0)).u32();
                site.device = row.at(size_t(1)).i64();
                site.bytes = row.at(size_t(2)).u64();
                target->push_back(site);
            });
        }
        r->steps.push_back(std::move(step));
    });

    root.at("leaks").forEach([&](const Value& l) {
        Leak leak;
        leak.stack = l.at("stack").u32();
        leak.pattern = l.at("pattern").str();
        leak.bytesPerStep = l.at("bytes_per_step").i64();
        leak.stepsObserved = l.at("steps_observed").u64();
        leak.evidence = l.at("evidence").str();
        r->leaks.push_back(std::move(leak));
    });

    root.at("diagnosis").forEach([&](const Value& d) {
        Diagnosis diag;
        diag.code = d.at("code").str();
        diag.severity = d.at("severity").str();
        diag.message = d.at("message").str();
        diag.suggestion = d.at("suggestion").str();
        r->diagnosis.push_back(std::move(diag));
    });

    root.at("stacks").forEach([&](const Value& s) {
        Stack stack;
        stack.id = s.at("id").u32();
        s.at("frames").forEach([&](const Value& f) { stack.frames.push_back(readFrame(f)); });
        r->stacks.push_back(std::move(stack));
    });

    root.at("modules").forEach([&](const Value& m) {
        Module module;
        module.id = m.at("id").u32();
        module.path = m.at("path").str();
        module.buildId = m.at("build_id").str();
        module.loadAddress = m.at("load_address").u64();
        r->modules.push_back(std::move(module));
    });

    const Value c = root.at("capture");
    r->capture.backends = readStrings(c.at("backends"));
    r->capture.eventsPushed = c.at("events_pushed").u64();
    r->capture.eventsRecorded = c.at("events_recorded").u64();
    r->capture.eventsDropped = c.at("events_dropped").u64();
    r->capture.liveAllocations = c.at("live_allocations").u64();
    r->capture.distinctStacks = c.at("distinct_stacks").u64();
    r->capture.ringBytes = c.at("ring_bytes").u64();
    r->capture.liveMapBytes = c.at("live_map_bytes").u64();
    r->capture.stackTableBytes = c.at("stack_table_bytes").u64();
    r->capture.unknownFrees = c.at("unknown_frees").u64();
    r->capture.unwinder = c.at("unwinder").str();
    r->capture.notes = readStrings(c.at("notes"));
    // Added with the CUPTI backend: optional.
    if (c.json().contains("coverage")) {
        const Value cov = c.at("coverage");
        Coverage coverage;
        coverage.cupti = cov.at("cupti").str();
        coverage.library = cov.at("library").str();
        coverage.confirmed = cov.at("confirmed").u64();
        coverage.missed = cov.at("missed").u64();
        coverage.missedBytes = cov.at("missed_bytes").u64();
        cov.at("missed_allocations").forEach([&](const Value& m) {
            MissedAllocation missed;
            missed.api = m.at("api").str();
            missed.size = m.at("size").u64();
            missed.device = int(m.at("device").i64());
            missed.address = m.at("address").u64();
            missed.timeNs = m.at("time_ns").u64();
            missed.stack = m.at("stack").u32();
            coverage.missedAllocations.push_back(std::move(missed));
        });
        r->capture.coverage = std::move(coverage);
    }

    // Cross-references: every stack id used must be defined, and every module id.
    for (const Stack& s : r->stacks) {
        for (const Frame& f : s.frames) {
            if (f.module && !r->findModule(*f.module))
                failAt("stacks", "stack " + std::to_string(s.id) + " names undefined module " + std::to_string(*f.module));
        }
    }
}

// Nesting depth before parsing: nlohmann's parser recurses, and a file of a million '['
// must be refused, not overflow the stack.
bool depthWithin(std::string_view text, int limit, size_t* where)
{
    int depth = 0;
    bool inString = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (inString) {
            if (c == '\\')
                ++i;
            else if (c == '"')
                inString = false;
            continue;
        }
        if (c == '"') {
            inString = true;
        } else if (c == '[' || c == '{') {
            if (++depth > limit) {
                *where = i;
                return false;
            }
        } else if (c == ']' || c == '}') {
            --depth;
        }
    }
    return true;
}

// The fast path for timeline.rows, most of a large report: the rows array is found by a scan
// of the JSON's structure (strings, depth, keys) and read by hand, and nlohmann parses the rest
// with an empty rows array. Anything the hand reader does not expect (escapes, fractions,
// exponents, a value out of range) makes it give up: the whole text then goes the slow,
// checked way, which names the error.

// Index one past the string starting at text[i] == '"'; npos if unterminated.
size_t skipString(std::string_view text, size_t i)
{
    for (++i; i < text.size(); ++i) {
        if (text[i] == '\\')
            ++i;
        else if (text[i] == '"')
            return i + 1;
    }
    return std::string_view::npos;
}

// The offset of the '[' of timeline.rows.
std::optional<size_t> findTimelineRows(std::string_view text)
{
    std::vector<char> stack;  // '{' or '['
    bool expectKey = false;
    std::string_view key1, key2;  // the current keys at depths 1 and 2
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (c == '"') {
            const size_t end = skipString(text, i);
            if (end == std::string_view::npos)
                return std::nullopt;
            if (!stack.empty() && stack.back() == '{' && expectKey) {
                const std::string_view key = text.substr(i + 1, end - i - 2);
                if (stack.size() == 1)
                    key1 = key;
                else if (stack.size() == 2)
                    key2 = key;
                expectKey = false;
            }
            i = end - 1;
        } else if (c == '{') {
            stack.push_back('{');
            expectKey = true;
        } else if (c == '[') {
            if (stack.size() == 2 && stack[0] == '{' && stack[1] == '{' && key1 == "timeline" && key2 == "rows")
                return i;
            stack.push_back('[');
        } else if (c == '}' || c == ']') {
            if (stack.empty())
                return std::nullopt;
            stack.pop_back();
            expectKey = false;
        } else if (c == ',') {
            expectKey = !stack.empty() && stack.back() == '{';
        }
    }
    return std::nullopt;
}

class RowScanner {
public:
    RowScanner(std::string_view text, Timeline* tl) : m_p(text.data()), m_end(text.data() + text.size()), m_tl(tl) {}

    // The array at the start of the text; false at the first thing it does not expect.
    // consumed(): how far it read (one past the ']').
    size_t consumed(const char* start) const { return size_t(m_p - start); }
    bool rows()
    {
        if (!expect('['))
            return false;
        space();
        if (peek(']'))
            return done();
        for (;;) {
            if (!row())
                return false;
            space();
            if (peek(']'))
                return done();
            if (!expect(','))
                return false;
        }
    }

private:
    bool done()
    {
        ++m_p;
        return true;
    }
    void space()
    {
        while (m_p < m_end && (*m_p == ' ' || *m_p == '\n' || *m_p == '\t' || *m_p == '\r'))
            ++m_p;
    }
    bool peek(char c) const { return m_p < m_end && *m_p == c; }
    bool expect(char c)
    {
        space();
        if (!peek(c))
            return false;
        ++m_p;
        return true;
    }
    template <class T>
    bool number(T* out)
    {
        space();
        const auto [ptr, ec] = std::from_chars(m_p, m_end, *out);
        if (ec != std::errc() || ptr == m_p || (ptr < m_end && (*ptr == '.' || *ptr == 'e' || *ptr == 'E')))
            return false;
        if (*m_p == '-' && std::is_unsigned_v<T>)
            return false;
        m_p = ptr;
        return true;
    }
    bool name(uint16_t* out)
    {
        space();
        if (!peek('"'))
            return false;
        const char* begin = ++m_p;
        while (m_p < m_end && *m_p != '"') {
            if (*m_p == '\\' || static_cast<unsigned char>(*m_p) < 0x20 || static_cast<unsigned char>(*m_p) >= 0x80)
                return false;  // escapes, control characters, UTF-8: the checked reader
            ++m_p;
        }
        if (m_p == m_end)
            return false;
        const std::string_view text(begin, size_t(m_p - begin));
        ++m_p;
        for (const auto& [seen, index] : m_names) {
            if (seen == text) {
                *out = index;
                return true;
            }
        }
        if (m_names.size() > 256)
            return false;
        *out = m_tl->intern(std::string(text));
        m_names.emplace_back(text, *out);
        return true;
    }
    bool row()
    {
        TimelineRow r;
        int64_t device = 0, error = 0;
        uint64_t stack = 0, thread = 0;
        if (!(expect('[') && number(&r.timeNs) && expect(',') && name(&r.kind) && expect(',') && number(&device) &&
              expect(',') && number(&r.address) && expect(',') && number(&r.size) && expect(',') && number(&r.stream) &&
              expect(',') && name(&r.api) && expect(',') && number(&stack) && expect(',') && number(&thread) &&
              expect(',') && number(&error) && expect(']')))
            return false;
        if (device < INT32_MIN || device > INT32_MAX || error < INT32_MIN || error > INT32_MAX || stack > UINT32_MAX ||
            thread > UINT32_MAX)
            return false;
        r.device = int32_t(device);
        r.error = int32_t(error);
        r.stack = uint32_t(stack);
        r.thread = uint32_t(thread);
        m_tl->rows.push_back(r);
        return true;
    }

    const char* m_p;
    const char* m_end;
    Timeline* m_tl;
    std::vector<std::pair<std::string_view, uint16_t>> m_names;
};

} // namespace

namespace {

bool readReportText(std::string_view text, Report* out, std::string* error)
{
    size_t firstNonSpace = text.find_first_not_of(" \t\r\n");
    if (firstNonSpace == std::string::npos) {
        *error = "empty file";
        return false;
    }
    // The fast path: the rows read by hand, the rest of the document parsed without them.
    if (const std::optional<size_t> begin = findTimelineRows(text)) {
        Timeline rows;
        rows.rows.reserve((text.size() - *begin) / 70);
        adviseHugePages(rows.rows.data(), rows.rows.capacity() * sizeof(TimelineRow));
        RowScanner scanner(text.substr(*begin), &rows);
        size_t deepAt = 0;
        if (scanner.rows()) {
            const size_t end = *begin + scanner.consumed(text.data() + *begin);
            std::string rest;
            rest.reserve(text.size() - (end - *begin) + 2);
            rest.append(text.substr(0, *begin)).append("[]").append(text.substr(end));
            if (depthWithin(rest, kMaxJsonDepth, &deepAt)) {  // too deep: the slow path says where
                try {
                    const Json root = Json::parse(rest);
                    Report report;
                    readAll(Value(root, ""), &report, &rows);
                    *out = std::move(report);
                    return true;
                } catch (...) {
                    // The slow path below says what is wrong.
                }
            }
        }
    }
    size_t where = 0;
    if (!depthWithin(text, kMaxJsonDepth, &where)) {
        *error = "not a report: nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels at byte " + std::to_string(where);
        return false;
    }
    // timeline.rows are taken out while parsing (key "timeline" at depth 1, "rows" at depth 2,
    // each row an array ending at depth 3): read into rows, then dropped from the document.
    Timeline rows;
    rows.rows.reserve(text.size() / 80);  // a row takes 60 to 100 bytes of JSON
    bool inTimeline = false, inRows = false;
    size_t rowIndex = 0;
    Json::parser_callback_t takeRows = [&](int depth, Json::parse_event_t event, Json& parsed) {
        if (event == Json::parse_event_t::key) {
            if (depth == 1) {
                inTimeline = parsed.is_string() && parsed.get_ref<const std::string&>() == "timeline";
                inRows = false;
            } else if (depth == 2 && inTimeline) {
                inRows = parsed.is_string() && parsed.get_ref<const std::string&>() == "rows";
            }
        } else if (event == Json::parse_event_t::array_end && depth == 3 && inRows) {
            readTimelineRow(parsed, rowIndex++, &rows);
            return false;
        }
        return true;
    };
    Json root;
    try {
        root = Json::parse(text.begin(), text.end(), takeRows);
    } catch (const ReadError& e) {
        *error = e.message;
        return false;
    } catch (const Json::parse_error& e) {
        std::string what = e.what();
        // "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error ..."
        if (const size_t p = what.find("] "); p != std::string::npos)
            what = what.substr(p + 2);
        if (e.byte >= text.size())
            what = "truncated (" + what + ")";
        *error = "not valid JSON: " + what;
        return false;
    } catch (const std::exception& e) {
        *error = std::string("not valid JSON: ") + e.what();
        return false;
    }
    try {
        Report report;
        readAll(Value(root, ""), &report, &rows);
        *out = std::move(report);
        return true;
    } catch (const ReadError& e) {
        *error = e.message;
    } catch (const std::exception& e) {
        *error = std::string("invalid report: ") + e.what();
    }
    return false;
}

} // namespace

bool readReport(const std::string& text, Report* out, std::string* error)
{
    return readReportText(text, out, error);
}

bool readReportFile(const std::string& path, Report* out, std::string* error)
{
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) {
        *error = path + ": " + std::strerror(errno);
        return false;
    }
    if (S_ISDIR(st.st_mode)) {
        *error = path + ": is a directory";
        return false;
    }
    // One read into a string of the file's size (a report can be 70 MiB: no per-character
    // stream iteration), then whatever a growing file added.
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        *error = path + ": " + std::strerror(errno);
        return false;
    }
    // Uninitialised storage: zero-filling 70 MiB first costs as much as reading it.
    size_t capacity = size_t(st.st_size > 0 ? st.st_size : 0) + 1;
    std::unique_ptr<char[]> buffer(new char[capacity]);
    size_t size = 0;
    while (in) {
        if (size == capacity) {
            std::unique_ptr<char[]> bigger(new char[capacity * 2]);
            std::memcpy(bigger.get(), buffer.get(), size);
            buffer = std::move(bigger);
            capacity *= 2;
        }
        in.read(buffer.get() + size, std::streamsize(capacity - size));
        size += size_t(in.gcount());
    }
    if (in.bad()) {
        *error = path + ": read error";
        return false;
    }
    std::string why;
    if (!readReportText(std::string_view(buffer.get(), size), out, &why)) {
        *error = path + ": " + why;
        return false;
    }
    return true;
}

} // namespace oomscope::report
