"""``mhab speed``: the harness' arithmetic and its output table (never timings)."""

import math

import pandas as pd
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from bench.speed import benchmark as speed
from bench.speed import targets as speed_targets
from models.attention import MultiHeadAttention
from tests.conftest import run_cli


@pytest.mark.parametrize("batch, seq_len, dim, heads", [(2, 16, 32, 4), (3, 40, 64, 8)])
def test_attention_flops_match_torch_flop_counter(batch, seq_len, dim, heads):
    module = MultiHeadAttention(dim, heads)
    x = torch.randn(batch, seq_len, dim)
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        module(x, need_weights=True)  # the explicit math path: every matmul is visible
    assert counter.get_total_flops() == speed.attention_flops(batch, seq_len, dim)


def test_the_projections_floor_counts_only_projections():
    assert speed.impl_flops("projections", 2, 16, 32) == 8 * 2 * 16 * 32**2
    assert speed.impl_flops("core", 2, 16, 32) == speed.attention_flops(2, 16, 32)


def test_training_counts_three_forwards():
    assert speed.step_flops(10.0, "train") == 30.0 and speed.step_flops(10.0, "forward") == 10.0


def test_rates_from_a_step_time():
    r = speed.rates(step_seconds=0.5, samples=32, tokens=32 * 128, flops=60e9)
    assert r["step_ms"] == 500.0 and r["samples_per_s"] == 64.0 and r["tokens_per_s"] == 8192.0
    shared = speed.with_peak_share(pd.DataFrame([r]), peak_gflops=200.0).iloc[0]
    assert r["achieved_gflop_s"] == 120.0 and math.isclose(shared["peak_share"], 0.6)


def test_grid_respects_the_token_cap():
    points = speed.grid([1, 8, 32], [128, 4096], max_tokens=32768)
    assert points == [(1, 128), (8, 128), (32, 128), (1, 4096), (8, 4096)]
    assert speed.grid([64], [4096], max_tokens=10) == [(64, 4096)]  # never empty


def _round(round_, peak, **step_ms):
    """One reference round: each impl's step time, and the core's share of the round's peak."""
    return [{"section": "reference", "status": "ok", "model": impl, "mode": "train", "round": round_,
             "step_ms": ms, "round_peak_gflop_s": peak,
             "round_peak_share": 100.0 / ms / peak if impl == "core" else None, **speed_targets.TARGET}
            for impl, ms in step_ms.items()]


def test_targets_are_medians_of_per_round_ratios():
    core, torch_ms = [5.0] * 6 + [4.0], [10.0, 10.0, 10.0, 10.5, 9.5, 10.0, 10.0]
    timm, peaks = [4.0] * 6 + [3.5], [20.0] + [40.0] * 6
    frame = pd.DataFrame([
        # per round core/torch is .5 .5 .5 .476 .526 .5 .4: median .5, 95% CI its range (7
        # rounds), where the bests of each (core 4, torch 9.5) would say .42
        *(row for r in range(7) for row in _round(r, peaks[r], core=core[r], torch=torch_ms[r],
                                                     timm=timm[r], projections=4.5)),
        {"section": "attention", "status": "ok", "model": "core", "mode": "train", "step_ms": 1.0,
         "round": None, **speed_targets.TARGET},  # the grid: not what the targets read
        {"section": "task", "model": "image/digits:gru", "mode": "train", "engine_overhead": 0.03,
         "data_share": 0.2},
        {"section": "task", "model": "image/digits:lstm", "mode": "train", "engine_overhead": 0.08,
         "data_share": 0.1},
    ])
    t = speed_targets.targets(frame).set_index("target")
    torch_ratio = t.loc["core / torch step time (fwd+bwd)"]
    assert torch_ratio["measured"] == pytest.approx(0.5) and torch_ratio["met"] == True  # noqa: E712
    assert (torch_ratio["ci_low"], torch_ratio["ci_high"]) == (pytest.approx(0.4), pytest.approx(5 / 9.5))
    timm_ratio = t.loc["core / timm step time (fwd+bwd)"]  # CI [1.14, 1.25]: above 1.05
    assert timm_ratio["measured"] == pytest.approx(1.25) and timm_ratio["met"] == False  # noqa: E712
    share = t.loc["core share of its round's matmul peak (fwd+bwd)"]  # per round 1.0, .5 x5, .625
    assert share["measured"] == pytest.approx(0.5) and share["ci_high"] == pytest.approx(1.0)
    assert share["met"] is None and "undecided" in share["goal"]  # 0.70 is inside [.5, 1]
    assert t.loc["floor: projections alone / torch", "measured"] == pytest.approx(0.45)
    assert t.loc["engine overhead, median over 2 task models", "measured"] == pytest.approx(0.055)
    worst = t.loc["engine overhead, worst (image/digits:lstm)"]  # one pass: by the median alone
    assert worst["measured"] == 0.08 and worst["met"] == False  # noqa: E712
    assert "median alone" in worst["goal"]
    summary = speed_targets.reference_summary(frame)
    assert "medians over 7 rounds" in summary and "from 20.0 to 40.0 GFLOP/s" in summary


