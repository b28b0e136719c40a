// Writes the fully populated sample report as JSON to the file named by argv[1], for the
// schema validation test.
#include "report/json_writer.h"
#include "sample_report.h"

#include <fstream>

int main(int argc, char** argv)
{
    if (argc != 2)
        return 2;
    std::ofstream out(argv[1]);
    out << oomscope::report::reportToJson(oomscope::test::sampleReport());
    return out ? 0 : 1;
}
