// Replays fuzz inputs through the fuzz target without libFuzzer (any compiler): each argument
// is a file, or a folder whose files are all replayed. Exit 0 when every input went through.
#include <cstdint>
#include <cstdio>
#include <dirent.h>
#include <fstream>
#include <iterator>
#include <string>
#include <sys/stat.h>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

int replay(const std::string& path)
{
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) {
        std::fprintf(stderr, "replay: %s: not found\n", path.c_str());
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        int n = 0;
        if (DIR* d = opendir(path.c_str())) {
            std::vector<std::string> names;
            while (dirent* e = readdir(d)) {
                if (e->d_name[0] != '.')
                    names.push_back(path + "/" + e->d_name);
            }
            closedir(d);
            for (const std::string& name : names) {
                const int r = replay(name);
                if (r < 0)
                    return r;
                n += r;
            }
        }
        return n;
    }
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    return 1;
}

} // namespace

int main(int argc, char** argv)
{
    int total = 0;
    for (int i = 1; i < argc; ++i) {
        const int n = replay(argv[i]);
        if (n < 0)
            return 2;
        total += n;
    }
    std::printf("replayed %d inputs\n", total);
    return total > 0 ? 0 : 1;
}
