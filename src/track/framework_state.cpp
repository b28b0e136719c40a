#include "track/framework_state.h"

#include <cerrno>
#include <cstdlib>
#include <sstream>

namespace oomscope::track {

namespace {

bool parseU64(const std::string& word, uint64_t* out)
{
    if (word.empty() || word[0] == '-')
        return false;
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(word.c_str(), &end, 10);
    if (errno != 0 || !end || *end != '\0')
        return false;
    *out = v;
    return true;
}

bool parseI64(const std::string& word, int64_t* out)
{
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(word.c_str(), &end, 10);
    if (word.empty() || errno != 0 || !end || *end != '\0')
        return false;
    *out = v;
    return true;
}

// "<file>\t<line>\t<function>[\t…]" → frames (innermost first).
std::vector<PythonFrameText> parseFrames(const std::string& text)
{
    std::vector<std::string> fields;
    size_t start = 0;
    for (size_t tab; (tab = text.find('\t', start)) != std::string::npos; start = tab + 1)
        fields.push_back(text.substr(start, tab - start));
    fields.push_back(text.substr(start));
    std::vector<PythonFrameText> frames;
    for (size_t i = 0; i + 3 <= fields.size(); i += 3) {
        uint64_t lineNumber = 0;
        parseU64(fields[i + 1], &lineNumber);
        frames.push_back(PythonFrameText{fields[i], uint32_t(lineNumber), fields[i + 2]});
    }
    return frames;
}

// One line kind each; false for a line that does not parse (counted, skipped).
bool parseDevice(std::istringstream& words, FrameworkState& state)
{
    FrameworkDevice d;
    std::string first;
    if (!(words >> first) || !parseI64(first, &d.device))
        return false;
    std::string key, value;
    bool haveAllocated = false, haveReserved = false;
    while (words >> key >> value) {
        uint64_t v = 0;
        if (!parseU64(value, &v))
            return false;
        if (key == "allocated") {
            d.allocated = v;
            haveAllocated = true;
        } else if (key == "reserved") {
            d.reserved = v;
            haveReserved = true;
        } else if (key == "active") {
            d.active = v;
        } else if (key == "inactive_split") {
            d.inactiveSplit = v;
        } else if (key == "segments") {
            d.segmentCount = v;
        } else if (key == "largest_free") {
            d.largestFree = v;
        } else if (key == "allocated_peak") {
            d.allocatedPeak = v;
        } else if (key == "expandable") {
            d.expandable = v != 0;
        } else if (key == "parameters") {
            d.parameters = v;
        } else if (key == "gradients") {
            d.gradients = v;
        } else if (key == "optimizer_state") {
            d.optimizerState = v;
        }
    }
    if (!haveAllocated || !haveReserved)
        return false;
    state.devices.push_back(d);
    return true;
}

bool parseSegment(std::istringstream& words, FrameworkState& state)
{
    std::string device, address, size, stream, kind;
    report::Segment s;
    if (!(words >> device >> address >> size >> stream >> kind) || !parseI64(device, &s.device) ||
        !parseU64(address, &s.address) || !parseU64(size, &s.size) || !parseU64(stream, &s.stream) ||
        !report::parseEnum(kind, &s.kind))
        return false;
    std::string key, a, b;
    if (words >> key >> a >> b && key == "pool") {
        int64_t first = 0, second = 0;
        if (!parseI64(a, &first) || !parseI64(b, &second))
            return false;
        if (first != 0 || second != 0)  // the default pool is left unsaid
            s.poolId = {first, second};
    }
    state.segments.push_back(std::move(s));
    return true;
}

// "block <offset> <size> <state>[\t<frames>]": a block of the segment above.
bool parseBlock(const std::string& line, FrameworkState& state)
{
    const size_t tab = line.find('\t');
    std::istringstream head(line.substr(0, tab));
    std::string kind, offset, size, blockState;
    report::Block b;
    if (state.segments.empty() || !(head >> kind >> offset >> size >> blockState) || !parseU64(offset, &b.offset) ||
        !parseU64(size, &b.size) || !report::parseEnum(blockState, &b.state))
        return false;
    state.segments.back().blocks.push_back(std::move(b));
    state.blockFrames.resize(state.segments.size());
    state.blockFrames.back().push_back(tab == std::string::npos ? std::vector<PythonFrameText>{}
                                                                : parseFrames(line.substr(tab + 1)));
    return true;
}

// "tensors <device> <bytes>\t<frames>": live blocks grouped by the stack that allocated them.
bool parseTensors(const std::string& line, FrameworkState& state)
{
    const size_t tab = line.find('\t');
    std::istringstream head(line.substr(0, tab));
    std::string kind, device, bytes;
    TensorGroup g;
    if (!(head >> kind >> device >> bytes) || !parseI64(device, &g.device) || !parseU64(bytes, &g.bytes) ||
        tab == std::string::npos || (g.frames = parseFrames(line.substr(tab + 1))).empty())
        return false;
    state.tensorGroups.push_back(std::move(g));
    return true;
}

// "retainer <device> <bytes> <tensors>\t<kind>\t<container>\t<name>[\t<frames>]"
bool parseRetainer(const std::string& line, FrameworkState& state)
{
    std::vector<std::string> fields;
    for (size_t start = 0;;) {
        const size_t tab = line.find('\t', start);
        fields.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
        if (tab == std::string::npos)
            break;
        start = tab + 1;
    }
    std::istringstream head(fields[0]);
    std::string kind, device, bytes, tensors;
    RetainerText r;
    if (fields.size() < 4 || !(head >> kind >> device >> bytes >> tensors) || !parseI64(device, &r.retainer.device) ||
        !parseU64(bytes, &r.retainer.bytes) || !parseU64(tensors, &r.retainer.tensors) || fields[3].empty())
        return false;
    r.retainer.kind = fields[1];
    r.retainer.container = fields[2];
    r.retainer.name = fields[3];
    const size_t framesAt = fields[0].size() + fields[1].size() + fields[2].size() + fields[3].size() + 4;
    if (framesAt < line.size())
        r.frames = parseFrames(line.substr(framesAt));
    state.retainers.push_back(std::move(r));
    return true;
}

// "frames <address> <frames>": the Python stack that allocated the memory at address.
bool parseAllocationFrames(std::istringstream& words, FrameworkState& state)
{
    std::string address, rest;
    uint64_t at = 0;
    if (!(words >> address) || !parseU64(address, &at))
        return false;
    std::getline(words, rest);
    if (!rest.empty() && rest[0] == ' ')
        rest.erase(0, 1);
    std::vector<PythonFrameText> frames = parseFrames(rest);
    if (frames.empty())
        return false;
    state.allocationFrames.emplace_back(at, std::move(frames));
    return true;
}

// graphs captures <n> aborted <n> live <n>
bool parseGraphs(std::istringstream& words, FrameworkState& state)
{
    report::CudaGraphs g;
    std::string key, value;
    bool captures = false, aborted = false, live = false;
    while (words >> key >> value) {
        uint64_t n = 0;
        if (!parseU64(value, &n))
            return false;
        if (key == "captures")
            g.captures = n, captures = true;
        else if (key == "aborted")
            g.aborted = n, aborted = true;
        else if (key == "live")
            g.live = n, live = true;
    }
    if (!captures || !aborted || !live || state.graphs)
        return false;
    state.graphs = std::move(g);
    return true;
}

// graph_pool <a> <b> <graphs>: after the graphs line
bool parseGraphPool(std::istringstream& words, FrameworkState& state)
{
    std::string a, b, n;
    report::GraphPoolUse p;
    int64_t first = 0, second = 0;
    if (!state.graphs || !(words >> a >> b >> n) || !parseI64(a, &first) || !parseI64(b, &second) ||
        !parseU64(n, &p.graphs) || (first == 0 && second == 0))
        return false;
    p.poolId = {first, second};
    state.graphs->pools.push_back(std::move(p));
    return true;
}

} // namespace

FrameworkState parseFrameworkState(const char* name, const char* text)
{
    FrameworkState state;
    state.name = name ? name : "";
    if (!text)
        return state;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream words(line);
        std::string kind;
        if (!(words >> kind))
            continue;
        bool ok = false;
        if (kind == "device")
            ok = parseDevice(words, state);
        else if (kind == "segment")
            ok = parseSegment(words, state);
        else if (kind == "block")
            ok = parseBlock(line, state);
        else if (kind == "tensors")
            ok = parseTensors(line, state);
        else if (kind == "frames")
            ok = parseAllocationFrames(words, state);
        else if (kind == "census")
            ok = state.census = true;
        else if (kind == "retainer")
            ok = parseRetainer(line, state);
        else if (kind == "graphs")
            ok = parseGraphs(words, state);
        else if (kind == "graph_pool")
            ok = parseGraphPool(words, state);
        else if (kind == "oom_pool") {
            std::string a, b;
            int64_t first = 0, second = 0;
            ok = words >> a >> b && parseI64(a, &first) && parseI64(b, &second);
            if (ok && (first != 0 || second != 0))
                state.oomPool = {first, second};
        }
        if (!ok)
            ++state.ignoredLines;
    }
    return state;
}

} // namespace oomscope::track
