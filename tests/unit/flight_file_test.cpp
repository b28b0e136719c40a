// The flight file written by a recorder and read back by the interpreter's reader: at each
// state the file must give the image a snapshot of the recorder gives (what `oomscope recover`
// makes a report of). The kill itself is tests/integration/test_flight.py's.
#include "interpret/flight_reader.h"
#include "track/flight_writer.h"
#include "track/recorder.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <string>
#include <tuple>
#include <sys/stat.h>
#include <unistd.h>

using namespace oomscope;
using namespace oomscope::track;

namespace {

std::string tempPath(const char* name)
{
    return "/tmp/oomscope-unit-" + std::to_string(getpid()) + "-" + name + ".flight";
}

TrackImage readBack(const std::string& path)
{
    TrackImage image;
    std::string error;
    INFO(error);
    REQUIRE(interpret::readFlightFile(path, &image, &error));
    return image;
}

std::set<std::tuple<uint64_t, uint64_t, uint32_t, int>> liveSet(const std::vector<LiveAllocation>& live)
{
    std::set<std::tuple<uint64_t, uint64_t, uint32_t, int>> out;
    for (const LiveAllocation& a : live)
        out.emplace(a.address, a.size, a.stack, a.device);
    return out;
}

// What the file must agree with the recorder on.
void checkAgrees(const Recorder& recorder, const std::string& path)
{
    const TrackImage inMemory = recorder.snapshot();
    const TrackImage fromFile = readBack(path);
    REQUIRE(fromFile.events.size() == inMemory.events.size());
    for (size_t i = 0; i < inMemory.events.size(); ++i) {
        CHECK(fromFile.events[i].timeNs == inMemory.events[i].timeNs);
        CHECK(fromFile.events[i].kind == inMemory.events[i].kind);
        CHECK(fromFile.events[i].address == inMemory.events[i].address);
        CHECK(fromFile.events[i].handle == inMemory.events[i].handle);
        CHECK(fromFile.events[i].size == inMemory.events[i].size);
    }
    CHECK(fromFile.pushed == inMemory.pushed);
    CHECK(liveSet(fromFile.live) == liveSet(inMemory.live));
    REQUIRE(fromFile.counters.size() == inMemory.counters.size());
    for (size_t i = 0; i < inMemory.counters.size(); ++i) {
        CHECK(fromFile.counters[i].device == inMemory.counters[i].device);
        CHECK(fromFile.counters[i].tracked() == inMemory.counters[i].tracked());
        CHECK(fromFile.counters[i].peakDeviceBytes == inMemory.counters[i].peakDeviceBytes);
    }
    for (size_t id = 1; id < inMemory.apiNames.size(); ++id)
        CHECK(fromFile.apiName(uint16_t(id)) == inMemory.apiName(uint16_t(id)));
    for (const auto& [id, frames] : inMemory.stacks) {
        const auto it = fromFile.stacks.find(id);
        REQUIRE(it != fromFile.stacks.end());
        CHECK(it->second == frames);
    }
    CHECK(fromFile.process.pid == getpid());
    // The facts (version 4): the framework, the step samples, the peaks' compositions.
    CHECK(fromFile.framework == inMemory.framework);
    REQUIRE(fromFile.steps.size() == inMemory.steps.size());
    for (size_t i = 0; i < inMemory.steps.size(); ++i) {
        CHECK(fromFile.steps[i].index == inMemory.steps[i].index);
        CHECK(fromFile.steps[i].timeNs == inMemory.steps[i].timeNs);
        CHECK(fromFile.steps[i].source == inMemory.steps[i].source);
        CHECK(fromFile.steps[i].devices == inMemory.steps[i].devices);
        CHECK(fromFile.steps[i].sites == inMemory.steps[i].sites);
    }
    REQUIRE(fromFile.peaks.size() == inMemory.peaks.size());
    for (size_t i = 0; i < inMemory.peaks.size(); ++i) {
        CHECK(fromFile.peaks[i].device == inMemory.peaks[i].device);
        CHECK(fromFile.peaks[i].bytes == inMemory.peaks[i].bytes);
        CHECK(fromFile.peaks[i].stacks == inMemory.peaks[i].stacks);
        CHECK(fromFile.peaks[i].otherBytes == inMemory.peaks[i].otherBytes);
    }
}

// Device facts as a driver would give them after the first allocation.
class FactsProbe final : public DeviceProbe {
public:
    std::vector<report::Device> probeDevices() override { return {}; }
    std::string errorName(ApiId, int) override { return {}; }
    std::vector<report::Pool> probePools(const std::vector<uint64_t>&) override { return {}; }
    std::vector<report::Device> probeDeviceFacts() override
    {
        ++asked;
        report::Device d;
        d.index = 0;
        d.name = "Fake H200";
        d.uuid = "GPU-0000";
        d.totalBytes = uint64_t(141) << 30;
        d.driverVersion = 13000;
        d.limitBytes = uint64_t(24) << 30;
        return {d};
    }
    int asked = 0;
};

Allocation allocation(uint64_t address, uint64_t size, StackId stack)
{
    Allocation a;
    a.api = ApiId(1);
    a.device = 0;
    a.address = address;
    a.size = size;
    a.stack = stack;
    return a;
}

} // namespace

