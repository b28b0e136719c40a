"""Every hooked runtime function records one event per call, under its own name."""
import collections

import oomscope_testlib as t

MiB = 1 << 20


def test_each_runtime_api_is_recorded_once(build, tmp_path):
    run = build.preloaded([build.program("runtime_apis")], str(tmp_path))
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().endswith("done 2"), run.stdout  # the two deliberate failures
    reports = t.reports_in(str(tmp_path))
    assert list(reports) == ["exit"], reports  # the failed null-pointer call is not an OOM
    rep = t.load(reports["exit"][0])
    rows = rep["timeline"]["rows"]
    allocs = collections.Counter(r[6] for r in rows if r[1] == "alloc")
    frees = collections.Counter(r[6] for r in rows if r[1] == "free")
    assert allocs == {
        "cudaMalloc": 2, "cudaMallocManaged": 2, "cudaMallocPitch": 1, "cudaMalloc3D": 1,
        "cudaMallocAsync": 1, "cudaMallocAsync_ptsz": 1, "cudaMallocFromPoolAsync": 1,
        "cudaMallocFromPoolAsync_ptsz": 1, "cudaMallocHost": 2, "cudaHostAlloc": 1,
    }
    # Frees are recorded under the free call's name; the unknown pointer is not recorded.
    assert frees == {"cudaFree": 4, "cudaFreeAsync": 3, "cudaFreeAsync_ptsz": 1, "cudaFreeHost": 2}
    failed = [r for r in rows if r[1] == "alloc_failed"]
    assert len(failed) == 1 and failed[0][6] == "cudaMalloc" and failed[0][9] == 1  # cudaErrorInvalidValue
    assert rep["capture"]["unknown_frees"] == 1
    # Pitch and 3D allocations are recorded with the size the runtime chose.
    pitch = [r for r in rows if r[6] == "cudaMallocPitch"][0]
    assert pitch[4] == 1024 * 100
    # Left at exit: one buffer of each kind.
    row = t.memory_row(rep, 0)
    assert row["by_kind"] == {"device": 5 * MiB, "managed": 6 * MiB, "host_pinned": 7 * MiB}
    assert row["tracked_bytes"] == 5 * MiB
    assert rep["capture"]["live_allocations"] == 3
    # Stream-ordered calls carry their stream.
    assert all(r[5] != 0 for r in rows if r[6].startswith(("cudaMallocAsync", "cudaMallocFromPool")))
