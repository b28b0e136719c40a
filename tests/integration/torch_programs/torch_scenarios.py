"""PyTorch-shaped scenarios for the adapter tests (run against the fake torch in CI).
Usage: torch_scenarios.py MODE FACTS_JSON. On a 1 GiB fake device with a 32 MiB context."""
import json
import sys

import torch

MiB = 1 << 20
facts = {"observer_stats": []}


def observer(device, alloc, device_allocated, device_free):
    # What memory_stats() says inside the observer: the report must say the same.
    facts["observer_stats"].append(dict(torch.cuda.memory_stats(device), requested=alloc))


def allocate_weights(n):
    return torch.empty(n * MiB, device="cuda")


def grow_activations(n):
    return torch.empty(n * MiB, device="cuda")  # OOM-LINE


def forward(n):
    return torch.empty(n * MiB, device="cuda")


def graph_pools():
    """Reserved and allocated bytes by pool id, from PyTorch's own snapshot."""
    pools = {}
    for seg in torch.cuda.memory._snapshot()["segments"]:
        key = "%d,%d" % tuple(seg["segment_pool_id"])
        reserved, allocated = pools.get(key, (0, 0))
        pools[key] = (reserved + seg["total_size"],
                      allocated + sum(b["size"] for b in seg["blocks"] if b["state"].startswith("active")))
    return pools


def train_loop(leak, steps=40):
    history = []
    optimizer = torch.optim.Optimizer()
    for _ in range(steps):
        activations = forward(8)
        if leak:
            history.append(forward(1))  # LEAK-LINE
        else:
            loss = forward(1)
            del loss
        del activations
        optimizer.step()


def roles(optimizer_kind, closure):
    """A model of three trained parameters (10, 20, 30 MiB) and a frozen one (5 MiB), trained
    three steps (40 MiB of activations a step, gradients kept), then a forward that runs out
    of memory: plainly, or inside optimizer.step(closure) as Lightning does."""
    params = [torch.nn.Parameter(torch.empty(n * MiB)) for n in (10, 20, 30)]
    frozen = torch.nn.Parameter(torch.empty(5 * MiB))
    optimizer = {"sgd": lambda: torch.optim.SGD(params),
                 "momentum": lambda: torch.optim.SGD(params, momentum=0.9),
                 "adamw": lambda: torch.optim.AdamW(params)}[optimizer_kind]()

    def step(too_much):
        activations = [forward(10) for _ in range(4)]
        if too_much:
            activations.append(grow_activations(2048))
        for p in params:
            if p.grad is None:
                p.grad = torch.empty(p.nbytes)
        del activations

    for i in range(4):
        try:
            if closure:
                optimizer.step(lambda: step(i == 3))
            else:
                step(i == 3)
                optimizer.step()
        except torch.OutOfMemoryError:
            facts["caught"] = True
    facts["expected"] = {"parameters": 65 * MiB, "gradients": 60 * MiB,
                         "optimizer_state": {"sgd": 0, "momentum": 60, "adamw": 120}[optimizer_kind] * MiB}
    del frozen


