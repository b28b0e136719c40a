"""Rehearsal on a smaller GPU (issue 23): --device-limit / OOMSCOPE_DEVICE_LIMIT on the fake
CUDA (1 GiB device, 32 MiB context)."""
import subprocess

import oomscope_testlib as t

MiB = 1 << 20


def lines(text):
    out = {}
    for line in text.splitlines():
        key, *values = line.split()
        out.setdefault(key, [int(v) for v in values])  # the first of a kind
    return out


def run_limited(build, tmp_path, limit, mode="fill", **env):
    return t.run_oomscope(build.oomscope, [build.program("device_limit"), mode], str(tmp_path / "out"),
                          env=dict(env, FAKECUDA_CAPACITY="1GiB", OOMSCOPE_DEVICE_LIMIT=limit))


def test_every_door_fails_at_the_limit_with_its_own_error(build, tmp_path):
    r = run_limited(build, tmp_path, "256MiB")
    assert r.returncode == 0, r.stderr
    got = lines(r.stdout)
    # The memory query answers as a 256 MiB card, through both APIs: free = the limit less the
    # context's 32 MiB (measured at the first allocation).
    assert got["runtime_info"] == [0, 224 * MiB, 256 * MiB]
    assert got["driver_info"] == [0, 224 * MiB, 256 * MiB]
    assert got["cudaMalloc_200MiB"] == [0]
    # Exactly what the query says is left fits; one byte more does not, through any door, each
    # with its own out-of-memory error (cudaErrorMemoryAllocation, CUDA_ERROR_OUT_OF_MEMORY: 2).
    assert got["cudaMalloc_rest"] == [0, 24 * MiB]
    for door in ("cudaMalloc_1", "cuMemAlloc_1", "cudaMallocAsync_1", "cuMemCreate_2MiB"):
        assert got[door] == [2], (door, r.stdout)
    # Pinned host and managed memory are not the device's: never refused.
    assert got["cudaMallocHost_64MiB"] == [0] and got["cudaMallocManaged_64MiB"] == [0]
    assert got["cudaFree_200MiB"] == [0] and got["cudaMalloc_100MiB"] == [0]
    # The OOM report says it was a rehearsal, with the limit.
    rep = r.only("oom")
    assert rep["devices"][0]["limit_bytes"] == 256 * MiB
    assert rep["trigger"]["api"] == "cudaMalloc" and rep["trigger"]["requested_bytes"] == 1
    text = subprocess.run([build.oomscope, "report", "--color", "never", r.reports["oom"][0]], capture_output=True,
                          text=True).stdout
    assert "rehearsed as a card of 256.00 MiB" in text, text


def test_another_process_does_not_count_against_the_limit(build, tmp_path):
    # The rehearsed card is this process's: 300 MiB held by another process (a run of `fit`
    # beside this one) is not its context. NVML says what the process holds; without it the
    # device's used memory stands in and the other's memory counts.
    r = run_limited(build, tmp_path, "256MiB", FAKECUDA_OTHER_PROCESS_BYTES="300MiB")
    got = lines(r.stdout)
    assert got["runtime_info"] == [0, 224 * MiB, 256 * MiB], r.stdout
    assert got["cudaMalloc_rest"] == [0, 24 * MiB]
    r = run_limited(build, tmp_path / "no-nvml", "256MiB", FAKECUDA_OTHER_PROCESS_BYTES="300MiB", FAKECUDA_NVML="0")
    assert lines(r.stdout)["runtime_info"] == [0, 0, 256 * MiB], r.stdout


def test_without_a_limit_the_same_program_sees_the_whole_device(build, tmp_path):
    r = t.run_oomscope(build.oomscope, [build.program("device_limit"), "fill"], str(tmp_path / "out"),
                       env={"FAKECUDA_CAPACITY": "1GiB"})
    got = lines(r.stdout)
    assert got["runtime_info"] == [0, 992 * MiB, 1024 * MiB]
    assert got["cudaMalloc_rest"] == [0, 792 * MiB]
    assert "limit_bytes" not in r.only("oom")["devices"][0]