def test_a_matmul_share_above_one_is_never_a_met_target():
    """On a loaded machine the rounds' matmul peaks come out low and the core's share of them
    above 1, which no kernel reaches: the target is not judged met."""
    frame = pd.DataFrame([row for r in range(7) for row in _round(r, 2.0, core=4.0)])
    share = speed_targets.targets(frame).set_index("target").loc[
        "core share of its round's matmul peak (fwd+bwd)"]
    assert share["measured"] == pytest.approx(12.5) and share["met"] is None
    assert "loaded machine" in share["goal"]


@pytest.mark.parametrize("value, low, high, met", [
    (0.08, 0.06, 0.10, False),  # the whole CI above the goal: not met
    (0.08, 0.03, 0.12, None),   # the goal inside the CI: noise could explain the miss
    (0.04, 0.035, 0.045, True),  # the whole CI under the goal
    (0.04, -0.10, 0.20, None),  # under the goal, but a pass is not decided within the noise either
    (0.04, math.nan, math.nan, True),  # no CI (under 6 pairs): the median decides, and says so
])
def test_a_target_whose_goal_is_inside_its_ci_is_undecided(value, low, high, met):
    frame = pd.DataFrame([
        {"section": "task", "model": "image/digits:lstm", "mode": "train", "engine_overhead": value,
         "engine_overhead_ci_low": low, "engine_overhead_ci_high": high, "data_share": 0.1}])
    goals = speed_targets.targets(frame).set_index("target")
    worst = goals.loc["engine overhead, worst (image/digits:lstm)"]
    assert worst["met"] is None if met is None else worst["met"] == met and worst["met"] is not None
    assert ("undecided" in worst["goal"]) == (met is None)
    assert ("median alone" in worst["goal"]) == math.isnan(low)
    # The same rule, mirrored, for a share that must be high.
    mirror = lambda v: 0.70 + (0.05 - v)
    assert speed_targets.verdict(mirror(value), mirror(high), mirror(low), 0.70, True, "hint")[1] is met


def test_overhead_is_the_median_of_paired_repeats_with_its_ci():
    # One noisy burst (the bare pass at 140) moves one pair, not the median.
    bare = [100.0, 100.0, 140.0, 100.0, 100.0, 100.0, 100.0]
    engine = [98.0, 97.0, 99.0, 99.0, 98.0, 96.0, 98.0]
    overhead, low, high = speed_targets.paired_overhead(bare, engine)
    assert overhead == pytest.approx(0.02)  # per pair: .02 .03 .293 .01 .02 .04 .02
    assert (low, high) == (pytest.approx(0.01), pytest.approx(0.293, abs=1e-3))  # 7 pairs: the range
    assert 1 - max(engine) / max(bare) == pytest.approx(0.293, abs=1e-3)  # what best-of-each said
    # The CI narrows with more repeats: of 21 values, the 6th to the 16th smallest.
    values = [float(v) for v in range(21, 0, -1)]
    assert speed_targets.median_ci(values) == (11.0, 6.0, 16.0)
    assert all(math.isnan(v) for v in speed_targets.paired_overhead([100.0] * 5, [90.0] * 5)[1:])


def test_targets_without_the_attention_part():
    tasks = pd.DataFrame([{"section": "task", "model": "image/digits:gru", "mode": "train",
                           "engine_overhead": 0.03, "data_share": 0.2}])
    assert list(speed_targets.targets(tasks)["target"]) == ["engine overhead, median over 1 task models",
                                                    "engine overhead, worst (image/digits:gru)",
                                                    "data time / step time, worst (image/digits:gru)"]


