"""`oomscope` as the wheel's console script, or `python -m oomscope`: runs the native CLI of the
install this package belongs to (the wheel's oomscope/_native/bin/oomscope, or <prefix>/bin/oomscope
of an install tree, four folders above <prefix>/share/oomscope/python/oomscope), with the same
arguments, in this process (exec: signals, the exit status and the terminal are the program's)."""
import os
import sys


def _binary():
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.path.join(here, "_native", "bin", "oomscope"),
                      os.path.join(here, os.pardir, os.pardir, os.pardir, os.pardir, "bin", "oomscope")):
        candidate = os.path.normpath(candidate)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def main():
    exe = _binary()
    if exe is None:
        sys.stderr.write("oomscope: error: the oomscope program is not installed beside this Python package "
                         f"({os.path.dirname(os.path.abspath(__file__))})\n")
        return 2
    os.execv(exe, [exe] + sys.argv[1:])
    return 2  # not reached


if __name__ == "__main__":
    sys.exit(main())
