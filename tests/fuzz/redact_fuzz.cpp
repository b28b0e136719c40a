// Fuzz target: the redaction of a command line and of a source line (common/redact.h), on any
// bytes: the input split at NUL bytes is the argument vector. Nothing may crash; redacting
// twice changes nothing the second time (what is left holds no secret the rules know).
#include "common/redact.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    using oomscope::common::Redactor;
    static const Redactor rules(nullptr);
    const std::string input(reinterpret_cast<const char*>(data), size);
    std::vector<std::string> argv;
    size_t from = 0;
    while (from <= input.size() && argv.size() < 64) {
        const size_t nul = input.find('\0', from);
        argv.push_back(input.substr(from, nul == std::string::npos ? std::string::npos : nul - from));
        from = nul == std::string::npos ? input.size() + 1 : nul + 1;
    }
    std::vector<std::string> once = argv;
    rules.arguments(once);
    std::vector<std::string> twice = once;
    if (rules.arguments(twice) != 0 || twice != once)
        __builtin_trap();
    std::string line = input.substr(0, input.find('\0'));
    rules.text(line);
    std::string again = line;
    if (rules.text(again) != 0 || again != line)
        __builtin_trap();
    return 0;
}