@pytest.mark.slow
def test_speed_command_writes_a_table_the_report_reads(tmp_path):
    out = run_cli("speed", f"results_dir={tmp_path}", "attention.batch_sizes=[2]",
                  "attention.seq_lens=[8,16]", "attention.dim=32", "attention.num_heads=4",
                  "warmup=1", "iters=2", "matmul_size=128", "tasks.names=[image]",
                  "tasks.models=[attention,gru]", "tasks.timed_steps=3", "tasks.repeats=1",
                  "attention.repeats=2", "attention.reference_rounds=2", "tasks.min_seconds=0",
                  # a recipe with mixup and a weight average: the bare loop does that work too
                  "tasks.run_overrides=['suite=quick','task.mixup_alpha=0.2','trainer.ema_decay=0.9']",
                  timeout=600)
    assert out.returncode == 0, out.stderr
    frame = pd.read_csv(tmp_path / "speed.csv")
    attention = frame[frame["section"] == "attention"]
    assert len(attention) == 2 * 5 * 2 * 2  # lengths x impls x modes x dtypes
    assert set(attention["dtype"]) == {"float32", "bf16"}
    core = attention[attention["model"] == "core"]
    assert set(core.loc[core["dtype"] == "float32", "attention_path"]) == {"sdpa"}
    assert set(core.loc[core["dtype"] == "bf16", "attention_path"]) <= {"sdpa", "matmul"}
    assert attention.loc[attention["model"] != "core", "attention_path"].isna().all()
    assert set(attention["model"]) == {"core", "torch", "torch_no_weights", "timm", "projections"}
    ok = attention[attention["status"] == "ok"]
    expected = [speed.step_flops(speed.impl_flops(i, 2, n, 32), m) / 1e9
                for i, n, m in zip(ok["model"], ok["seq_len"], ok["mode"], strict=True)]
    assert ok["gflop_per_step"].tolist() == pytest.approx(expected)
    assert (ok["tokens_per_s"] == ok["samples_per_s"] * ok["seq_len"]).all()
    share = ok["achieved_gflop_s"] / ok["matmul_peak_gflop_s"]
    assert ok["peak_share"].tolist() == pytest.approx(share.tolist())
    # each precision against its own matmul peak
    assert frame.groupby("dtype")["matmul_peak_gflop_s"].nunique().tolist() == [1, 1]
    tasks = frame[frame["section"] == "task"]
    assert sorted(tasks["model"] + "/" + tasks["mode"] + "/" + tasks["dtype"]) == [
        f"image/digits:{model}/{mode}/{dtype}" for model in ("attention", "gru")
        for mode in ("infer", "train") for dtype in ("bf16", "float32")]
    train = tasks[tasks["mode"] == "train"]
    assert (train["engine_samples_per_s"] > 0).all() and train["data_share"].notna().all()
    assert train["engine_overhead_ci_low"].isna().all()  # one repeat: no CI
    # The reference point is the (B=32, L=128, D=256, H=8), whatever the grid's width.
    reference = frame[frame["section"] == "reference"]
    assert sorted(reference.groupby(["round", "dtype"])["model"].apply(sorted).tolist()) == [
        sorted(["core", "torch", "torch_no_weights", "timm", "projections"])] * 2 * 2
    assert (reference["dim"] == 256).all() and (reference["seq_len"] == 128).all()
    assert reference["round_peak_share"].dropna().tolist() == pytest.approx(
        (reference["achieved_gflop_s"] / reference["round_peak_gflop_s"]).dropna().tolist())
    assert "core / torch step time" in out.stdout and "medians over 2 rounds" in out.stdout
    assert "core bf16 speed-up" in out.stdout and "training samples/s by precision" in out.stdout
    assert (tmp_path / "speed.parquet").is_file()


@pytest.mark.parametrize("override, message", [
    ("attention.num_heads=3", "attention.num_heads=3 does not divide attention.dim=256"),
    ("attention.impls=[flash]",
     "attention.impls[0] must be one of core, torch, torch_no_weights, timm, projections"),
    ("dtypes=[fp8]", "dtypes must be float32 or bf16"),
    ("dtypes=[]", "dtypes is empty"),
    ("dtype=bf16", "unknown config key 'dtype'"),
    ("iters=0", "iters must be >= 1, got 0"),
    ("iters=abc", "iters must be an integer, got 'abc'"),
    ("attention.reference_rounds=-1", "attention.reference_rounds must be >= 0, got -1"),
    ("attention.seq_lens=[128,0]", "attention.seq_lens[1] must be >= 1, got 0"),
    ("nonsense=1", "unknown config key 'nonsense'"),
    ("attention.sdpa_backends=[fast]",
     "attention.sdpa_backends[0] must be one of auto, math, flash, efficient, cudnn, got 'fast'"),
    ("attention.sdpa_backends=[]", "attention.sdpa_backends is empty, so attention would measure nothing"),
    ("threads=-1", "threads must be >= 1, got -1"),
    ("+tasks.repeat=3",
     "tasks.repeat is not a tasks setting, so it would be ignored; did you mean tasks.repeats?"),
    ("tasks.min_seconds=inf", "tasks.min_seconds must be a finite number, got inf"),
    ("compile=turbo", "compile must be true, false or a torch.compile backend"),
    ("tasks.run_overrides=['trainer.ema_decay=2']", "trainer.ema_decay must be > 0 and < 1"),
    ("dtypes=[float32] tasks.run_overrides=['trainer.dtype=bf16']",
     "tasks.run_overrides sets trainer.dtype=bf16 but mhab speed measures under dtypes=[float32]; "
     "set dtypes="),
])
@pytest.mark.slow
def test_speed_bad_input_is_one_line(tmp_path, override, message):
    out = run_cli("speed", f"results_dir={tmp_path}", *override.split(" "))  # no override has a space
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr
    assert not (tmp_path / "speed.csv").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks which kernels a CPU lacks")
