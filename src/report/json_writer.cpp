#include "report/json_writer.h"

#include "report/fields.h"
#include "report/json_out.h"
#include "report/huge_pages.h"

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <vector>

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

// Timeline rows from the parallel formatting: chunks of this many rows, this many helper
// threads at most, and none below kParallelRows rows.
constexpr size_t kRowsPerChunk = 32768;
constexpr size_t kMaxWorkers = 8;
constexpr size_t kParallelRows = 131072;

// Rows [begin, end) as JSON text joined by commas, into *out (replaced).
void formatRows(const Timeline& tl, const std::vector<std::string>& quoted, bool handles, size_t begin, size_t end,
                std::string* out)
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
        if (handles) {
            line += ',';
            number(row.handle);
        }
        line += ']';
    }
}

// The pipeline of writeAll's rows: chunk i is formatted into buffer i % inFlight by whichever
// helper claims it, and written by the calling thread once it is done, in chunk order.
void writeRowsPipelined(JsonOut& w, const Timeline& tl, const std::vector<std::string>& quoted, bool handles)
{
    const size_t n = tl.rows.size();
    const size_t chunks = (n + kRowsPerChunk - 1) / kRowsPerChunk;
    const size_t hardware = std::max(1u, std::thread::hardware_concurrency());
    const size_t helpersWanted = n < kParallelRows ? 0 : std::min<size_t>(hardware, kMaxWorkers);
    if (helpersWanted == 0) {
        std::string text;
        for (size_t c = 0; c < chunks; ++c) {
            formatRows(tl, quoted, handles, c * kRowsPerChunk, std::min(n, (c + 1) * kRowsPerChunk), &text);
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
            formatRows(tl, quoted, handles, c * kRowsPerChunk, std::min(n, (c + 1) * kRowsPerChunk), &buffers[c % inFlight]);
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
            formatRows(tl, quoted, handles, c * kRowsPerChunk, std::min(n, (c + 1) * kRowsPerChunk), &buffers[k]);
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


// Walks the field table (fields.h) and writes each field as it comes.
class WriteVisitor {
public:
    explicit WriteVisitor(JsonOut& w) : m_w(w) {}

    template <class T>
    void operator()(const char* key, T&& member, int /*since*/)
    {
        using M = std::remove_cvref_t<T>;
        if constexpr (fields::IsAbsentWhenEmpty<M>::value) {
            if (fields::isEmptyValue(member.value))
                return;
            m_w.key(key);
            value(fields::presentValue(member.value));
        } else {
            m_w.key(key);
            value(member);
        }
    }

private:

    template <class T>
    void value(const T& x)
    {
        if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, bool>) {
            m_w.value(x);
        } else if constexpr (std::is_enum_v<T>) {
            m_w.value(enumName(x));
        } else if constexpr (std::is_integral_v<T>) {
            if constexpr (std::is_signed_v<T>)
                m_w.value(int64_t(x));
            else
                m_w.value(uint64_t(x));
        } else if constexpr (fields::IsOptional<T>::value) {
            if (x)
                value(*x);
            else
                m_w.null();
        } else if constexpr (fields::IsVector<T>::value) {
            m_w.beginArray();
            for (const auto& e : x)
                value(e);
            m_w.endArray();
        } else if constexpr (fields::IsMap<T>::value) {
            object(x);
        } else {
            m_w.beginObject();
            fields::describe(*this, x);
            m_w.endObject();
        }
    }

    // An object of a map; enum keys by name, in the order of their names.
    template <class K, class V>
    void object(const std::map<K, V>& map)
    {
        m_w.beginObject();
        if constexpr (std::is_enum_v<K>) {
            std::vector<std::pair<std::string, const V*>> named;
            for (const auto& [k, v] : map)
                named.emplace_back(enumName(k), &v);
            std::sort(named.begin(), named.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
            for (const auto& [name, v] : named) {
                m_w.key(name.c_str());
                value(*v);
            }
        } else {
            for (const auto& [k, v] : map) {
                m_w.key(k.c_str());
                value(v);
            }
        }
        m_w.endObject();
    }

    void value(const fields::TimelineColumns<const Timeline>& columns)
    {
        m_w.beginArray();
        for (const char* c : Timeline::kColumns)
            m_w.value(c);
        if (columns.timeline.hasHandles())
            m_w.value(Timeline::kHandleColumn);
        m_w.endArray();
    }

    // Each name once as JSON text, then the rows formatted in chunks by helper threads while
    // this one writes the chunks done so far, in order (a million rows are most of an OOM
    // dump's time: formatting and writing overlap).
    void value(const fields::TimelineRows<const Timeline>& rows)
    {
        const Timeline& tl = rows.timeline;
        std::vector<std::string> quoted;
        for (const std::string& name : tl.names) {
            std::string q;
            appendJsonString(q, name);
            quoted.push_back(std::move(q));
        }
        m_w.beginArray();
        writeRowsPipelined(m_w, tl, quoted, tl.hasHandles());
        m_w.endArray();
    }

    void value(const fields::SiteTriples<const std::vector<StepSite>>& triples)
    {
        m_w.beginArray();
        for (const StepSite& site : triples.sites) {
            m_w.beginArray();
            m_w.value(uint64_t(site.stack));
            m_w.value(site.device);
            m_w.value(site.bytes);
            m_w.endArray();
        }
        m_w.endArray();
    }

    JsonOut& m_w;
};

void writeAll(JsonOut& w, const Report& r)
{
    WriteVisitor visitor(w);
    w.beginObject();
    fields::describe(visitor, r);
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
    JsonOut w(&sink);
    writeAll(w, report);
    return w.finish();
}

std::string reportToJson(const Report& report)
{
    JsonOut w(nullptr);
    writeAll(w, report);
    return std::move(w.buffer());
}

} // namespace oomscope::report
