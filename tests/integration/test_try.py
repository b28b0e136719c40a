"""A newcomer's path without a GPU: the README's five tasks on the simulated device, as
`tools/try.py TASK` runs them (the commands it prints are the README's), each with the verdict
the README shows. Skipped under the sanitizers (the tool preloads the build's own library)."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

EXPECTED = {
    "oom": ["$ oomscope run -o", "OUT OF MEMORY on device 0 (oomscope fakecuda (simulated GPU))",
            "leak_step_buffer", "Top allocation sites by live bytes"],
    "leak": ["$ oomscope run -o", "--check", "FAIL  leak", "keep_step_history", "per step over"],
    "job": ["$ oomscope report", "First failure", "rank 2", "cudaMalloc of 6.00 GiB", "ERROR  wrong_device: rank 3",
            "WARNING  rank_imbalance: rank 2"],
    "fit": ["$ oomscope fit", "Largest size that fits device 0 (1.00 GiB): 29", "verify: the prediction holds"],
    "live": ["$ oomscope top --once", "growth +1.00 MiB/step", "LEAK", "keep_history", "$ oomscope snapshot"],
}


@pytest.mark.skipif(bool(os.environ.get("OOMSCOPE_TEST_PRELOAD_FIRST")), reason="the tool preloads the plain build")
@pytest.mark.parametrize("task", sorted(EXPECTED))
def test_each_readme_task_runs_on_the_simulated_device(build, task):
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "try.py"), task, build.dir], capture_output=True,
                       text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    for text in EXPECTED[task]:
        assert text in r.stdout, (text, r.stdout)
