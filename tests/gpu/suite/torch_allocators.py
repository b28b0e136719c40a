"""PyTorch's allocators, each door: the caching allocator, expandable segments (CUDA VMM),
cudaMallocAsync, cuBLAS beside it; and an OOM whose tracked bytes equal memory_reserved()."""

import glob
import json
import os
import subprocess
import sys

from .common import check, compact, delta_line, false_alarms, GiB, HERE, MiB, site_sources, t, TOLERANCE, workload


def scenario_torch_oom(ctx):
    """PyTorch holds 4 GiB and asks for more than the GPU has: one OOM report whose tracked
    bytes equal torch.cuda.memory_reserved() then, with stacks through libc10_cuda."""
    out = ctx.dir("torch_oom")
    facts_path = os.path.join(out, "facts.json")
    script = os.path.join(HERE, "scenarios", "torch_oom.py")
    run = t.run_oomscope(ctx.oomscope, [sys.executable, script, facts_path], out)
    check(run.returncode == 3, f"exit status {run.returncode}, expected 3; stderr: {run.stderr[-800:]}")
    facts = t.load(facts_path)
    check(facts["oom"], "PyTorch did not raise OutOfMemoryError")
    check(run.count("oom") == 1, f"expected one OOM report, got {run.count('oom')}")
    rep = run.only("oom")
    dev = rep["trigger"]["device"]
    row = t.memory_row(rep, dev)
    check(row["tracked_bytes"] == facts["reserved_before"],
          f"tracked {row['tracked_bytes']} != memory_reserved() {facts['reserved_before']}")
    site_modules = set()
    for s in rep["sites"]:
        site_modules.update(t.frame_modules(rep, s["stack"]))
    check(any(m.startswith("libc10_cuda") for m in site_modules), f"no libc10_cuda frame; modules {sorted(site_modules)[:8]}")
    check(row["by_source"].get("torch", 0) == row["tracked_bytes"], f"by_source {row['by_source']}")
    return (f"tracked {row['tracked_bytes'] / GiB:.2f} GiB == memory_reserved() {facts['reserved_before'] / GiB:.2f} GiB; "
            f"request {rep['trigger']['requested_bytes'] / GiB:.1f} GiB; untracked {row['untracked_bytes'] / MiB:.0f} MiB; "
            f"stacks through libc10_cuda; by_source torch")


def scenario_torch_default(ctx):
    """(b) PyTorch, default caching allocator."""
    run, facts, rep = workload(ctx, "torch_default", "torch-default")
    false_alarms(ctx, run)
    row = t.memory_row(rep, 0)
    check(row["tracked_bytes"] == facts["reserved"], f"tracked {row['tracked_bytes']} != reserved {facts['reserved']}")
    ok, line = delta_line(facts, row["tracked_bytes"])
    check(ok, line)
    # The process's own memory (NVML's per-process list, devices[].process_bytes) against what
    # nvidia-smi lists for the pid right after the report, and untracked derived from it.
    process = rep["devices"][0].get("process_bytes")
    smi = facts.get("smi_used_mib")
    check(process is not None, f"no process_bytes in the report (nvidia-smi lists the pid: {smi} MiB)")
    check(smi is not None and abs(process / MiB - smi) <= 2, f"process_bytes {process / MiB:.0f} MiB, nvidia-smi {smi} MiB")
    check(row["untracked_bytes"] == process - row["tracked_bytes"], f"untracked {row['untracked_bytes']} != process - tracked")
    return (f"{line}; == memory_reserved(); process_bytes {process / MiB:.0f} MiB == nvidia-smi {smi} MiB, untracked "
            f"{row['untracked_bytes'] / MiB:.0f} MiB; by_source {compact(row['by_source'])}; exit report: no growth/cache_churn")