TEST_CASE("the flight file gives what the recorder holds, in every state", "[flight]")
{
    const std::string path = tempPath("states");
    FlightFile* flight = FlightFile::createAt(path, 1024);
    REQUIRE(flight);
    {
        Recorder recorder(flight);
        recorder.registerApi("cudaMalloc");
        recorder.registerApi("cudaFree");
        recorder.registerApi("cuMemCreate");
        SECTION("empty")
        {
            checkAgrees(recorder, path);
        }
        const uint64_t frames[] = {0x401000, 0x402000};
        const StackId stack = const_cast<StackTable&>(recorder.stacks()).intern(frames, 2);
        for (uint64_t i = 1; i <= 8; ++i)
            recorder.recordAlloc(allocation(0x7000000 + i * 0x100000, i << 20, stack));
        SECTION("allocations live")
        {
            checkAgrees(recorder, path);
        }
        SECTION("some freed, the peak kept")
        {
            for (uint64_t i = 1; i <= 4; ++i)
                recorder.recordFree(ApiId(2), 0x7000000 + i * 0x100000, 0);
            checkAgrees(recorder, path);
            const TrackImage image = readBack(path);
            REQUIRE(image.counters.size() == 1);
            CHECK(image.counters[0].peakDeviceBytes == (36u << 20));  // 1 + ... + 8 MiB
            CHECK(image.counters[0].tracked() == (26u << 20));        // 5 + ... + 8 MiB
        }
        SECTION("CUDA VMM: created, mapped, unmapped and released")
        {
            Allocation handle = allocation(0, 20 << 20, stack);
            handle.api = ApiId(3);
            handle.handle = 0x51;
            recorder.recordVmmCreate(handle);
            recorder.recordVmmMap(ApiId(3), 0x9000000, 20 << 20, 0x51);
            checkAgrees(recorder, path);
            CHECK(readBack(path).live.size() == 9);
            recorder.recordVmmUnmap(ApiId(3), 0x9000000, 20 << 20);
            recorder.recordVmmRelease(ApiId(3), 0x51);
            checkAgrees(recorder, path);
            CHECK(readBack(path).live.size() == 8);
        }
        SECTION("steps, the framework and the peak: in the file as in memory")
        {
            FactsProbe probe;
            recorder.setDeviceProbe(&probe);
            recorder.attachFramework("torch", false);
            for (int step = 0; step < 600; ++step) {  // more than the file's 512 step slots
                recorder.recordAlloc(allocation(0x30000000 + uint64_t(step) * 0x100000, 1 << 20, stack));
                recorder.recordStep(nullptr);
            }
            for (int step = 0; step < 600; step += 2)
                recorder.recordFree(ApiId(2), 0x30000000 + uint64_t(step) * 0x100000, 0);
            recorder.setDeviceProbe(nullptr);
            CHECK(probe.asked == 0);  // the devices were noted at the first allocation, before the probe
            const TrackImage image = readBack(path);
            CHECK(image.framework == "torch");
            REQUIRE(image.steps.size() == 512);
            CHECK(image.steps.front().index == 600 - 511);
            CHECK(image.steps.back().index == 600);
            CHECK(image.steps.back().devices.at(0).trackedBytes == (36u << 20) + (600u << 20));
            REQUIRE(image.peaks.size() == 1);
            CHECK(image.peaks[0].bytes == (36u << 20) + (600u << 20));
            // The in-memory sampler keeps 4096: the file's last 512 are its last 512.
            TrackImage inMemory = recorder.snapshot();
            inMemory.steps.erase(inMemory.steps.begin(), inMemory.steps.end() - 512);
            for (size_t i = 0; i < 512; ++i) {
                CHECK(image.steps[i].index == inMemory.steps[i].index);
                CHECK(image.steps[i].sites == inMemory.steps[i].sites);
            }
            CHECK(image.peaks[0].stacks == inMemory.peaks.at(0).stacks);
        }
        SECTION("the ring wrapped")
        {
            for (uint64_t i = 0; i < 3000; ++i) {
                recorder.recordAlloc(allocation(0x20000000 + i * 0x1000, 4096, stack));
                recorder.recordFree(ApiId(2), 0x20000000 + i * 0x1000, 0);
            }
            checkAgrees(recorder, path);
            const TrackImage image = readBack(path);
            CHECK(image.events.size() <= 1024);
            CHECK(image.dropped > 0);
            CHECK(std::any_of(image.notes.begin(), image.notes.end(),
                              [](const std::string& n) { return n.find("the ring had wrapped") == 0; }));
        }
    }
    flight->remove();
}

