"""The PyTorch adapter against the fake torch + fake CUDA + the real preload."""
import json
import os
import pickle
import subprocess
import sys

import pytest

import oomscope_testlib as t

MiB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "torch_programs", "torch_scenarios.py")
FAKE_TORCH = os.path.join(HERE, "fake_torch")


def run(build, tmp_path, mode, **env):
    facts = str(tmp_path / "facts.json")
    full_env = {"PYTHONPATH": FAKE_TORCH, "FAKECUDA_LIB": build.fake_lib, "FAKECUDA_CAPACITY": "1GiB",
                "LD_LIBRARY_PATH": build.fake_lib}
    full_env.update(env)
    r = t.run_oomscope(build.oomscope, [sys.executable, SCRIPT, mode, facts], str(tmp_path / "out"), env=full_env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"done {mode}" in r.stdout
    return r, t.load(facts)


def oom_line():
    with open(SCRIPT) as f:
        return next(i for i, line in enumerate(f, 1) if "OOM-LINE" in line)


@pytest.mark.parametrize("conf, kind", [("", "large"), ("expandable_segments:True", "expandable")])
def test_one_report_per_oom_with_the_allocators_view(build, tmp_path, conf, kind):
    r, facts = run(build, tmp_path, "oom", PYTORCH_CUDA_ALLOC_CONF=conf)
    assert facts["caught"]
    assert r.count("oom") == 1, r.reports
    rep = r.only("oom")
    trig = rep["trigger"]
    assert trig["framework"] == "torch"
    assert trig["requested_bytes"] == 700 * MiB
    assert trig["api"] == "cudaMalloc" and trig["error"] == 2  # the CUDA call that failed first
    stats = facts["observer_stats"][0]
    row = t.memory_row(rep, 0)
    assert row["allocated_bytes"] == stats["allocated_bytes.all.current"] == 600 * MiB
    assert row["reserved_bytes"] == stats["reserved_bytes.all.current"] == 600 * MiB
    assert row["fragmented_bytes"] == 0
    assert row["tracked_bytes"] == row["reserved_bytes"]
    # Segments with their blocks, adding up to the reserved bytes; none dropped for its kind.
    assert rep["segments"] and {s["kind"] for s in rep["segments"]} == {kind}
    assert sum(s["size"] for s in rep["segments"]) == row["reserved_bytes"]
    for s in rep["segments"]:
        assert sum(b["size"] for b in s["blocks"]) == s["size"]
    # The view at the first failure, before the cache flush.
    assert rep["at_first_failure"] and rep["at_first_failure"][0]["tracked_bytes"] == 600 * MiB
    assert "torch" in rep["capture"]["backends"]
    # Exported for memory_viz, the segments keep PyTorch's own type and flag.
    pickled = tmp_path / "snapshot.pickle"
    export = subprocess.run([build.oomscope, "export", r.reports["oom"][0], "-f", "torch-snapshot", "-o", str(pickled)],
                            capture_output=True, text=True, timeout=120)
    assert export.returncode == 0, export.stderr
    segments = pickle.loads(pickled.read_bytes())["segments"]
    assert {(s["segment_type"], s["is_expandable"]) for s in segments} == {("large", kind == "expandable")}


def test_the_out_of_memory_error_names_its_report(build, tmp_path):
    # A note under the exception's message (its message unchanged): tracebacks, torchrun's
    # error file and failure summary show where the report is.
    r, facts = run(build, tmp_path, "oom")
    assert facts["notes"] == [f"oomscope report: {r.reports['oom'][0]}"], facts
    assert "oomscope" not in facts["message"]
    # Each OOM its own report, each exception its own note.
    r, facts = run(build, tmp_path / "twice", "twice")
    assert sorted(n[0] for n in facts["notes"]) == sorted(f"oomscope report: {p}" for p in r.reports["oom"]), facts
    assert len(r.reports["oom"]) == 2


def test_past_the_report_limit_the_adapter_only_counts(build, tmp_path):
    r, facts = run(build, tmp_path, "catch", OOMSCOPE_OOM_EPISODE_MS="0", OOMSCOPE_MAX_OOM_REPORTS="3")
    assert facts["caught"] == 12
    assert r.count("oom") == 3, r.reports
    # PyTorch's snapshot (the costly part of an OOM report) taken for the three reports only.
    assert facts["snapshots"] == 3
    skipped = t.load(r.reports["exit"][0])["skipped_ooms"]
    assert skipped["count"] == 9 and skipped["max_reports"] == 3
    assert {e["api"] for e in skipped["episodes"]} == {"torch"}
    assert {e["requested_bytes"] for e in skipped["episodes"]} == {700 * MiB}
    assert skipped["largest_success_after_bytes"] == 100 * MiB


def test_the_oom_stack_ends_in_the_programs_line(build, tmp_path):
    # The observer runs with the GIL held: the trigger's stack has the line that asked.
    r, _ = run(build, tmp_path, "oom")
    rep = r.only("oom")
    trig = t.stack(rep, rep["trigger"]["stack"])["frames"]
    # The adapter's own frames are cut: the stack starts in PyTorch ("torch.empty").
    assert not any("oomscope" in f.get("file", "") for f in trig), trig
    python = [f for f in trig if f["kind"] == "python"]
    assert python[0]["file"].endswith(("_allocator.py", "__init__.py")), python[0]
    assert any(f["function"] == "grow_activations" and f["line"] == oom_line() for f in python)
    assert any(f["function"] == "main" and f["file"] == SCRIPT for f in python)


def test_the_top_site_has_the_allocating_python_line_by_default(build, tmp_path):
    # The fake allocator calls CUDA through ctypes.CDLL, which releases the GIL (as PyTorch's
    # bindings do): the frames are read as memory, no history needed.
    r, _ = run(build, tmp_path, "oom")
    rep = r.only("oom")
    frames = t.stack(rep, rep["sites"][0]["stack"])["frames"]
    python = [f for f in frames if f["kind"] == "python"]
    assert any(f["function"] == "allocate_weights" and f["file"] == SCRIPT for f in python), frames
    assert any(f["function"] == "main" and f["file"] == SCRIPT for f in python), frames
    text = subprocess.run([build.oomscope, "report", r.reports["oom"][0]], capture_output=True, text=True).stdout
    with open(SCRIPT) as f:
        line = next(i for i, text in enumerate(f, 2) if text.startswith("def allocate_weights"))
    assert f"{SCRIPT}:{line} allocate_weights" in text, text


def test_python_frames_of_the_allocating_line_from_torch_history(build, tmp_path):
    # PyTorch releases the GIL before allocating, as the fake does (ctypes.CDLL): the site's
    # Python frames come from PyTorch's own history (OOMSCOPE_TORCH_HISTORY).
    r, _ = run(build, tmp_path, "oom", OOMSCOPE_TORCH_HISTORY="1000")
    rep = r.only("oom")
    top = rep["sites"][0]
    frames = t.stack(rep, top["stack"])["frames"]
    python = [f for f in frames if f["kind"] == "python"]
    assert python and python[0]["function"] == "allocate_weights" and python[0]["file"] == SCRIPT, frames
    assert any(f["function"] == "main" for f in python)
    # The native frames up to the interpreter stay in front; the interpreter's are replaced.
    assert frames[0]["kind"] == "native"
    assert frames[-1]["kind"] == "python"
    # Tensor level: the live block (the weights) carries the Python stack of its tensor.
    active = [b for s in rep["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
    assert len(active) == 1 and active[0]["size"] == 600 * MiB
    block_frames = t.stack(rep, active[0]["stack"])["frames"]
    assert block_frames[0]["function"] == "allocate_weights" and block_frames[0]["file"] == SCRIPT
    text = subprocess.run([build.oomscope, "report", r.reports["oom"][0]], capture_output=True, text=True).stdout
    assert "Top live tensors by Python line" in text
    assert "600.00 MiB in 1 tensor" in text


def test_python_frames_spliced_when_the_gil_is_held(build, tmp_path):
    # An allocator that keeps the GIL while it calls CUDA (CuPy-like; here ctypes.PyDLL).
    code = "\n".join([
        "import ctypes, os",
        "rt = ctypes.PyDLL(os.path.join(os.environ['FAKECUDA_LIB'], 'libcudart.so.13'))",
        "def allocate_buffer():",
        "    p = ctypes.c_void_p()",
        "    rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(64 << 20))  # THE-LINE",
        "    return p",
        "kept = allocate_buffer()",
    ])
    script = tmp_path / "gil_held.py"
    script.write_text(code)
    r = t.run_oomscope(build.oomscope, [sys.executable, str(script)], str(tmp_path / "out"),
                       env={"FAKECUDA_LIB": build.fake_lib})
    assert r.returncode == 0, r.stderr
    rep = r.only("exit")
    frames = t.stack(rep, rep["sites"][0]["stack"])["frames"]
    python = [f for f in frames if f["kind"] == "python"]
    assert python[0] == {"kind": "python", "file": str(script), "line": 5, "function": "allocate_buffer"}
    assert python[1]["function"] == "<module>" and python[1]["line"] == 7


def _gil_released_script(tmp_path):
    # An allocator that releases the GIL before it calls CUDA, as PyTorch's bindings and CuPy
    # do (here ctypes.CDLL), called from a method, a nested function and a loop; then a worker
    # thread without any Python frames of its own (a native thread, as autograd's backward).
    code = "\n".join([
        "import ctypes, os, threading",
        "rt = ctypes.CDLL(os.path.join(os.environ['FAKECUDA_LIB'], 'libcudart.so.13'))",
        "kept = []",
        "class Model:",
        "    def forward(self, n):",
        "        def activation():",
        "            p = ctypes.c_void_p()",
        "            rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n << 20))  # line 8",
        "            return p",
        "        return activation()",
        "def train():",
        "    m = Model()",
        "    for step in range(3):",
        "        kept.append(m.forward(8 + step))  # line 14",
        "    native = ctypes.CDLL(os.environ['WORKER_LIB'])",
        "    native.allocate_on_native_thread(ctypes.c_size_t(96 << 20))  # line 16",
        "train()",
    ])
    script = tmp_path / "gil_released.py"
    script.write_text(code)
    return script


def test_python_frames_read_without_the_gil(build, tmp_path):
    script = _gil_released_script(tmp_path)
    r = t.run_oomscope(build.oomscope, [sys.executable, str(script)], str(tmp_path / "out"),
                       env={"FAKECUDA_LIB": build.fake_lib, "WORKER_LIB": build.worker_lib})
    assert r.returncode == 0, r.stderr
    rep = r.only("exit")
    python_of = {}
    for site in rep["sites"]:
        frames = t.stack(rep, site["stack"])["frames"]
        python_of[site["bytes"] // MiB] = [f for f in frames if f["kind"] == "python"]
    # Every allocation of the loop (8 + 9 + 10 MiB, one site) has its Python frames, read as
    # memory, the first one too: oomscope's sitecustomize imports oomscope, which has the
    # preload learn the interpreter's layout at start-up, with the GIL held (before, the first
    # allocation came before the layout was learnt and had none).
    assert 8 not in python_of
    python = python_of[27]
    assert python[0] == {"kind": "python", "file": str(script), "line": 8, "function": "Model.forward.<locals>.activation"}
    assert python[1] == {"kind": "python", "file": str(script), "line": 10, "function": "Model.forward"}
    assert python[2] == {"kind": "python", "file": str(script), "line": 14, "function": "train"}
    assert python[3]["function"] == "<module>" and python[3]["line"] == 17
    # The native worker has no Python frames: it borrows the main thread's, behind a marker.
    python = python_of[96]
    assert python[0]["file"] == "<main thread>" and python[0]["line"] == 0
    assert python[1] == {"kind": "python", "file": str(script), "line": 16, "function": "train"}
    text = subprocess.run([build.oomscope, "report", r.reports["exit"][0]], capture_output=True, text=True).stdout
    assert f"{script}:16 train (main thread)" in text, text
    assert f"{script}:8 Model.forward.<locals>.activation" in text, text


def test_a_failure_pytorch_recovers_from_writes_no_report(build, tmp_path):
    r, facts = run(build, tmp_path, "recover")
    assert facts["recovered"] == 700 * MiB
    assert r.count("oom") == 0, r.reports
    rep = r.only("exit")
    failed = [row for row in rep["timeline"]["rows"] if row[1] == "alloc_failed"]
    assert len(failed) == 1 and failed[0][9] == 2  # kept in the timeline


def test_an_oom_without_a_failing_cuda_call(build, tmp_path):
    r, facts = run(build, tmp_path, "fraction")
    assert facts["caught"]
    rep = r.only("oom")
    assert rep["trigger"]["framework"] == "torch"
    assert rep["trigger"]["error"] is None and rep["trigger"]["api"] == "torch"
    assert rep["at_first_failure"] is None
    assert not [row for row in rep["timeline"]["rows"] if row[1] == "alloc_failed"]


def test_each_oom_the_program_experiences_is_one_report(build, tmp_path):
    r, facts = run(build, tmp_path, "twice")
    assert facts["caught"] == 2
    assert r.count("oom") == 2


def test_steps_with_allocator_samples(build, tmp_path):
    r, facts = run(build, tmp_path, "steps")
    rep = r.only("exit")
    steps = rep["steps"]
    assert [s["index"] for s in steps] == [1, 2, 3, 4, 5]
    assert [s["devices"][0]["allocated_bytes"] // MiB for s in steps] == [4, 8, 12, 16, 20]
    assert all(s["devices"][0]["reserved_bytes"] == s["devices"][0]["tracked_bytes"] for s in steps)
    assert len([row for row in rep["timeline"]["rows"] if row[1] == "step"]) == 5


def test_adapter_off_with_oomscope_torch_0(build, tmp_path):
    r, facts = run(build, tmp_path, "recover", OOMSCOPE_TORCH="0")
    # Without the adapter the first failed cudaMalloc writes the report, recovered or not.
    assert r.count("oom") == 1
    rep = r.only("oom")
    assert rep["trigger"]["framework"] is None
    assert "torch" not in rep["capture"]["backends"]


def test_another_sitecustomize_keeps_working(build, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['OTHER_SITECUSTOMIZE'] = 'ran'\n")
    code = "import os, sitecustomize; print(os.environ.get('OTHER_SITECUSTOMIZE'), sitecustomize.__file__)"
    r = t.run_oomscope(build.oomscope, [sys.executable, "-c", code], str(tmp_path / "out"),
                       env={"PYTHONPATH": str(other)})
    assert r.returncode == 0, r.stderr
    value, path = r.stdout.split()
    assert value == "ran"
    assert path == str(other / "sitecustomize.py")


def test_plain_ld_preload_puts_the_adapter_on_the_path(build, tmp_path):
    code = "import sys; print([p for p in sys.path if p.endswith('share/oomscope/python')])"
    r = build.preloaded([sys.executable, "-c", code], str(tmp_path))
    assert "share/oomscope/python" in r.stdout
    r = build.preloaded([sys.executable, "-c", code], str(tmp_path), OOMSCOPE_TORCH="0")
    assert r.stdout.strip() == "[]"


def test_oomscope_module_api(build, tmp_path):
    code = ("import oomscope; print(oomscope.loaded()); oomscope.mark('phase-1'); oomscope.step();"
            "print(oomscope.dump('from python'))")
    r = t.run_oomscope(build.oomscope, [sys.executable, "-c", code], str(tmp_path / "out"),
                       env={"OOMSCOPE_EXIT_REPORT": "0"})
    assert r.returncode == 0, r.stderr
    loaded, path = r.stdout.split()
    assert loaded == "True" and path.endswith("-request.json")
    rep = t.load(path)
    assert rep["trigger"]["message"] == "from python"
    kinds = [(row[1], row[6]) for row in rep["timeline"]["rows"]]
    assert kinds == [("marker", "phase-1"), ("step", "step")]
    assert len(rep["steps"]) == 1
    # Without the preload the module is a no-op.
    plain = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=dict(build.env(), PYTHONPATH=os.path.join(build.dir, "share", "oomscope", "python")))
    assert plain.stdout.split() == ["False", "None"]


def test_an_incompatible_torch_turns_the_adapter_off_with_one_notice(build, tmp_path):
    # The private API the adapter needs is missing: one notice, the program runs as without
    # us, and the interposer still writes the OOM report (as with OOMSCOPE_TORCH=0).
    # Without the preload (a sanitizer's runtime stays first: the fake CUDA is built with it).
    plain_env = build.env(PYTHONPATH=FAKE_TORCH, FAKECUDA_LIB=build.fake_lib, FAKECUDA_CAPACITY="1GiB",
                          LD_LIBRARY_PATH=build.fake_lib, FAKE_TORCH_DROP="get_allocator_backend")
    plain = subprocess.run([sys.executable, SCRIPT, "recover", str(tmp_path / "plain.json")], capture_output=True,
                           text=True, env=plain_env)
    r, facts = run(build, tmp_path, "recover", FAKE_TORCH_DROP="get_allocator_backend")
    assert [l for l in r.stdout.splitlines() if l.startswith("done")] == \
        [l for l in plain.stdout.splitlines() if l.startswith("done")]
    notices = [l for l in r.stderr.splitlines() if l.startswith("oomscope:") and "written" not in l and "  " not in l]
    assert len(notices) == 1 and "could not attach" in notices[0] and "get_allocator_backend" in notices[0], r.stderr
    rep = r.only("oom")
    assert rep["trigger"]["framework"] is None
    assert "torch" not in rep["capture"]["backends"]


@pytest.mark.parametrize("kind", ["sgd", "momentum", "adamw"])
@pytest.mark.parametrize("loop", ["plain", "closure"])
def test_memory_by_role_from_the_objects(build, tmp_path, kind, loop):
    # Issue 24: parameters (the frozen one too), gradients and optimizer state measured from the
    # objects, exact to the byte at the OOM and at each step; activations the rest of allocated;
    # inside optimizer.step(closure) as in a plain loop; stateless SGD is never "optimizer state".
    r, facts = run(build, tmp_path, f"roles-{kind}-{loop}")
    assert facts["caught"]
    expected = facts["expected"]
    rep = r.only("oom")
    stats = facts["observer_stats"][-1]
    roles = t.memory_row(rep, 0)["by_role"]
    for role in ("parameters", "gradients", "optimizer_state"):
        assert roles[role] == expected[role], (role, roles, expected)
    allocated = stats["allocated_bytes.all.current"]
    assert roles["activations"] == allocated - sum(expected.values()) > 0
    assert roles["cache"] == stats["reserved_bytes.all.current"] - allocated
    assert roles["time_ns"] == rep["trigger"]["time_ns"]
    # Every step sample carries them; the exit report takes the last step's.
    steps = rep["steps"]
    assert len(steps) == 3 and all(s["devices"][0].get("by_role") for s in steps)
    assert steps[-1]["devices"][0]["by_role"]["optimizer_state"] == expected["optimizer_state"]
    exit_roles = t.memory_row(r.only("exit"), 0)["by_role"]
    assert exit_roles["time_ns"] == t.load(r.reports["exit"][0])["steps"][-1]["time_ns"]
    analysed = subprocess.run([build.oomscope, "report", "--format", "json", r.reports["oom"][0]],
                              capture_output=True, text=True, timeout=120)
    codes = {d["code"] for d in json.loads(analysed.stdout)["diagnosis"]}
    assert ("optimizer_state" in codes) == (kind != "sgd"), codes
    text = subprocess.run([build.oomscope, "report", "--color", "never", r.reports["oom"][0]], capture_output=True,
                          text=True).stdout
    assert "by role:" in text and "parameters 65.00 MiB" in text, text


def test_pools_a_mempool_and_a_graph_pool_by_their_ids(build, tmp_path):
    r, facts = run(build, tmp_path, "pools")
    assert facts["caught"]
    rep = r.only("oom")
    by_pool = {}
    for s in rep["segments"]:
        key = tuple(s.get("pool_id", (0, 0)))
        by_pool[key] = by_pool.get(key, 0) + s["size"]
    mempool, graph = tuple(facts["mempool"]["id"]), tuple(facts["graph_pool"]["id"])
    assert mempool[0] == 0 and mempool[1] > 0 and graph[0] > 0 and graph[1] == 0
    assert by_pool[mempool] == facts["mempool"]["reserved"] == 3 * 64 * MiB
    assert by_pool[graph] == facts["graph_pool"]["reserved"] == 2 * 32 * MiB
    assert sum(by_pool.values()) == t.memory_row(rep, 0)["reserved_bytes"]
    # The default pool's segments carry no pool_id (PyTorch's (0, 0)).
    assert all("pool_id" not in s or s["pool_id"] != [0, 0] for s in rep["segments"])
    text = subprocess.run([build.oomscope, "report", r.reports["oom"][0], "--color", "never"], capture_output=True,
                          text=True).stdout
    assert ("device 0 by pool:  default pool 300.00 MiB (300.00 MiB allocated)  MemPool (0, %d) 192.00 MiB (192.00 MiB "
            "allocated)  CUDA graph pool (%d, 0) 64.00 MiB (64.00 MiB allocated)" % (mempool[1], graph[0])) in text, text
    # The torch-snapshot export keeps each segment's pool, as PyTorch's own snapshot writes it.
    out = tmp_path / "s.pickle"
    subprocess.run([build.oomscope, "export", r.reports["oom"][0], "-f", "torch-snapshot", "--torch-only", "-o", str(out)],
                   check=True)
    snap = pickle.loads(out.read_bytes())
    exported = {}
    for s in snap["segments"]:
        exported[s["segment_pool_id"]] = exported.get(s["segment_pool_id"], 0) + s["total_size"]
    assert exported == {(0, 0): by_pool[(0, 0)], mempool: by_pool[mempool], graph: by_pool[graph]}
    # The HTML page's segment map colours the bars by pool and lists the three.
    if t.CHROMIUM:
        page = tmp_path / "r.html"
        subprocess.run([build.oomscope, "html", r.reports["oom"][0], "-o", str(page)], check=True, capture_output=True)
        drawn = t.body_data(t.browser("--dump-dom", "file://" + str(page), profile=str(tmp_path / "profile")).stdout)
        assert drawn.get("segment-pools") == "3", drawn


@pytest.mark.parametrize("history", ["1000", ""])
def test_graph_pools_whose_graphs_are_gone_are_flagged_and_one_in_use_is_not(build, tmp_path, history):
    # A dropped graph whose capture's output lives on, a capture a synchronisation broke (its pool
    # stays held: pytorch#190348), a graph alive; then an OOM in the default pool. The output is
    # named by PyTorch's history, or without it by the allocation that made its segment.
    r, facts = run(build, tmp_path, "graphs", OOMSCOPE_TORCH_HISTORY=history)
    assert facts["caught"] and "capturing" not in facts.get("broken_error", "capturing")
    rep = r.only("oom")
    dropped, broken, alive = (tuple(facts[k]) for k in ("dropped", "broken", "alive"))
    assert len({dropped, broken, alive}) == 3 and all(p[0] > 0 and p[1] == 0 for p in (dropped, broken, alive))
    graphs = rep["cuda_graphs"]
    assert (graphs["captures"], graphs["aborted"], graphs["live"]) == (3, 1, 1), graphs
    assert {tuple(p["pool_id"]): p["graphs"] for p in graphs["pools"]} == {alive: 1}
    # Each pool's bytes as PyTorch's own snapshot has them.
    by_pool = {}
    for s in rep["segments"]:
        key = "%d,%d" % tuple(s.get("pool_id", (0, 0)))
        reserved, allocated = by_pool.get(key, (0, 0))
        by_pool[key] = (reserved + s["size"], allocated + sum(b["size"] for b in s["blocks"]
                                                              if b["state"] == "active_allocated"))
    assert by_pool == {k: tuple(v) for k, v in facts["pools"].items()}, (by_pool, facts["pools"])
    assert by_pool["%d,%d" % dropped] == (48 * MiB, 48 * MiB) and by_pool["%d,%d" % broken] == (96 * MiB, 0)
    analysed = json.loads(subprocess.run([build.oomscope, "report", r.reports["oom"][0], "--format", "json"],
                                         capture_output=True, text=True, check=True).stdout)
    found = [d for d in analysed["diagnosis"] if d["code"] == "orphaned_graph_pool"]
    assert len(found) == 2, found
    by_pool_named = {d["message"].split(" holds ")[0]: d for d in found}
    outlived = by_pool_named["device 0: CUDA graph pool (%d, 0)" % dropped[0]]
    with open(SCRIPT) as f:
        output_line = next(i for i, line in enumerate(f, 1) if "OUTPUT-LINE" in line)
    assert "48.00 MiB (48.00 MiB allocated)" in outlived["message"] and "outlive their graph" in outlived["message"]
    assert "torch_scenarios.py:%d" % output_line in outlived["message"], outlived["message"]
    assert "del them" in outlived["suggestion"]
    failed = by_pool_named["device 0: CUDA graph pool (%d, 0)" % broken[0]]
    assert "96.00 MiB (0 B allocated)" in failed["message"] and "1 of 3 captures failed" in failed["message"]
    assert "_cuda_releasePool" in failed["suggestion"] and "pytorch#190348" in failed["suggestion"]
    assert all(d["severity"] == "warning" for d in found)
    text = subprocess.run([build.oomscope, "report", r.reports["oom"][0], "--color", "never"], capture_output=True,
                          text=True).stdout
    assert "CUDA graph pool (%d, 0) 32.00 MiB (32.00 MiB allocated)" % alive[0] in text, text
    # oomscope.dump() before the OOM: the same view in a report on request, nothing having failed.
    (dumped,) = r.reports["request"]
    assert facts["dump"] == dumped
    req = t.load(dumped)
    assert req["trigger"]["kind"] == "request" and req["trigger"]["framework"] == "torch"
    row = t.memory_row(req, 0)
    assert row["allocated_bytes"] == facts["dump_stats"]["allocated_bytes.all.current"]
    assert row["reserved_bytes"] == facts["dump_stats"]["reserved_bytes.all.current"]
    assert req["cuda_graphs"] == graphs
    codes = [d["code"] for d in json.loads(subprocess.run([build.oomscope, "report", dumped, "--format", "json"],
                                                          capture_output=True, text=True).stdout)["diagnosis"]]
    assert codes.count("orphaned_graph_pool") == 2, codes


def test_a_graph_pool_handle_is_named_as_a_graph_pool_and_not_flagged_while_a_graph_uses_it(build, tmp_path):
    # graph_pool_handle() numbers its pool (0, n), as a MemPool: the captures say what it is.
    r, facts = run(build, tmp_path, "graph_handle")
    rep = r.only("oom")
    handle = tuple(facts["handle"])
    assert handle[0] == 0 and handle[1] > 0
    assert {tuple(p["pool_id"]): p["graphs"] for p in rep["cuda_graphs"]["pools"]} == {handle: 2}
    text = subprocess.run([build.oomscope, "report", r.reports["oom"][0], "--color", "never"], capture_output=True,
                          text=True).stdout
    assert "CUDA graph pool (0, %d) 64.00 MiB" % handle[1] in text and "MemPool" not in text, text
    assert "orphaned_graph_pool" not in text


@pytest.mark.parametrize("conf, fires", [("expandable_segments:True,max_split_size_mb:128", True),
                                         ("expandable_segments:True", False), ("max_split_size_mb:128", False)])
def test_max_split_size_with_expandable_segments_is_named(build, tmp_path, conf, fires):
    # pytorch#123548: reserved memory keeps growing while allocated stays small, with both set.
    r, facts = run(build, tmp_path, "maxsplit", FAKECUDA_CAPACITY="8GiB", PYTORCH_CUDA_ALLOC_CONF=conf)
    (path,) = r.reports["exit"]
    assert t.load(path)["process"]["allocator_config"] == conf
    analysed = json.loads(subprocess.run([build.oomscope, "report", path, "--format", "json"], capture_output=True,
                                         text=True).stdout)
    found = [d for d in analysed["diagnosis"] if d["code"] == "max_split_with_expandable"]
    assert bool(found) == fires, analysed["diagnosis"]
    if fires:
        assert found[0]["severity"] == "warning"
        assert "max_split_size_mb:128 together with expandable_segments:True" in found[0]["message"]
        assert "drop max_split_size_mb" in found[0]["suggestion"]


def test_an_oom_inside_use_mem_pool_says_the_pool_was_full(build, tmp_path):
    r, facts = run(build, tmp_path, "pool_full", FAKE_TORCH_POOL_LIMIT=str(250 * MiB))
    assert facts["caught"]
    rep = r.only("oom")
    pool = facts["pool"]
    assert rep["trigger"]["pool_id"] == pool
    assert rep["trigger"]["message"].endswith("(in MemPool (0, %d))" % pool[1]), rep["trigger"]["message"]
    analysed = json.loads(subprocess.run([build.oomscope, "report", r.reports["oom"][0], "--format", "json"],
                                         capture_output=True, text=True).stdout)
    (found,) = [d for d in analysed["diagnosis"] if d["code"] == "pool_full"]
    assert found["severity"] == "error"
    assert "use_mem_pool(MemPool (0, %d)), which holds 200.00 MiB" % pool[1] in found["message"], found
    assert "the pool was full, not the device" in found["message"]
    # The same program's OOM outside any pool says nothing of pools.
    r2, _ = run(build, tmp_path / "plain", "oom")
    assert "pool_id" not in r2.only("oom")["trigger"]
