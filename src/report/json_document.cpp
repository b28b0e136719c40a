// The report document, checked: nlohmann parses it, and the field table (fields.h) is walked
// over it reading each field strictly, errors named by their path (json_read_parts.h).
#include "report/json_read_parts.h"

#include "report/fields.h"
#include "report/json_reader.h"

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <type_traits>

namespace oomscope::report::detail {
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
            using Member = std::remove_cvref_t<decltype(member.value)>;
            member.value = Member{};
            if (present) {
                typename fields::PresentType<Member>::type inner{};
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

} // namespace

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

bool readRest(const std::string& rest, RowsRead* rows, std::vector<Stack>* stacks, Report* out)
{
    try {
        const Json root = Json::parse(rest);
        Report report;
        readAll(Value(root, ""), &report, rows, stacks);
        *out = std::move(report);
        return true;
    } catch (...) {
        return false;
    }
}

} // namespace oomscope::report::detail
