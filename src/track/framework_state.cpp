#include "track/framework_state.h"

#include <cerrno>
#include <cstdlib>
#include <sstream>

namespace oomscope::track {

const FrameworkDevice* FrameworkState::device(int64_t index) const
{
    for (const FrameworkDevice& d : devices) {
        if (d.device == index)
            return &d;
    }
    return nullptr;
}

std::optional<uint64_t> FrameworkState::largestFreeBlock(int64_t device) const
{
    std::optional<uint64_t> largest;
    if (const FrameworkDevice* d = this->device(device); d && d->largestFree && segments.empty())
        return d->largestFree;
    for (const report::Segment& s : segments) {
        if (s.device != device)
            continue;
        largest = largest.value_or(0);
        for (const report::Block& b : s.blocks) {
            if (b.state == "inactive" && b.size > *largest)
                largest = b.size;
        }
    }
    return largest;
}

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
        if (kind == "device") {
            FrameworkDevice d;
            std::string first;
            bool ok = bool(words >> first) && parseI64(first, &d.device);
            std::string key, value;
            bool haveAllocated = false, haveReserved = false;
            while (ok && (words >> key >> value)) {
                uint64_t v = 0;
                if (!parseU64(value, &v)) {
                    ok = false;
                    break;
                }
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
                }
            }
            if (ok && haveAllocated && haveReserved)
                state.devices.push_back(d);
            else
                ++state.ignoredLines;
        } else if (kind == "segment") {
            std::string device, address, size, stream, segmentKind;
            report::Segment s;
            if ((words >> device >> address >> size >> stream >> segmentKind) && parseI64(device, &s.device) &&
                parseU64(address, &s.address) && parseU64(size, &s.size) && parseU64(stream, &s.stream)) {
                s.kind = segmentKind;
                state.segments.push_back(std::move(s));
            } else {
                ++state.ignoredLines;
            }
        } else if (kind == "block") {
            const size_t tab = line.find('\t');
            std::istringstream head(line.substr(0, tab));
            std::string offset, size, blockState;
            report::Block b;
            head >> kind;
            if (!state.segments.empty() && (head >> offset >> size >> blockState) && parseU64(offset, &b.offset) &&
                parseU64(size, &b.size)) {
                b.state = blockState;
                state.segments.back().blocks.push_back(std::move(b));
                state.blockFrames.resize(state.segments.size());
                state.blockFrames.back().push_back(tab == std::string::npos ? std::vector<PythonFrameText>{}
                                                                            : parseFrames(line.substr(tab + 1)));
            } else {
                ++state.ignoredLines;
            }
        } else if (kind == "tensors") {
            const size_t tab = line.find('\t');
            std::istringstream head(line.substr(0, tab));
            std::string device, bytes;
            TensorGroup g;
            head >> kind;
            if ((head >> device >> bytes) && parseI64(device, &g.device) && parseU64(bytes, &g.bytes) &&
                tab != std::string::npos && !(g.frames = parseFrames(line.substr(tab + 1))).empty())
                state.tensorGroups.push_back(std::move(g));
            else
                ++state.ignoredLines;
        } else if (kind == "frames") {
            std::string address;
            uint64_t at = 0;
            std::string rest;
            if (!(words >> address) || !parseU64(address, &at)) {
                ++state.ignoredLines;
                continue;
            }
            std::getline(words, rest);
            if (!rest.empty() && rest[0] == ' ')
                rest.erase(0, 1);
            std::vector<PythonFrameText> frames = parseFrames(rest);
            if (frames.empty())
                ++state.ignoredLines;
            else
                state.allocationFrames.emplace_back(at, std::move(frames));
        } else {
            ++state.ignoredLines;
        }
    }
    return state;
}

} // namespace oomscope::track
