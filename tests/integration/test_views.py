"""oomscope html and oomscope export: every report fixture rendered as a page and opened in a
real headless browser (Debian's chromium, installed by `make deps`), a screenshot of each kept
in the build's test-output/html folder; the exports checked by what reads them (Python's
pickle, a JSON parser) and against the report's own numbers; bad input is one line, status 2,
nothing left behind."""
import glob
import json
import os
import pickle
import re
import shutil
import subprocess

import pytest

from conftest import BUILD

import oomscope_testlib as t

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "v1")
ALL = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(FIXTURES, "*.json")))
CHROMIUM = t.CHROMIUM
SHOTS = os.path.join(BUILD, "test-output", "html")


def cli(build, *args):
    return subprocess.run([build.oomscope] + list(args), capture_output=True, text=True, timeout=120)


def load(name):
    with open(os.path.join(FIXTURES, name + ".json")) as f:
        return json.load(f)


browser = t.browser
body_data = t.body_data


@pytest.mark.skipif(not CHROMIUM, reason="chromium is not installed (make deps installs it)")
@pytest.mark.parametrize("name", ALL)
def test_every_fixture_renders_and_draws_what_the_report_holds(build, tmp_path, name):
    page = tmp_path / (name + ".html")
    out = cli(build, "html", os.path.join(FIXTURES, name + ".json"), "-o", str(page))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(page)
    text = page.read_text()
    # One file, nothing fetched: no external script, stylesheet or image.
    assert not re.search(r'(src|href)\s*=\s*["\']?(https?:)?//', text), "the page refers to the network"
    shown = browser("--dump-dom", "file://" + str(page), profile=str(tmp_path / "profile"))
    data = body_data(shown.stdout)
    console = [l for l in shown.stderr.splitlines() if "CONSOLE" in l and ("Uncaught" in l or "rror" in l)]
    assert not console, console
    assert data.get("ready") == "1" and data.get("errors") == "0", data
    report = load(name)
    # The chart: one series per source that ever held device memory on the device, among them
    # every source that holds some at the trigger.
    series = json.loads(data["series-per-device"])
    for row, sources in zip(sorted(report["memory"], key=lambda r: r["device"]), series):
        held = {s for s, b in row["by_source"].items() if b > 0 and s != "untracked"}
        assert held <= set(sources), (held, sources)
        assert len(sources) == len(set(sources))
    # The flame graph's boxes add up to the tracked live bytes.
    tracked = sum(r["tracked_bytes"] for r in report["memory"])
    assert int(data["flame-root"]) == tracked
    assert int(data["flame-children"]) == tracked
    # One bar per segment.
    assert int(data["segment-bars"]) == len(report["segments"])
    os.makedirs(SHOTS, exist_ok=True)
    shot = os.path.join(SHOTS, name + ".png")
    taken = browser("--screenshot=" + shot, "file://" + str(page), profile=str(tmp_path / "profile"))
    assert os.path.getsize(shot) > 10000, taken.stderr[-500:]


def test_the_page_embeds_the_analysed_report_and_escapes_what_could_close_its_script(build, tmp_path):
    report = load("fake-cuda-oom")
    report["process"]["cmdline"] = ["</script><script>alert(1)</script>", "{{js}}"]
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(report))
    page = tmp_path / "hostile.html"
    assert cli(build, "html", str(path), "-o", str(page)).returncode == 0
    text = page.read_text()
    assert "</script><script>alert(1)" not in text
    data = json.loads(re.search(r'<script type="application/json" id="oomscope-data">(.*?)</script>', text, re.S).group(1))
    process = dict(data["headline"]["facts"])["process"]
    assert "</script><script>alert(1)</script> {{js}}" in process  # the JSON's own "<\/" read back as "</"
    assert data["diagnosis"] and data["diagnosis"][0]["code"] == "request_too_large"  # analysed, in C++


