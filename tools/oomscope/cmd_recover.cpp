// oomscope recover FILE: the flight-recorder file of a process that ended without a report,
// turned into one (written atomically next to the file, or into -o DIR). The file stays.
#include "commands.h"

#include "interpret/recover.h"
#include "report/report_file.h"

#include <iostream>

namespace oomscope::cli {

int recoverCommand(const RecoverOptions& o)
{
    report::Report r;
    std::string error;
    if (!interpret::recoverReport(o.file, &r, &error)) {
        logError("recover: " + error);
        return kExitUsage;
    }
    std::string dir = o.outputDir;
    if (dir.empty()) {
        const size_t slash = o.file.rfind('/');
        dir = slash == std::string::npos ? "." : slash == 0 ? "/" : o.file.substr(0, slash);
    }
    std::string host = r.process.hostname.empty() ? "host" : r.process.hostname;
    for (char& c : host) {
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_')
            c = '_';
    }
    const std::string stem = "oomscope-" + host + "-" + std::to_string(r.process.pid) + "-recovered";
    const report::WriteResult written = report::writeReportFile(r, dir, stem);
    if (!written.ok) {
        logError("recover: " + written.error);
        return kExitUsage;
    }
    std::cout << written.path << "\n";
    return kExitOk;
}

} // namespace oomscope::cli
