// The hand readers of a report's two large arrays, timeline.rows and stacks (a million rows, a
// million frames), and the fast path that uses them (json_read_parts.h).
#include "report/json_read_parts.h"

#include "report/huge_pages.h"
#include "report/json_reader.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>
#include <optional>
#include <string>

namespace oomscope::report::detail {

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

namespace {

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

// The offset of the '[' of the array at key1 (depth 1) or key1.key2 (depth 2). From `from`
// on, where the scan is inside `open` (the brackets open there, outermost first: "{{" just
// after timeline.rows) with the keys `at` of those depths.
std::optional<size_t> findArray(std::string_view text, std::string_view key1, std::string_view key2 = {},
                                size_t from = 0, std::string_view open = {}, std::string_view at = {})
{
    std::vector<char> stack(open.begin(), open.end());  // '{' or '['
    bool expectKey = false;
    std::string_view keys[2] = {at, {}};  // the current keys at depths 1 and 2
    const size_t depth = key2.empty() ? 1 : 2;
    for (size_t i = from; i < text.size(); ++i) {
        const char c = text[i];
        if (c == '"') {
            const size_t end = skipString(text, i);
            if (end == std::string_view::npos)
                return std::nullopt;
            if (!stack.empty() && stack.back() == '{' && expectKey) {
                if (stack.size() <= 2)
                    keys[stack.size() - 1] = text.substr(i + 1, end - i - 2);
                expectKey = false;
            }
            i = end - 1;
        } else if (c == '{') {
            stack.push_back('{');
            expectKey = true;
        } else if (c == '[') {
            if (stack.size() == depth && std::all_of(stack.begin(), stack.end(), [](char b) { return b == '{'; }) &&
                keys[0] == key1 && (depth == 1 || keys[1] == key2))
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

// Eight bytes of text as a little-endian word (the first byte lowest).
[[gnu::always_inline]] inline uint64_t load8(const char* p)
{
    uint64_t w;
    std::memcpy(&w, p, 8);
    return w;
}

// How many of the eight bytes of w, from the first, are ASCII digits (0..8). A byte below '0'
// borrows and one above '9' carries only into the bytes after it, so the first non-digit is
// found exactly (what follows it does not matter).
[[gnu::always_inline]] inline unsigned digitRun(uint64_t w)
{
    const uint64_t nonDigit = ((w - 0x3030303030303030ull) | (w + 0x4646464646464646ull)) & 0x8080808080808080ull;
    return nonDigit ? unsigned(__builtin_ctzll(nonDigit)) / 8 : 8;
}

// The value of the first n (1..8) digits of w, most significant first: moved to the top of the
// word (zeros before them read as leading zeros), then folded pairwise (2, 4, 8 digits).
[[gnu::always_inline]] inline uint64_t digitsValue(uint64_t w, unsigned n)
{
    w = (w & 0x0F0F0F0F0F0F0F0Full) << (8 * (8 - n));
    w = (w * 10 + (w >> 8)) & 0x00FF00FF00FF00FFull;
    w = (w * 100 + (w >> 16)) & 0x0000FFFF0000FFFFull;
    return (w * 10000 + (w >> 32)) & 0xFFFFFFFFull;
}

constexpr uint64_t kPow10[9] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};

// The JSON a hand reader takes: whitespace, punctuation, integers, and strings of printable
// ASCII without escapes. Anything else is a "no": the caller falls back to the checked reader.
class Scanner {
public:
    explicit Scanner(std::string_view text) : m_p(text.data()), m_end(text.data() + text.size()) {}
    // How far it read from start.
    size_t consumed(const char* start) const { return size_t(m_p - start); }

protected:
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
        if (m_p < m_end && *m_p == c) {  // a report as written has no space between tokens
            ++m_p;
            return true;
        }
        space();
        if (!peek(c))
            return false;
        ++m_p;
        return true;
    }
    template <class T>
    bool number(T* out)
    {
        if (m_p < m_end && unsigned(*m_p - '0') >= 10)
            space();
        // Most numbers of a report are plain and at most 16 digits (ten million rows, ten
        // each): read eight digits at a time; longer ones, signs and anything odd go on below.
        if (m_end - m_p >= 16) {
            const uint64_t w1 = load8(m_p);
            const unsigned n1 = digitRun(w1);
            uint64_t v = 0;
            unsigned n = 0;
            if (n1 > 0 && n1 < 8) {
                v = digitsValue(w1, n1), n = n1;
            } else if (n1 == 8) {
                const uint64_t w2 = load8(m_p + 8);
                const unsigned n2 = digitRun(w2);
                if (n2 < 8)
                    v = digitsValue(w1, 8) * kPow10[n2] + (n2 ? digitsValue(w2, n2) : 0), n = 8 + n2;
            }
            const char end = n ? m_p[n] : '0';
            if (n && end != '.' && end != 'e' && end != 'E' && v <= uint64_t(std::numeric_limits<T>::max())) {
                *out = T(v);
                m_p += n;
                return true;
            }
        }
        {
            const char* p = m_p;
            uint64_t v = 0;
            while (p < m_end && p - m_p < 18 && unsigned(*p - '0') < 10)
                v = v * 10 + unsigned(*p++ - '0');
            if (p > m_p && p < m_end && unsigned(*p - '0') >= 10 && *p != '.' && *p != 'e' && *p != 'E' &&
                v <= uint64_t(std::numeric_limits<T>::max())) {
                *out = T(v);
                m_p = p;
                return true;
            }
        }
        const auto [ptr, ec] = std::from_chars(m_p, m_end, *out);
        if (ec != std::errc() || ptr == m_p || (ptr < m_end && (*ptr == '.' || *ptr == 'e' || *ptr == 'E')))
            return false;
        if (*m_p == '-' && std::is_unsigned_v<T>)
            return false;
        m_p = ptr;
        return true;
    }
    bool text(std::string_view* out)
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
        *out = std::string_view(begin, size_t(m_p - begin));
        ++m_p;
        return true;
    }
    bool key(std::string_view wanted)
    {
        std::string_view k;
        return text(&k) && k == wanted && expect(':');
    }
    // A JSON array, each element read by element(); false at the first thing unexpected.
    template <class Element>
    bool array(Element element)
    {
        if (!expect('['))
            return false;
        space();
        if (peek(']'))
            return done();
        for (;;) {
            if (!element())
                return false;
            space();
            if (peek(']'))
                return done();
            if (!expect(','))
                return false;
        }
    }
    bool null()
    {
        space();
        if (m_end - m_p < 4 || std::memcmp(m_p, "null", 4) != 0)
            return false;
        m_p += 4;
        return true;
    }

    const char* m_p;
    const char* m_end;
};

// The top-level "stacks" array, most of a report with deep stacks (a million frames): read by
// hand in the order the writer puts the keys (fields.h); anything else is a "no".
class StackScanner : public Scanner {
public:
    using Scanner::Scanner;
    bool stacks(std::vector<Stack>* out)
    {
        return array([&] { return stack(&out->emplace_back()); });
    }

private:
    bool stack(Stack* s)
    {
        if (!(expect('{') && key("id") && number(&s->id) && expect(',') && key("frames") &&
              array([&] { return frame(&s->frames.emplace_back()); })))
            return false;
        space();
        if (peek(',')) {
            std::string_view name;
            Source source{};
            if (!(expect(',') && key("source")))
                return false;
            if (!null()) {
                if (!text(&name) || !parseEnum(std::string(name), &source))
                    return false;
                s->source = source;
            }
        }
        return expect('}');
    }
    bool frame(Frame* f)
    {
        std::string_view kind, a, b;
        if (!(expect('{') && key("kind") && text(&kind) && expect(',')))
            return false;
        if (kind == "python") {
            f->kind = FrameKind::Python;
            if (!(key("file") && text(&a) && expect(',') && key("line") && number(&f->line) && expect(',') &&
                  key("function") && text(&b)))
                return false;
            f->file = a;
            f->function = b;
        } else if (kind == "native") {
            uint32_t module = 0;
            if (!key("module"))
                return false;
            if (!null()) {
                if (!number(&module))
                    return false;
                f->module = module;
            }
            if (!(expect(',') && key("offset") && number(&f->offset) && expect(',') && key("symbol") && text(&a)))
                return false;
            f->symbol = a;
            // Revision 8: the source line, each key absent when unknown.
            space();
            while (peek(',')) {
                std::string_view k;
                if (!(expect(',') && text(&k) && expect(':')))
                    return false;
                if (k == "file" && text(&b))
                    f->file = b;
                else if (!(k == "line" && number(&f->line)))
                    return false;
                space();
            }
        } else {
            return false;
        }
        return expect('}');
    }
};

class RowScanner : public Scanner {
public:
    RowScanner(std::string_view text, RowsRead* read) : Scanner(text), m_read(read), m_tl(&read->rows) {}

