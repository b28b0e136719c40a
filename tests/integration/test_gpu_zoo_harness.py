"""The GPU suite's model zoo (tests/gpu/suite/zoo.py) runs rarely, on a GPU lent for minutes:
its harness is run here on the fake CUDA so that a bug in it costs no device time. The trial is
fit_synthetic.py (100 MiB + 30 MiB·size, the fake device's context 32 MiB), the ballast a
stand-in (each process has its own simulated device). What it checks is the harness: fit, the
search and the ballast probes ran and agree where the arithmetic says they must, and the rows'
JSON and the table are written. The scenario itself fails here, as it must: the stand-in
ballast holds nothing, so beside it the rehearsed answer is not the real card's. (Whether fit
takes a quarter of the search's time is not asserted: that depends on the machine's load.)"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
GPU = os.path.join(HERE, "..", "gpu")


def test_the_zoo_harness_on_the_fake_cuda(build, tmp_path):
    env = build.env(FAKECUDA_CAPACITY="1GiB", FAKECUDA_LIB=build.fake_lib,
                    OOMSCOPE_ZOO_TRIAL=os.path.join(HERE, "programs", "fit_synthetic.py"),
                    OOMSCOPE_ZOO_HOG=os.path.join(HERE, "programs", "stand_in_ballast.py"),
                    OOMSCOPE_ZOO_ROWS="arg:0.5,arg:0.75,kink:1", OOMSCOPE_ZOO_BUDGET_GIB="3", OOMSCOPE_ZOO_DEADLINE="600")
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, os.path.join(GPU, "gpu_suite.py"), build.dir, str(out), "fit_zoo"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 1 and "FAIL  fit_zoo" in p.stdout, p.stdout + p.stderr
    # The stand-in holds nothing: beside it each trial has its whole simulated device (29 fits).
    assert "rehearsed 12, beside the ballast 29" in p.stdout, p.stdout
    for card, largest in (("0.5", 12), ("0.75", 21)):  # (card − 32 − 100) / 30 MiB
        row = json.load(open(out / "fit_zoo" / f"arg-{card}.json"))
        assert row["fit"]["largest_size"] == largest and row["search"]["truth"] == largest, row
        sizes = [probe["size"] for probe in row["search"]["probes"]]
        assert sizes[:3] == [2, 4, 8] and largest in sizes and largest + 1 in sizes, sizes  # doubling, then bisection
        # Out of sample: sizes the search ran and fit did not, where the line is exact.
        ran = {p["size"] for p in row["points"] if p["where"] == "fitted"}
        outside = [p for p in row["points"] if p["where"] != "fitted" and p["size"] not in ran]
        assert outside and all(abs(p["relative"]) < 1e-9 for p in outside), row["points"]
        assert [probe["size"] for probe in row["ballast"]["probes"]][:1] == [largest], row["ballast"]
    kink = json.load(open(out / "fit_zoo" / "kink-1.json"))  # 100 + max(100, 60·n): size 1 left out
    assert kink["fit"]["largest_size"] == kink["search"]["truth"] == 14, kink["fit"]
    assert [s["size"] for s in kink["fit"]["sizes"] if s.get("left_out")] == [1]
    table = open(out / "fit_zoo" / "table.md").read()
    assert table.count("\n| arg |") == 2 and table.count("\n| kink |") == 1, table
    # The replay of fit's model (suite.zoo replay, a transcription of it in Python) answers as
    # fit did where the peaks are lines: it follows fit's choice of sizes and its model.
    replay = subprocess.run([sys.executable, "-m", "suite.zoo", "replay", str(out)], capture_output=True, text=True,
                            cwd=GPU, timeout=60)
    assert replay.returncode == 0, replay.stderr
    rows = [line.split(" | ") for line in replay.stdout.splitlines() if line.startswith(("| arg", "| kink"))]
    assert [(r[0], r[3], r[4]) for r in rows] == [("| arg", "12", "12"), ("| arg", "21", "21"), ("| kink", "14", "14")], \
        replay.stdout
    assert rows[2][6] == "1+2+4 then 8+16" and rows[2][7] == "1", rows[2]
    again = subprocess.run([sys.executable, "-m", "suite.zoo", "table", str(out)], capture_output=True, text=True,
                           cwd=GPU, timeout=60)
    assert again.returncode == 0 and again.stdout.startswith(table.strip()), again.stdout + again.stderr


def test_an_edge_of_more_than_one_size_is_judged_below_its_first_failure():
    # ResNet-50 with checkpointing under 24 GiB on the H100 (tests/gpu/fit_data/h100-3079961):
    # --verify's walk found 624 training and 625 not, the search 664 training and 672 not. The
    # answer 595 is judged against 624 (-4.6 %), not the search's 664 (-10.4 %), and the search
    # cut above it by the deadline does not matter.
    sys.path.insert(0, GPU)
    try:
        from suite import zoo
    finally:
        sys.path.remove(GPU)
    with open(os.path.join(GPU, "fit_data", "h100-3079961", "resnet50-ckpt-24.json")) as f:
        row = json.load(f)
    assert zoo.safe_truth(row) == 624
    assert "resnet50-ckpt" not in zoo.verdict([row]).replace("the bar holds on every row", "")
    assert "every size to 624 trains, 625 does not" in zoo.table([row]) and "| -4.6% |" in zoo.table([row])
    # Where every failure is above the search's truth, the edge is one size.
    with open(os.path.join(GPU, "fit_data", "h100-3079961", "resnet50-accum-24.json")) as f:
        one = json.load(f)
    assert zoo.safe_truth(one) is None and "-3.6%" in zoo.table([one])
    # An answer far below the first failure is still a miss.
    row["fit"]["largest_size"] = 500
    row["fit"]["verify"][0]["size"] = 500
    assert "resnet50-ckpt: 500 is -19.9% from the truth 624" in zoo.verdict([row])
