"""A process that keeps a file mapped under the name a flight file of its own would have
(oomscope-HOST-PID.flight in DIR), as the preload keeps its flight file, with the bytes of
SOURCE: what `oomscope metrics` finds scanning a folder when a running process's file is not
one it can read. Usage: maps_flight_file.py DIR SOURCE; prints "ready", ends when stdin closes."""
import mmap
import os
import sys

path = os.path.join(sys.argv[1], f"oomscope-host-{os.getpid()}.flight")
with open(sys.argv[2], "rb") as src, open(path, "wb") as f:
    f.write(src.read())
fd = os.open(path, os.O_RDONLY)
mapped = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
print("ready", flush=True)
sys.stdin.read()