def test_a_program_that_fits_is_unchanged(build, tmp_path):
    prog = [build.program("runtime_apis")]
    plain = t.run_oomscope(build.oomscope, prog, str(tmp_path / "plain"), env={"FAKECUDA_CAPACITY": "1GiB"})
    limited = subprocess.run([build.oomscope, "run", "-o", str(tmp_path / "limited"), "--device-limit", "1000MiB", "--"]
                             + prog, capture_output=True, text=True, env=build.env(FAKECUDA_CAPACITY="1GiB"), timeout=120)
    assert limited.returncode == plain.returncode == 0, limited.stderr
    assert limited.stdout == plain.stdout and "cudaMalloc ok" in plain.stdout
    rep = [p for p in t.reports_in(str(tmp_path / "limited")).get("exit", [])]
    assert rep and t.load(rep[0])["devices"][0]["limit_bytes"] == 1000 * MiB


def test_a_limit_above_the_device_runs_unlimited_and_says_so(build, tmp_path):
    r = run_limited(build, tmp_path, "2GiB")
    assert "more than device 0 has" in r.stderr
    got = lines(r.stdout)
    assert got["runtime_info"] == [0, 992 * MiB, 1024 * MiB]
    assert "limit_bytes" not in r.only("oom")["devices"][0]


def test_disable_wins_over_the_limit(build, tmp_path):
    r = run_limited(build, tmp_path, "256MiB", mode="query", OOMSCOPE_DISABLE="1")
    assert lines(r.stdout)["runtime_info"] == [0, 992 * MiB, 1024 * MiB]


def test_bad_limits_are_refused(build, tmp_path):
    for bad in ("24XB", "l5", "24GiB,", ",", "0"):
        p = subprocess.run([build.oomscope, "run", "--device-limit", bad, "--", "true"], capture_output=True, text=True,
                           env=build.env())
        assert p.returncode == 2, (bad, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1 and "--device-limit" in p.stderr
    # In the environment (no CLI to refuse it): one line, and the run goes on unlimited.
    r = run_limited(build, tmp_path, "lots", mode="query")
    assert "OOMSCOPE_DEVICE_LIMIT=lots" in r.stderr
    assert lines(r.stdout)["runtime_info"] == [0, 992 * MiB, 1024 * MiB]


def test_a_context_that_grows_after_the_first_allocation_counts_as_on_the_card(build, tmp_path):
    # The context takes 16 MiB more after the first allocation (a real one loads kernels lazily
    # and makes library handles: 42 to 112 MiB by the end of a PyTorch run): a real 256 MiB card
    # has 8 MiB left after 200 MiB. The rehearsal measures the context again near its limit
    # and says the same; a run beside a ballast (T5 at 76, GPT-2 at 26) fails as it does there.
    grow = {"FAKECUDA_CONTEXT_GROWTH": "16MiB@1"}
    real = t.run_oomscope(build.oomscope, [build.program("device_limit"), "fill"], str(tmp_path / "real"),
                          env=dict(grow, FAKECUDA_CAPACITY="256MiB"))
    assert lines(real.stdout)["cudaMalloc_rest"] == [0, 8 * MiB], real.stdout
    r = run_limited(build, tmp_path / "limited", "256MiB", **grow)
    got = lines(r.stdout)
    assert got["cudaMalloc_rest"] == [0, 8 * MiB], r.stdout
    assert got["cudaMalloc_1"] == [2] and got["cuMemAlloc_1"] == [2], r.stdout
    # Without the driver's count of the process's own memory, the first measure stands.
    r = run_limited(build, tmp_path / "no-nvml", "256MiB", FAKECUDA_NVML="0", **grow)
    assert lines(r.stdout)["cudaMalloc_rest"] == [0, 24 * MiB], r.stdout