TEST_CASE("the devices' facts are noted once, after the first allocation", "[flight]")
{
    const std::string path = tempPath("devices");
    FlightFile* flight = FlightFile::createAt(path, 1024);
    REQUIRE(flight);
    {
        Recorder recorder(flight);
        recorder.registerApi("cudaMalloc");
        FactsProbe probe;
        recorder.setDeviceProbe(&probe);
        CHECK(readBack(path).devices.empty());
        for (uint64_t i = 1; i <= 3; ++i)
            recorder.recordAlloc(allocation(0x7000000 + i * 0x100000, 1 << 20, StackId()));
        CHECK(probe.asked == 1);
        const TrackImage image = readBack(path);
        REQUIRE(image.devices.size() == 1);
        CHECK(image.devices[0].name == "Fake H200");
        CHECK(image.devices[0].uuid == "GPU-0000");
        CHECK(image.devices[0].totalBytes == uint64_t(141) << 30);
        CHECK(image.devices[0].driverVersion == 13000);
        CHECK_FALSE(image.devices[0].runtimeVersion.has_value());
        CHECK(image.devices[0].limitBytes == uint64_t(24) << 30);
        CHECK_FALSE(image.devices[0].freeBytes.has_value());
        recorder.setDeviceProbe(nullptr);
    }
    flight->remove();
}

TEST_CASE("a file of another version, or not a flight file at all, is refused with one line", "[flight]")
{
    const std::string path = tempPath("version");
    FlightFile* flight = FlightFile::createAt(path, 64);
    REQUIRE(flight);
    TrackImage image;
    std::string error;
    {
        FILE* f = std::fopen(path.c_str(), "r+b");
        REQUIRE(f);
        const uint32_t version = 2;  // the 64-byte slots of before
        std::fseek(f, 8, SEEK_SET);
        std::fwrite(&version, sizeof(version), 1, f);
        std::fclose(f);
    }
    CHECK_FALSE(interpret::readFlightFile(path, &image, &error));
    CHECK(error.find("flight-recorder file version 2 (this oomscope reads 4)") != std::string::npos);
    flight->remove();
    CHECK_FALSE(interpret::readFlightFile(path, &image, &error));
    CHECK(error.find("cannot open") == 0);
    CHECK_FALSE(interpret::readFlightFile("/proc/self/status", &image, &error));
    CHECK(error.find('\n') == std::string::npos);
}

TEST_CASE("the flight file keeps the job around the process, and its absence", "[flight]")
{
    const char* names[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RUN_ID",
                           "SLURM_JOB_ID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE",
                           "SLURM_NODEID", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE",
                           "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE"};
    for (const char* name : names)
        unsetenv(name);
    SECTION("a torchrun rank")
    {
        setenv("RANK", "5", 1);
        setenv("LOCAL_RANK", "1", 1);
        setenv("WORLD_SIZE", "8", 1);
        setenv("LOCAL_WORLD_SIZE", "4", 1);
        setenv("GROUP_RANK", "1", 1);
        setenv("TORCHELASTIC_RUN_ID", "run-42", 1);
        const std::string path = tempPath("job");
        FlightFile* flight = FlightFile::createAt(path, 64);
        REQUIRE(flight);
        const report::Process p = readBack(path).process;
        flight->remove();
        CHECK(p.rank == 5);
        CHECK(p.localRank == 1);
        CHECK(p.worldSize == 8);
        CHECK(p.localWorldSize == 4);
        CHECK(p.groupRank == 1);
        CHECK(p.runId == "run-42");
        CHECK_FALSE(p.slurmJobId);
    }
    SECTION("no launcher")
    {
        const std::string path = tempPath("nojob");
        FlightFile* flight = FlightFile::createAt(path, 64);
        REQUIRE(flight);
        const report::Process p = readBack(path).process;
        flight->remove();
        CHECK_FALSE(p.rank);
        CHECK_FALSE(p.localRank);
        CHECK_FALSE(p.worldSize);
        CHECK_FALSE(p.runId);
    }
    for (const char* name : names)
        unsetenv(name);
}

