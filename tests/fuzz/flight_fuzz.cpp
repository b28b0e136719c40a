// Fuzz target: a flight-recorder file as `oomscope recover` reads it. Whatever the bytes, the
// reader gives an image or one error line, and an image's counts stay within the file.
#include "track/flight_file.h"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    using namespace oomscope::track;
    FlightImage image;
    std::string error;
    if (!readFlightImage(data, size, &image, &error)) {
        if (error.empty() || error.find('\n') != std::string::npos)
            __builtin_trap();
        return 0;
    }
    if (image.events.size() > image.header.ringCapacity || image.live.size() * sizeof(LiveAllocation) > size)
        __builtin_trap();
    return 0;
}
