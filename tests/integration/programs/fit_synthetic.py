"""A program whose device memory is a + b·size (issue 23's `oomscope fit` on the fake CUDA):
100 MiB of weights, then 30 MiB per unit of size at once. Usage: fit_synthetic.py MODE [SIZE]
  arg       the size is the argument ({} in fit's command)
  env       the size is OOMSCOPE_FIT_SIZE
  constant  ignores the size (fit must say so)
  steps     as arg, with a 300 MiB workspace from size 3 on (a peak in steps: no line explains it)
  shrinks   as arg, but 30 MiB per unit below 10 (the peak shrinks as the size grows)
  late      as arg, with a 200 MiB workspace from size 20 on (beyond what 1, 2 and 4 can show)
  kink      as arg, after a step of its own first (an optimizer's update): 100 MiB beside the
            weights, then 60 MiB per unit; the peak 100 + max(100, 60·size): size 1 above the line
  flat      the same with a step of 400 MiB and 30 MiB per unit: the peak does not move up to 13
            (an LSTM's weights and Adam's state up to batch 8)
  broken    exits 5 without running out of memory
  recovers  as arg, then asks for a 60 MiB workspace beside its memory and goes on without it
            when that fails (as PyTorch's cuDNN convolutions do): exits 0 at sizes where the
            workspace does not fit
Exits 3 when an allocation fails (out of memory).

With FIT_MEET=DIR, the runs at sizes 1 and 2 meet (a FIFO each opens, so neither goes on
until the other runs: fit must run them at the same time), the first time only; with
FIT_CROWD too, the one that finds the other holding DIR/lock asks for more than the device
has, as a run would on a card too crowded for two: alone, it fits."""
import ctypes
import fcntl
import os
import signal
import sys

MiB = 1 << 20
rt = ctypes.CDLL(os.path.join(os.environ["FAKECUDA_LIB"], "libcudart.so.13"))


def malloc(n):
    p = ctypes.c_void_p()
    return rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)), p


mode = sys.argv[1]
if mode == "broken":
    sys.exit(5)
size = {"arg": lambda: int(sys.argv[2]), "recovers": lambda: int(sys.argv[2]), "env": lambda: int(os.environ["OOMSCOPE_FIT_SIZE"]),
        "constant": lambda: 1, "steps": lambda: int(sys.argv[2]), "shrinks": lambda: int(sys.argv[2]),
        "kink": lambda: int(sys.argv[2]), "flat": lambda: int(sys.argv[2]), "late": lambda: int(sys.argv[2])}[mode]()
crowded = False
meet = os.environ.get("FIT_MEET")
if meet and size in (1, 2) and not os.path.exists(os.path.join(meet, f"met-{size}")):
    open(os.path.join(meet, f"met-{size}"), "w").close()
    signal.alarm(60)  # never met: fit ran them one after the other (SIGALRM ends the run)
    lock = open(os.path.join(meet, "lock"), "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        crowded = bool(os.environ.get("FIT_CROWD"))
    fifo = os.path.join(meet, "fifo")
    open(fifo, "w" if size == 1 else "r").close()
    signal.alarm(0)
rc, weights = malloc(100 * MiB if not crowded else 4 << 30)
if rc != 0:
    print("out of memory beside another run")
    sys.exit(3)
if mode in ("kink", "flat"):
    rc, step = malloc({"kink": 100, "flat": 400}[mode] * MiB)
    if rc != 0:
        print("out of memory at size", size)
        sys.exit(3)
    rt.cudaFree(step)
per_size = {"steps": 30 * MiB * size + (300 * MiB if size >= 3 else 0), "kink": 60 * MiB * size,
            "late": 30 * MiB * size + (200 * MiB if size >= 20 else 0),
            "shrinks": 30 * MiB * max(1, 10 - size)}.get(mode, 30 * MiB * size)
rc, activations = malloc(per_size)
if rc != 0:
    print("out of memory at size", size)
    sys.exit(3)
if mode == "recovers":
    rc, workspace = malloc(60 * MiB)
    if rc == 0:
        rt.cudaFree(workspace)
    else:
        print("no room for the workspace: without it")
rt.cudaFree(activations)
print("fits", size)
