// The field table (src/report/fields.h) against docs/report.schema.json, both ways: every
// field is a property of its object in the schema, with a type that admits what the writer
// writes, required exactly when the field is of the first revision; and every property of the
// schema is a field. A field added to one and not the other fails here, naming it.
#include "report/fields.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace {

using namespace oomscope::report;
using Json = nlohmann::json;


// node[key], or null when node is not an object or has no such key (const operator[] on a
// missing key is undefined).
const Json& field(const Json& node, const char* key)
{
    static const Json kNull;
    if (!node.is_object())
        return kNull;
    auto it = node.find(key);
    return it == node.end() ? kNull : *it;
}

std::string typeOf(const Json& node)
{
    const Json& t = field(node, "type");
    return t.is_string() ? t.get<std::string>() : std::string();
}

class SchemaCheck {
public:
    SchemaCheck(const Json& root, const Json& object, std::string path, std::vector<std::string>* problems)
        : m_root(root), m_object(resolve(object)), m_path(std::move(path)), m_problems(problems)
    {
        if (typeOf(m_object) != "object")
            problem(m_path, "is not an object in the schema");
    }

    template <class T>
    void operator()(const char* key, T&& member, int since)
    {
        using M = std::remove_cvref_t<T>;
        const std::string path = m_path + "." + key;
        m_visited.insert(key);
        const Json& properties = field(m_object, "properties");
        if (!properties.is_object() || !properties.contains(key)) {
            problem(path, "is a field but not a property of the schema");
            return;
        }
        const bool required = contains(field(m_object, "required"), key);
        const bool mustBe = since == fields::kFirst && !fields::IsAbsentWhenEmpty<M>::value;
        if (required != mustBe)
            problem(path, mustBe ? "is in every report but not required by the schema"
                                 : "may be absent (added later) but the schema requires it");
        if constexpr (fields::IsAbsentWhenEmpty<M>::value)
            check(properties[key], typename fields::PresentType<std::remove_cvref_t<decltype(member.value)>>::type{}, path);
        else
            check(properties[key], member, path);
    }

    // Every property of the schema's object was a field.
    void finish()
    {
        const Json& properties = field(m_object, "properties");
        if (!properties.is_object())
            return;
        for (const auto& [name, _] : properties.items()) {
            if (!m_visited.count(name))
                problem(m_path + "." + name, "is a property of the schema but no field writes it");
        }
    }

private:
    const Json& resolve(const Json& node) const
    {
        const Json& ref = field(node, "$ref");  // "#/$defs/name"
        if (!ref.is_string())
            return node;
        const std::string name = ref.get<std::string>();
        return field(field(m_root, "$defs"), name.substr(name.rfind('/') + 1).c_str());
    }

    static bool contains(const Json& list, const std::string& value)
    {
        for (const Json& v : list) {
            if (v == value)
                return true;
        }
        return false;
    }

    void problem(const std::string& path, const std::string& what) { m_problems->push_back(path + " " + what); }

    // The non-null branch of a nullable property, or nullptr when it admits no null.
    const Json* nonNull(const Json& node) const
    {
        const Json& oneOf = field(node, "oneOf");
        if (!oneOf.is_array() || oneOf.size() != 2)
            return nullptr;
        if (typeOf(oneOf[1]) == "null")
            return &oneOf[0];
        if (typeOf(oneOf[0]) == "null")
            return &oneOf[1];
        return nullptr;
    }

    template <class T>
    void check(const Json& raw, const T& x, const std::string& path)
    {
        const Json& node = resolve(raw);
        if constexpr (fields::IsOptional<T>::value) {
            const Json* inner = nonNull(node);
            if (!inner)
                problem(path, "is nullable but the schema admits no null");
            else
                check(*inner, typename T::value_type{}, path);
        } else {
            if (nonNull(node))
                problem(path, "is never null but the schema admits null");
            checkValue(node, x, path);
        }
    }

    template <class T>
    void checkValue(const Json& node, const T&, const std::string& path)
    {
        if constexpr (std::is_same_v<T, std::string>) {
            if (!field(node, "const").is_string())  // "schema": one fixed string
                expectType(node, "string", path);
        } else if constexpr (std::is_same_v<T, bool>) {
            expectType(node, "boolean", path);
        } else if constexpr (std::is_enum_v<T>) {
            checkEnum<T>(node, path);
        } else if constexpr (std::is_integral_v<T>) {
            expectType(node, "integer", path);
            if (std::is_unsigned_v<T> && field(node, "minimum") != Json(0))
                problem(path, "is unsigned but the schema's minimum is not 0");
        } else if constexpr (fields::IsVector<T>::value) {
            expectType(node, "array", path);
            if (field(node, "items").is_object())
                check(field(node, "items"), typename T::value_type{}, path + "[]");
            else
                problem(path, "has no items in the schema");
        } else if constexpr (fields::IsMap<T>::value) {
            expectType(node, "object", path);
            if (!field(node, "additionalProperties").is_object())
                problem(path, "is a map but the schema has no additionalProperties");
            else
                check(field(node, "additionalProperties"), typename T::mapped_type{}, path + ".*");
        } else if constexpr (std::is_same_v<T, Frame>) {
            checkFrame(node, path);
        } else {
            SchemaCheck inner(m_root, node, path, m_problems);
            T value{};
            fields::describe(inner, value);
            inner.finish();
        }
    }

