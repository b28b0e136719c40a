// Device facts at a trigger, asked of the driver already loaded in the process (libcuda.so.1
// opened with RTLD_NOLOAD: we never load or initialise CUDA ourselves). Free memory is read
// only where a context already exists, so a report never creates a context on an idle GPU.
// Dump time, and once after the first allocation (probeDeviceFacts: no context or memory query); any thread.
#pragma once

#include "track/recorder.h"

namespace oomscope::interpose {

class DriverDeviceProbe : public track::DeviceProbe {
public:
    static DriverDeviceProbe& instance();
    std::vector<report::Device> probeDevices() override;
    std::string errorName(ApiId api, int error) override;
    std::vector<report::Pool> probePools(const std::vector<uint64_t>& explicitPools) override;
    std::vector<report::Device> probeDeviceFacts() override;

private:
    std::vector<report::Device> probe(bool dynamic);
};

// The device's UUID as nvidia-smi prints it (GPU-…), empty where the driver cannot say.
std::string deviceUuid(int ordinal);

} // namespace oomscope::interpose