def scenario_torch_expandable(ctx):
    """(c) PyTorch with expandable_segments:True (cuMemCreate & co.), including an OOM."""
    env = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    run, facts, rep = workload(ctx, "torch_expandable", "torch-expandable", env)
    row = t.memory_row(rep, 0)
    check(row["tracked_bytes"] == facts["reserved"], f"tracked {row['tracked_bytes']} != reserved {facts['reserved']}")
    ok, line = delta_line(facts, row["tracked_bytes"])
    check(ok, line)
    apis = {r[6] for r in rep["timeline"]["rows"]}
    check("cuMemCreate" in apis and "cuMemMap" in apis, f"apis {apis}")
    check(facts["oom"], "no OutOfMemoryError")
    check(run.count("oom") == 1, f"OOM reports: {run.count('oom')}")
    oom = run.only("oom")
    failed = [r[9] for r in oom["timeline"]["rows"] if r[1] == "alloc_failed"]
    # PyTorch unmaps free pages of its segments for good (at the OOM's cache flush) while their
    # address space stays reserved: not paused memory.
    unmaps = sum(1 for r in oom["timeline"]["rows"] if r[1] == "segment_unmap")
    for r in (rep, oom):
        check("paused" not in r, f"PyTorch's released pages listed as paused: {r.get('paused', [])[:2]}")
    return (f"{line}; == memory_reserved(); {len(rep['segments'])} vmm segments; OOM via {oom['trigger']['api']} "
            f"error {oom['trigger']['error']}; failures seen {sorted(set(failed))}; {unmaps} pages unmapped, none paused")


def scenario_torch_async(ctx):
    """(d) PyTorch with backend:cudaMallocAsync (stream-ordered pool)."""
    env = {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}
    _, facts, rep = workload(ctx, "torch_async", "torch-async", env)
    check(facts["backend"] == "cudaMallocAsync", f"backend {facts['backend']}")
    row = t.memory_row(rep, 0)
    pools = [p for p in rep["pools"] if p["device"] == 0]
    check(pools, "no pool statistics")
    reserved = max(p["reserved_bytes"] for p in pools)
    used = max(p["used_bytes"] for p in pools)
    check(row["tracked_bytes"] == used, f"tracked {row['tracked_bytes']} != pool used {used}")
    base_pools = [p for p in t.load(facts["baseline"])["pools"] if p["device"] == 0]
    base_reserved = max((p["reserved_bytes"] for p in base_pools), default=0)
    ok, line = delta_line(facts, reserved, base_reserved)
    check(ok, "pool reserved vs driver: " + line)
    return (f"tracked {row['tracked_bytes'] / MiB:.0f} MiB == pool used; pool reserved {reserved / MiB:.0f} MiB; "
            f"{line.replace('tracked', 'pool reserved')}; torch allocated {facts['allocated'] / MiB:.0f} MiB")


def scenario_cublas(ctx):
    """(g) a cuBLAS matmul: its workspace attributed to cublas or torch, as its stack says."""
    run, facts, rep = workload(ctx, "torch_cublas", "torch-cublas")
    false_alarms(ctx, run)  # cuBLAS's workspace lives until exit by design: not growth
    row = t.memory_row(rep, 0)
    ok, line = delta_line(facts, row["tracked_bytes"])
    check(ok, line)
    by_module = site_sources(rep)
    cublas = sum(b for m, b in by_module.items() if m.startswith("libcublas"))
    check(row["by_source"].get("cublas", 0) == cublas, f"by_source {row['by_source']} vs stacks {dict(by_module)}")
    torch_bytes = sum(b for m, b in by_module.items() if m.startswith(("libc10", "libtorch")))
    check(row["by_source"].get("torch", 0) == torch_bytes, f"by_source {row['by_source']} vs stacks {dict(by_module)}")
    return f"{line}; by_source {compact(row['by_source'])} matches the stacks; reserved {facts['reserved'] / MiB:.0f} MiB; exit report: no growth/cache_churn"




