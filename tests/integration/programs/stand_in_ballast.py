"""Stands in for tests/gpu/scenarios/hog.py where each process has its own simulated device (the
fake CUDA): holds nothing, says it is ready as the hog does, ends when stdin closes."""
import sys

print(f"ready {int(float(sys.argv[1]) * (1 << 30))}", flush=True)
sys.stdin.read()
