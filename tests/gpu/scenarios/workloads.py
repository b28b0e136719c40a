"""GPU workloads for the driver-doors scenarios. Usage: workloads.py NAME FACTS_JSON
Each warms up (the kernels it will run are loaded, library handles created, then the memory
given back), reads the driver's free memory and asks oomscope for a baseline report, runs,
reads the driver again and asks for a measure report. The suite compares the growth of tracked
bytes between the two reports with the driver's used-memory growth. Each prints one `result:`
line that must not change with or without oomscope."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_common import driver_free, dump, write_facts  # noqa: E402

MiB = 1 << 20


def smi_used_mib():
    """What nvidia-smi lists as this process's GPU memory (MiB), None where it lists no such pid."""
    import subprocess
    p = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True)
    for line in p.stdout.splitlines():
        pid, _, used = line.partition(",")
        if pid.strip() == str(os.getpid()):
            return int(used)
    return None


def torch_compute(torch, matmul):
    torch.manual_seed(0)
    a = torch.randn(4096, 4096, device="cuda")
    b = torch.randn(4096, 4096, device="cuda")
    c = a @ b if matmul else a + b
    return float(c.double().sum().item())


def torch_workload(facts_path, oom=False, matmul=False):
    import torch
    torch_compute(torch, matmul)  # warm-up: kernels loaded, cuBLAS handle created
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    free0, total = driver_free()
    baseline = dump("baseline")
    held = [torch.empty(256 * MiB, dtype=torch.uint8, device="cuda") for _ in range(8)]
    result = torch_compute(torch, matmul)
    torch.cuda.synchronize()
    free1, _ = driver_free()
    stats = torch.cuda.memory_stats()
    facts = dict(free0=free0, free1=free1, total=total, reserved=torch.cuda.memory_reserved(),
                 allocated=torch.cuda.memory_allocated(), result=result,
                 backend=torch.cuda.get_allocator_backend(), held=len(held),
                 active_bytes=stats.get("active_bytes.all.current"), baseline=baseline)
    facts["report"] = dump("measure")
    facts["smi_used_mib"] = smi_used_mib()
    if oom:
        try:
            torch.empty(total + (1 << 30), dtype=torch.uint8, device="cuda")
            facts["oom"] = False
        except torch.OutOfMemoryError:
            facts["oom"] = True
        facts["reserved_after_oom"] = torch.cuda.memory_reserved()
    write_facts(facts_path, **facts)
    print(f"result: {result:.6e}")


def cupy_compute(cupy):
    x = cupy.arange(1 << 20, dtype=cupy.float64)
    return float((x * 2).sum())


def cupy_workload(facts_path):
    import cupy
    cupy_compute(cupy)  # warm-up
    cupy.cuda.Device().synchronize()
    cupy.get_default_memory_pool().free_all_blocks()
    free0, total = driver_free()
    baseline = dump("baseline")
    held = [cupy.zeros(256 * MiB, dtype=cupy.uint8) for _ in range(4)]
    result = cupy_compute(cupy)
    cupy.cuda.Device().synchronize()
    free1, _ = driver_free()
    pool = cupy.get_default_memory_pool()
    facts = dict(free0=free0, free1=free1, total=total, pool_total=pool.total_bytes(), pool_used=pool.used_bytes(),
                 result=result, held=len(held), baseline=baseline)
    facts["report"] = dump("measure")
    write_facts(facts_path, **facts)
    print(f"result: {result:.6e}")


def jax_workload(facts_path):
    # No warm-up: XLA preallocates at its first use, which is what this scenario looks at.
    free0, total = driver_free()
    baseline = dump("baseline")
    import jax
    import jax.numpy as jnp
    x = jnp.arange(1 << 20, dtype=jnp.float32)
    result = float((x * 2).sum())
    free1, _ = driver_free()
    facts = dict(free0=free0, free1=free1, total=total, result=result, devices=str(jax.devices()), baseline=baseline)
    facts["report"] = dump("measure")
    write_facts(facts_path, **facts)
    print(f"result: {result:.6e}")


WORKLOADS = {
    "torch-default": lambda p: torch_workload(p),
    "torch-expandable": lambda p: torch_workload(p, oom=True),
    "torch-async": lambda p: torch_workload(p),
    "torch-cublas": lambda p: torch_workload(p, matmul=True),
    "cupy": cupy_workload,
    "jax": jax_workload,
}

if __name__ == "__main__":
    WORKLOADS[sys.argv[1]](sys.argv[2])
