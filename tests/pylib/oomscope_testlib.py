"""Helpers shared by the integration tests (fake CUDA, in CI) and the GPU suite (real CUDA):
run a program under `oomscope run`, find the reports it left, read stacks and memory rows.
Standard library only: the GPU machine has no extra packages."""

import glob
import json
import os
import re
import shutil
import subprocess


class Run:
    def __init__(self, proc, outdir, reports):
        self.proc = proc
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.outdir = outdir
        self.reports = reports  # trigger kind -> list of paths

    def only(self, kind):
        paths = self.reports.get(kind, [])
        assert len(paths) == 1, f"expected one {kind} report, found {paths}; stderr:\n{self.stderr}"
        return load(paths[0])

    def count(self, kind):
        return len(self.reports.get(kind, []))


# True under `make test-asan` (conftest.py): the few tests that cannot hold there skip,
# saying why (README: Tests).
UNDER_ASAN = bool(os.environ.get("OOMSCOPE_TEST_PRELOAD_FIRST"))


def reports_in(outdir):
    found = {}
    for path in sorted(glob.glob(os.path.join(outdir, "oomscope-*.json"))):
        with open(path) as f:
            kind = json.load(f)["trigger"]["kind"]
        found.setdefault(kind, []).append(path)
    return found


def run_oomscope(oomscope, cmd, outdir, env=None, timeout=300, cwd=None):
    """Runs `oomscope run -o outdir -- cmd` and collects the reports by trigger kind."""
    os.makedirs(outdir, exist_ok=True)
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.run([oomscope, "run", "-o", outdir, "--"] + list(cmd), env=full_env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)
    return Run(proc, outdir, reports_in(outdir))


def run_oomscope_via(oomscope, cmd, outdir, via, env=None, timeout=300):
    """Runs `oomscope run --via=VIA -o outdir -- cmd` and collects the reports by trigger kind."""
    os.makedirs(outdir, exist_ok=True)
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.run([oomscope, "run", "--via=" + via, "-o", outdir, "--"] + list(cmd), env=full_env,
                          capture_output=True, text=True, timeout=timeout)
    return Run(proc, outdir, reports_in(outdir))


def load(path):
    with open(path) as f:
        return json.load(f)


def stack(report, stack_id):
    for s in report["stacks"]:
        if s["id"] == stack_id:
            return s
    raise KeyError(f"stack {stack_id} not in report")


def module_path(report, module_id):
    for m in report["modules"]:
        if m["id"] == module_id:
            return m["path"]
    return ""


def frame_names(report, stack_id):
    """Each frame as 'symbol' (native) or 'file:line function' (python)."""
    names = []
    for f in stack(report, stack_id)["frames"]:
        if f["kind"] == "python":
            names.append(f"{f['file']}:{f['line']} {f['function']}")
        else:
            names.append(f["symbol"])
    return names


def frame_modules(report, stack_id):
    return [os.path.basename(module_path(report, f["module"])) for f in stack(report, stack_id)["frames"]
            if f["kind"] == "native" and f["module"] is not None]


def memory_row(report, device):
    for row in report["memory"]:
        if row["device"] == device:
            return row
    raise KeyError(f"no memory row for device {device}")


def live_sum(report, device=None, kind="device"):
    return sum(s["bytes"] for s in report["sites"] if (device is None or s["device"] == device) and s["kind"] == kind)


def wait_for_line(proc, wanted):
    """Reads proc's stdout (a pipe, text) until the line `wanted`; fails if the program ends first."""
    for line in proc.stdout:
        if line.strip() == wanted:
            return
    raise AssertionError(f"program ended before printing {wanted!r}: {proc.stderr.read()}")


def check_alloc_modes_live(rep):
    """What tests/integration/programs/alloc_modes holds once it has allocated: 4 x 16 MiB of
    device memory from allocate_model, 2 MiB managed, 1 MiB pinned."""
    MiB = 1 << 20
    row = memory_row(rep, 0)
    assert row["tracked_bytes"] == 64 * MiB
    assert row["by_kind"] == {"device": 64 * MiB, "managed": 2 * MiB, "host_pinned": 1 * MiB}
    top = rep["sites"][0]
    assert top["count"] == 4 and top["bytes"] == 64 * MiB
    assert "allocate_model" in frame_names(rep, top["stack"])[0]


def format_bytes(n):
    """Bytes as oomscope's tables write them ("512 B", "1.50 KiB", "2.00 GiB")."""
    if n < 1024:
        return f"{n} B"
    value, units = n / 1024.0, ["KiB", "MiB", "GiB", "TiB", "PiB"]
    unit = 0
    while value >= 1024.0 and unit + 1 < len(units):
        value /= 1024.0
        unit += 1
    return f"{value:.2f} {units[unit]}"


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

# The browser is not under test: it runs without what conftest puts into this process's
# environment for the programs that are (a sanitizer runtime in LD_PRELOAD, the fake CUDA).
BROWSER_ENV = {k: v for k, v in os.environ.items()
               if k not in ("LD_PRELOAD", "LD_LIBRARY_PATH") and not k.endswith("SAN_OPTIONS")}


def browser(*args, profile):
    """Headless Chromium with args (--dump-dom URL, --screenshot=PATH URL)."""
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           "--user-data-dir=" + profile, "--enable-logging=stderr", "--v=0", "--hide-scrollbars",
                           "--window-size=1400,2400"] + list(args), capture_output=True, text=True, timeout=120,
                          env=BROWSER_ENV)


def body_data(dom):
    """The data-* attributes of the page's body: what the page's script says it drew."""
    body = re.search(r"<body([^>]*)>", dom)
    assert body, dom[:500]
    return {k: v.replace("&quot;", '"') for k, v in re.findall(r'data-([a-z-]+)="([^"]*)"', body.group(1))}