TEST_CASE("the file is sparse: its regions have blocks reserved as they fill", "[flight]")
{
    const std::string path = tempPath("sparse");
    FlightFile* flight = FlightFile::createAt(path, 1024);
    REQUIRE(flight);
    const auto blocks = [&] {
        struct stat st {};
        REQUIRE(::stat(path.c_str(), &st) == 0);
        return std::pair<uint64_t, uint64_t>(uint64_t(st.st_blocks) * 512, uint64_t(st.st_size));
    };
    const auto [startBlocks, length] = blocks();
    const size_t kStart = 4096 + 1024 * 48 + 4096 + flight::kFactsBytes + 4 * FlightFile::kReserveChunk;
    // The header, 1024 slots of 48 bytes, the counters, the facts and four first chunks; the
    // length is the regions at their largest (16 MiB journal, 32 MiB arena, 3.5 MiB VMM table,
    // 1 MiB of step samples).
    CHECK(flight->reservedBytes() == kStart);
    CHECK(startBlocks >= flight->reservedBytes());
    CHECK(startBlocks < flight->reservedBytes() + 64 * 1024);  // what the filesystem adds
    CHECK(length > (51u << 20));
    {
        Recorder recorder(flight);
        recorder.registerApi("cudaMalloc");
        // 4096 stacks of 64 frames: 2.1 MiB of journal, past its first chunk.
        std::vector<uint64_t> frames(64);
        for (uint64_t i = 0; i < 4096; ++i) {
            for (size_t f = 0; f < frames.size(); ++f)
                frames[f] = 0x401000 + i * 64 + f;
            recorder.recordAlloc(allocation(0x7000000 + i * 0x1000, 4096,
                                            const_cast<StackTable&>(recorder.stacks()).intern(frames.data(), 64)));
        }
        CHECK(flight->reservedBytes() > kStart + (2u << 20));
        CHECK(blocks().first >= flight->reservedBytes());
        CHECK(blocks().second == length);  // never longer: the regions grow inside it
        checkAgrees(recorder, path);
        CHECK(readBack(path).stacks.size() == 4096);
        CHECK(readBack(path).live.size() == 4096);
        // Past a region's largest nothing is reserved, and nothing else changes.
        CHECK_FALSE(flight->reserve(FlightFile::kVmm, (64u << 10) * sizeof(flight::VmmEntry) + 1));
        CHECK(flight->reserve(FlightFile::kVmm, 4096));
    }
    flight->remove();
}

// Run by tests/integration/test_flight.py on a tmpfs it mounts just large enough for the file's
// start (OOMSCOPE_TEST_FULL_DIR): the journal and the live arena then cannot grow. Hidden: it
// needs that folder.
TEST_CASE("on a full filesystem the regions stop growing: no SIGBUS, the reader says what is missing", "[.][fullfs]")
{
    const char* dir = std::getenv("OOMSCOPE_TEST_FULL_DIR");
    REQUIRE(dir);
    const std::string path = std::string(dir) + "/full.flight";
    FlightFile* flight = FlightFile::createAt(path, size_t(1) << 18);
    REQUIRE(flight);
    const size_t atStart = flight->reservedBytes();
    constexpr uint64_t kStacks = 20000;  // 5 MiB of journal: far past what is left
    {
        Recorder recorder(flight);
        recorder.registerApi("cudaMalloc");
        std::vector<uint64_t> frames(32);
        for (uint64_t i = 0; i < kStacks; ++i) {
            for (size_t f = 0; f < frames.size(); ++f)
                frames[f] = 0x401000 + i * 32 + f;
            recorder.recordAlloc(allocation(0x10000000 + i * 0x1000, 4096,
                                            const_cast<StackTable&>(recorder.stacks()).intern(frames.data(), 32)));
        }
        CHECK(flight->reservedBytes() < atStart + (2u << 20));  // it stopped growing
        const TrackImage inMemory = recorder.snapshot();
        CHECK(inMemory.live.size() == kStacks);  // the recorder itself lost nothing
        CHECK(inMemory.stacks.size() == kStacks);
        const TrackImage fromFile = readBack(path);
        CHECK(fromFile.events.size() == kStacks);  // the ring was reserved whole
        CHECK(fromFile.stacks.size() < kStacks);
        CHECK(std::any_of(fromFile.notes.begin(), fromFile.notes.end(),
                          [](const std::string& n) { return n.find("journal was full") != std::string::npos; }));
    }
    flight->remove();
}
