#include "report/json_reader.h"

#include "report/fields.h"
#include "report/huge_pages.h"

#include <algorithm>
#include <charconv>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <type_traits>
#include <string_view>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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

// What the rows' own reader saw (the fast path, or the parse callback of the slow one), to be
// checked against the columns once they are read.
struct RowsRead {
    Timeline rows;
    size_t width = 0;                  // of the first row
    std::optional<size_t> firstOther;  // the first row of another width
    void saw(size_t index, size_t rowWidth)
    {
        if (index == 0)
            width = rowWidth;
        else if (rowWidth != width && !firstOther)
            firstOther = index;
    }
};

constexpr size_t kMaxWidth = Timeline::kWidth + 1;

// One timeline row, checked, into tl (its names interned there). A million rows: the common
// case reads the values directly; the path of a value is only spelled out for an error.
void readTimelineRow(const Json& j, size_t index, RowsRead* read)
{
    Timeline* tl = &read->rows;
    auto path = [&] { return "timeline.rows[" + std::to_string(index) + "]"; };
    if (!j.is_array() || (j.size() != Timeline::kWidth && j.size() != kMaxWidth))
        failAt(path(), "expected a row of " + std::to_string(Timeline::kWidth) + " values");
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
    if (j.size() == kMaxWidth)
        row.handle = u64(10);
    if (tl->names.size() > 60000)
        failAt(path(), "too many distinct event and API names");
    read->saw(index, j.size());
    tl->rows.push_back(row);
}


template <class E>
E readEnum(const Value& v)
{
    const std::string name = v.str();
    E out{};
    if (parseEnum(name, &out))
        return out;
    std::string expected;
    for (const char* n : EnumNames<E>::names)
        expected += (expected.empty() ? "" : ", ") + std::string(n);
    failAt(v.path(), "expected one of " + expected + ", got \"" + name + "\"");
}

// Walks the field table (fields.h) over one JSON object, reading each field strictly: a
// missing key of the first revision, a wrong type or a value out of range is an error with
// its path.
class ReadVisitor {
public:
    ReadVisitor(const Value& object, RowsRead* rowsRead) : m_object(object), m_rowsRead(rowsRead) {}

    template <class T>
    void operator()(const char* key, T&& member, int since)
    {
        using M = std::remove_cvref_t<T>;
        const bool present = m_object.json().contains(key);
        if constexpr (fields::IsAbsentWhenEmpty<M>::value) {
            member.value.reset();
            if (present) {
                typename std::remove_cvref_t<decltype(member.value)>::value_type inner{};
                read(m_object.at(key), inner);
                member.value = std::move(inner);
            }
        } else {
            if (!present && since > fields::kFirst)
                return;  // a report from before the key existed: the default stands
            read(m_object.at(key), member);
        }
    }

    template <class T>
    void read(const Value& v, T& x)
    {
        if constexpr (std::is_same_v<T, std::string>) {
            x = v.str();
        } else if constexpr (std::is_same_v<T, bool>) {
            x = v.boolean();
        } else if constexpr (std::is_enum_v<T>) {
            x = readEnum<T>(v);
        } else if constexpr (std::is_same_v<T, uint64_t>) {
            x = v.u64();
        } else if constexpr (std::is_same_v<T, uint32_t>) {
            x = v.u32();
        } else if constexpr (std::is_same_v<T, int64_t>) {
            x = v.i64();
        } else if constexpr (std::is_same_v<T, int32_t>) {
            x = v.i32();
        } else if constexpr (fields::IsOptional<T>::value) {
            x.reset();
            if (!v.isNull()) {
                typename T::value_type inner{};
                read(v, inner);
                x = std::move(inner);
            }
        } else if constexpr (fields::IsVector<T>::value) {
            x.clear();
            v.forEach([&](const Value& e) {
                typename T::value_type element{};
                read(e, element);
                x.push_back(std::move(element));
            });
        } else if constexpr (fields::IsMap<T>::value) {
            readMap(v, x);
        } else {
            v.expectObject();
            ReadVisitor inner(v, m_rowsRead);
            fields::describe(inner, x);
        }
    }

    void read(const Value& v, fields::TimelineColumns<Timeline>& columns)
    {
        const size_t n = v.arraySize();
        if (n != Timeline::kWidth && !(n == kMaxWidth && v.at(Timeline::kWidth).json() == Timeline::kHandleColumn))
            failAt(v.path(), "expected " + std::to_string(Timeline::kWidth) + " columns");
        for (size_t i = 0; i < Timeline::kWidth; ++i) {
            const std::string name = v.at(i).str();
            if (name != Timeline::kColumns[i])
                failAt(v.at(i).path(), "expected \"" + std::string(Timeline::kColumns[i]) + "\", got \"" + name + "\"");
        }
        m_columns = n;
        (void)columns;
    }