    void check(const Json& node, const fields::TimelineColumns<Timeline>&, const std::string& path)
    {
        // The ten columns, or the ten and the handle column.
        std::vector<std::string> ten(std::begin(Timeline::kColumns), std::end(Timeline::kColumns));
        std::vector<std::string> eleven = ten;
        eleven.push_back(Timeline::kHandleColumn);
        bool tenOk = false, elevenOk = false;
        const Json branches = field(node, "oneOf").is_array() ? field(node, "oneOf") : Json::array({node});
        for (const Json& branch : branches) {
            tenOk = tenOk || field(branch, "const") == Json(ten);
            elevenOk = elevenOk || field(branch, "const") == Json(eleven);
        }
        if (!tenOk || !elevenOk)
            problem(path, "does not admit exactly the ten columns and the ten with \"handle\"");
    }

    void check(const Json& node, const fields::TimelineRows<Timeline>&, const std::string& path)
    {
        expectType(node, "array", path);
        const Json& items = field(node, "items");
        if (field(items, "minItems") != Json(Timeline::kWidth) || field(items, "maxItems") != Json(Timeline::kWidth + 1) ||
            field(items, "prefixItems").size() != Timeline::kWidth + 1)
            problem(path, "rows are not of ten or eleven values in the schema");
    }

    void check(const Json& node, const fields::SiteTriples<std::vector<StepSite>>&, const std::string& path)
    {
        expectType(node, "array", path);
        const Json& items = field(node, "items");
        if (typeOf(items) != "array" || field(items, "minItems") != Json(3) || field(items, "maxItems") != Json(3))
            problem(path, "is not a list of [stack, device, bytes] in the schema");
    }

    void expectType(const Json& node, const char* type, const std::string& path)
    {
        if (typeOf(node) != type)
            problem(path, std::string("is ") + type + " but the schema says " + node.dump());
    }

    template <class E>
    void checkEnum(const Json& node, const std::string& path)
    {
        std::set<std::string> names(EnumNames<E>::names.begin(), EnumNames<E>::names.end());
        std::set<std::string> listed;
        for (const Json& v : field(node, "enum")) {
            if (v.is_string())
                listed.insert(v.get<std::string>());
        }
        if (field(node, "const").is_string())
            listed.insert(field(node, "const").get<std::string>());
        // A frame's kind is one name per branch (checkFrame); every other enum lists them all.
        const bool ok = std::is_same_v<E, FrameKind>
                            ? listed.size() == 1 && names.count(*listed.begin())
                            : listed == names;
        if (!ok)
            problem(path, "names differ between the enum and the schema's enum");
    }

    // A frame is one of two objects, by its kind.
    void checkFrame(const Json& node, const std::string& path)
    {
        for (FrameKind kind : {FrameKind::Native, FrameKind::Python}) {
            const Json* branch = nullptr;
            for (const Json& b : field(node, "oneOf")) {
                if (field(field(field(b, "properties"), "kind"), "const") == enumName(kind))
                    branch = &b;
            }
            if (!branch) {
                problem(path, std::string("has no branch for kind ") + enumName(kind));
                continue;
            }
            SchemaCheck inner(m_root, *branch, path + "<" + enumName(kind) + ">", m_problems);
            Frame frame;
            frame.kind = kind;
            fields::describe(inner, frame);
            inner.finish();
        }
    }

    const Json& m_root;
    const Json& m_object;
    std::string m_path;
    std::vector<std::string>* m_problems;
    std::set<std::string> m_visited;
};

Json loadSchema()
{
    std::ifstream in(std::string(OOMSCOPE_SOURCE_DIR) + "/docs/report.schema.json");
    REQUIRE(in);
    return Json::parse(in);
}

} // namespace

TEST_CASE("every field of the table is in the schema and every schema property is a field", "[fields][schema]")
{
    const Json schema = loadSchema();
    std::vector<std::string> problems;
    SchemaCheck check(schema, schema, "report", &problems);
    Report report;
    fields::describe(check, report);
    check.finish();
    for (const std::string& p : problems)
        UNSCOPED_INFO(p);
    CHECK(problems.empty());
}

TEST_CASE("the schema check finds a field the schema lacks and a property no field writes", "[fields][schema]")
{
    Json schema = loadSchema();
    schema["properties"]["tool"]["properties"].erase("version");
    schema["properties"]["tool"]["properties"]["vendor"] = Json{{"type", "string"}};
    std::vector<std::string> problems;
    SchemaCheck check(schema, schema, "report", &problems);
    Report report;
    fields::describe(check, report);
    check.finish();
    CHECK(std::count_if(problems.begin(), problems.end(),
                        [](const std::string& p) { return p.find("report.tool.version is a field but not") == 0; }) == 1);
    CHECK(std::count_if(problems.begin(), problems.end(),
                        [](const std::string& p) { return p.find("report.tool.vendor is a property") == 0; }) == 1);
}
