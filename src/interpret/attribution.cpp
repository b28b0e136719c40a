#include "interpret/attribution.h"

#include "track/frame_word.h"

namespace oomscope::interpret {

using report::Source;

Source sourceOfFrames(const std::vector<uint64_t>& frames, const std::function<std::string(uint64_t)>& pathOf,
                      const std::function<std::string(uint64_t)>& pythonModuleOf)
{
    for (uint64_t word : frames) {
        if (track::isPythonFrame(word))
            return report::classifyPythonModule(pythonModuleOf(word));
        const std::string path = pathOf(word);
        if (path.empty() || report::isCudaModule(path))
            continue;
        return report::classifySource(path);
    }
    return Source::Other;
}

} // namespace oomscope::interpret