    // The array at the start of the text; false at the first thing it does not expect.
    bool rows()
    {
        return array([&] { return row(); });
    }

private:
    // A name seen before is told by the word of its first eight bytes with the closing quote
    // (the rest compared when longer): no scan for the quote, no string compare per row.
    struct Known {
        uint64_t head = 0, mask = 0;
        std::string_view text;  // the name and its closing quote, in the report's text
        uint16_t index = 0;
    };
    bool name(uint16_t* out)
    {
        if (m_p < m_end && *m_p != '"')
            space();
        if (m_end - m_p > 8 && *m_p == '"') {
            const uint64_t w = load8(m_p + 1);
            for (const Known& k : m_names) {
                if ((w & k.mask) != k.head)
                    continue;
                if (k.text.size() > 8 && (size_t(m_end - m_p - 1) < k.text.size() ||
                                          std::memcmp(m_p + 9, k.text.data() + 8, k.text.size() - 8) != 0))
                    continue;
                m_p += 1 + k.text.size();
                *out = k.index;
                return true;
            }
        }
        std::string_view text;
        if (!Scanner::text(&text))
            return false;
        if (m_names.size() > 256)
            return false;
        Known k;
        k.index = m_tl->intern(std::string(text));
        for (const Known& seen : m_names)
            if (seen.index == k.index)
                return *out = k.index, true;
        k.text = std::string_view(text.data(), text.size() + 1);  // with its quote
        const size_t head = std::min<size_t>(8, k.text.size());
        std::memcpy(&k.head, k.text.data(), head);
        k.mask = head == 8 ? ~uint64_t(0) : (uint64_t(1) << (8 * head)) - 1;
        m_names.push_back(k);
        *out = k.index;
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
              expect(',') && number(&error)))
            return false;
        size_t width = Timeline::kWidth;
        space();
        if (peek(',')) {
            if (!(expect(',') && number(&r.handle)))
                return false;
            ++width;
        }
        if (!expect(']'))
            return false;
        if (device < INT32_MIN || device > INT32_MAX || error < INT32_MIN || error > INT32_MAX || stack > UINT32_MAX ||
            thread > UINT32_MAX)
            return false;
        r.device = int32_t(device);
        r.error = int32_t(error);
        r.stack = uint32_t(stack);
        r.thread = uint32_t(thread);
        m_read->saw(m_tl->rows.size(), width);
        m_tl->rows.push_back(r);
        return true;
    }

