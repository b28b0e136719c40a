"""A program whose device memory is a + b·size (issue 23's `oomscope fit` on the fake CUDA):
100 MiB of weights, then 30 MiB per unit of size at once. Usage: fit_synthetic.py MODE [SIZE]
  arg       the size is the argument ({} in fit's command)
  env       the size is OOMSCOPE_FIT_SIZE
  constant  ignores the size (fit must say so)
  broken    exits 5 without running out of memory
Exits 3 when an allocation fails (out of memory)."""
import ctypes
import os
import sys

MiB = 1 << 20
rt = ctypes.CDLL(os.path.join(os.environ["FAKECUDA_LIB"], "libcudart.so.13"))


def malloc(n):
    p = ctypes.c_void_p()
    return rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)), p


mode = sys.argv[1]
if mode == "broken":
    sys.exit(5)
size = {"arg": lambda: int(sys.argv[2]), "env": lambda: int(os.environ["OOMSCOPE_FIT_SIZE"]),
        "constant": lambda: 1}[mode]()
rc, weights = malloc(100 * MiB)
rc, activations = malloc(30 * MiB * size)
if rc != 0:
    print("out of memory at size", size)
    sys.exit(3)
rt.cudaFree(activations)
print("fits", size)