def scenario_torch_pools(ctx):
    """A MemPool and a CUDA graph's private pool beside the default pool, then an OOM: the
    report's bytes per pool equal the pools' own snapshots; the torch-snapshot export keeps
    each segment's pool and loads in PyTorch's memory_viz."""
    out = ctx.dir("torch_pools")
    facts_path = os.path.join(out, "facts.json")
    run = t.run_oomscope(ctx.oomscope, [sys.executable, os.path.join(HERE, "scenarios", "torch_pools.py"), facts_path], out)
    check(run.returncode == 0, f"exit {run.returncode}: {run.stderr[-600:]}")
    facts = t.load(facts_path)
    check(facts.get("caught"), "no OutOfMemoryError")
    rep = run.only("oom")
    by_pool = {}
    for s in rep["segments"]:
        key = tuple(s.get("pool_id", (0, 0)))
        by_pool[key] = by_pool.get(key, 0) + s["size"]
    mempool, graph = tuple(facts["mempool"]), tuple(facts["graph_pool"])
    check(mempool[0] == 0 and mempool[1] > 0, f"MemPool id {mempool}")
    check(graph[0] > 0 and graph[1] == 0, f"graph pool id {graph}")
    check(by_pool.get(mempool) == facts["mempool_reserved"], f"MemPool {by_pool.get(mempool)} vs pool.snapshot() {facts['mempool_reserved']}")
    check(by_pool.get(graph) == facts["graph_reserved"], f"graph pool {by_pool.get(graph)} vs snapshot {facts['graph_reserved']}")
    check(by_pool.get((0, 0), 0) == facts["default_reserved"], f"default {by_pool.get((0, 0))} vs {facts['default_reserved']}")
    text = subprocess.run([ctx.oomscope, "report", run.reports["oom"][0], "--color", "never"], capture_output=True,
                          text=True).stdout
    line = [l for l in text.splitlines() if " by pool:" in l]
    check(line and "MemPool (0, %d)" % mempool[1] in line[0] and "CUDA graph pool (%d, 0)" % graph[0] in line[0],
          f"report's pool line: {line}")
    snap_path = os.path.join(out, "snap.pickle")
    subprocess.run([ctx.oomscope, "export", run.reports["oom"][0], "-f", "torch-snapshot", "--torch-only", "-o", snap_path],
                   check=True, capture_output=True)
    viz = subprocess.run([sys.executable, "-c", (
        "import pickle, sys, torch.cuda._memory_viz as v\n"
        "s = pickle.load(open(sys.argv[1], 'rb'))\n"
        "pools = {}\n"
        "for g in s['segments']: pools[g['segment_pool_id']] = pools.get(g['segment_pool_id'], 0) + g['total_size']\n"
        "html = v.segment_plot(s)\n"
        "print(len(html), sorted(pools.items()))"), snap_path], capture_output=True, text=True, timeout=300)
    check(viz.returncode == 0, f"memory_viz: {viz.stderr[-500:]}")
    check(str(mempool) in viz.stdout and str(graph) in viz.stdout, f"pools in the pickle: {viz.stdout.strip()[:300]}")
    return (f"MemPool {mempool} {by_pool[mempool] / MiB:.0f} MiB == pool.snapshot(); graph pool {graph} "
            f"{by_pool[graph] / MiB:.0f} MiB == its snapshot; default {by_pool.get((0, 0), 0) / MiB:.0f} MiB; report line "
            f"names both; the export's segment_pool_ids read by memory_viz (segment_plot {viz.stdout.split()[0]} bytes)")



