"""Native frames by file and line: read from DWARF when the report is written (elfutils' libdw),
from the program itself or from its separate debug file (by .gnu_debuglink beside it or in its
.debug/ folder, by build id under the debug folders), never from a debug file of another build;
and shown by `report`, the exports and `diff`."""
import json
import os
import pickle
import re
import shutil
import subprocess

import oomscope_testlib as t

FUNCTIONS = ("load_weights", "allocate_activations", "leak_step_buffer", "run_final_step")


def call_lines(source):
    """The line of each function's cudaMalloc call in the example's source, read from the file."""
    lines = open(source).read().splitlines()
    found, current = {}, None
    for number, text in enumerate(lines, 1):
        m = re.search(r"\b(" + "|".join(FUNCTIONS) + r")\(", text)
        if m and "NOINLINE" in text:
            current = m.group(1)
        if current and "cudaMalloc(" in text and current not in found:
            found[current] = number
    assert set(found) == set(FUNCTIONS), found
    return found


def frames_named(rep, function):
    return [f for s in rep["stacks"] for f in s["frames"] if f["kind"] == "native" and function in f["symbol"]]


def run(build, program, outdir, **env):
    r = t.run_oomscope(build.oomscope, [program, "8"], str(outdir), env=dict(FAKECUDA_CAPACITY="1GiB", **env))
    assert r.returncode == 1, r.stderr
    return r.only("oom")


def source_of(build):
    return os.path.join(build.dir, "gen", "leaky_oom_fake.cpp")  # what leaky_oom_fake is compiled from


def test_frames_carry_the_call_line_from_dwarf(build, tmp_path):
    rep = run(build, build.program("leaky_oom_fake"), tmp_path)
    expected = call_lines(source_of(build))
    for function, line in expected.items():
        frames = frames_named(rep, function)
        assert frames, function
        for f in frames:
            assert os.path.realpath(f["file"]) == os.path.realpath(source_of(build)), f
            assert f["line"] == line, (function, f)
    # A frame without line tables has neither key (the fake runtime is built with -g, the
    # dynamic loader's entry _start without).
    starts = frames_named(rep, "_start")
    assert starts and all("file" not in f and "line" not in f for f in starts if f["symbol"] == "_start")

    # OOMSCOPE_SOURCE_LINES=0: no lines anywhere, libdw never loaded; the names unchanged.
    off = run(build, build.program("leaky_oom_fake"), tmp_path / "off", OOMSCOPE_SOURCE_LINES="0")
    assert not [f for s in off["stacks"] for f in s["frames"] if f["kind"] == "native" and "line" in f]
    assert frames_named(off, "leak_step_buffer")


def test_a_separate_debug_file_by_debuglink_and_not_another_builds(build, tmp_path):
    original = build.program("leaky_oom_fake")
    expected = call_lines(source_of(build))
    for layout in ("beside", ".debug"):
        folder = tmp_path / layout.strip(".")
        folder.mkdir()
        program = folder / "leaky"
        debug_dir = folder if layout == "beside" else folder / ".debug"
        debug_dir.mkdir(exist_ok=True)
        debug = debug_dir / "leaky.debug"
        subprocess.run(["objcopy", "--only-keep-debug", original, str(debug)], check=True)
        subprocess.run(["objcopy", "--strip-debug", "--add-gnu-debuglink=" + str(debug), original, str(program)],
                       check=True)
        stripped = subprocess.run(["readelf", "-S", str(program)], capture_output=True, text=True).stdout
        assert ".debug_line" not in stripped and ".gnu_debuglink" in stripped
        rep = run(build, str(program), folder / "out")
        f = frames_named(rep, "leak_step_buffer")[0]
        assert f["line"] == expected["leak_step_buffer"], (layout, f)

        # The debug file of another build of the same name (its build id differs: the note's
        # last byte flipped in the debug file): no lines, the function names still there.
        data = bytearray(debug.read_bytes())
        ident = bytes.fromhex(module_build_id(rep, "leaky"))
        at = data.find(ident)
        assert at > 0
        data[at + len(ident) - 1] ^= 0xFF
        debug.write_bytes(bytes(data))
        rep = run(build, str(program), folder / "out-wrong")
        f = frames_named(rep, "leak_step_buffer")[0]
        assert "line" not in f and "file" not in f, f
        assert "leak_step_buffer" in f["symbol"]


def module_build_id(rep, name):
    return [m for m in rep["modules"] if os.path.basename(m["path"]) == name][0]["build_id"]


def test_report_exports_and_diff_show_the_lines(build, tmp_path):
    rep_path = None
    for i, steps in enumerate(("4", "8")):
        r = t.run_oomscope(build.oomscope, [build.program("leaky_oom_fake"), steps], str(tmp_path / str(i)),
                           env={"FAKECUDA_CAPACITY": "1GiB"})
        rep_path = r.reports["oom"][0] if i == 0 else (rep_path, r.reports["oom"][0])
    before, after = rep_path
    line = call_lines(source_of(build))["leak_step_buffer"]
    where = "leaky_oom_fake.cpp:%d" % line

    text = subprocess.run([build.oomscope, "report", after], capture_output=True, text=True).stdout
    assert re.search(r"leak_step_buffer\(.*\(" + re.escape(where) + r", leaky_oom_fake\+0x", text), text

    folded = tmp_path / "f.folded"
    subprocess.run([build.oomscope, "export", after, "-f", "folded", "-o", str(folded)], check=True)
    assert "leak_step_buffer(std::vector<void*, std::allocator<void*> >&, unsigned long) (%s)" % where in folded.read_text()

    snap_path = tmp_path / "s.pickle"
    subprocess.run([build.oomscope, "export", after, "-f", "torch-snapshot", "-o", str(snap_path)], check=True)
    snap = pickle.loads(snap_path.read_bytes())
    frames = [fr for s in snap["segments"] for b in s["blocks"] for fr in b["frames"] if "leak_step_buffer" in fr["name"]]
    assert frames and all(fr["line"] == line and fr["filename"].endswith("leaky_oom_fake.cpp") for fr in frames)

    diff = subprocess.run([build.oomscope, "diff", before, after], capture_output=True, text=True)
    assert diff.returncode == 0, diff.stderr
    assert where in diff.stdout, diff.stdout

    html = tmp_path / "r.html"
    subprocess.run([build.oomscope, "html", after, "-o", str(html)], check=True)
    assert where in html.read_text()
