"""Paths of the build under test (OOMSCOPE_BUILD_DIR, set by CTest) and helpers."""
import os
import subprocess
import sys

import pytest

SOURCE = os.environ.get("OOMSCOPE_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BUILD = os.environ.get("OOMSCOPE_BUILD_DIR", os.path.join(SOURCE, "build"))
sys.path.insert(0, os.path.join(SOURCE, "tests", "pylib"))

import oomscope_testlib  # noqa: E402,F401

# Under `make test-asan` the preload and the programs are ASan builds: the sanitizer's runtime
# goes first in every LD_PRELOAD (OOMSCOPE_TEST_PRELOAD_FIRST), and into this process's
# environment for the commands that inherit it (`oomscope run` puts the preload before it).
# ASan's dlopen interceptor makes the runtime, not the program, the caller of dlopen: the
# programs' RUNPATH no longer finds the fake libcuda, so the folder goes on the library path.
PRELOAD_FIRST = os.environ.get("OOMSCOPE_TEST_PRELOAD_FIRST", "")
if PRELOAD_FIRST:
    os.environ["LD_PRELOAD"] = PRELOAD_FIRST
    fake_lib = os.path.join(BUILD, "fakecuda", "lib")
    os.environ["LD_LIBRARY_PATH"] = fake_lib + (":" + os.environ["LD_LIBRARY_PATH"] if os.environ.get("LD_LIBRARY_PATH") else "")


class Build:
    def __init__(self):
        self.dir = BUILD
        self.source = SOURCE
        self.oomscope = os.path.join(BUILD, "bin", "oomscope")
        self.preload = os.path.join(BUILD, "lib", "oomscope", "liboomscope.so")
        self.fake_lib = os.path.join(BUILD, "fakecuda", "lib")
        self.worker_lib = os.path.join(BUILD, "fakecuda", "bin", "libnative_worker.so")

    def program(self, name):
        return os.path.join(self.dir, "fakecuda", "bin", name)

    def env(self, **extra):
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        env.update({k: str(v) for k, v in extra.items()})
        if PRELOAD_FIRST:
            env["LD_PRELOAD"] = PRELOAD_FIRST + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
        return env

    def preloaded(self, cmd, outdir, **env):
        """Runs cmd with LD_PRELOAD set directly (no CLI)."""
        return subprocess.run(cmd, env=self.env(LD_PRELOAD=self.preload, OOMSCOPE_OUTPUT_DIR=outdir, **env),
                              capture_output=True, text=True, timeout=120, cwd=outdir)


@pytest.fixture(scope="session")
def build():
    b = Build()
    assert os.path.exists(b.oomscope), f"build first: {b.oomscope} is missing"
    return b