def scenario_nccl_world1(ctx):
    """An NCCL process group of world size 1: the communicator's device memory, by source nccl,
    equals what NCCL's own log says it allocated (NCCL_DEBUG_SUBSYS=ALLOC: each "Cuda Alloc" takes
    whole 2 MiB granules of CUDA VMM), and the driver's used-memory growth around its init and
    first all-reduce is that plus the residue of the kernels NCCL loads at init."""
    import re
    out = ctx.dir("nccl_world1")
    facts_path = os.path.join(out, "facts.json")
    log = os.path.join(out, "nccl.%p.log")
    run = t.run_oomscope(ctx.oomscope, [sys.executable, os.path.join(HERE, "scenarios", "nccl_world1.py"), facts_path],
                         out, env={"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "ALLOC,INIT", "NCCL_DEBUG_FILE": log})
    check(run.returncode == 0, f"exit {run.returncode}: {run.stderr[-800:]}")
    facts = t.load(facts_path)
    check(facts["sum"] == 1.0, f"all_reduce of world size 1 gave {facts['sum']}")
    text = "".join(open(p).read() for p in glob.glob(os.path.join(out, "nccl.*.log")))
    first = text[:facts["log_offset"]] if facts.get("log_offset") else text  # the log up to the first report
    sizes = [int(x) for x in re.findall(r"Cuda Alloc Size (\d+)", first)]
    granule = 2 * MiB
    nccl_own = sum((x + granule - 1) // granule * granule for x in sizes)
    rep = t.load(facts["report"])
    row = t.memory_row(rep, 0)
    nccl = row["by_source"].get("nccl", 0)
    check(sizes and nccl == nccl_own, f"nccl {nccl / MiB:.1f} MiB by source vs NCCL's log {nccl_own / MiB:.1f} MiB "
                                      f"({len(sizes)} allocations)")
    growth = facts["driver_growth"] - facts["torch_growth"]
    check(growth >= nccl, f"the driver's growth {growth / MiB:.1f} MiB is below nccl's {nccl / MiB:.1f} MiB")
    kernels = re.search(r"kernels ([0-9.]+)", text)
    # By communicator: every NCCL byte named (a communicator's phase, symmetric, shared, other),
    # the world's own at its init.
    named = rep.get("nccl", {})
    comms = named.get("communicators", [])
    check(len(comms) == 1 and comms[0]["rank"] == 0 and comms[0]["nranks"] == 1 and comms[0]["device"] == 0,
          f"communicators after the first all_reduce: {comms}")
    total = lambda n: (sum(c["init_bytes"] + c["first_collective_bytes"] + c["registration_bytes"]
                           for c in n["communicators"]) + n["symmetric_bytes"] + n["shared_bytes"] + n["other_bytes"])
    check(total(named) == nccl, f"NCCL by communicator {total(named)} != by source {nccl}: {named}")
    world = comms[0]
    check(world["init_bytes"] > 0 and named["other_bytes"] == 0, f"world {world}, other {named['other_bytes']}")
    groups = t.load(facts["report_groups"])
    two = groups["nccl"]
    nccl_two = t.memory_row(groups, 0)["by_source"].get("nccl", 0)
    check(total(two) == nccl_two, f"two groups: by communicator {total(two)} != by source {nccl_two}: {two}")
    check(len(two["communicators"]) == 2, f"communicators with the second group: {two['communicators']}")
    second = [c for c in two["communicators"] if c["handle"] != world["handle"]][0]
    if "symmetric_pool" in facts:
        check(two["symmetric_bytes"] >= 64 * MiB and two["symmetric_allocations"] >= 1, f"symmetric {two}")
    return (f"nccl {nccl / MiB:.1f} MiB by source == NCCL's own log ({len(sizes)} allocations in 2 MiB granules); the "
            f"driver's growth around init + first all_reduce {growth / MiB:.1f} MiB: the residue "
            f"{(growth - nccl) / MiB:.1f} MiB is the kernels NCCL loads at init ({kernels.group(1) if kernels else '?'} s); "
            f"by communicator: world {world['init_bytes'] / MiB:.1f} MiB at init + {world['first_collective_bytes'] / MiB:.1f} "
            f"at its first all_reduce, == by source; with new_group: second {second['init_bytes'] / MiB:.1f} MiB at "
            f"{'split' if second.get('parent') else 'init'} + {second['first_collective_bytes'] / MiB:.1f} at first, "
            f"symmetric {two['symmetric_bytes'] / MiB:.1f} MiB ({facts.get('symmetric_error', 'ncclMemAlloc pool')}), "
            f"shared {two['shared_bytes'] / MiB:.1f}, other {two['other_bytes'] / MiB:.1f}")



def scenario_torch_pool_full(ctx):
    """An OOM inside torch.cuda.use_mem_pool of a MemPool over a bounded pluggable allocator,
    while the device has room: the report names the pool and says it was full, not the device."""
    out = ctx.dir("torch_pool_full")
    facts_path = os.path.join(out, "facts.json")
    so = os.path.join(ctx.examples, "libcapped_allocator.so")
    run = t.run_oomscope(ctx.oomscope, [sys.executable, os.path.join(HERE, "scenarios", "torch_pool_full.py"), so,
                                        facts_path], out, env={"CAPPED_BYTES": str(512 * MiB)})
    check(run.returncode == 0, f"exit {run.returncode}: {run.stderr[-800:]}")
    facts = t.load(facts_path)
    check(facts.get("caught") and facts["kept"] == 2, f"facts {facts}")
    rep = run.only("oom")
    check(rep["trigger"].get("pool_id") == facts["pool"], f"trigger {rep['trigger']}")
    analysed = json.loads(subprocess.run([ctx.oomscope, "report", run.reports["oom"][0], "--format", "json"],
                                         capture_output=True, text=True).stdout)
    found = [d for d in analysed["diagnosis"] if d["code"] == "pool_full"]
    check(found and "the pool was full, not the device" in found[0]["message"], f"diagnosis {analysed['diagnosis']}")
    return (f"OOM in MemPool {tuple(facts['pool'])} (PyTorch: {facts['message'][:60]}...); trigger.pool_id set; "
            f"pool_full: {found[0]['message'][:140]}")


def scenario_torch_graph_pools(ctx):
    """CUDA graphs' pools: a graph dropped while its capture's output lives on and a capture a
    synchronisation broke are flagged (orphaned_graph_pool), a graph alive and two sharing a
    graph_pool_handle() are not; each pool's bytes equal PyTorch's snapshot of it."""
    out = ctx.dir("torch_graph_pools")
    facts_path = os.path.join(out, "facts.json")
    run = t.run_oomscope(ctx.oomscope, [sys.executable, os.path.join(HERE, "scenarios", "torch_graph_pools.py"),
                                        facts_path], out)
    check(run.returncode == 0, f"exit {run.returncode}: {run.stderr[-800:]}")
    facts = t.load(facts_path)
    check(facts.get("caught"), "no OutOfMemoryError")
    rep = run.only("oom")
    by_pool = {}
    for s in rep["segments"]:
        key = "%d,%d" % tuple(s.get("pool_id", (0, 0)))
        reserved, allocated = by_pool.get(key, (0, 0))
        by_pool[key] = [reserved + s["size"], allocated + sum(b["size"] for b in s["blocks"]
                                                              if b["state"] == "active_allocated")]
    check(by_pool == facts["pools_after_oom"], f"report by pool {by_pool} vs PyTorch's snapshot {facts['pools_after_oom']}")
    graphs = rep.get("cuda_graphs", {})
    counts = (graphs.get("captures"), graphs.get("aborted"), graphs.get("live"))
    check(counts == (5, 1, 3), f"cuda_graphs {graphs}")
    dropped, alive, shared = (tuple(facts[k]) for k in ("dropped", "alive", "shared"))
    users = {tuple(p["pool_id"]): p["graphs"] for p in graphs.get("pools", [])}
    check(users == {alive: 1, shared: 2}, f"graphs by pool {users}")
    known = {"%d,%d" % p for p in (dropped, alive, shared)} | {"0,0"}
    broken = [k for k in by_pool if k not in known]
    check(len(broken) == 1 and by_pool[broken[0]][1] == 0, f"the broken capture's pool: {broken} of {by_pool}")
    analysed = json.loads(subprocess.run([ctx.oomscope, "report", run.reports["oom"][0], "--format", "json"],
                                         capture_output=True, text=True).stdout)
    found = {d["message"].split(" holds ")[0].split(": ", 1)[1]: d for d in analysed["diagnosis"]
             if d["code"] == "orphaned_graph_pool"}
    names = {"CUDA graph pool (%d, 0)" % dropped[0], "CUDA graph pool (%s)" % broken[0].replace(",", ", ")}
    check(set(found) == names, f"flagged {sorted(found)}, expected {sorted(names)}")
    outlived = found["CUDA graph pool (%d, 0)" % dropped[0]]["message"]
    failed = found["CUDA graph pool (%s)" % broken[0].replace(",", ", ")]["message"]
    with open(os.path.join(HERE, "scenarios", "torch_graph_pools.py")) as f:
        line = next(i for i, text in enumerate(f, 1) if "output = x * 2" in text)
    check("outlive their graph" in outlived and "torch_graph_pools.py:%d" % line in outlived, outlived)
    check("1 of 5 captures failed" in failed, failed)
    text = subprocess.run([ctx.oomscope, "report", run.reports["oom"][0], "--color", "never"], capture_output=True,
                          text=True).stdout
    check("CUDA graph pool (0, %d)" % shared[1] in text, "the shared handle is not named a graph pool")
    return (f"PyTorch {torch_version()}: flagged dropped {dropped} {by_pool['%d,%d' % dropped][0] / MiB:.0f} MiB "
            f"({by_pool['%d,%d' % dropped][1] / MiB:.0f} MiB allocated) and broken ({broken[0]}) "
            f"{by_pool[broken[0]][0] / MiB:.0f} MiB (capture error: {facts.get('broken_error', '?')[:70]}; pool(): "
            f"{facts.get('broken_pool_error', facts.get('broken_pool'))}); alive {alive} and shared {shared} (2 graphs) "
            f"not; bytes by pool == PyTorch's snapshot at the OOM")


def torch_version():
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    return out.stdout.strip()


SCENARIOS = [
    ("torch_oom", scenario_torch_oom),
    ("torch_default", scenario_torch_default),
    ("torch_expandable", scenario_torch_expandable),
    ("torch_async", scenario_torch_async),
    ("torch_cublas", scenario_cublas),
    ("torch_pools", scenario_torch_pools),
    ("nccl_world1", scenario_nccl_world1),
    ("torch_pool_full", scenario_torch_pool_full),
    ("torch_graph_pools", scenario_torch_graph_pools),
]