    RowsRead* m_read;
    Timeline* m_tl;
    std::vector<Known> m_names;
};

} // namespace

// The fast path: the rows (and the stacks, where the hand reader takes them) read by hand,
// the rest of the document parsed without them. false (nothing said) at anything unexpected:
// the checked path then says what is wrong.
bool readFast(std::string_view text, Report* out)
{
    const std::optional<size_t> rowsBegin = findArray(text, "timeline", "rows");
    if (!rowsBegin)
        return false;
    RowsRead rows;
    rows.rows.rows.reserve((text.size() - *rowsBegin) / 70);
    adviseHugePages(rows.rows.rows.data(), rows.rows.rows.capacity() * sizeof(TimelineRow));
    RowScanner scanner(text.substr(*rowsBegin), &rows);
    {
        // The rows' pages zeroed on another core while this one scans (the reserve is an upper
        // bound: pages past the last row are zeroed for nothing, a few percent).
        const Prefault ahead(rows.rows.rows.data(), rows.rows.rows.capacity() * sizeof(TimelineRow));
        if (!scanner.rows())
            return false;
    }
    const size_t rowsEnd = *rowsBegin + scanner.consumed(text.data() + *rowsBegin);
    // The stacks, after the rows in a report as written; left to nlohmann where anything differs.
    std::optional<std::vector<Stack>> stacks;
    size_t stacksBegin = 0, stacksEnd = 0;
    // After the rows the scan is inside the root object and its "timeline".
    if (const std::optional<size_t> at = findArray(text, "stacks", {}, rowsEnd, "{{", "timeline")) {
        std::vector<Stack> read;
        StackScanner stackScanner(text.substr(*at));
        if (stackScanner.stacks(&read)) {
            stacksBegin = *at;
            stacksEnd = *at + stackScanner.consumed(text.data() + *at);
            stacks = std::move(read);
        }
    }
    std::string rest;
    rest.reserve(text.size() - (rowsEnd - *rowsBegin) - (stacksEnd - stacksBegin) + 4);
    rest.append(text.substr(0, *rowsBegin)).append("[]");
    if (stacks)
        rest.append(text.substr(rowsEnd, stacksBegin - rowsEnd)).append("[]").append(text.substr(stacksEnd));
    else
        rest.append(text.substr(rowsEnd));
    size_t deepAt = 0;
    if (!depthWithin(rest, kMaxJsonDepth, &deepAt))  // too deep: the checked path says where
        return false;
    return readRest(rest, &rows, stacks ? &*stacks : nullptr, out);
}

} // namespace oomscope::report::detail