@pytest.mark.skipif(not CHROMIUM, reason="chromium is not installed (make deps installs it)")
def test_the_flame_graph_toggles_to_the_peak_where_the_report_has_its_composition(build, tmp_path):
    report = load("fake-cuda-oom")
    [row] = report["memory"]
    top = report["sites"][0]
    peak_bytes = row["tracked_bytes"] + (512 << 20)
    row["peak"] = {"bytes": peak_bytes, "time_ns": report["trigger"]["time_ns"], "by_source": {"other": peak_bytes},
                   "sites": [{"stack": top["stack"], "bytes": top["bytes"] + (512 << 20)}]}
    path = tmp_path / "peak.json"
    path.write_text(json.dumps(report))
    page = tmp_path / "peak.html"
    assert cli(build, "html", str(path), "-o", str(page)).returncode == 0
    data = body_data(browser("--dump-dom", "file://" + str(page), profile=str(tmp_path / "profile")).stdout)
    assert data.get("errors") == "0" and int(data["flame-root"]) == row["tracked_bytes"], data
    assert int(data["flame-peak-root"]) == peak_bytes  # the top site and "other sites" add up to the peak
    # Pressing "At the peak" draws that tree (the click is the page's own button, scripted).
    toggled = tmp_path / "toggled.html"
    toggled.write_text(page.read_text().replace(
        "</body>", '<script>document.getElementById("flame-at-peak").click()</script></body>'))
    data = body_data(browser("--dump-dom", "file://" + str(toggled), profile=str(tmp_path / "profile")).stdout)
    assert data.get("flame-view") == "peak" and int(data["flame-root"]) == peak_bytes, data
    os.makedirs(SHOTS, exist_ok=True)
    browser("--screenshot=" + os.path.join(SHOTS, "peak-toggled.png"), "file://" + str(toggled),
            profile=str(tmp_path / "profile"))
    # Without a composition there is no toggle.
    plain = tmp_path / "plain.html"
    assert cli(build, "html", os.path.join(FIXTURES, "fake-cuda-oom.json"), "-o", str(plain)).returncode == 0
    data = body_data(browser("--dump-dom", "file://" + str(plain), profile=str(tmp_path / "profile")).stdout)
    assert "flame-peak-root" not in data, data


def test_folded_stacks_add_up_to_the_tracked_bytes(build, tmp_path):
    for name in ("fake-cuda-oom", "h200-torch-gpt2-oom", "fake-torch-leak-exit"):
        out_path = tmp_path / (name + ".folded")
        out = cli(build, "export", os.path.join(FIXTURES, name + ".json"), "--format", "folded", "-o", str(out_path))
        assert out.returncode == 0, out.stderr
        total = 0
        for line in out_path.read_text().splitlines():
            stack, count = line.rsplit(" ", 1)
            assert stack and ";" not in stack.split(";")[-1]
            total += int(count)
        assert total == sum(r["tracked_bytes"] for r in load(name)["memory"]), name


def test_chrome_trace_is_valid_json_with_ordered_counters(build, tmp_path):
    for name in ("h200-torch-gpt2-oom", "fake-step-loop-leaky-exit", "h200-cuda-example-oom"):
        path = tmp_path / (name + ".trace.json")
        assert cli(build, "export", os.path.join(FIXTURES, name + ".json"), "-f", "chrome-trace", "-o", str(path)).returncode == 0
        trace = json.loads(path.read_text())
        events = trace["traceEvents"]
        assert events
        last = {}
        for e in events:
            assert {"ph", "ts", "pid"} <= set(e), e
            if e["ph"] == "C":
                assert e["ts"] >= last.get(e["name"], 0), e
                last[e["name"]] = e["ts"]
                assert all(isinstance(v, int) and v >= 0 for v in e["args"].values())
        report = load(name)
        assert any(e["ph"] == "C" for e in events)
        assert sum(e["ph"] == "X" for e in events) == len(report["steps"])
        if report["trigger"]["kind"] == "oom":
            assert any(e["ph"] == "i" and e["name"] == "OOM" for e in events)
        # The last sample of each device's counter is what the report says is live.
        for row in report["memory"]:
            name_ = f"device {row['device']} memory by source"
            final = [e for e in events if e["ph"] == "C" and e["name"] == name_][-1]["args"]
            assert sum(final.values()) == row["tracked_bytes"], (final, row)


