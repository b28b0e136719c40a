#include "report/analysis/allocator_replay.h"

#include "report/analysis/largest_where.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>
#include <unordered_map>

namespace oomscope::report {
namespace {

// c10/cuda/CUDACachingAllocator.cpp's constants.
constexpr uint64_t kMinBlockSize = 512;          // every request is rounded up to it
constexpr uint64_t kSmallSize = 1 << 20;         // the largest request of the small pool
constexpr uint64_t kSmallBuffer = 2 << 20;       // a small pool's segment
constexpr uint64_t kLargeBuffer = 20 << 20;      // a large pool's segment for a request below kMinLargeAlloc
constexpr uint64_t kMinLargeAlloc = 10 << 20;
constexpr uint64_t kRoundLarge = 2 << 20;        // larger segments are rounded up to it

uint64_t roundUp(uint64_t n, uint64_t unit)
{
    return (n + unit - 1) / unit * unit;
}

class CachingAllocatorModel {
public:
    explicit CachingAllocatorModel(uint64_t limit) : m_limit(limit) {}

    // The block's index, or -1 when out of memory.
    int64_t malloc(uint64_t bytes, uint64_t stream)
    {
        const uint64_t size = bytes < kMinBlockSize ? kMinBlockSize : roundUp(bytes, kMinBlockSize);
        const bool small = size <= kSmallSize;
        int64_t b = takeFree(small, stream, size);
        if (b < 0) {
            const uint64_t segment = small ? kSmallBuffer : size < kMinLargeAlloc ? kLargeBuffer : roundUp(size, kRoundLarge);
            if (m_reserved + segment > m_limit)
                releaseCached();
            if (m_reserved + segment > m_limit) {
                m_failed = size;
                return -1;
            }
            m_reserved += segment;
            m_peakReserved = std::max(m_peakReserved, m_reserved);
            b = newBlock({m_top, segment, stream, small});
            m_top += segment + kSmallBuffer;  // segments never touch: blocks merge within one only
        }
        Block& blk = m_blocks[size_t(b)];
        const uint64_t remaining = blk.size - size;
        if (small ? remaining >= kMinBlockSize : remaining > kSmallSize) {
            const int64_t rest = newBlock({blk.ptr + size, remaining, stream, small});
            Block& r = m_blocks[size_t(rest)];
            Block& me = m_blocks[size_t(b)];  // newBlock may have moved the vector
            r.prev = b, r.next = me.next;
            if (me.next >= 0)
                m_blocks[size_t(me.next)].prev = rest;
            me.next = rest;
            me.size = size;
            insertFree(rest);
        }
        m_blocks[size_t(b)].allocated = true;
        m_allocated += m_blocks[size_t(b)].size;
        m_peakAllocated = std::max(m_peakAllocated, m_allocated);
        return b;
    }

    void free(int64_t b)
    {
        Block& blk = m_blocks[size_t(b)];
        blk.allocated = false;
        m_allocated -= blk.size;
        for (const int64_t other : {blk.prev, blk.next}) {
            if (other < 0 || m_blocks[size_t(other)].allocated)
                continue;
            eraseFree(other);
            Block& o = m_blocks[size_t(other)];
            Block& me = m_blocks[size_t(b)];
            if (other == me.prev) {
                me.ptr = o.ptr, me.prev = o.prev;
                if (o.prev >= 0)
                    m_blocks[size_t(o.prev)].next = b;
            } else {
                me.next = o.next;
                if (o.next >= 0)
                    m_blocks[size_t(o.next)].prev = b;
            }
            me.size += o.size;
            m_spare.push_back(other);
        }
        insertFree(b);
    }

    uint64_t peakReserved() const { return m_peakReserved; }
    uint64_t peakAllocated() const { return m_peakAllocated; }
    uint64_t reserved() const { return m_reserved; }
    uint64_t failed() const { return m_failed; }

private:
    struct Block {
        uint64_t ptr = 0, size = 0, stream = 0;
        bool small = false;
        bool allocated = false;
        int64_t prev = -1, next = -1;
    };
    // The pools as PyTorch orders its BlockPool: by stream, size, address.
    using Key = std::tuple<uint64_t, uint64_t, uint64_t, int64_t>;

