"""`oomscope metrics` with the real parts a platform team runs: Debian's Prometheus scraping
four simulated ranks of a job (the fake PyTorch on the fake CUDA) through both deliveries —
`--listen` (a sidecar) and `--textfile` read by Debian's prometheus-node-exporter — on loopback
ports, bounded in time. What Prometheus stores equals what `oomscope snapshot` reads from the
same flight files; every PromQL expression of the Grafana dashboard evaluates and returns the
job's ranks; `promtool check metrics` finds nothing to say; a rank that ends drops out."""
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

import oomscope_testlib as t

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
RANK_PROGRAM = os.path.join(HERE, "programs", "metrics_rank.py")
FAKE_TORCH = os.path.join(HERE, "fake_torch")
JOB = "metrics-job-1"
MiB = 1 << 20
# (share MiB, leak MiB a step, steps, then): rank 2 holds more and survives an OOM, rank 3 leaks
# 2 MiB a step.
RANKS = [(64, 0, 20, ""), (64, 0, 20, ""), (192, 0, 20, "oom"), (64, 2, 30, "")]

pytestmark = pytest.mark.skipif(t.UNDER_ASAN, reason="the servers are not sanitizer builds; the reader is tested "
                                                     "under the sanitizers by test_live")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def need(tool):
    path = shutil.which(tool)
    assert path, f"{tool} is missing: make deps installs prometheus and prometheus-node-exporter"
    return path


def http_get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


class Prometheus:
    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"

    def query(self, expr):
        body = json.loads(http_get(self.base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})))
        assert body["status"] == "success", (expr, body)
        return body["data"]["result"]


def wait_until(what, predicate, seconds=90):
    """Polls predicate() until it holds (a deadline, not a sleep: Prometheus scrapes every second)."""
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
    raise AssertionError(f"{what}: not within {seconds} s (last: {last})")


def dashboard_queries():
    dash = json.load(open(os.path.join(ROOT, "dashboards", "oomscope-job.json")))
    for panel in dash["panels"]:
        for target in panel["targets"]:
            yield panel["title"], target["expr"].replace("$job_id", JOB).replace("$__rate_interval", "1m")


