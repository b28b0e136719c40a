"""The other frameworks: CuPy with its memory pool, JAX with its preallocation."""


from .common import check, compact, delta_line, MiB, t, workload


def scenario_cupy(ctx):
    """(e) CuPy with its default memory pool."""
    _, facts, rep = workload(ctx, "cupy", "cupy")
    row = t.memory_row(rep, 0)
    check(row["tracked_bytes"] == facts["pool_total"], f"tracked {row['tracked_bytes']} != pool total {facts['pool_total']}")
    ok, line = delta_line(facts, row["tracked_bytes"])
    check(ok, line)
    check(row["by_source"].get("cupy", 0) == row["tracked_bytes"], f"by_source {row['by_source']}")
    return f"{line}; == CuPy pool total_bytes; by_source {compact(row['by_source'])}"


def scenario_jax(ctx):
    """(f) JAX with its default preallocation: the big XLA allocation owned by jax."""
    _, facts, rep = workload(ctx, "jax", "jax")
    row = t.memory_row(rep, 0)
    ok, line = delta_line(facts, row["tracked_bytes"])
    check(ok, line)
    top = rep["sites"][0]
    check(top["bytes"] >= facts["total"] // 2, f"top site {top['bytes']}")
    check(row["by_source"].get("jax", 0) >= top["bytes"], f"by_source {row['by_source']}")
    return f"{line}; largest allocation {top['bytes'] / MiB:.0f} MiB owned by jax; by_source {compact(row['by_source'])}"


SCENARIOS = [
    ("cupy", scenario_cupy),
    ("jax", scenario_jax),
]
