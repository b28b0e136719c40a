#!/usr/bin/env bash
# The report's views at scale (docs/BENCHMARKS.md): the dump benchmark's report (1 Mi events,
# 100 k live allocations, 10 k stacks) and one of 10 Mi events (a ring of 16 Mi), each turned
# into an HTML page (time, size, peak memory), the page drawn in headless chromium (its own
# count of milliseconds from the script's start to everything drawn, and the browser's wall
# time to the dumped DOM), and the exports.
# Usage: bench/html_bench.sh BUILD_DIR [ROUNDS]
set -eu
build=$(cd "${1:?usage: html_bench.sh BUILD_DIR [ROUNDS]}" && pwd)
rounds=${2:-3}
out=$(mktemp -d -t oomscope-html-bench-XXXXXX)
trap 'rm -rf "$out"' EXIT
export OOMSCOPE_EXIT_REPORT=0 OOMSCOPE_QUIET=1 OOMSCOPE_FLIGHT=0
chromium=$(command -v chromium || command -v chromium-browser)
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%F), $($chromium --version)"
mkdir -p "$out/1m" "$out/10m"
OOMSCOPE_OUTPUT_DIR="$out/1m" "$build/bench/bench_dump" >/dev/null
OOMSCOPE_OUTPUT_DIR="$out/10m" OOMSCOPE_RING_EVENTS=16Mi "$build/bench/bench_dump" 5000000 >/dev/null
for size in 1m 10m; do
  report=$(ls "$out/$size"/oomscope-*.json)
  rows=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(len(r['timeline']['rows']), len(r['sites']), len(r['stacks']))" "$report")
  echo "== $size: report $(du -m "$report" | cut -f1) MiB, rows/sites/stacks $rows"
  for round in $(seq "$rounds"); do
    /usr/bin/time -f "html: %e s wall, max RSS %M KiB" "$build/bin/oomscope" html "$report" -o "$out/$size/page.html" >/dev/null
    ls -l "$out/$size/page.html" | awk '{printf "page: %.2f MiB\n", $5 / 1048576}'
    start=$(date +%s.%N)
    dom=$("$chromium" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
      --disable-component-update --disable-sync --user-data-dir="$out/profile" --window-size=1400,1000 --dump-dom \
      "file://$out/$size/page.html" 2>/dev/null)
    end=$(date +%s.%N)
    drawn=$(printf '%s' "$dom" | grep -o 'data-draw-ms="[0-9]*"' | head -1)
    echo "chromium: $drawn (script start to everything drawn); $(echo "$end - $start" | bc) s from launch to the dumped DOM"
  done
  for format in torch-snapshot chrome-trace folded; do
    /usr/bin/time -f "export $format: %e s wall, max RSS %M KiB" "$build/bin/oomscope" export "$report" -f "$format" -o "$out/$size/export" >/dev/null
    ls -l "$out/$size/export" | awk '{printf "  %.2f MiB\n", $5 / 1048576}'
  done
done