    int64_t newBlock(Block b)
    {
        if (!m_spare.empty()) {
            const int64_t i = m_spare.back();
            m_spare.pop_back();
            m_blocks[size_t(i)] = b;
            return i;
        }
        m_blocks.push_back(b);
        return int64_t(m_blocks.size() - 1);
    }
    std::set<Key>& pool(bool small) { return small ? m_small : m_large; }
    void insertFree(int64_t b)
    {
        const Block& blk = m_blocks[size_t(b)];
        pool(blk.small).insert({blk.stream, blk.size, blk.ptr, b});
    }
    void eraseFree(int64_t b)
    {
        const Block& blk = m_blocks[size_t(b)];
        pool(blk.small).erase({blk.stream, blk.size, blk.ptr, b});
    }
    int64_t takeFree(bool small, uint64_t stream, uint64_t size)
    {
        std::set<Key>& p = pool(small);
        const auto it = p.lower_bound({stream, size, 0, -1});
        if (it == p.end() || std::get<0>(*it) != stream)
            return -1;
        const int64_t b = std::get<3>(*it);
        p.erase(it);
        return b;
    }
    // release_cached_blocks: every free block that is a whole segment goes back to CUDA.
    void releaseCached()
    {
        for (std::set<Key>* p : {&m_small, &m_large}) {
            for (auto it = p->begin(); it != p->end();) {
                const int64_t b = std::get<3>(*it);
                const Block& blk = m_blocks[size_t(b)];
                if (blk.prev < 0 && blk.next < 0) {
                    m_reserved -= blk.size;
                    m_spare.push_back(b);
                    it = p->erase(it);
                } else {
                    ++it;
                }
            }
        }
    }

    uint64_t m_limit;
    uint64_t m_reserved = 0, m_allocated = 0, m_peakReserved = 0, m_peakAllocated = 0, m_failed = 0;
    uint64_t m_top = uint64_t(1) << 40;
    std::vector<Block> m_blocks;
    std::vector<int64_t> m_spare;
    std::set<Key> m_small, m_large;
};

} // namespace

bool readTorchTrace(const std::string& path, int64_t device, TorchTrace* out, std::string* error)
{
    std::ifstream in(path);
    std::string header;
    if (!in || !std::getline(in, header) || header.rfind("oomscope-torch-trace 1 ", 0) != 0) {
        *error = path + ": not an allocator trace of oomscope's Python adapter";
        return false;
    }
    *out = {};
    // The header: events N max M conf C backend B.
    std::map<std::string, std::string> fields;
    {
        std::istringstream h(header.substr(sizeof("oomscope-torch-trace 1 ") - 1));
        for (std::string k, v; h >> k >> v;)
            fields[k] = v;
    }
    if (fields["backend"] != "native")
        out->unusable = "PyTorch's allocator backend is " + fields["backend"] + ", not the native caching allocator";
    else if (fields["conf"] != "-")
        out->unusable = "PYTORCH_CUDA_ALLOC_CONF=" + fields["conf"] + " (the replay follows the default settings)";
    else if (!fields["events"].empty() && fields["events"] == fields["max"])
        out->unusable = "the trace is full (" + fields["max"] + " events): its oldest were dropped";
    std::unordered_map<uint64_t, uint64_t> live;  // address -> allocation index
    uint64_t allocations = 0;
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream l(line);
        char code = 0;
        int64_t dev = 0;
        uint64_t address = 0, bytes = 0, stream = 0;
        if (!(l >> code >> dev >> address >> bytes >> stream)) {
            *error = path + ": a line that is not an action: " + line.substr(0, 80);
            return false;
        }
        if (dev != device)
            continue;
        if (code == 'm' && out->unusable.empty()) {
            // Expandable segments grow by mapping pages, whatever turned them on: not the
            // placement the model follows.
            out->unusable = "PyTorch's allocator maps expandable segments (the replay follows the default settings)";
        } else if (code == 'a') {
            live[address] = allocations;
            out->actions.push_back({true, allocations++, bytes, stream});
        } else if (code == 'f') {
            // A free of a block allocated before the trace began has nothing to end.
            if (const auto it = live.find(address); it != live.end()) {
                out->actions.push_back({false, it->second, 0, 0});
                live.erase(it);
            }
        }
    }
    // Frees with no allocation between them in one order: the order the program drops a
    // burst of tensors in can follow their addresses (a set, a dict of grads) and so differ
    // from run to run, and the allocator ends such a burst in the same state whatever its
    // order (each free merges with its free neighbours; nothing is released on a free).
    for (auto from = out->actions.begin(); from != out->actions.end();) {
        if (from->alloc) {
            ++from;
            continue;
        }
        const auto to = std::find_if(from, out->actions.end(), [](const TorchTrace::Action& a) { return a.alloc; });
        std::sort(from, to, [](const TorchTrace::Action& a, const TorchTrace::Action& b) { return a.index < b.index; });
        from = to;
    }
    return true;
}

uint64_t ScaledTrace::bytesAt(size_t i, uint64_t n) const
{
    const int64_t b = int64_t(actions[i].bytes) + slope[i] * (int64_t(n) - int64_t(at));
    return b > 0 ? uint64_t(b) : 0;
}

