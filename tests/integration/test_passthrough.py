"""What the preload must never do: change a program's behaviour, cost a non-CUDA process
anything, export more than it hooks, or pull in libraries of its own."""
import os
import re
import subprocess
import sys

import oomscope_testlib as t


def test_disable_is_a_pass_through(build, tmp_path):
    prog = [build.program("leaky_oom_fake"), "5"]
    plain = subprocess.run(prog, capture_output=True, text=True, env=build.env(), cwd=str(tmp_path))
    run = t.run_oomscope(build.oomscope, prog, str(tmp_path / "out"), env={"OOMSCOPE_DISABLE": "1"})
    assert run.returncode == plain.returncode == 1
    assert run.stdout == plain.stdout
    assert run.reports == {}
    assert not [l for l in run.stderr.splitlines() if "report written" in l]


def test_same_output_with_and_without_the_preload(build, tmp_path):
    prog = [build.program("leaky_oom_fake"), "5"]
    plain = subprocess.run(prog, capture_output=True, text=True, env=build.env(), cwd=str(tmp_path))
    traced = build.preloaded(prog, str(tmp_path))
    assert traced.returncode == plain.returncode
    assert traced.stdout == plain.stdout


def test_a_process_without_cuda_gets_no_file_and_no_thread(build, tmp_path):
    code = "import os; print(len(os.listdir('/proc/self/task')))"
    plain = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=build.env())
    traced = build.preloaded([sys.executable, "-c", code], str(tmp_path))
    assert traced.returncode == 0, traced.stderr
    assert traced.stdout == plain.stdout == "1\n"
    assert traced.stderr == ""
    assert os.listdir(str(tmp_path)) == []


def test_exports_are_exactly_the_hooks_and_the_c_api(build):
    with open(os.path.join(build.source, "src", "interpose", "hooked_functions.def")) as f:
        hooks = set(re.findall(r"^OOMSCOPE_HOOK\(\w+,\s*(\w+)\)", f.read(), re.M))
    with open(os.path.join(build.source, "src", "preload", "include", "oomscope", "oomscope.h")) as f:
        api = set(re.findall(r"\b(oomscope_\w+)\(", f.read()))
    assert "cudaMalloc" in hooks and "oomscope_dump" in api
    nm = subprocess.run(["nm", "-D", "--defined-only", build.preload], capture_output=True, text=True, check=True)
    exported = {line.split()[-1] for line in nm.stdout.splitlines() if line.strip()}
    # InitializeInjection: the driver's door when loaded through CUDA_INJECTION64_PATH.
    assert exported == hooks | api | {"InitializeInjection"}


def test_no_cuda_or_cxx_runtime_dependency(build):
    out = subprocess.run(["readelf", "-d", build.preload], capture_output=True, text=True, check=True).stdout
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out))
    for lib in needed:
        assert not lib.startswith(("libcuda", "libcudart", "libstdc++", "libunwind", "libgcc_s", "libfmt", "libspdlog")), needed


def test_program_with_its_own_cxx_runtime_spdlog_and_exceptions(build, tmp_path):
    prog = [build.program("own_runtime")]
    plain = subprocess.run(prog, capture_output=True, text=True, env=build.env())
    traced = build.preloaded(prog, str(tmp_path))
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert traced.returncode == 0, traced.stdout + traced.stderr
    assert "buffers 10 caught 5" in traced.stdout
    rep = t.load(t.reports_in(str(tmp_path))["exit"][0])
    assert t.memory_row(rep, 0)["tracked_bytes"] == 0
    assert len([r for r in rep["timeline"]["rows"] if r[1] == "alloc"]) == 10


def test_spawned_workers_that_never_touch_cuda_pay_nothing(build, tmp_path):
    # multiprocessing's spawn workers (DataLoader-style) inherit LD_PRELOAD: no report, no
    # thread of ours, same output as without the preload.
    code = """
import multiprocessing as mp, os
def work(q):
    threads = len(os.listdir('/proc/self/task'))  # before q.put starts the queue's feeder thread
    q.put(threads)
if __name__ == '__main__':
    ctx = mp.get_context('spawn')
    q = ctx.Queue()
    workers = [ctx.Process(target=work, args=(q,)) for _ in range(3)]
    for w in workers: w.start()
    counts = sorted(q.get() for _ in workers)
    for w in workers: w.join()
    print('worker threads', counts, 'exit codes', [w.exitcode for w in workers])
"""
    script = tmp_path / "spawn.py"
    script.write_text(code)
    out = tmp_path / "reports"
    out.mkdir()
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=build.env(), cwd=str(tmp_path))
    traced = build.preloaded([sys.executable, str(script)], str(out))
    assert traced.returncode == plain.returncode == 0, traced.stderr
    assert traced.stdout == plain.stdout == "worker threads [1, 1, 1] exit codes [0, 0, 0]\n"
    assert traced.stderr == ""
    assert os.listdir(str(out)) == []
