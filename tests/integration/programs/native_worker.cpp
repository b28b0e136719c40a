// A library whose allocation runs on a thread of its own, without Python frames, while the
// calling (Python) thread waits: the shape of autograd's backward or a library worker.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <thread>

extern "C" __attribute__((visibility("default"))) int allocate_on_native_thread(size_t bytes)
{
    int status = -1;
    std::thread worker([&] {
        void* p = nullptr;
        status = int(cudaMalloc(&p, bytes));  // kept: the exit report lists it live
    });
    worker.join();
    return status;
}
