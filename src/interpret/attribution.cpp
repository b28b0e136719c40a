#include "interpret/attribution.h"

#include <cstring>

namespace oomscope::track {
namespace {

std::string baseName(const std::string& path)
{
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool startsWith(const std::string& s, const char* prefix)
{
    return s.compare(0, std::strlen(prefix), prefix) == 0;
}

} // namespace

bool isCudaModule(const std::string& path)
{
    const std::string base = baseName(path);
    return startsWith(base, "libcuda.so") || startsWith(base, "libcudart.so") || startsWith(base, "libcudart_static") ||
           startsWith(base, "liboomscope") || startsWith(base, "libcupti") || startsWith(base, "libffi") || startsWith(base, "_ctypes");
}

const char* classifySource(const std::string& path)
{
    // By the library's own name first: wheels put libcublas & co. under any prefix (a venv
    // named /opt/torch/.venv holds JAX and CuPy too), so folder names alone decide nothing.
    const std::string base = baseName(path);
    if (startsWith(base, "libnccl"))
        return "nccl";
    if (startsWith(base, "libcublas"))
        return "cublas";
    if (startsWith(base, "libcudnn"))
        return "cudnn";
    if (startsWith(base, "libc10") || startsWith(base, "libtorch") || path.find("/site-packages/torch/") != std::string::npos ||
        path.find("/dist-packages/torch/") != std::string::npos)
        return "torch";
    if (path.find("/jaxlib/") != std::string::npos || path.find("/jax_plugins/") != std::string::npos ||
        path.find("/jax/") != std::string::npos || base.find("xla") != std::string::npos)
        return "jax";
    if (path.find("/cupy/") != std::string::npos || path.find("/cupy_backends/") != std::string::npos ||
        startsWith(base, "cupy"))
        return "cupy";
    return "other";
}

const char* classifyPythonModule(const std::string& name)
{
    const std::string top = name.substr(0, name.find('.'));
    if (top == "torch")
        return "torch";
    if (top == "jax" || top == "jaxlib" || top == "flax" || top == "optax")
        return "jax";
    if (top == "cupy" || top == "cupyx" || top == "cupy_backends")
        return "cupy";
    return "other";
}

} // namespace oomscope::track
