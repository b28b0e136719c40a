#include "report/sources.h"

#include <cstring>

namespace oomscope::report {
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

bool isOwnModule(const std::string& path)
{
    return startsWith(baseName(path), "liboomscope");
}

Source classifySource(const std::string& path)
{
    // By the library's own name first: wheels put libcublas & co. under any prefix (a venv
    // named /opt/torch/.venv holds JAX and CuPy too), so folder names alone decide nothing.
    const std::string base = baseName(path);
    if (startsWith(base, "libnccl"))
        return Source::Nccl;
    if (startsWith(base, "libcublas"))
        return Source::Cublas;
    if (startsWith(base, "libcudnn"))
        return Source::Cudnn;
    if (startsWith(base, "libc10") || startsWith(base, "libtorch") || path.find("/site-packages/torch/") != std::string::npos ||
        path.find("/dist-packages/torch/") != std::string::npos)
        return Source::Torch;
    if (path.find("/jaxlib/") != std::string::npos || path.find("/jax_plugins/") != std::string::npos ||
        path.find("/jax/") != std::string::npos || base.find("xla") != std::string::npos)
        return Source::Jax;
    if (path.find("/cupy/") != std::string::npos || path.find("/cupy_backends/") != std::string::npos ||
        startsWith(base, "cupy"))
        return Source::Cupy;
    return Source::Other;
}

Source classifyPythonModule(const std::string& name)
{
    const std::string top = name.substr(0, name.find('.'));
    if (top == "torch")
        return Source::Torch;
    if (top == "jax" || top == "jaxlib" || top == "flax" || top == "optax")
        return Source::Jax;
    if (top == "cupy" || top == "cupyx" || top == "cupy_backends")
        return Source::Cupy;
    return Source::Other;
}

Source classifyPythonFile(const std::string& path)
{
    // The package folder right after site-packages/dist-packages (a program's own torch/
    // folder elsewhere is the program's).
    for (const char* packages : {"/site-packages/", "/dist-packages/"}) {
        const size_t at = path.rfind(packages);
        if (at == std::string::npos)
            continue;
        const std::string rest = path.substr(at + std::strlen(packages));
        return classifyPythonModule(rest.substr(0, rest.find('/')));
    }
    return Source::Other;
}

} // namespace oomscope::report
