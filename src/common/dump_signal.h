// The signal that asks for a report while the program goes on (OOMSCOPE_DUMP_SIGNAL), read the
// same way by the preload (which handles it) and by `oomscope run` (which forwards it).
#pragma once

#include <cctype>
#include <csignal>
#include <cstdlib>
#include <string>

namespace oomscope::common {

// "USR2", "SIGUSR1", "12"; 0 for "0", "off", "no", "none" and anything else (no dump signal
// rather than a guess). The fatal signals oomscope reports on (TERM, INT, ABRT) are refused.
inline int parseDumpSignal(const char* text)
{
    if (!text)
        return SIGUSR2;
    std::string s = text;
    for (char& ch : s)
        ch = char(std::toupper(static_cast<unsigned char>(ch)));
    if (s.rfind("SIG", 0) == 0)
        s = s.substr(3);
    int sig = 0;
    if (s == "USR1")
        sig = SIGUSR1;
    else if (s == "USR2")
        sig = SIGUSR2;
    else if (!s.empty() && s.find_first_not_of("0123456789") == std::string::npos && s.size() <= 2)
        sig = std::atoi(s.c_str());
    const bool usable = sig > 0 && sig < 65 && sig != SIGTERM && sig != SIGINT && sig != SIGABRT && sig != SIGKILL &&
                        sig != SIGSTOP && sig != SIGSEGV && sig != SIGBUS && sig != SIGFPE && sig != SIGILL;
    return usable ? sig : 0;
}

} // namespace oomscope::common
