#!/usr/bin/env bash
# The job view at scale (docs/BENCHMARKS.md): 256 rank reports made from the H200 GPT-2 OOM
# fixture (each with its rank, local rank, host, pid, a run id and a start time; rank 17 runs
# out of memory first, every 32nd rank holds 2 GiB more, the others end by SIGTERM), then
# `oomscope report DIR`, `oomscope check DIR` and `oomscope html DIR`, timed with their peak
# memory. Usage: bench/job_bench.sh BUILD_DIR [RANKS] [ROUNDS]
set -eu
build=$(cd "${1:?usage: job_bench.sh BUILD_DIR [RANKS] [ROUNDS]}" && pwd)
ranks=${2:-256}
rounds=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)
out=$(mktemp -d -t oomscope-job-bench-XXXXXX)
trap 'rm -rf "$out"' EXIT
python3 - "$here/../tests/fixtures/v1/h200-torch-gpt2-oom.json" "$out/job" "$ranks" <<'PY'
import copy, json, os, sys
source, folder, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(folder)
base = json.load(open(source))
for rank in range(ranks):
    r = copy.deepcopy(base)
    p = r["process"]
    p.update(rank=rank, local_rank=rank % 8, world_size=ranks, local_world_size=8, group_rank=rank // 8,
             run_id="bench-job", hostname=f"node-{rank // 8:03d}", pid=1000 + rank)
    # The ranks started within a second of each other; rank 17's OOM is the first failure.
    p["start_time_unix_ns"] += rank * 3_000_000
    if rank != 17:
        r["trigger"].update(kind="signal", message="received SIGTERM", api="", error=None, error_name="",
                            requested_bytes=None, framework=None, stack=None)
        r["trigger"]["time_ns"] += 2_000_000_000
    if rank % 32 == 5:
        for row in r["memory"]:
            row["peak_tracked_bytes"] += 2 << 30
    kind = r["trigger"]["kind"]
    with open(os.path.join(folder, f"oomscope-node-{rank // 8:03d}-r{rank}-{1000 + rank}-{kind}.json"), "w") as f:
        json.dump(r, f)
PY
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%F)"
echo "== $ranks reports, $(du -sm "$out/job" | cut -f1) MiB"
for round in $(seq "$rounds"); do
  /usr/bin/time -f "report DIR: %e s wall, max RSS %M KiB" "$build/bin/oomscope" report "$out/job" --color never >"$out/view.txt"
  /usr/bin/time -f "check DIR: %e s wall, max RSS %M KiB" "$build/bin/oomscope" check "$out/job" >/dev/null || true
  /usr/bin/time -f "html DIR: %e s wall, max RSS %M KiB" "$build/bin/oomscope" html "$out/job" -o "$out/job.html" >/dev/null
  ls -l "$out/job.html" | awk '{printf "job page: %.2f MiB\n", $5 / 1048576}'
done
grep -A2 "^First failure" "$out/view.txt"
grep -c "^  [0-9]" "$out/view.txt" | sed 's/^/rank rows: /'
