// The recorder under growth, where the peak's composition is taken (docs/BENCHMARKS.md): N
// allocations of SIZE held one after another (the peak rises with each: a composition at every
// 1 %, each a copy of the live tables), then all freed; per allocation and per free, median of
// rounds, a fresh recorder each round. The steady case (a pair at a constant peak) is
// bench_parts' "recorder pair".
//
//   bench_peak [allocations] [size-bytes] [rounds]
#include "track/recorder.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace oomscope::track;
using oomscope::ApiId;
using oomscope::StackId;

namespace {

double nowNs()
{
    return double(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

} // namespace

int main(int argc, char** argv)
{
    const int n = argc > 1 ? std::atoi(argv[1]) : 100000;
    const uint64_t size = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : uint64_t(64) << 10;
    const int rounds = argc > 3 ? std::atoi(argv[3]) : 5;
    setenv("OOMSCOPE_EXIT_REPORT", "0", 1);
    setenv("OOMSCOPE_FLIGHT", "0", 1);
    std::vector<double> grow, shrink;
    for (int round = 0; round < rounds; ++round) {
        Recorder recorder;
        const ApiId allocApi = recorder.registerApi("cuMemAlloc_v2");
        const ApiId freeApi = recorder.registerApi("cuMemFree_v2");
        Allocation a;
        a.api = allocApi;
        a.device = 0;
        a.size = size;
        const uint64_t base = uint64_t(1) << 40;
        double start = nowNs();
        for (int i = 0; i < n; ++i) {
            a.address = base + uint64_t(i) * size;
            a.stack = StackId(uint32_t(1 + i % 1000));  // 1000 sites
            recorder.recordAlloc(a);
        }
        grow.push_back((nowNs() - start) / n);
        start = nowNs();
        for (int i = 0; i < n; ++i)
            recorder.recordFree(freeApi, base + uint64_t(i) * size, 0);
        shrink.push_back((nowNs() - start) / n);
    }
    std::sort(grow.begin(), grow.end());
    std::sort(shrink.begin(), shrink.end());
    std::printf("%d allocations of %llu bytes held, then freed (median of %d rounds):\n", n,
                static_cast<unsigned long long>(size), rounds);
    std::printf("  allocation while the peak grows   %9.1f ns\n", grow[grow.size() / 2]);
    std::printf("  free                              %9.1f ns\n", shrink[shrink.size() / 2]);
    return 0;
}
