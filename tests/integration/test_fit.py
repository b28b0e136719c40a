"""oomscope fit (issue 23) on the fake CUDA (1 GiB device, 32 MiB context): a program whose
memory is 100 MiB + 30 MiB·size."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20
PROGRAM = os.path.join(HERE, "programs", "fit_synthetic.py")


def fit(build, tmp_path, *args, command=("arg", "{}"), program=PROGRAM, **env_extra):
    env = build.env(**dict({"FAKECUDA_CAPACITY": "1GiB", "FAKECUDA_LIB": build.fake_lib}, **env_extra))
    return subprocess.run([build.oomscope, "fit", "-o", str(tmp_path / "fit")] + list(args) +
                          ["--", sys.executable, program] + list(command),
                          capture_output=True, text=True, env=env, timeout=300)


def test_predicts_the_exact_largest_size(build, tmp_path):
    # 32 + 100 + 30·n <= 1024 MiB: n = 29 (30 would need 1032 MiB).
    p = fit(build, tmp_path, "--format", "json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["largest_size"] == 29
    # 1, 2 and 4 at once, and no more: 29 is less than 8x 4 (a second round at a quarter of it,
    # 7, would not halve the extrapolation).
    assert [s["size"] for s in out["sizes"]] == [1, 2, 4] and all(s["fits"] for s in out["sizes"])
    assert out["rounds"] == [[1, 2, 4]] and out["rerun_alone"] == []
    assert out["context_bytes"] == 32 << 20 and out["capacity_bytes"] == 1 << 30
    assert out["predicted_bytes"] == (32 + 100 + 29 * 30) << 20
    assert out["margin_bytes"] == (1024 - 32 - 100 - 29 * 30) << 20
    assert out["largest_measured_size"] == 4
    # The model against each run it was fitted to: by source, and its residual (exact here).
    for s in out["sizes"]:
        assert s["measured_bytes"] == s["peak_bytes"] == (100 + 30 * s["size"]) << 20, s
        assert s["predicted_bytes"] == s["measured_bytes"] and abs(s["relative_residual"]) < 1e-9
        assert sum(s["measured_by_source"].values()) == s["measured_bytes"]
        assert sum(s["predicted_by_source"].values()) == s["predicted_bytes"]
    text = fit(build, tmp_path / "text")
    assert "Largest size that fits device 0 (1.00 GiB): 29" in text.stdout, text.stdout + text.stderr
    assert "the largest size measured" not in text.stdout  # 29 is within 8x of 7
    assert "(sizes 1+2+4;" in text.stdout, text.stdout
    # A card with room for 132: then an eighth and a quarter of it (16 and 33), together.
    big = fit(build, tmp_path / "big", "--format", "json", FAKECUDA_CAPACITY="4GiB")
    assert big.returncode == 0, big.stderr
    big = json.loads(big.stdout)
    assert big["largest_size"] == 132 and big["rounds"] == [[1, 2, 4], [16, 33]], big["rounds"]
    far = fit(build, tmp_path / "far", "--sizes", "1,2,3")
    assert ": 29" in far.stdout and "9x the largest size measured" in far.stdout, far.stdout


def test_the_runs_of_a_round_go_at_the_same_time(build, tmp_path):
    # Sizes 1 and 2 wait for each other: run one after the other, neither would end.
    meet = tmp_path / "meet"
    meet.mkdir()
    os.mkfifo(meet / "fifo")
    p = fit(build, tmp_path, "--format", "json", FIT_MEET=str(meet))
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["largest_size"] == 29


def test_a_run_out_of_memory_beside_another_is_run_again_alone(build, tmp_path):
    meet = tmp_path / "meet"
    meet.mkdir()
    os.mkfifo(meet / "fifo")
    p = fit(build, tmp_path, "--format", "json", FIT_MEET=str(meet), FIT_CROWD="1")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert len(out["rerun_alone"]) == 1 and out["rerun_alone"][0] in (1, 2)
    assert out["largest_size"] == 29 and all(s["fits"] for s in out["sizes"])


def test_the_size_from_the_environment_and_verify(build, tmp_path):
    p = fit(build, tmp_path, "--verify", command=("env",))
    assert p.returncode == 0, p.stdout + p.stderr
    assert ": 29" in p.stdout
    assert "verify: size 29 fits (peak 970.00 MiB, the model's 970.00 MiB, +0.0 %)" in p.stdout, p.stdout
    assert "verify: size 30 runs out of memory" in p.stdout
    assert "the prediction holds" in p.stdout
    j = fit(build, tmp_path / "json", "--verify", "--format", "json", command=("env",))
    verify = json.loads(j.stdout)["verify"]
    assert verify[0]["size"] == 29 and verify[0]["measured_bytes"] == verify[0]["predicted_bytes"] == 970 << 20
    assert "measured_bytes" not in verify[1]  # size 30 ran out of memory: nothing measured to compare


def test_verify_finds_the_size_that_fits_where_the_prediction_does_not_hold(build, tmp_path):
    # A 200 MiB workspace from size 20 on: 1, 2 and 4 say 29, which runs out of memory; --verify
    # walks down 1, 2, 4 (28, 26 out of memory, 22 fits), then bisects (24 no, 23 yes): 23,
    # 32 + 100 + 690 + 200 = 1022 MiB.
    p = fit(build, tmp_path, "--verify", "--format", "json", command=("late", "{}"))
    assert p.returncode == 1, p.stdout + p.stderr
    out = json.loads(p.stdout)
    assert out["largest_size"] == 29 and out["verified_largest_size"] == 23, out
    assert [(v["size"], v["fits"]) for v in out["verify"]] == \
        [(29, False), (30, False), (28, False), (26, False), (22, True), (24, False), (23, True)], out["verify"]
    text = fit(build, tmp_path / "text", "--verify", command=("late", "{}"))
    assert "verify: the prediction does NOT hold\nverify: the largest size that fits, by real runs: 23\n" in text.stdout, \
        text.stdout
    # Where it holds and the next size runs out of memory, nothing more is run: that is the edge.
    holds = json.loads(fit(build, tmp_path / "holds", "--verify", "--format", "json").stdout)
    assert len(holds["verify"]) == 2 and holds["verified_largest_size"] == holds["largest_size"] == 29


def test_for_a_smaller_card(build, tmp_path):
    # Rehearsed under the limit: 32 + 100 + 30·n <= 512 MiB: n = 12.
    p = fit(build, tmp_path, "--device-limit", "512MiB", "--verify", "--format", "json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["largest_size"] == 12 and out["capacity_bytes"] == 512 << 20
    # One round: 12 is within 4x of 4. The measuring rounds: --verify's runs are not among them.
    assert out["rounds"] == [[1, 2, 4]]
    assert [(v["size"], v["fits"]) for v in out["verify"]] == [(12, True), (13, False)]
    assert out["verify"][0]["oom_reports"] == 0 and out["verify"][1]["oom_reports"] >= 1


def test_another_process_on_the_card_is_not_the_context(build, tmp_path):
    # 300 MiB held by another process through every run (as a run of a round beside another):
    # the context is the process's own 32 MiB (NVML lists it), so the rehearsed card's answer
    # is unchanged; on the whole card the answer is the card's, and the other process is said.
    p = fit(build, tmp_path, "--device-limit", "512MiB", "--format", "json", FAKECUDA_OTHER_PROCESS_BYTES="300MiB")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["context_bytes"] == 32 << 20 and out["largest_size"] == 12, out
    assert out["other_processes_bytes"] == 300 << 20
    whole = fit(build, tmp_path / "whole", FAKECUDA_CAPACITY="8GiB", FAKECUDA_OTHER_PROCESS_BYTES="2GiB")
    assert "(other processes held 2.00 GiB of device 0 through every run" in whole.stdout, whole.stdout
    alone = fit(build, tmp_path / "alone", "--format", "json")
    assert json.loads(alone.stdout)["other_processes_bytes"] == 0


def test_a_run_that_recovers_from_an_out_of_memory_fits(build, tmp_path):
    # Whether a size fits is the program's own verdict (exit 0), as in a binary search with
    # real runs: an OOM it recovers from (a workspace it does without) is said, not a failure.
    # Peaks 32 + 160 + 30·n: 27 predicted; at 28 the 60 MiB workspace does not fit (1032 MiB).
    p = fit(build, tmp_path, "--verify", command=("recovers", "{}"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Largest size that fits device 0 (1.00 GiB): 27" in p.stdout, p.stdout
    assert "verify: size 27 fits (peak " in p.stdout  # without its workspace: below the model's
    assert "verify: size 28 fits (after 1 out-of-memory episode it recovered from: " in p.stdout, p.stdout
    assert "the prediction holds, conservatively" in p.stdout
    # Both fit: --verify walks up (28 + 2 = 30 runs out of memory, 29 fits without its
    # workspace: 32 + 100 + 870 MiB), and ends at the edge a search with real runs finds.
    assert "verify: size 30 runs out of memory\nverify: size 29 fits" in p.stdout, p.stdout
    assert "verify: the largest size that fits, by real runs: 29\n" in p.stdout, p.stdout
    j = json.loads(fit(build, tmp_path / "json", "--verify", "--format", "json", command=("recovers", "{}")).stdout)
    assert [(v["size"], v["fits"]) for v in j["verify"]] == [(27, True), (28, True), (30, False), (29, True)], j
    assert j["largest_size"] == 27 and j["verified_largest_size"] == 29


def test_out_of_memory_at_a_measured_size_still_predicts(build, tmp_path):
    p = fit(build, tmp_path, "--sizes", "4,8,16,32")
    assert p.returncode == 0, p.stderr
    assert "out of memory at size 32" in p.stdout and ": 29" in p.stdout
    # 16 and 32 together need more than the device (their lines' peaks with a quarter spare):
    # one after the other.
    assert "(sizes 4+8, then 16, then 32;" in p.stdout, p.stdout


def test_a_leading_size_above_the_line_of_the_rest_is_left_out(build, tmp_path):
    # The peak 100 + max(100, 60·n) MiB (a step of its own sets it at size 1): the line of the
    # larger sizes, 100 + 60·n, answers on a 4 GiB card: 32 + 100 + 60·n <= 4096: 66.
    p = fit(build, tmp_path, "--format", "json", command=("kink", "{}"), FAKECUDA_CAPACITY="4GiB")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["largest_size"] == 66, out
    assert out["rounds"][0] == [1, 2, 4] and len(out["rounds"]) == 2, out["rounds"]
    at = {s["size"]: s for s in out["sizes"]}
    assert at[1].get("left_out") and not any(s.get("left_out") for n, s in at.items() if n != 1), out["sizes"]
    assert at[1]["measured_bytes"] == 200 << 20 and at[1]["predicted_bytes"] == 160 << 20  # shown, not held to
    # On 1 GiB the first round answers below 8x its largest run, but it is no line (size 1 is
    # 19 % above it): a second round at 8 and 16 (one after the other: no room for both; 16
    # runs out of memory) tells the kink from a curve, and the line of 2, 4 and 8 answers:
    # 32 + 100 + 60·n <= 1024: 14.
    small = fit(build, tmp_path / "small", "--format", "json", command=("kink", "{}"))
    assert small.returncode == 0, small.stderr
    small = json.loads(small.stdout)
    assert small["rounds"] == [[1, 2, 4], [8], [16]] and small["largest_size"] == 14, small
    assert [s["size"] for s in small["sizes"] if s.get("left_out")] == [1]
    text = fit(build, tmp_path / "text", command=("kink", "{}"), FAKECUDA_CAPACITY="4GiB")
    assert "(left out: 1, above the line through the larger sizes" in text.stdout, text.stdout
    assert "Largest size that fits device 0 (4.00 GiB): 66" in text.stdout


def test_a_peak_flat_at_the_first_sizes_is_looked_for_further_up(build, tmp_path):
    # The peak 100 + max(400, 30·n) MiB does not move from 1 to 4: 16, 32 and 64 are run, on
    # the line 100 + 30·n beyond the kink, and the first round is left out: 132 on 4 GiB.
    p = fit(build, tmp_path, "--format", "json", command=("flat", "{}"), FAKECUDA_CAPACITY="4GiB")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["rounds"] == [[1, 2, 4], [16, 32, 64]], out["rounds"]
    assert out["largest_size"] == 132, out
    assert [s["size"] for s in out["sizes"] if s.get("left_out")] == [1, 2, 4]
    # Still flat at 64: refused, as before, after the second round.
    constant = fit(build, tmp_path / "constant", "--format", "json", command=("constant",), FAKECUDA_CAPACITY="4GiB")
    assert constant.returncode == 3 and json.loads(constant.stdout)["rounds"] == [[1, 2, 4], [16, 32, 64]]


def test_a_command_that_ignores_the_size_is_told(build, tmp_path):
    p = fit(build, tmp_path, command=("constant",))
    assert p.returncode == 3
    assert "does not change with the size" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert "No answer" in p.stdout and "Largest size" not in p.stdout


def test_runs_the_model_does_not_explain_give_no_answer(build, tmp_path):
    # Fail closed: a peak in steps (no line or parabola reproduces the runs within 5 %), a peak
    # that shrinks as the size grows: which runs and why, no size, status 3.
    steps = fit(build, tmp_path / "steps", "--format", "json", command=("steps", "{}"))
    assert steps.returncode == 3, steps.stderr
    out = json.loads(steps.stdout)
    assert "largest_size" not in out and "predicted_bytes" not in out
    assert out["refused"] and all(why.startswith("size ") and "more than 5 %" in why for why in out["refused"]), out
    assert [why.split(":")[0] for why in out["refused"]] == ["size 1", "size 2"], out["refused"]
    at = {s["size"]: s for s in out["sizes"]}
    assert at[4]["measured_bytes"] == (100 + 120 + 300) << 20 and at[1]["relative_residual"] < -0.05
    assert "no answer: size" in steps.stderr and len(steps.stderr.strip().splitlines()) == 1
    text = fit(build, tmp_path / "steps-text", command=("steps", "{}"))
    assert text.returncode == 3 and "No answer: the runs are not explained by the model" in text.stdout
    assert "Largest size" not in text.stdout
    shrinks = fit(build, tmp_path / "shrinks", "--format", "json", command=("shrinks", "{}"))
    assert shrinks.returncode == 3, shrinks.stderr
    refused = json.loads(shrinks.stdout)["refused"]
    assert refused and all("the peak shrinks as the size grows" in why for why in refused), refused
    assert "largest_size" not in json.loads(shrinks.stdout)


def test_a_command_that_fails_otherwise_gets_no_prediction(build, tmp_path):
    p = fit(build, tmp_path, command=("broken",))
    assert p.returncode == 5
    assert "for another reason than memory" in p.stderr and "exit status 5" in p.stderr
    assert p.stdout == ""


def test_bad_sizes_are_a_usage_error(build, tmp_path):
    for bad in ("8,4", "0,1", "1", "a,b"):
        p = fit(build, tmp_path, "--sizes", bad)
        assert p.returncode == 2 and "--sizes" in p.stderr, (bad, p.stderr)


def test_pytorch_needs_what_it_allocates_not_what_it_caches(build, tmp_path):
    # Reserved in a roomy run: 100 + 50·n MiB (17 would be the answer); allocated at once:
    # 100 + 30·n, and the cache is flushed when the device is full: 32 + 100 + 30·29 = 1002 MiB
    # fits, 30 does not. Headroom: half the largest segment (50 MiB), for the memory a real
    # caching allocator strands near the capacity (the fake strands none): 28, conservative.
    p = fit(build, tmp_path, "--verify", "--format", "json", command=("{}",),
            program=os.path.join(HERE, "programs", "fit_torch.py"),
            PYTHONPATH=os.path.join(HERE, "fake_torch"))
    assert p.returncode == 0, p.stdout + p.stderr
    out = json.loads(p.stdout)
    assert out["torch_need"] == "allocated_peak"
    assert out["largest_size"] == 28, out
    # The program allocates n tensors at size n: the traces do not align, not even after one more
    # run for the replay (16), and the peak model answers.
    assert out["method"] == "peak_model" and "actions differ" in out["replay_not_used"], out
    assert out["rounds"] == [[1, 2, 4], [16]], out
    # The reserved peaks' line (100 + 50·n, headroom 25 MiB): 17.
    assert out["largest_size_by_tracked_peak"] == 17
    assert out["headroom_bytes"] == 50 * (1 << 20) // 2
    assert [(v["size"], v["fits"]) for v in out["verify"]] == [(28, True), (29, True), (31, False), (30, False)]
    assert out["verified_largest_size"] == 29


def test_the_allocator_replay_counts_the_segment_a_small_block_strands(build, tmp_path):
    # Activations of 100 MiB·n, logits of 10 MiB·n freed, then a 3 MiB tensor kept in the logits'
    # free block: the next step's logits need a segment of their own. 32 + 20 + 120·n MiB
    # reserved at once: 8 on 1 GiB, which the replay of PyTorch's traced allocator finds; the
    # peak model (23 + 110·n allocated, the whole largest segment, 100·n, kept free) says 4.
    program, torch_path = os.path.join(HERE, "programs", "fit_torch.py"), os.path.join(HERE, "fake_torch")
    p = fit(build, tmp_path, "--verify", "--format", "json", command=("{}", "strands"), program=program,
            PYTHONPATH=torch_path)
    assert p.returncode == 0, p.stdout + p.stderr
    out = json.loads(p.stdout)
    assert out["method"] == "allocator_replay" and out["largest_size"] == 8, out
    assert out["largest_size_by_peak_model"] == 4 and out["verified_largest_size"] == 8
    r = out["replay"]
    assert r["runs"] == 3 and r["off_line"] == 0 and r["actions"] == 12, r
    assert r["reserved_bytes"] == (20 + 120 * 8) * MiB and r["limit_bytes"] == (1024 - 32) * MiB
    assert r["next_failed_request_bytes"] == 90 * MiB  # size 9's first logits
    # The replay's peaks at the sizes run, against PyTorch's: in sample (the runs it was scaled
    # from) and at --verify's 8 (out of sample), exact on this program.
    at8 = out["verify"][0]
    assert at8["replayed_torch_allocated_bytes"] == at8["measured_by_source"]["torch"] == (23 + 110 * 8) * MiB, at8
    assert at8["replayed_torch_reserved_bytes"] == (20 + 120 * 8) * MiB and at8["replay_relative"] == 0
    assert all(s["replay_relative"] == 0 for s in out["sizes"] if s["fits"]), out["sizes"]
    text = fit(build, tmp_path / "text", command=("{}", "strands"), program=program, PYTHONPATH=torch_path)
    assert "Largest size that fits device 0 (1.00 GiB): 8\n" in text.stdout, text.stdout
    assert "by replaying PyTorch's allocator (12 actions of 3 runs, scaled to the size): at 8 its segments take " \
           "980.00 MiB of the 992.00 MiB left to it" in text.stdout, text.stdout
    assert "(the peak model alone says 4)" in text.stdout
    # A run whose actions differ from the larger ones' (a workspace at size 1 only): the replay
    # aligns the runs from the smallest that matches all the larger ones.
    ws = json.loads(fit(build, tmp_path / "ws", "--format", "json", command=("{}", "strands", "workspace"),
                        program=program, PYTHONPATH=torch_path).stdout)
    assert ws["method"] == "allocator_replay" and ws["largest_size"] == 8 and ws["replay"]["runs"] == 2, ws
    # Runs whose traces align in no two of 1, 2 and 4 (the smallest sizes' own paths) on a line:
    # one more round, a run at 16, for the replay to scale from 4 and 16: 20 + 120·n MiB reserved
    # in 4 GiB less the context: 33 (the peak model alone: 19, where fit stopped before).
    sp = json.loads(fit(build, tmp_path / "sp", "--format", "json", command=("{}", "strands", "smallpaths"),
                        program=program, PYTHONPATH=torch_path, FAKECUDA_CAPACITY="4GiB").stdout)
    assert sp["rounds"] == [[1, 2, 4], [16]], sp
    assert sp["method"] == "allocator_replay" and sp["replay"]["runs"] == 2 and sp["largest_size"] == 33, sp
    assert sp["largest_size_by_peak_model"] == 19, sp
    # A PyTorch that does not record its history: the adapter says so in the run's output and
    # stays attached (the steps' allocated peaks still come); the peak model answers.
    none = fit(build, tmp_path / "none", "--format", "json", command=("{}", "strands"), program=program,
               PYTHONPATH=torch_path, FAKE_TORCH_HISTORY_FAILS="1")
    out = json.loads(none.stdout)
    assert out["method"] == "peak_model" and out["torch_need"] == "allocated_peak" and out["largest_size"] == 4, out
    assert "wrote no trace" in out["replay_not_used"], out
    log = open(tmp_path / "none" / "fit" / "size-1" / "output.log").read()
    assert "could not trace the allocator for fit (RuntimeError: recording history is not supported here)" in log, log
    # Settings the replay does not model: the peak model answers, and says why.
    conf = fit(build, tmp_path / "conf", "--format", "json", command=("{}", "strands"), program=program,
               PYTHONPATH=torch_path, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    out = json.loads(conf.stdout)
    assert out["method"] == "peak_model" and out["largest_size"] == 4, out
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in out["replay_not_used"]


def test_a_largest_segment_of_a_tenth_of_the_peak_is_kept_free_whole(build, tmp_path):
    # A language model's logits (40 MiB·n beside a peak of 20 + 70·n): at the edge PyTorch's
    # allocator strands a segment of that size (the OOM reports on the GPU), so all of it stays
    # free: 32 + 20 + 70·n + 40·n <= 1024 MiB: 8 (10 with half of it; the fake strands none).
    p = fit(build, tmp_path, "--format", "json", command=("{}", "logits"),
            program=os.path.join(HERE, "programs", "fit_torch.py"), PYTHONPATH=os.path.join(HERE, "fake_torch"))
    assert p.returncode == 0, p.stdout + p.stderr
    out = json.loads(p.stdout)
    assert out["largest_size"] == 8, out
    assert out["headroom_bytes"] == 8 * 40 << 20
    text = fit(build, tmp_path / "text", command=("{}", "logits"),
               program=os.path.join(HERE, "programs", "fit_torch.py"), PYTHONPATH=os.path.join(HERE, "fake_torch"))
    assert "headroom 320.00 MiB (the largest segment PyTorch's allocator asks for there: one of that size is stranded" \
        in text.stdout, text.stdout