bool alignTraces(const std::vector<std::pair<uint64_t, const TorchTrace*>>& runsIn, ScaledTrace* out, std::string* why)
{
    auto runs = runsIn;
    std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    if (runs.size() < 2 || runs[runs.size() - 2].first == runs.back().first) {
        *why = "fewer than two sizes traced";
        return false;
    }
    for (const auto& [n, t] : runs) {
        if (!t->unusable.empty()) {
            *why = "size " + std::to_string(n) + ": " + t->unusable;
            return false;
        }
    }
    const std::vector<TorchTrace::Action>& last = runs.back().second->actions;
    for (const auto& [n, t] : runs) {
        const auto& a = t->actions;
        if (a.size() != last.size()) {
            *why = "the allocator's actions differ: " + std::to_string(a.size()) + " at size " + std::to_string(n) + ", " +
                   std::to_string(last.size()) + " at size " + std::to_string(runs.back().first) +
                   " (a small size takes paths of its own, or a library picks its algorithm, with other"
                   " workspaces, by size: cuDNN's convolutions)";
            return false;
        }
        for (size_t i = 0; i < a.size(); ++i) {
            if (a[i].alloc != last[i].alloc || a[i].index != last[i].index || a[i].stream != last[i].stream) {
                *why = "the allocator's actions differ from action " + std::to_string(i) + " between sizes " +
                       std::to_string(n) + " and " + std::to_string(runs.back().first);
                return false;
            }
        }
    }
    // Each allocation's bytes on the line through the two largest runs (an integer slope: a
    // tensor's bytes are a whole number per unit of size); checked on the others.
    const uint64_t n1 = runs[runs.size() - 2].first, n2 = runs.back().first;
    const auto& prev = runs[runs.size() - 2].second->actions;
    out->actions = last;
    out->slope.assign(last.size(), 0);
    out->at = n2;
    out->offLine = 0;
    for (size_t i = 0; i < last.size(); ++i) {
        if (!last[i].alloc)
            continue;
        const int64_t rise = int64_t(last[i].bytes) - int64_t(prev[i].bytes);
        const int64_t run = int64_t(n2 - n1);
        int64_t slope = rise / run;
        bool onLine = rise % run == 0;
        for (const auto& [n, t] : runs)
            onLine = onLine && int64_t(t->actions[i].bytes) == int64_t(last[i].bytes) + slope * (int64_t(n) - int64_t(n2));
        if (!onLine) {
            // Not one line (a workspace the library picks by size): the steepest rise seen, and
            // never below the largest run's bytes.
            ++out->offLine;
            slope = 0;
            for (size_t k = 0; k + 1 < runs.size(); ++k) {
                const auto& a = runs[k].second->actions[i];
                const auto& b = runs[k + 1].second->actions[i];
                const int64_t r = (int64_t(b.bytes) - int64_t(a.bytes) + int64_t(runs[k + 1].first - runs[k].first) - 1) /
                                  int64_t(runs[k + 1].first - runs[k].first);
                slope = std::max(slope, r);
            }
        }
        out->slope[i] = slope;
    }
    return true;
}

size_t alignFromSmallest(const std::vector<std::pair<uint64_t, const TorchTrace*>>& runs, ScaledTrace* out,
                         std::string* why)
{
    for (size_t from = 0; from + 2 <= runs.size(); ++from)
        if (alignTraces({runs.begin() + long(from), runs.end()}, out, why))
            return from;
    return runs.size();
}

ReplayResult replay(const ScaledTrace& trace, uint64_t n, uint64_t limit)
{
    CachingAllocatorModel model(limit);
    std::vector<int64_t> blocks;  // by allocation index
    ReplayResult r;
    for (size_t i = 0; i < trace.actions.size(); ++i) {
        const TorchTrace::Action& a = trace.actions[i];
        if (a.alloc) {
            const int64_t b = model.malloc(trace.bytesAt(i, n), a.stream);
            if (b < 0) {
                r.failedBytes = model.failed();
                r.reservedAtFailure = model.reserved();
                r.peakReserved = model.peakReserved(), r.peakAllocated = model.peakAllocated();
                return r;
            }
            if (blocks.size() <= a.index)
                blocks.resize(a.index + 1, -1);
            blocks[a.index] = b;
        } else if (a.index < blocks.size() && blocks[a.index] >= 0) {
            model.free(blocks[a.index]);
            blocks[a.index] = -1;
        }
    }
    r.fits = true;
    r.peakReserved = model.peakReserved(), r.peakAllocated = model.peakAllocated();
    return r;
}

uint64_t largestByReplay(const ScaledTrace& trace, const std::function<uint64_t(uint64_t)>& limit, uint64_t most)
{
    return largestWhere([&](uint64_t n) { return replay(trace, n, limit(n)).fits; }, most);
}

} // namespace oomscope::report