def main():
    mode, path = sys.argv[1], sys.argv[2]
    torch.cuda.init()
    torch._C._cuda_attach_out_of_memory_observer(observer)
    if mode == "oom":
        weights = allocate_weights(600)
        try:
            grow_activations(700)
        except torch.OutOfMemoryError as e:
            facts["caught"] = True
            facts["message"] = str(e)
            facts["notes"] = getattr(e, "__notes__", [])
        del weights
    elif mode == "catch":
        # A batch-size finder: twelve OOMs caught, then a size that fits.
        import torch.cuda.memory as memory
        weights = allocate_weights(600)
        facts["caught"] = 0
        for _ in range(12):
            try:
                grow_activations(700)
            except torch.OutOfMemoryError:
                facts["caught"] += 1
        facts["snapshots"] = memory.SNAPSHOTS[0]
        fits = forward(100)
        del weights, fits
    elif mode == "twice":
        weights = allocate_weights(600)
        for _ in range(2):
            try:
                grow_activations(700)
            except torch.OutOfMemoryError as e:
                facts["caught"] = facts.get("caught", 0) + 1
                facts.setdefault("notes", []).append(getattr(e, "__notes__", []))
        del weights
    elif mode == "recover":
        weights = allocate_weights(600)
        del weights  # cached: PyTorch keeps the segment
        activations = grow_activations(700)  # cudaMalloc fails, the cache is flushed, the retry works
        facts["recovered"] = activations.nbytes
    elif mode == "fraction":
        torch.cuda.set_per_process_memory_fraction(0.5)
        try:
            grow_activations(600)
        except torch.OutOfMemoryError:
            facts["caught"] = True
    elif mode in ("leak", "steady"):
        train_loop(mode == "leak")
    elif mode.startswith("roles-"):
        _, kind, loop = mode.split("-")
        roles(kind, loop == "closure")
    elif mode == "pools":
        # Part of the memory in a MemPool and in a CUDA graph's pool, then an OOM in the default pool.
        weights = allocate_weights(300)
        pool = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(pool):
            pooled = [forward(64) for _ in range(3)]
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # what a capture allocates comes from the graph's own pool
            captured = [forward(32) for _ in range(2)]
        graph_pool = graph.pool()
        facts["mempool"] = {"id": list(pool.id), "reserved": sum(s["total_size"] for s in pool.snapshot())}
        facts["graph_pool"] = {"id": list(graph_pool), "reserved": sum(
            s["total_size"] for s in torch.cuda.memory._snapshot()["segments"] if s["segment_pool_id"] == graph_pool)}
        try:
            grow_activations(700)
        except torch.OutOfMemoryError:
            facts["caught"] = True
        del weights, pooled, captured
    elif mode == "pool_full":
        # A MemPool over a bounded allocator (FAKE_TORCH_POOL_LIMIT): the third tensor does not fit
        # the pool while the device has room (pytorch#159674).
        allocator = torch.cuda.memory.CUDAPluggableAllocator("libcapped.so", "capped_malloc", "capped_free")
        pool = torch.cuda.MemPool(allocator.allocator())
        kept = []
        try:
            with torch.cuda.use_mem_pool(pool):
                for _ in range(3):
                    kept.append(forward(100))
        except torch.OutOfMemoryError:
            facts["caught"] = True
        facts["pool"] = list(pool.id)
        facts["pool_reserved"] = sum(s["total_size"] for s in pool.snapshot())
        facts["free"] = torch.cuda.mem_get_info()[0]
        outside = forward(100)  # outside the pool the device still has room
        del kept, outside
    elif mode == "graphs":
        # Three CUDA graphs: one dropped while its capture's output lives on, one whose capture a
        # synchronisation broke, one alive; then an OOM in the default pool.
        facts["pools"] = graph_pools()
        weights = allocate_weights(300)
        dropped = torch.cuda.CUDAGraph()
        with torch.cuda.graph(dropped):
            output = torch.empty(48 * MiB, device="cuda")  # OUTPUT-LINE
            scratch = forward(16)
            del scratch
        facts["dropped"] = list(dropped.pool())
        del dropped
        broken = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(broken):
                work = forward(96)
                torch.cuda.synchronize()  # not allowed while capturing: the capture breaks
        except RuntimeError as e:
            facts["broken_error"] = str(e)
            facts["broken"] = list(broken._pool)  # the fake's: PyTorch's pool() refuses a broken capture
        del work, broken
        alive = torch.cuda.CUDAGraph()
        with torch.cuda.graph(alive):
            static = forward(32)
        facts["alive"] = list(alive.pool())
        torch.cuda.empty_cache()
        facts["pools"] = graph_pools()
        import oomscope
        facts["dump"] = oomscope.dump("graph pools")  # a report on request carries PyTorch's view too
        facts["dump_stats"] = {k: torch.cuda.memory_stats()[k] for k in ("allocated_bytes.all.current",
                                                                         "reserved_bytes.all.current")}
        try:
            grow_activations(700)
        except torch.OutOfMemoryError:
            facts["caught"] = True
        del weights, output, static, alive
    elif mode == "graph_handle":
        # Two graphs share one pool from graph_pool_handle(), as make_graphed_callables does.
        handle = torch.cuda.graph_pool_handle()
        first, second = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(first, pool=handle):
            a = forward(32)
        with torch.cuda.graph(second, pool=handle):
            b = forward(32)
        facts["handle"] = list(handle)
        try:
            grow_activations(1000)
        except torch.OutOfMemoryError:
            facts["caught"] = True
        del a, b, first, second
    elif mode == "nccl":
        # A communicator through ctypes (vLLM's PyNccl reaches libnccl.so.2 so), its first
        # all-reduce, then an OOM in PyTorch's pool.
        import ctypes
        import os

        class UniqueId(ctypes.Structure):
            _fields_ = [("internal", ctypes.c_byte * 128)]

        nccl = ctypes.CDLL(os.path.join(os.environ["FAKECUDA_LIB"], "libnccl.so.2"))
        nccl.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, UniqueId, ctypes.c_int]
        nccl.ncclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                       ctypes.c_void_p, ctypes.c_void_p]
        uid = UniqueId()
        assert nccl.ncclGetUniqueId(ctypes.byref(uid)) == 0
        comm = ctypes.c_void_p()
        assert nccl.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0) == 0
        weights = allocate_weights(300)
        assert nccl.ncclAllReduce(None, None, 0, 7, 0, comm, None) == 0
        try:
            grow_activations(700)
        except torch.OutOfMemoryError:
            facts["caught"] = True
        del weights
    elif mode == "maxsplit":
        # Each step a larger temporary than the last: the cache keeps the old segments and takes a
        # new one, so reserved memory grows step after step while one tensor is allocated at a time.
        optimizer = torch.optim.Optimizer()
        for i in range(12):
            tmp = forward(64 + 32 * i)
            del tmp
            optimizer.step()
    elif mode == "steps":
        kept = []
        optimizer = torch.optim.Optimizer()
        for _ in range(5):
            kept.append(allocate_weights(4))
            optimizer.step()
    facts["reserved"] = torch.cuda.memory_reserved()
    with open(path, "w") as f:
        json.dump(facts, f)
    print("done", mode)


if __name__ == "__main__":
    main()
