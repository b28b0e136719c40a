#include "common/redact.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex.h>

namespace oomscope::common {

namespace {

// A shape: matches are replaced, but for the first `keep` subexpression (kept as it is) and
// `suffix` (written back after the redaction).
struct Shape {
    const char* pattern;
    bool keepFirstGroup;
    const char* suffix;
};
const Shape kShapes[] = {
    {"hf_[A-Za-z0-9]{20,}", false, ""},
    {"gh[pousr]_[A-Za-z0-9]{20,}", false, ""},
    {"github_pat_[A-Za-z0-9_]{20,}", false, ""},
    {"(AKIA|ASIA)[0-9A-Z]{16}", false, ""},
    {"xox[abp]-[A-Za-z0-9-]{10,}", false, ""},
    {"sk-[A-Za-z0-9_-]{20,}", false, ""},
    {"([Bb]earer[[:space:]]+)[A-Za-z0-9._~+/=-]{8,}", true, ""},
    {"([A-Za-z][A-Za-z0-9+.-]*://[^/@:[:space:]]+:)[^/@[:space:]]+@", true, "@"},
};
constexpr size_t kShapeCount = sizeof(kShapes) / sizeof(kShapes[0]);

const char* const kSecretWords[] = {"token", "key", "secret", "password", "passwd", "credential", "auth"};

std::string lower(std::string s)
{
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    return s;
}

// A value that carries no secret whatever its name: a number, true or false, empty.
bool harmless(const std::string& value)
{
    if (value.empty() || value == kRedacted)  // redacted already: nothing left to count
        return true;
    const std::string v = lower(value);
    if (v == "true" || v == "false" || v == "none" || v == "null")
        return true;
    bool digit = false;
    for (char c : value) {
        if (std::isdigit(static_cast<unsigned char>(c)))
            digit = true;
        else if (c != '.' && c != '-' && c != '+' && c != 'e' && c != 'E' && c != '_')
            return false;
    }
    return digit;
}

// NAME=VALUE where NAME looks like a variable or a dotted key (X_API_KEY, wandb.api_key).
bool assignmentName(const std::string& arg, size_t eq)
{
    if (eq == 0 || eq == std::string::npos)
        return false;
    for (size_t i = 0; i < eq; ++i) {
        const unsigned char c = static_cast<unsigned char>(arg[i]);
        if (!std::isalnum(c) && c != '_' && c != '.' && c != '-')
            return false;
    }
    return std::isalpha(static_cast<unsigned char>(arg[0])) || arg[0] == '_';
}

} // namespace

bool secretName(const std::string& name)
{
    const std::string n = lower(name);
    for (const char* word : kSecretWords)
        if (n.find(word) != std::string::npos)
            return true;
    return false;
}

struct Redactor::Rules {
    regex_t shapes[kShapeCount];
    bool compiled[kShapeCount] = {};
    regex_t user;
    bool hasUser = false;

    ~Rules()
    {
        for (size_t i = 0; i < kShapeCount; ++i)
            if (compiled[i])
                regfree(&shapes[i]);
        if (hasUser)
            regfree(&user);
    }

    // Every match of one expression replaced, left to right; returns how many.
    static size_t replace(const regex_t& re, std::string& s, bool keepFirstGroup, const char* suffix)
    {
        size_t count = 0, from = 0;
        regmatch_t m[2];
        while (from <= s.size() && regexec(&re, s.c_str() + from, 2, m, from ? REG_NOTBOL : 0) == 0) {
            if (m[0].rm_eo == m[0].rm_so) {  // an empty match redacts nothing: step on
                ++from;
                continue;
            }
            const size_t begin = from + size_t(m[0].rm_so), end = from + size_t(m[0].rm_eo);
            const size_t kept = keepFirstGroup && m[1].rm_so >= 0 ? size_t(m[1].rm_eo - m[1].rm_so) : 0;
            if (s.compare(begin + kept, end - begin - kept, std::string(kRedacted) + suffix) == 0) {
                from = end;  // redacted already
                continue;
            }
            const std::string replacement = s.substr(begin, kept) + kRedacted + suffix;
            s.replace(begin, end - begin, replacement);
            from = begin + replacement.size();
            ++count;
        }
        return count;
    }

    size_t text(std::string& s) const
    {
        size_t count = 0;
        for (size_t i = 0; i < kShapeCount; ++i)
            if (compiled[i])
                count += replace(shapes[i], s, kShapes[i].keepFirstGroup, kShapes[i].suffix);
        if (hasUser)
            count += replace(user, s, false, "");
        return count;
    }
};

Redactor::Redactor(const char* userPattern, std::string* error) : m_rules(std::make_unique<Rules>())
{
    if (userPattern && lower(userPattern) == "off") {
        m_enabled = false;
        return;
    }
    for (size_t i = 0; i < kShapeCount; ++i)
        m_rules->compiled[i] = regcomp(&m_rules->shapes[i], kShapes[i].pattern, REG_EXTENDED) == 0;
    if (userPattern && *userPattern) {
        const int rc = regcomp(&m_rules->user, userPattern, REG_EXTENDED);
        m_rules->hasUser = rc == 0;
        if (rc != 0 && error) {
            char why[128] = {};
            regerror(rc, &m_rules->user, why, sizeof(why));
            *error = std::string("OOMSCOPE_REDACT is not a regular expression (") + why + "): only the built-in rules apply";
        }
    }
}

Redactor::~Redactor() = default;

const Redactor& Redactor::fromEnvironment()
{
    static const Redactor* instance = [] {
        std::string error;
        auto* r = new Redactor(std::getenv("OOMSCOPE_REDACT"), &error);
        if (!error.empty())
            std::fprintf(stderr, "oomscope: %s\n", error.c_str());
        return r;
    }();
    return *instance;
}

size_t Redactor::text(std::string& line) const
{
    return m_enabled ? m_rules->text(line) : 0;
}

size_t Redactor::arguments(std::vector<std::string>& argv) const
{
    if (!m_enabled)
        return 0;
    size_t count = 0;
    for (size_t i = 0; i < argv.size(); ++i) {
        std::string& arg = argv[i];
        // Shapes first, anywhere in the argument (an option's name included): what is left is
        // then read as an option or an assignment, so that a second pass finds nothing more.
        count += m_rules->text(arg);
        const size_t eq = arg.find('=');
        if (arg.size() > 2 && arg[0] == '-') {
            const size_t dashes = arg[1] == '-' ? 2 : 1;
            const std::string name = arg.substr(dashes, eq == std::string::npos ? std::string::npos : eq - dashes);
            if (name.size() > 1 && secretName(name)) {
                if (eq != std::string::npos && !harmless(arg.substr(eq + 1))) {
                    arg = arg.substr(0, eq + 1) + kRedacted;
                    ++count;
                } else if (eq == std::string::npos && i + 1 < argv.size() &&
                           !(argv[i + 1].size() > 1 && argv[i + 1][0] == '-') && !harmless(argv[i + 1])) {
                    argv[i + 1] = kRedacted;  // the option's value, next
                    ++count;
                }
            }
        } else if (assignmentName(arg, eq) && secretName(arg.substr(0, eq)) && !harmless(arg.substr(eq + 1))) {
            arg = arg.substr(0, eq + 1) + kRedacted;
            ++count;
        }
    }
    return count;
}

} // namespace oomscope::common
