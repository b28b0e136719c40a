"""The other frameworks: CuPy with its memory pool, JAX with its preallocation."""


from .common import check, compact, delta_line, false_alarms, MiB, peak_of, t, workload


def scenario_cupy(ctx):
    """(e) CuPy with its default memory pool."""
    run, facts, rep = workload(ctx, "cupy", "cupy")
    false_alarms(ctx, run)
    row = t.memory_row(rep, 0)
    check(row["tracked_bytes"] == facts["pool_total"], f"tracked {row['tracked_bytes']} != pool total {facts['pool_total']}")
    ok, line = delta_line(facts, row["tracked_bytes"])
    check(ok, line)
    check(row["by_source"].get("cupy", 0) == row["tracked_bytes"], f"by_source {row['by_source']}")
    return f"{line}; == CuPy pool total_bytes; by_source {compact(row['by_source'])}; exit report: no growth/cache_churn"


def scenario_jax(ctx):
    """(f) JAX with its default preallocation: the big XLA allocation owned by jax. Issue 21: the
    exit report (XLA's pool already handed back) still says what made the peak: jax, >= 90 %;
    and it warns of neither growth nor cache churn."""
    run, facts, rep = workload(ctx, "jax", "jax")
    row = t.memory_row(rep, 0)
    ok, line = delta_line(facts, row["tracked_bytes"])
    check(ok, line)
    top = rep["sites"][0]
    check(top["bytes"] >= facts["total"] // 2, f"top site {top['bytes']}")
    check(row["by_source"].get("jax", 0) >= top["bytes"], f"by_source {row['by_source']}")
    exit_rep = false_alarms(ctx, run)
    peak = peak_of(exit_rep)
    share = peak["by_source"].get("jax", 0) / peak["bytes"]
    check(share >= 0.9, f"exit report's peak: jax {share:.1%} of {peak['bytes'] / MiB:.0f} MiB: {peak['by_source']}")
    now = t.memory_row(exit_rep, 0)["tracked_bytes"]
    return (f"{line}; largest allocation {top['bytes'] / MiB:.0f} MiB owned by jax; by_source {compact(row['by_source'])}; "
            f"exit report: tracked {now / MiB:.0f} MiB now, peak {peak['bytes'] / MiB:.0f} MiB of which jax {share:.1%}, "
            f"no growth/cache_churn")


SCENARIOS = [
    ("cupy", scenario_cupy),
    ("jax", scenario_jax),
]
