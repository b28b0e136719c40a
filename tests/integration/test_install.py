"""How users get oomscope, each tried as a user would: `make install`'s tree (stripped binaries,
debug files by build id, examples that keep their symbols), the wheel pip-installed offline into
fresh virtual environments (the CLI on PATH, the preload, `import oomscope`, the pytest plugin by
its entry point), and the Debian package installed into a scratch root with dpkg. Each then runs
the demo's program on the fake CUDA and reads its report. Sanitizer builds are not packaged:
skipped there."""
import glob
import os
import re
import subprocess
import sys

import pytest

import oomscope_testlib as t

pytestmark = pytest.mark.skipif(bool(os.environ.get("OOMSCOPE_TEST_PRELOAD_FIRST")),
                                reason="sanitizer builds are not installed or packaged")

MiB = 1 << 20


def run(cmd, **kw):
    kw.setdefault("timeout", 300)
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert r.returncode == 0, (cmd, r.stdout, r.stderr)
    return r


def build_id(path):
    out = run(["readelf", "-n", path]).stdout
    return out.split("Build ID:")[1].split()[0]


def sections(path):
    return run(["readelf", "-S", "-W", path]).stdout


def demo(build, oomscope, tmp_path, env=None):
    """The demo's program under this oomscope: its OOM report, rendered, with the program's
    source lines read by the libdw this install tree bundles (the loader's log says which)."""
    out = tmp_path / "demo"
    log = tmp_path / "ld-debug"
    r = subprocess.run([oomscope, "run", "-o", str(out), "--", build.program("leaky_oom_fake"), "8"],
                       capture_output=True, text=True, timeout=120,
                       env=dict(env or build.env(), FAKECUDA_CAPACITY="8GiB", LD_DEBUG="files",
                                LD_DEBUG_OUTPUT=str(log)))
    assert r.returncode != 0 and "report written" in r.stderr, r.stderr  # it runs out of memory on purpose
    [oom] = glob.glob(str(out / "oomscope-*-oom.json"))
    text = run([oomscope, "report", oom, "--color", "never"]).stdout
    assert "OUT OF MEMORY on device 0" in text and "leak_step_buffer" in text, text
    assert re.search(r"leak_step_buffer\(.*\(leaky_oom_fake\.cpp:\d+, ", text), text
    loaded = set()
    for path in glob.glob(str(log) + ".*"):
        loaded |= set(re.findall(r"file=(\S*/libdw\.so\.1) \[0\];\s+dynamically loaded by (\S+)", open(path).read()))
    assert loaded, "libdw was not loaded"
    for libdw, by in loaded:
        assert os.path.dirname(libdw) == os.path.dirname(by), (libdw, by)  # beside the preload that loaded it
        assert by.endswith("/lib/oomscope/liboomscope.so") and not by.startswith(build.dir + "/"), by
    return text


def test_make_install_gives_stripped_binaries_with_their_debug_files(build, tmp_path):
    prefix = tmp_path / "prefix"
    run(["cmake", "--install", build.dir, "--prefix", str(prefix)])
    cli, preload = prefix / "bin" / "oomscope", prefix / "lib" / "oomscope" / "liboomscope.so"
    assert cli.stat().st_size < 12 * MiB, cli.stat().st_size
    for binary in (cli, preload):
        assert ".debug_info" not in sections(str(binary)), binary
        assert ".gnu_debuglink" in sections(str(binary)), binary
        ident = build_id(str(binary))
        debug = prefix / "lib" / "debug" / ".build-id" / ident[:2] / (ident[2:] + ".debug")
        assert debug.is_file() and ".debug_info" in sections(str(debug)), debug
    # The examples keep their symbol tables: their reports name static functions.
    for example in glob.glob(str(prefix / "share" / "oomscope" / "examples" / "leaky_oom*")):
        assert ".symtab" in sections(example), example
    assert (prefix / "lib" / "oomscope" / "libunwind.so.8").is_file()
    assert (prefix / "share" / "oomscope" / "python" / "sitecustomize.py").is_file()
    demo(build, str(cli), tmp_path)


