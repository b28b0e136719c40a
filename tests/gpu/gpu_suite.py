#!/usr/bin/env python3
"""The GPU suite: the scenarios of tests/gpu against real CUDA and PyTorch, run from an
installed tree (it builds nothing). Each family of scenarios is a module of suite/ (plain CUDA,
PyTorch's allocators, other frameworks, training under the adapter, the report's views, the
examples, reliability, CUPTI); this runner runs them in that order and prints one row per scenario, PASS or FAIL, with
the numbers that decided it. Usage: gpu_suite.py PREFIX OUTDIR [SCENARIO ...]"""

import json
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from suite import (cuda, cupti, examples, frameworks, live, reliability, torch_allocators, torch_training,  # noqa: E402
                   views, rehearsal, workflows, zoo)
from suite.common import Ctx  # noqa: E402

# CUPTI's family last: its coverage check reads every report the others left.
FAMILIES = [cuda, torch_allocators, frameworks, torch_training, views, examples, workflows, rehearsal, zoo, reliability,
            live, cupti]
SCENARIOS = [scenario for family in FAMILIES for scenario in family.SCENARIOS]
# Run only when named: the model zoo alone outlasts a device call, the edge's search is its aside (suite/zoo.py).
ALONE = {"fit_zoo", "fit_edge", "fit_replay"}


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    ctx = Ctx(sys.argv[1], sys.argv[2])
    wanted = set(sys.argv[3:])
    results = []
    for name, fn in SCENARIOS:
        if (wanted and name not in wanted) or (not wanted and name in ALONE):
            continue
        try:
            details = fn(ctx)
            results.append((name, "PASS", details))
        except Exception as e:  # a failing scenario is a row, not a crash of the suite
            results.append((name, "FAIL", f"{type(e).__name__}: {e}"))
            traceback.print_exc(file=sys.stderr)
        print(f"{results[-1][1]}  {name}: {results[-1][2]}", flush=True)
    width = max(len(n) for n, _, _ in results) if results else 8
    print("\n| scenario | result | numbers |\n|---|---|---|")
    for name, status, details in results:
        print(f"| {name:<{width}} | {status} | {details} |")
    with open(os.path.join(ctx.outdir, "results.json"), "w") as f:
        json.dump([{"scenario": n, "result": s, "details": d} for n, s, d in results], f, indent=1)
    return 0 if all(s == "PASS" for _, s, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
