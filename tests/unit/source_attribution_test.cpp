#include "report/sources.h"

#include <catch2/catch.hpp>

using oomscope::report::classifySource;
using oomscope::report::isCudaModule;
using oomscope::report::enumName;

TEST_CASE("sources by library name, whatever the folder", "[attribution]")
{
    // A virtualenv named after one framework holds the others too (seen on the H200 image).
    const std::string venv = "/opt/torch/.venv/lib/python3.12/site-packages/";
    CHECK(std::string(enumName(classifySource(venv + "torch/lib/libc10_cuda.so"))) == "torch");
    CHECK(std::string(enumName(classifySource(venv + "torch/lib/libtorch_cuda.so"))) == "torch");
    CHECK(std::string(enumName(classifySource(venv + "torch/_C.cpython-312-x86_64-linux-gnu.so"))) == "torch");
    CHECK(std::string(enumName(classifySource(venv + "nvidia/cu13/lib/libcublas.so.13"))) == "cublas");
    CHECK(std::string(enumName(classifySource(venv + "nvidia/cu13/lib/libcublasLt.so.13"))) == "cublas");
    CHECK(std::string(enumName(classifySource(venv + "nvidia/cudnn/lib/libcudnn_ops.so.9"))) == "cudnn");
    CHECK(std::string(enumName(classifySource(venv + "nvidia/nccl/lib/libnccl.so.2"))) == "nccl");
    CHECK(std::string(enumName(classifySource(venv + "jaxlib/xla_extension.so"))) == "jax");
    CHECK(std::string(enumName(classifySource(venv + "jax_plugins/xla_cuda13/xla_cuda_plugin.so"))) == "jax");
    CHECK(std::string(enumName(classifySource(venv + "cupy/_core/core.cpython-312-x86_64-linux-gnu.so"))) == "cupy");
    CHECK(std::string(enumName(classifySource(venv + "cupy_backends/cuda/api/driver.cpython-312-x86_64-linux-gnu.so"))) == "cupy");
    CHECK(std::string(enumName(classifySource(venv + "cuda/bindings/cydriver.cpython-312-x86_64-linux-gnu.so"))) == "other");
    CHECK(std::string(enumName(classifySource("/home/user/train"))) == "other");
    CHECK(std::string(enumName(classifySource("/usr/bin/python3.12"))) == "other");
}

TEST_CASE("CUDA's own modules are looked past", "[attribution]")
{
    CHECK(isCudaModule("/usr/lib/x86_64-linux-gnu/libcuda.so.1"));
    CHECK(isCudaModule("/opt/x/nvidia/cu13/lib/libcudart.so.13"));
    CHECK(isCudaModule("/opt/oomscope/lib/liboomscope.so"));
    CHECK_FALSE(isCudaModule("/opt/x/libcublas.so.13"));
}