    void read(const Value& v, fields::TimelineRows<Timeline>& rows)
    {
        v.arraySize();  // an array, whichever reader took its rows
        Timeline* tl = &rows.timeline;
        RowsRead local;
        RowsRead* read = m_rowsRead;
        if (!read) {
            for (size_t i = 0; i < v.arraySize(); ++i)
                readTimelineRow(v.json()[i], i, &local);
            read = &local;
        }
        if (!read->rows.rows.empty() && read->width != m_columns)
            failAt(v.path() + "[0]", "expected a row of " + std::to_string(m_columns) + " values");
        if (read->firstOther)
            failAt(v.path() + "[" + std::to_string(*read->firstOther) + "]",
                   "expected a row of " + std::to_string(m_columns) + " values");
        tl->names = std::move(read->rows.names);
        tl->rows = std::move(read->rows.rows);
    }

    void read(const Value& v, fields::SiteTriples<std::vector<StepSite>>& triples)
    {
        triples.sites.clear();
        v.forEach([&](const Value& row) {
            if (row.arraySize() != 3)
                failAt(row.path(), "expected [stack, device, bytes]");
            triples.sites.push_back(StepSite{row.at(size_t(0)).u32(), row.at(size_t(1)).i64(), row.at(size_t(2)).u64()});
        });
    }

private:
    template <class K, class V>
    void readMap(const Value& v, std::map<K, V>& out)
    {
        v.expectObject();
        out.clear();
        for (auto it = v.json().begin(); it != v.json().end(); ++it) {
            const Value entry(it.value(), v.path() + "." + it.key());
            K key{};
            if constexpr (std::is_enum_v<K>) {
                if (!parseEnum(it.key(), &key))
                    failAt(entry.path(), "not a known name");
            } else {
                key = it.key();
            }
            read(entry, out[key]);
        }
    }

    const Value& m_object;
    RowsRead* m_rowsRead;
    size_t m_columns = Timeline::kWidth;
};

// stacks: read by hand already (the document's own "stacks" then an empty array), or null.
void readAll(const Value& root, Report* r, RowsRead* rowsRead, std::vector<Stack>* stacks = nullptr)
{
    root.expectObject();
    auto schemaIt = root.json().find("schema");
    if (schemaIt == root.json().end())
        throw ReadError{"not an oomscope report (no \"schema\" key)"};
    if (!schemaIt->is_string() || schemaIt->get<std::string>() != kSchema)
        throw ReadError{"unsupported schema " + schemaIt->dump() + " (this oomscope reads " + kSchema + ")"};
    ReadVisitor visitor(root, rowsRead);
    fields::describe(visitor, *r);
    if (stacks)
        r->stacks = std::move(*stacks);

    // Cross-references: every module id a frame names must be defined.
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

namespace {

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
    try {
        const Json root = Json::parse(rest);
        Report report;
        readAll(Value(root, ""), &report, &rows, stacks ? &*stacks : nullptr);
        *out = std::move(report);
        return true;
    } catch (...) {
        return false;
    }
}

// The checked path: nlohmann parses the whole text; timeline.rows are taken out while parsing
// (key "timeline" at depth 1, "rows" at depth 2, each row an array ending at depth 3), read
// into rows, then dropped from the document.
bool readChecked(std::string_view text, Report* out, std::string* error)
{
    RowsRead rows;
    rows.rows.rows.reserve(text.size() / 80);  // a row takes 60 to 100 bytes of JSON
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

bool readReportText(std::string_view text, Report* out, std::string* error)
{
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
        *error = "empty file";
        return false;
    }
    if (readFast(text, out))
        return true;
    size_t where = 0;
    if (!depthWithin(text, kMaxJsonDepth, &where)) {
        *error = "not a report: nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels at byte " + std::to_string(where);
        return false;
    }
    return readChecked(text, out, error);
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
    // A regular file is mapped, not read: a report of 10 Mi events is 800 MiB, and reading it
    // costs a copy and the zeroing of as many fresh pages (a third of `oomscope html` there).
    if (S_ISREG(st.st_mode) && st.st_size > 0) {
        const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        void* map = fd < 0 ? MAP_FAILED : mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
        if (fd >= 0)
            close(fd);
        if (map != MAP_FAILED) {
            madvise(map, size_t(st.st_size), MADV_SEQUENTIAL);
            std::string why;
            const bool ok = readReportText(std::string_view(static_cast<const char*>(map), size_t(st.st_size)), out, &why);
            munmap(map, size_t(st.st_size));
            if (!ok)
                *error = path + ": " + why;
            return ok;
        }
    }
    // Otherwise (a pipe, /dev/stdin, a file that cannot be mapped) one read into a buffer of
    // the file's size (no per-character stream iteration), then whatever a growing file added.
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