def test_grid_under_each_pinned_sdpa_kernel_and_the_choice(tmp_path):
    """Several sdpa_backends: the impls that call SDPA are timed under each kernel, the others
    once; a kernel the device lacks leaves a status row; the choice table picks the fastest."""
    from bench.report.sections import Section, _speed_tables
    from bench.setup.compose import compose_config

    cfg = compose_config("speed", ["attention.batch_sizes=[2]", "attention.seq_lens=[8]",
                                   "attention.dim=32", "attention.num_heads=4", "warmup=0", "iters=1",
                                   "attention.repeats=1", "attention.impls=[core,torch]",
                                   "attention.sdpa_backends=[math,flash,efficient]"], "speed")
    rows = pd.DataFrame(speed.attention_rows(cfg, torch.device("cpu"), False, [], "float32"))
    ran = {(r.model, r.mode, r.sdpa_backend): r.status for r in rows.itertuples()}
    assert len(ran) == len(rows) == 2 * (3 + 1)  # modes x (core under 3 kernels + torch once)
    assert {b for m, _, b in ran if m == "torch"} == {"math"}
    assert ran[("core", "train", "flash")] == "ok" and ran[("core", "train", "math")] == "ok"
    assert ran[("core", "train", "efficient")] == "no efficient kernel"  # CUDA only

    rows["section"] = "attention"
    choice = speed_targets.backend_choice(rows)
    assert list(choice.columns) == ["dtype", "mode", "batch_size", "seq_len", "math", "flash", "efficient",
                                    "fastest"]
    assert choice["efficient"].isna().all()
    for r in choice.itertuples():
        assert r.fastest == ("math" if r.math < r.flash else "flash")
    assert speed_targets.backend_choice(rows[rows["sdpa_backend"] == "math"]).empty

    rows = speed.with_peak_share(rows, 50.0)
    for key, value in {"dtype": "float32", "device_name": "Test CPU", "threads": 2, "torch": "2.x",
                       "compile": "none"}.items():
        rows[key] = value
    section = Section("speed", "Speed")
    _speed_tables(section, rows)
    markdown = "\n".join(section.markdown)
    assert "SDPA backends: math, flash, efficient" in markdown
    assert "core [flash]" in markdown and "torch [math]" in markdown
    assert "under each pinned SDPA kernel, and the fastest" in markdown


@pytest.mark.slow
def test_an_impossible_task_model_stops_speed_with_runs_line_before_timing(tmp_path):
    """speed builds its task models through run's build path, before it times anything."""
    out = run_cli("speed", f"results_dir={tmp_path}", "attention.enabled=false", "tasks.names=[image]",
                  "tasks.models=[attention]", "tasks.run_overrides=['suite=quick','task.patch_size=16']")
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "mhab: error: patch size (16, 16) is larger than the input (8, 8); use a smaller patch_size"]
    assert not (tmp_path / "speed.csv").exists()


def test_a_task_rows_throughput_is_the_median_pass_not_the_best(monkeypatch):
    # A record's samples/s is a mean over a run; the best of noisy passes sat 20% above it
    # (docs/speed.md), so the task row reports the median with its 95% CI.
    from bench.setup.compose import compose_config
    from bench.setup.spec import build, prepare

    cfg = compose_config("speed", ["tasks.repeats=7", "tasks.timed_steps=1", "tasks.min_seconds=0",
                                   "warmup=0", "iters=1", "dtypes=[float32]"], "speed")
    run_cfg = speed._run_config(cfg, "image", "attention")
    bare = iter([500.0, 100.0, 500.0, 90.0, 110.0, 105.0, 95.0, 98.0])  # calibration first
    engine = iter([99.0, 480.0, 88.0, 108.0, 101.0, 94.0, 97.0])
    monkeypatch.setattr(speed, "_bare_loop", lambda *args: next(bare))
    monkeypatch.setattr(speed, "_engine_samples_per_s", lambda *args: next(engine))
    train, infer = speed.measure_task_model(build(prepare(run_cfg)), "float32", cfg, torch.device("cpu"))
    assert train["samples_per_s"] == pytest.approx(100.0)  # the median of the 7 timed passes
    assert (train["samples_per_s_ci_low"], train["samples_per_s_ci_high"]) == (90.0, 500.0)
    assert train["repeats"] == 7 and train["engine_samples_per_s"] == 99.0
    assert train["step_ms"] == pytest.approx(1000 * train["batch_size"] / 100.0)
    assert infer["mode"] == "infer"
