// Secrets kept out of what oomscope writes. A report travels (CI artifacts, issues), so before
// the program's command line goes into a report or a flight file, and before the CLI quotes a
// source line, values that look like secrets become "<redacted>":
//   - the value of an option or assignment whose name contains token, key, secret, password,
//     passwd, credential or auth (any case): `--hf-token V`, `--hf-token=V`, `X_API_KEY=V`,
//     `wandb.api_key=V`; a value that is a plain number or true/false is kept
//     (`--max-new-tokens 256`);
//   - values of known shapes anywhere: Hugging Face `hf_…`, GitHub `ghp_…`/`gho_…`/`github_pat_…`,
//     AWS `AKIA…`/`ASIA…`, Slack `xoxa-`/`xoxb-`/`xoxp-…`, OpenAI-style `sk-…`, `Bearer …`, and
//     the password of a URL's `user:password@`;
//   - matches of OOMSCOPE_REDACT, a POSIX extended regular expression (as grep -E) of the
//     user's; OOMSCOPE_REDACT=off keeps everything.
// Counts are kept (the report says how many values were redacted), never what.
// POSIX regex from libc: nothing linked into the preload for it. Thread-safe after construction.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace oomscope::common {

inline constexpr const char* kRedacted = "<redacted>";

class Redactor {
public:
    // From OOMSCOPE_REDACT. An expression that does not compile is reported in *error (one
    // line) and left out; the built-in rules stay.
    static const Redactor& fromEnvironment();
    explicit Redactor(const char* userPattern, std::string* error = nullptr);
    ~Redactor();
    Redactor(const Redactor&) = delete;
    Redactor& operator=(const Redactor&) = delete;

    bool enabled() const { return m_enabled; }
    // A command line, in place; returns how many values were redacted.
    size_t arguments(std::vector<std::string>& argv) const;
    // A line of free text (a source line), in place; returns how many values were redacted.
    size_t text(std::string& line) const;

private:
    struct Rules;
    bool m_enabled = true;
    std::unique_ptr<Rules> m_rules;
};

// Whether an option's or a variable's name says its value is a secret.
bool secretName(const std::string& name);

} // namespace oomscope::common
