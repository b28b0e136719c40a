#!/usr/bin/env python3
"""The README's five tasks on the simulated device of tests/fakecuda, for a machine without a
GPU (after `make demo` or `make build`):

    tools/try.py oom|leak|job|fit|live [BUILD_DIR]

  oom    a program that leaks a buffer a step, then asks for more than is left: its OOM report
  leak   a training-style loop that keeps a buffer per step, gated by `oomscope run --check`
  job    four ranks of a job, one runs out of memory, one on the wrong device: the job view
  fit    a program whose memory is 100 MiB + 30 MiB x size: `oomscope fit --verify`
  live   a running loop that leaks: `oomscope top --once` and `oomscope snapshot` while it runs

Each oomscope command is printed before it runs, as you would type it. The programs it needs
are built first where they are missing. Standard library only."""
import glob
import os
import shlex
import signal
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
TASKS = ("oom", "leak", "job", "fit", "live")


class Try:
    def __init__(self, build):
        self.build = os.path.abspath(build)
        self.oomscope = os.path.join(self.build, "bin", "oomscope")
        if not os.path.exists(self.oomscope):
            sys.exit(f"try: {self.oomscope} is missing: run `make demo` (or `make build`) first")
        self.fake = os.path.join(self.build, "fakecuda", "lib")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("OOMSCOPE_", "FAKECUDA_"))}
        self.env.update(FAKECUDA_UNBACKED="1", FAKECUDA_LIB=self.fake)

    def program(self, name):
        path = os.path.join(self.build, "fakecuda", "bin", name)
        if not os.path.exists(path):
            subprocess.run(["cmake", "--build", self.build, "--target", name], check=True, stdout=subprocess.DEVNULL)
        return path

    def out(self, task):
        path = os.path.join(self.build, "try", task)
        for old in glob.glob(os.path.join(path, "*")):
            if os.path.isfile(old):
                os.remove(old)
        os.makedirs(path, exist_ok=True)
        return path

    def show(self, args):
        shown = ["oomscope" if a == self.oomscope else "python3" if a == sys.executable else
                 os.path.relpath(a, ROOT) if a.startswith(ROOT) else a for a in args]
        print("$ " + " ".join(shlex.quote(a) for a in shown), flush=True)

    def oomscope_(self, *args, env=None, expect=(0,)):
        cmd = [self.oomscope, *args]
        self.show(cmd)
        r = subprocess.run(cmd, env=dict(self.env, **(env or {})), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=600)
        sys.stdout.write(r.stdout)
        print(flush=True)
        if r.returncode not in expect:
            sys.exit(f"try: exit status {r.returncode}, expected {expect}")
        return r.stdout

    # -- the tasks

    def oom(self):
        out = self.out("oom")
        # The program writes into what it allocates: memory behind the simulated device's pointers.
        self.oomscope_("run", "-o", out, "--", self.program("leaky_oom_fake"), "8",
                       env={"FAKECUDA_CAPACITY": "8GiB", "FAKECUDA_UNBACKED": "0"}, expect=(1,))
        [report] = glob.glob(os.path.join(out, "oomscope-*-oom.json"))
        self.oomscope_("report", report, "--color", "never")

    def leak(self):
        out = self.out("leak")
        self.oomscope_("run", "-o", out, "--check", "--", self.program("step_loop"), "leaky", "40",
                       env={"FAKECUDA_CAPACITY": "8GiB"}, expect=(1,))

    def job(self):
        out = self.out("job")
        rank_job = self.program("rank_job")
        # As torchrun starts them: four ranks, one GPU each. Rank 2 holds 2 GiB more than the
        # others and then asks for 6 GiB; rank 3 forgot torch.cuda.set_device (device0).
        specs = [("1024", "0", "0"), ("1024", "0", "0"), ("1024", "2048", "6144"), ("1024", "0", "0", "device0")]
        print(f"# four ranks of a job, each under oomscope, writing to {os.path.relpath(out, ROOT)}", flush=True)
        procs = []
        for rank, spec in enumerate(specs):
            env = dict(self.env, LD_PRELOAD=os.path.join(self.build, "lib", "oomscope", "liboomscope.so"),
                       OOMSCOPE_OUTPUT_DIR=out, OOMSCOPE_QUIET="1", FAKECUDA_DEVICES="4", FAKECUDA_CAPACITY="8GiB",
                       RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="4", LOCAL_WORLD_SIZE="4", GROUP_RANK="0",
                       TORCHELASTIC_RUN_ID="try-job")
            procs.append(subprocess.Popen([rank_job, *spec], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, text=True))
        for p in procs:
            while "ready" not in p.stdout.readline():
                pass
        procs[2].communicate("go\n", timeout=120)  # rank 2 runs out of memory and exits 1
        for p in procs[:2] + procs[3:]:
            p.send_signal(signal.SIGTERM)  # torchrun then ends the other ranks
            p.wait(timeout=120)
        self.oomscope_("report", out, "--color", "never")

    def fit(self):
        out = self.out("fit")
        program = os.path.join(ROOT, "tests", "integration", "programs", "fit_synthetic.py")
        self.oomscope_("fit", "-o", out, "--verify", "--", sys.executable, program, "arg", "{}",
                       env={"FAKECUDA_CAPACITY": "1GiB"})

    def live(self):
        out = self.out("live")
        env = dict(self.env, LD_PRELOAD=os.path.join(self.build, "lib", "oomscope", "liboomscope.so"),
                   OOMSCOPE_OUTPUT_DIR=out, OOMSCOPE_QUIET="1", FAKECUDA_CAPACITY="16GiB")
        proc = subprocess.Popen([self.program("live_loop"), "leak"], env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            while "ready" not in proc.stdout.readline():
                pass
            print(f"# a training loop that keeps 1 MiB a step runs as pid {proc.pid}; looking at it:", flush=True)
            # The leak verdict needs a warm-up and some steps after it: wait for 20 step samples.
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                frame = subprocess.run([self.oomscope, "top", "--once", str(proc.pid)], capture_output=True, text=True,
                                       timeout=60).stdout
                if "LEAK" in frame:
                    break
            self.oomscope_("top", "--once", str(proc.pid))
            self.oomscope_("snapshot", str(proc.pid), "--events", "100", "-o", out)
        finally:
            proc.communicate("stop\n", timeout=120)


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in TASKS:
        sys.exit(__doc__)
    t = Try(sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "build"))
    getattr(t, sys.argv[1])()


if __name__ == "__main__":
    main()