def test_torch_snapshot_has_the_shape_of_torch_cuda_memory_snapshot(build, tmp_path):
    report = load("h200-torch-gpt2-oom")
    row = report["memory"][0]
    for torch_only in (True, False):
        path = tmp_path / ("only.pickle" if torch_only else "all.pickle")
        args = ["export", os.path.join(FIXTURES, "h200-torch-gpt2-oom.json"), "-f", "torch-snapshot", "-o", str(path)]
        assert cli(build, *(args + (["--torch-only"] if torch_only else []))).returncode == 0
        raw = path.read_bytes()
        assert raw[:2] == b"\x80\x04"  # protocol 4: memory_viz's page reads it (not 5)
        snap = pickle.loads(raw)
        assert set(snap) == {"segments", "device_traces"}
        torch_segments = [s for s in snap["segments"] if "oomscope_source" not in s]
        assert sum(s["total_size"] for s in torch_segments) == row["reserved_bytes"]
        allocated = sum(b["size"] for s in torch_segments for b in s["blocks"] if b["state"] == "active_allocated")
        assert allocated == row["allocated_bytes"]
        for s in snap["segments"]:
            assert sum(b["size"] for b in s["blocks"]) == s["total_size"]
            assert {"address", "total_size", "stream", "segment_type", "blocks", "device"} <= set(s)
            for b in s["blocks"]:
                assert {"address", "size", "requested_size", "state", "frames"} <= set(b)
        outside = [s for s in snap["segments"] if "oomscope_source" in s]
        if torch_only:
            assert not outside
        else:
            # The memory outside PyTorch: cuBLAS's workspaces, labelled, adding up to by_source.
            assert sum(s["total_size"] for s in outside) == row["by_source"]["cublas"]
            assert all(s["blocks"][0]["frames"][0]["name"].startswith("cublas: ") for s in outside)
        actions = {e["action"] for trace in snap["device_traces"] for e in trace}
        assert {"segment_alloc", "oom"} <= actions
        for trace in snap["device_traces"]:
            for e in trace:
                assert {"action", "addr", "size", "stream", "frames", "time_us"} <= set(e)


