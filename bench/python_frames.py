"""Python-frame capture on its own: cudaMalloc/cudaFree pairs through ctypes (which releases
the GIL, as PyTorch does before it allocates) from a Python stack DEPTH frames deep. Run it
plain, and under the preload with OOMSCOPE_STACK_DEPTH=0, with OOMSCOPE_PYTHON_FRAMES=0 and
with the defaults (bench/python_frames.sh): the differences are the costs.
Usage: python_frames.py LIBCUDART [PAIRS] [DEPTH] [ROUNDS]"""
import ctypes
import json
import statistics
import sys
import time


def main():
    lib = ctypes.CDLL(sys.argv[1])
    pairs = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    depth = int(sys.argv[3]) if len(sys.argv) > 3 else 20
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 15
    malloc, free = lib.cudaMalloc, lib.cudaFree
    malloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    free.argtypes = [ctypes.c_void_p]
    ptr = ctypes.c_void_p()
    ref = ctypes.byref(ptr)

    def loop():
        t0 = time.perf_counter_ns()
        for _ in range(pairs):
            malloc(ref, 1 << 20)
            free(ptr)
        return (time.perf_counter_ns() - t0) / pairs

    def at(d):
        return at(d - 1) if d > 0 else [loop() for _ in range(rounds)]

    at(depth)  # warm-up: stacks interned, the ring's pages touched
    print(json.dumps({"ns_per_pair": statistics.median(at(depth)), "depth": depth, "pairs": pairs}))


if __name__ == "__main__":
    main()
