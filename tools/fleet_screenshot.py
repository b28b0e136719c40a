#!/usr/bin/env python3
"""The README's picture of a fleet: four simulated ranks of a job (the fake PyTorch on the fake
CUDA; rank 2 holds more, rank 3 leaks 2 MiB a step) scraped by Debian's Prometheus from
`oomscope metrics --listen`, and Prometheus' own graph page of the dashboard's first panel
(memory by rank and source) drawn by headless Chromium.

    tools/fleet_screenshot.py BUILD_DIR OUT.png [SECONDS]

Needs prometheus and chromium (make deps). Loopback only; everything it starts ends with it."""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PROGRAM = os.path.join(ROOT, "tests", "integration", "programs", "metrics_rank.py")
FAKE_TORCH = os.path.join(ROOT, "tests", "integration", "fake_torch")
EXPR = "sum by (rank, source) (oomscope_device_memory_bytes) > 0"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    build, png = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 90
    oomscope = os.path.join(build, "bin", "oomscope")
    work = tempfile.mkdtemp(prefix="oomscope-fleet-")
    out = os.path.join(work, "job")
    procs = []
    try:
        for rank, (share, leak) in enumerate([(64, 0), (64, 0), (192, 0), (64, 2)]):
            env = dict(os.environ, FAKECUDA_CAPACITY="16GiB", FAKECUDA_UNBACKED="1",
                       FAKECUDA_LIB=os.path.join(build, "fakecuda", "lib"), PYTHONPATH=FAKE_TORCH, OOMSCOPE_QUIET="1",
                       RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="4", TORCHELASTIC_RUN_ID="fleet-demo")
            p = subprocess.Popen([oomscope, "run", "-o", out, "--", sys.executable, PROGRAM, str(share), str(leak), "1",
                                  "run"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            procs.append(p)
        for p in procs:
            while "ready" not in p.stdout.readline():
                pass
        metrics = subprocess.Popen([oomscope, "metrics", "--listen", "127.0.0.1:0", out], stderr=subprocess.PIPE,
                                   text=True)
        procs.append(metrics)
        port = int(metrics.stderr.readline().rsplit(":", 1)[1].split("/")[0])
        prom_port = free_port()
        config = os.path.join(work, "prometheus.yml")
        with open(config, "w") as f:
            f.write(f"global: {{scrape_interval: 1s}}\nscrape_configs:\n  - job_name: oomscope\n"
                    f"    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n")
        procs.append(subprocess.Popen([shutil.which("prometheus"), f"--config.file={config}",
                                       f"--storage.tsdb.path={os.path.join(work, 'tsdb')}",
                                       f"--web.listen-address=127.0.0.1:{prom_port}"], stderr=subprocess.DEVNULL))
        time.sleep(seconds)  # the job runs and Prometheus scrapes: the picture needs time on its x axis
        query = urllib.parse.urlencode({"g0.expr": EXPR, "g0.tab": "0", "g0.range_input": f"{int(seconds)}s",
                                        "g0.stacked": "0"})
        subprocess.run([shutil.which("chromium"), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        f"--user-data-dir={os.path.join(work, 'chromium')}", "--window-size=1300,900",
                        "--virtual-time-budget=15000", f"--screenshot={png}",
                        f"http://127.0.0.1:{prom_port}/graph?{query}"], check=True, capture_output=True, timeout=180)
        print(png)
    finally:
        for p in procs:
            if p.stdin:
                p.stdin.close()
            elif p.poll() is None:
                p.terminate()
        for p in procs:
            p.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