@pytest.mark.parametrize("args,why", [
    (["export", "REPORT", "-f", "svg"], "unknown format"),
    (["export", "NOTREPORT", "-f", "folded"], "not an oomscope report"),
    (["html", "NOTREPORT"], "not an oomscope report"),
    (["export", "REPORT", "-f", "folded", "-o", "/nonexistent-dir/x.folded"], "cannot write"),
    (["html", "REPORT", "-o", "/nonexistent-dir/x.html"], "cannot write"),
])
def test_bad_input_is_one_line_status_2_and_nothing_left(build, tmp_path, args, why):
    report = os.path.join(FIXTURES, "fake-cuda-oom.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    args = [report if a == "REPORT" else str(bad) if a == "NOTREPORT" else a for a in args]
    before = set(os.listdir(tmp_path))
    out = cli(build, *args)
    assert out.returncode == 2, out
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("oomscope: error: ") and why in lines[0], lines
    assert set(os.listdir(tmp_path)) == before


def test_default_output_names_and_the_temporary_file_is_gone(build, tmp_path):
    shutil.copy(os.path.join(FIXTURES, "fake-cuda-oom.json"), tmp_path / "r.json")
    assert cli(build, "html", str(tmp_path / "r.json")).stdout.strip() == str(tmp_path / "r.html")
    assert cli(build, "export", str(tmp_path / "r.json"), "-f", "torch-snapshot").stdout.strip() == str(tmp_path / "r.pickle")
    assert cli(build, "export", str(tmp_path / "r.json"), "-f", "chrome-trace").stdout.strip() == str(tmp_path / "r.trace.json")
    assert sorted(os.listdir(tmp_path)) == ["r.html", "r.json", "r.pickle", "r.trace.json"]


def trace_events_are_well_formed(events):
    """The Trace Event Format's rules the viewers rely on (Perfetto, chrome://tracing)."""
    for e in events:
        assert {"ph", "name", "ts", "pid", "tid"} <= set(e), e
        assert e["ph"] in ("M", "C", "X", "i"), e
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
        if e["ph"] == "X":
            assert e["dur"] >= 0, e
        if e["ph"] == "i":
            assert e["s"] in ("g", "p", "t"), e
        if e["ph"] == "C":
            assert all(isinstance(v, int) and v >= 0 for v in e["args"].values()), e


def test_export_windows_keep_the_newest_events_and_say_what_they_cut(build, tmp_path):
    report = os.path.join(FIXTURES, "h200-torch-gpt2-oom.json")
    rows = load("h200-torch-gpt2-oom")["timeline"]["rows"]
    start = load("h200-torch-gpt2-oom")["process"]["start_time_ns"]
    # --last N: the trace holds the newest N events' entries; the segments are the trigger's.
    r = cli(build, "export", report, "-f", "torch-snapshot", "--last", "50", "-o", str(tmp_path / "last.pickle"))
    assert r.returncode == 0 and f"50 of {len(rows)} events kept (--last)" in r.stderr, r.stderr
    assert cli(build, "export", report, "-f", "torch-snapshot", "--last", "0", "-o", str(tmp_path / "all.pickle")).returncode == 0
    whole = pickle.loads((tmp_path / "all.pickle").read_bytes())
    last = pickle.loads((tmp_path / "last.pickle").read_bytes())
    assert last["segments"] == whole["segments"]
    newest = min(e["time_us"] for t in last["device_traces"] for e in t)
    kept = [e for t in whole["device_traces"] for e in t if e["time_us"] >= newest]
    assert sum(len(t) for t in last["device_traces"]) == len(kept) > 0
    # The default keeps everything a fixture has (it is below the cap), and says nothing.
    r = cli(build, "export", report, "-f", "torch-snapshot", "-o", str(tmp_path / "default.pickle"))
    assert r.returncode == 0 and "kept" not in r.stderr
    assert (tmp_path / "default.pickle").read_bytes() == (tmp_path / "all.pickle").read_bytes()
    # --from/--to on chrome-trace: only that span of the run, its counters and steps.
    mid = (rows[len(rows) // 2][0] - start) / 1e9
    r = cli(build, "export", report, "-f", "chrome-trace", "--from", f"{mid:.6f}", "-o", str(tmp_path / "w.json"))
    assert r.returncode == 0 and "events kept (--from/--to)" in r.stderr, r.stderr
    events = json.loads((tmp_path / "w.json").read_text())["traceEvents"]
    trace_events_are_well_formed(events)
    assert all(e["ts"] >= mid * 1e6 - 1 for e in events if e["ph"] in ("X", "i"))
    assert any(e["ph"] == "C" for e in events)
    for args, why in ((["-f", "torch-snapshot", "--to", "3"], "--to goes with chrome-trace"),
                      (["-f", "folded", "--last", "5"], "no window"), (["-f", "chrome-trace", "--from", "5", "--to", "4"],
                                                                      "--to must be after --from")):
        r = cli(build, "export", report, *args, "-o", str(tmp_path / "x"))
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and why in r.stderr, (args, r.stderr)


def test_a_jobs_reports_export_as_one_trace_a_process_per_rank(build, tmp_path):
    from test_job import run_job
    run_job(build, tmp_path)
    r = cli(build, "export", str(tmp_path), "-f", "chrome-trace")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(tmp_path / "oomscope-job.trace.json")
    events = json.loads((tmp_path / "oomscope-job.trace.json").read_text())["traceEvents"]
    trace_events_are_well_formed(events)
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert [names[p].split(" (")[0] for p in sorted(names)] == ["rank 0", "rank 1", "rank 2", "rank 3"], names
    # Every rank's memory on the job's clock; the first failure an instant across the trace, at rank 2.
    for pid in names:
        assert any(e["ph"] == "C" and e["pid"] == pid for e in events), pid
    [first] = [e for e in events if e["name"].startswith("first failure")]
    assert first["s"] == "g" and first["name"] == "first failure: rank 2" and "6.00 GiB" in first["args"]["what"]
    assert names[first["pid"]].startswith("rank 2")
    # The job's clock: rank 2's failure is its last memory sample's time, and no rank starts before 0.
    rank2 = [e for e in events if e["ph"] == "C" and e["pid"] == first["pid"]]
    assert rank2[-1]["ts"] <= first["ts"] + 1
    assert min(e["ts"] for e in events if e["ph"] != "M") >= 0
    for args in (["-f", "torch-snapshot"], ["-f", "folded"]):
        r = cli(build, "export", str(tmp_path), *args)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "is one trace" in r.stderr, r.stderr