@pytest.fixture(scope="module")
def wheel(build, tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    r = run([os.path.join(build.source, "tools", "make_wheel.sh"), build.dir, str(out), sys.executable])
    [path] = glob.glob(str(out / "oomscope-*.whl"))
    return path


def venv(tmp_path, name, wheel_path, system_site_packages=False):
    where = tmp_path / name
    run([sys.executable, "-m", "venv", *(["--system-site-packages"] if system_site_packages else []), str(where)])
    run([str(where / "bin" / "python"), "-m", "pip", "install", "--no-index", "--no-deps", "--no-cache-dir", "-q",
         wheel_path])
    return where


def test_the_wheel_is_tagged_for_the_glibc_its_binaries_need(build, wheel):
    name = os.path.basename(wheel)
    tag = name[:-len(".whl")].split("-")[-3:]
    assert tag[:2] == ["py3", "none"], name
    assert tag[2].startswith("manylinux_2_") and tag[2].endswith("_x86_64"), name
    # The newest glibc symbol version of the CLI and the preload is the tag's, no newer.
    versions = set()
    for binary in (os.path.join(build.dir, "bin", "oomscope"), build.preload):
        for word in run(["objdump", "-T", binary]).stdout.split():
            if word.startswith("(GLIBC_2.") or word.startswith("GLIBC_2."):
                versions.add(int(word.strip("()").split(".")[1]))
    assert tag[2] == f"manylinux_2_{max(versions)}_x86_64", (name, max(versions))


def test_the_wheel_alone_gives_the_cli_the_preload_and_the_adapter(build, wheel, tmp_path):
    # A virtual environment with nothing but the wheel in it (no system site-packages).
    env_dir = venv(tmp_path, "bare", wheel)
    oomscope = str(env_dir / "bin" / "oomscope")
    assert os.path.isfile(oomscope)
    version = run([oomscope, "--version"]).stdout.strip()
    assert version and version[0].isdigit(), version
    text = demo(build, oomscope, tmp_path)
    assert "(simulated GPU)" in text
    # The adapter: importable, and loaded under `oomscope run`, also by an interpreter that is not
    # the environment's (the sitecustomize finds the wheel's package).
    probe = "import oomscope, sys; print(oomscope.loaded(), oomscope.__file__)"
    for python in (str(env_dir / "bin" / "python"), sys.executable):
        r = run([oomscope, "run", "-o", str(tmp_path / "probe"), "--", python, "-c", probe], env=build.env())
        loaded, where = r.stdout.split()
        assert loaded == "True" and where.startswith(str(env_dir)), (python, r.stdout)
    # The pages the commands' --help names, and the bundled libraries' copyright files.
    native = glob.glob(str(env_dir / "lib" / "python3*" / "site-packages" / "oomscope" / "_native"))[0]
    help_page = run([oomscope, "report", "--help"]).stdout.strip().splitlines()[-1]
    assert os.path.isfile(os.path.join(native, "share", "doc", "oomscope", "commands", "report.md")), help_page
    third = sorted(os.listdir(os.path.join(native, "share", "doc", "oomscope", "third-party")))
    assert {"libdw1.copyright", "libelf1.copyright", "libunwind8.copyright"} <= set(third), third
    for lib in os.listdir(os.path.join(native, "lib", "oomscope")):
        if lib != "liboomscope.so":
            real = os.path.basename(os.path.realpath("/lib/x86_64-linux-gnu/" + lib))
            package_of = run(["dpkg-query", "-S", "*/x86_64-linux-gnu/" + real]).stdout
            assert package_of.split(":")[0] + ".copyright" in third, (lib, package_of, third)
    # `python -m oomscope` is the CLI too.
    assert run([str(env_dir / "bin" / "python"), "-m", "oomscope", "--version"]).stdout.strip() == version
    # Nothing else was installed, and the wheel asks for nothing.
    listed = run([str(env_dir / "bin" / "python"), "-m", "pip", "list", "--format", "freeze"]).stdout
    assert {line.split("==")[0] for line in listed.split()} <= {"oomscope", "pip", "setuptools"}, listed
    meta = run([str(env_dir / "bin" / "python"), "-c",
                "import importlib.metadata as m; d = m.distribution('oomscope'); print(d.requires)"]).stdout
    assert meta.strip() == "None", meta


# The plugin test's own program (over, under, a leak and none): here through the wheel.
from test_pytest_plugin import TESTS as PLUGIN_TESTS  # noqa: E402


def test_the_wheels_pytest_plugin_is_found_by_its_entry_point(build, wheel, tmp_path):
    # pytest itself from the system (no PyPI here); the plugin from the wheel, with no -p.
    env_dir = venv(tmp_path, "withpytest", wheel, system_site_packages=True)
    python, oomscope = str(env_dir / "bin" / "python"), str(env_dir / "bin" / "oomscope")
    markers = run([python, "-m", "pytest", "--markers", "-p", "no:cacheprovider"], cwd=str(tmp_path)).stdout
    assert "limit_gpu_memory(size)" in markers, markers
    (tmp_path / "test_budget.py").write_text(PLUGIN_TESTS)
    env = dict(build.env(), FAKECUDA_LIB=build.fake_lib, LD_LIBRARY_PATH=build.fake_lib)
    env.pop("PYTEST_ADDOPTS", None)
    r = subprocess.run([oomscope, "run", "-o", str(tmp_path / "out"), "--", python, "-m", "pytest", "-q", "-rA",
                        "-p", "no:cacheprovider", "test_budget.py"], capture_output=True, text=True, timeout=300,
                       cwd=str(tmp_path), env=env)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAILED test_budget.py::test_over" in r.stdout and "PASSED test_budget.py::test_under" in r.stdout
    assert "peak GPU memory 128.00 MiB exceeds limit_gpu_memory 64.00 MiB" in r.stdout, r.stdout


def test_the_debian_package_installs_into_a_scratch_root_and_runs_the_demo(build, tmp_path):
    dist = tmp_path / "dist"
    run(["cpack", "-B", str(dist)], cwd=build.dir)
    [main] = glob.glob(str(dist / "oomscope_*.deb"))
    [dbg] = glob.glob(str(dist / "oomscope-dbg_*.deb"))
    fields = run(["dpkg-deb", "-f", main, "Package", "Depends"]).stdout
    assert "Package: oomscope" in fields and "libc6 (>= 2." in fields, fields
    # Installed by dpkg into a root of its own (its database there: libc6 is the system's).
    root = tmp_path / "root"
    (root / "var" / "lib" / "dpkg" / "info").mkdir(parents=True)
    (root / "var" / "lib" / "dpkg" / "updates").mkdir()
    (root / "var" / "lib" / "dpkg" / "status").write_text("")
    run(["dpkg", f"--root={root}", "--force-not-root", "--force-depends", "--force-script-chrootless",
         "--log=/dev/null", "-i", main, dbg])
    listed = run(["dpkg", f"--root={root}", "-l", "oomscope", "oomscope-dbg"]).stdout
    assert listed.count("\nii  oomscope") == 2, listed
    oomscope = root / "usr" / "bin" / "oomscope"
    assert (root / "usr" / "lib" / "oomscope" / "liboomscope.so").is_file()
    demo(build, str(oomscope), tmp_path)
    # The adapter from /usr/share/oomscope/python, under the system's Python.
    r = run([str(oomscope), "run", "-o", str(tmp_path / "probe"), "--", sys.executable, "-c",
             "import oomscope; print(oomscope.loaded(), oomscope.__file__)"], env=build.env())
    loaded, where = r.stdout.split()
    assert loaded == "True" and where == str(root / "usr" / "share" / "oomscope" / "python" / "oomscope" / "__init__.py")
    # The -dbg part holds the debug file of each stripped binary, by its build id.
    for binary in (oomscope, root / "usr" / "lib" / "oomscope" / "liboomscope.so"):
        ident = build_id(str(binary))
        assert (root / "usr" / "lib" / "debug" / ".build-id" / ident[:2] / (ident[2:] + ".debug")).is_file()
    # The dependencies it declares are met by this system (apt resolves them, installing nothing).
    sim = subprocess.run(["apt-get", "install", "-s", "-q", main], capture_output=True, text=True, timeout=120)
    assert sim.returncode == 0 and "Inst oomscope" in sim.stdout, sim.stdout + sim.stderr
