// Streaming JSON output without a DOM: objects, arrays, keys and values appended to a buffer
// that is handed to a sink in chunks (or kept, without one). What the report writer and the
// views (HTML, exports) write with; strings escaped and made valid UTF-8 by appendJsonString.
// Not thread-safe; allocates only its buffer.
#pragma once

#include "report/json_writer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

namespace oomscope::report {

class JsonOut {
public:
    explicit JsonOut(JsonSink* sink = nullptr) : m_sink(sink) { m_out.reserve(kChunk + 4096); }

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
    // A number that need not be an integer (shares, seconds): shortest round-trip form;
    // NaN and infinities, which JSON has not, as null.
    void value(double v)
    {
        comma();
        if (!std::isfinite(v)) {
            m_out.append("null");
            return;
        }
        char buf[32];
        auto r = std::to_chars(buf, buf + sizeof(buf), v);
        m_out.append(buf, r.ptr);
        maybeFlush();
    }
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


} // namespace oomscope::report
