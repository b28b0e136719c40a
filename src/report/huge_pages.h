// A hint for buffers of tens of MiB filled at once (a million timeline rows): back them with
// 2 MiB pages where the kernel gives them on request (transparent huge pages in "madvise"
// mode). On the development VM a 4 KiB page fault every 70 rows was a third of building them.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <sys/mman.h>
#include <thread>

namespace oomscope::report {

inline void adviseHugePages(const void* data, size_t bytes)
{
    constexpr uintptr_t kHuge = uintptr_t(2) << 20;
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kHuge - 1) & ~(kHuge - 1);
    const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHuge - 1);
    if (end > begin)
        madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

// The kernel zeroes every fresh page on its first touch, in the thread that touches it: for the
// 10 Mi-event report's 646 MiB of rows a third of the reader's time, serial with the scan.
// Prefault zeroes a buffer ahead of the thread that fills it, on another core
// (MADV_POPULATE_WRITE, Linux 5.14; where it is refused the filler faults as before). It never
// writes the buffer's bytes; stopped and joined when it goes out of scope.
class Prefault {
public:
    Prefault(const void* data, size_t bytes)
    {
        constexpr size_t kMin = size_t(64) << 20;  // below this a thread costs more than it saves
        if (bytes < kMin || std::thread::hardware_concurrency() < 2)
            return;
        m_thread = std::thread([this, begin = reinterpret_cast<uintptr_t>(data), bytes] {
            constexpr uintptr_t kChunk = uintptr_t(8) << 20, kPage = 4096;
            constexpr int kPopulateWrite = 23;  // MADV_POPULATE_WRITE, for older headers
            for (uintptr_t at = (begin + kPage - 1) & ~(kPage - 1); at < begin + bytes && !m_stop.load(std::memory_order_relaxed);
                 at += kChunk) {
                const uintptr_t end = std::min<uintptr_t>(at + kChunk, (begin + bytes) & ~(kPage - 1));
                if (end <= at || madvise(reinterpret_cast<void*>(at), end - at, kPopulateWrite) != 0)
                    return;
            }
        });
    }
    ~Prefault()
    {
        m_stop.store(true, std::memory_order_relaxed);
        if (m_thread.joinable())
            m_thread.join();
    }
    Prefault(const Prefault&) = delete;
    Prefault& operator=(const Prefault&) = delete;

private:
    std::atomic<bool> m_stop{false};
    std::thread m_thread;
};

} // namespace oomscope::report
