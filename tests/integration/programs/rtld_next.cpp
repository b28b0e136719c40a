// dlsym(RTLD_NEXT) from the main program must find the first definition after the program:
// with the preload, its own cudaMalloc. Prints the module that defines what was found.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <dlfcn.h>

int main()
{
    void* next = dlsym(RTLD_NEXT, "cudaMalloc");
    Dl_info info{};
    if (!next || !dladdr(next, &info) || !info.dli_fname)
        return 3;
    const char* base = std::strrchr(info.dli_fname, '/');
    std::printf("%s\n", base ? base + 1 : info.dli_fname);
    // Keep a real reference so that the program links the runtime like a CUDA program.
    void* p = nullptr;
    return cudaMalloc(&p, 0) == cudaSuccess ? 0 : 4;
}