@pytest.fixture
def job(build, tmp_path):
    """Four ranks under `oomscope run`, ready (their steps taken), writing to tmp_path/job."""
    out = tmp_path / "job"
    procs = []
    for rank, (share, leak, steps, then) in enumerate(RANKS):
        env = build.env(FAKECUDA_CAPACITY="16GiB", FAKECUDA_LIB=build.fake_lib, PYTHONPATH=FAKE_TORCH,
                        OOMSCOPE_QUIET="1", RANK=rank, LOCAL_RANK=rank, WORLD_SIZE=4, LOCAL_WORLD_SIZE=4,
                        TORCHELASTIC_RUN_ID=JOB)
        procs.append(subprocess.Popen([build.oomscope, "run", "-o", str(out), "--", sys.executable, RANK_PROGRAM,
                                       str(share), str(leak), str(steps), then], env=env, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        for p in procs:
            t.wait_for_line(p, "ready")
        yield out, procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.communicate("", timeout=60)


def snapshot_bytes(build, job_dir):
    """{(rank, source): bytes} as `oomscope snapshot` reads each rank's flight file."""
    out = {}
    for flight in sorted(job_dir.glob("*.flight")):
        r = subprocess.run([build.oomscope, "snapshot", str(flight), "--events", "0", "-o", str(job_dir / "snaps")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        rep = t.load(r.stdout.strip())
        for row in rep["memory"]:
            for source, b in row["by_source"].items():
                if source != "untracked":
                    out[(str(rep["process"]["rank"]), source)] = b
    return out


def started(cmd, **kw):
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kw)


def test_prometheus_scrapes_every_rank_through_both_deliveries(build, tmp_path, job):
    job_dir, procs = job
    prometheus, node_exporter, promtool = need("prometheus"), need("prometheus-node-exporter"), need("promtool")
    textdir = tmp_path / "textfile"
    textdir.mkdir()
    servers = []
    try:
        # A sidecar: GET /metrics on a port it picks.
        sidecar = started([build.oomscope, "metrics", "--listen", "127.0.0.1:0", str(job_dir)])
        servers.append(sidecar)
        line = sidecar.stderr.readline()
        assert "metrics on http://127.0.0.1:" in line, line
        sidecar_port = int(line.rsplit(":", 1)[1].split("/")[0])
        # A node: the textfile, which node_exporter's textfile collector reads.
        servers.append(started([build.oomscope, "metrics", "--textfile", str(textdir / "oomscope.prom"), "--interval",
                                "0.5", str(job_dir)]))
        node_port = free_port()
        servers.append(started([node_exporter, f"--web.listen-address=127.0.0.1:{node_port}",
                                "--collector.disable-defaults", "--collector.textfile",
                                f"--collector.textfile.directory={textdir}"]))
        prom_port = free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: oomscope
    static_configs: [{{targets: ["127.0.0.1:{sidecar_port}"]}}]
  - job_name: node
    static_configs: [{{targets: ["127.0.0.1:{node_port}"]}}]
""")
        servers.append(started([prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                f"--web.listen-address=127.0.0.1:{prom_port}"]))
        prom = Prometheus(prom_port)

        def both_deliveries():
            try:
                got = {}
                for scrape_job in ("oomscope", "node"):
                    rows = prom.query(f'oomscope_device_memory_bytes{{job="{scrape_job}",job_id="{JOB}"}}')
                    got[scrape_job] = {(r["metric"]["rank"], r["metric"]["source"]): int(float(r["value"][1]))
                                       for r in rows}
                return got if all({rank for rank, _ in per} == {"0", "1", "2", "3"} for per in got.values()) else None
            except OSError:
                return None  # Prometheus still starting

        got = wait_until("each rank's memory from both deliveries", both_deliveries)
        want = snapshot_bytes(build, job_dir)
        assert want[("2", "torch")] > want[("0", "torch")] >= 64 * MiB
        for scrape_job, per in got.items():
            assert per == want, (scrape_job, per, want)

        # The dashboard: every expression evaluates and gives the job's ranks.
        def every_panel():
            try:
                results = {(title, expr): prom.query(expr) for title, expr in dashboard_queries()}
            except OSError:
                return None
            return results if all(results.values()) else None

        panels = wait_until("every dashboard query answering", every_panel)
        for (title, expr), rows in panels.items():
            ranks = {r["metric"].get("rank") for r in rows}
            assert ranks <= {"0", "1", "2", "3"} and ranks, (title, expr, rows)
        leaks = panels[next(k for k in panels if k[0].startswith("Leaks"))]
        assert [(r["metric"]["rank"], "metrics_rank.py:" in r["metric"]["site"]) for r in leaks] == [("3", True)]
        assert float(leaks[0]["value"][1]) == 2 * MiB
        stand_out = panels[next(k for k in panels if k[0].startswith("Ranks that stand out"))]
        above = {r["metric"]["rank"]: float(r["value"][1]) for r in stand_out}
        assert max(above, key=above.get) == "2" and above["2"] > 64 * MiB, above

        # The exposition is clean by Prometheus' own linter.
        text = subprocess.run([build.oomscope, "metrics", "--once", str(job_dir)], capture_output=True, text=True,
                              timeout=60)
        assert text.returncode == 0, text.stderr
        lint = subprocess.run([promtool, "check", "metrics"], input=text.stdout, capture_output=True, text=True,
                              timeout=60)
        assert lint.returncode == 0 and not lint.stdout.strip() and not lint.stderr.strip(), lint.stdout + lint.stderr

        # A rank that ends drops out of the next scrape (and of the textfile's next write).
        procs[1].communicate("", timeout=60)
        scraped = http_get(f"http://127.0.0.1:{sidecar_port}/metrics")
        assert 'rank="1"' not in scraped and 'rank="0"' in scraped
        wait_until("rank 1 gone from the textfile", lambda: 'rank="1"' not in (textdir / "oomscope.prom").read_text())
    finally:
        for s in servers:
            s.terminate()
        for s in servers:
            try:
                s.wait(timeout=30)
            except subprocess.TimeoutExpired:
                s.kill()
                s.wait()


def test_the_metrics_say_steps_ooms_leaks_and_the_build(build, tmp_path, job):
    job_dir, _ = job
    text = subprocess.run([build.oomscope, "metrics", str(job_dir)], capture_output=True, text=True, timeout=60)
    assert text.returncode == 0, text.stderr
    samples = {}
    for line in text.stdout.splitlines():
        if line and not line.startswith("#"):
            name_labels, value = line.rsplit(" ", 1)
            samples[name_labels] = float(value)

    def one(name, **labels):
        found = [v for k, v in samples.items() if k.startswith(name + "{") and
                 all(f'{key}="{val}"' in k for key, val in labels.items())]
        assert len(found) == 1, (name, labels, found)
        return found[0]

    assert one("oomscope_build_info") == 1
    assert one("oomscope_steps_total", rank="3") == 30 and one("oomscope_steps_total", rank="0") == 20
    # Rank 2's OOM, counted in its flight file while it runs on.
    assert one("oomscope_oom_episodes_total", rank="2") == 1 and one("oomscope_oom_episodes_total", rank="0") == 0
    assert one("oomscope_failed_allocations_total", rank="2") >= 1
    assert one("oomscope_process_info", rank="3", framework="torch", job_id=JOB) == 1
    assert one("oomscope_torch_allocated_bytes", rank="2") >= 192 * MiB
    assert one("oomscope_torch_reserved_bytes", rank="2") >= one("oomscope_torch_allocated_bytes", rank="2")
    assert one("oomscope_leak_growth_bytes_per_step", rank="3") == 2 * MiB
    assert not any(k.startswith("oomscope_leak_growth_bytes_per_step") and 'rank="0"' in k for k in samples)
    assert "pid" not in text.stdout.replace("oomscope_", "")


def test_the_textfile_is_never_half_written_and_bad_use_is_one_line(build, tmp_path):
    r = subprocess.run([build.oomscope, "metrics", "--textfile", str(tmp_path / "m.prom"), "--once", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    # No process: only what describes the metrics, and no temporary file left beside it.
    assert "oomscope_build_info" in (tmp_path / "m.prom").read_text()
    assert sorted(os.listdir(tmp_path)) == ["m.prom"]
    for args, text in ((["--listen", "nonsense"], "not HOST:PORT"), (["--listen", "127.0.0.1:0", "--once"], "--once"),
                       (["999999999"], "no process 999999999"),
                       (["--textfile", str(tmp_path / "absent" / "m.prom"), "--once"], "cannot write")):
        r = subprocess.run([build.oomscope, "metrics", *args], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and text in r.stderr, (args, r.stderr)
