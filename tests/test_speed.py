"""``mhab speed``: the harness' arithmetic and its output table (never timings)."""

import math

import pandas as pd
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from bench import speed
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


def _row(model, mode="train", step_ms=10.0, share=0.5, **kw):
    return {"section": "attention", "model": model, "mode": mode, "step_ms": step_ms, "peak_share": share,
            **speed.TARGET, **kw}


def test_targets_are_ratios_at_the_reference_point():
    frame = pd.DataFrame([
        _row("core", step_ms=5.0, share=0.72), _row("torch", step_ms=10.0), _row("timm", step_ms=4.0),
        _row("projections", step_ms=4.5),
        _row("core", step_ms=1.0, batch_size=1),  # another point: ignored
        {"section": "task", "model": "image/digits:gru", "mode": "train", "engine_overhead": 0.03,
         "data_share": 0.2},
        {"section": "task", "model": "image/digits:lstm", "mode": "train", "engine_overhead": 0.08,
         "data_share": 0.1},
    ])
    t = speed.targets(frame).set_index("target")
    assert t.loc["core / torch step time (fwd+bwd)", "measured"] == 0.5
    assert bool(t.loc["core / torch step time (fwd+bwd)", "met"])
    assert t.loc["core / timm step time (fwd+bwd)", "measured"] == 1.25
    assert not bool(t.loc["core / timm step time (fwd+bwd)", "met"])
    assert bool(t.loc["core share of matmul peak (fwd+bwd)", "met"])
    assert t.loc["floor: projections alone / torch", "measured"] == 0.45
    assert t.loc["engine overhead, median over 2 task models", "measured"] == pytest.approx(0.055)
    worst = t.loc["engine overhead, worst (image/digits:lstm)"]
    assert worst["measured"] == 0.08 and not bool(worst["met"])


@pytest.mark.parametrize("overhead, spread, met", [
    (0.08, 0.01, False),  # a miss larger than the noise: not met
    (0.08, 0.05, None),   # 0.08 - 0.05 <= 0.05: the machine's noise could explain the miss
    (0.04, 0.20, True),   # under the goal, noisy or not
])
def test_worst_engine_overhead_within_its_timing_spread_is_undecided(overhead, spread, met):
    frame = pd.DataFrame([
        {"section": "task", "model": "image/digits:lstm", "mode": "train", "engine_overhead": overhead,
         "timing_spread": spread, "data_share": 0.1}])
    worst = speed.targets(frame).set_index("target").loc["engine overhead, worst (image/digits:lstm)"]
    assert worst["met"] == met if met is not None else worst["met"] is None
    assert ("undecided" in worst["goal"]) == (met is None)


def test_overhead_is_the_median_of_paired_repeats():
    assert speed.paired_overhead([100.0], [90.0]) == (pytest.approx(0.1), 0.0)
    # One noisy burst (the bare pass at 140) moves one pair, not the median.
    bare = [100.0, 100.0, 140.0, 100.0, 100.0]
    engine = [98.0, 97.0, 99.0, 99.0, 98.0]
    overhead, spread = speed.paired_overhead(bare, engine)
    assert overhead == pytest.approx(0.02)  # per pair: .02 .03 .293 .01 .02
    assert spread == pytest.approx((0.03 - 0.02) / 2)
    assert 1 - max(engine) / max(bare) == pytest.approx(0.293, abs=1e-3)  # what best-of-each said


def test_targets_without_the_attention_part():
    tasks = pd.DataFrame([{"section": "task", "model": "image/digits:gru", "mode": "train",
                           "engine_overhead": 0.03, "data_share": 0.2}])
    assert list(speed.targets(tasks)["target"]) == ["engine overhead, median over 1 task models",
                                                    "engine overhead, worst (image/digits:gru)",
                                                    "data time / step time, worst (image/digits:gru)"]


def test_speed_command_writes_a_table_the_report_reads(tmp_path):
    out = run_cli("speed", f"results_dir={tmp_path}", "attention.batch_sizes=[2]",
                  "attention.seq_lens=[8,16]", "attention.dim=32", "attention.num_heads=4",
                  "warmup=1", "iters=2", "matmul_size=128", "tasks.names=[image]",
                  "tasks.models=[attention,gru]", "tasks.timed_steps=3", "tasks.repeats=1",
                  "attention.repeats=2", "tasks.min_seconds=0",
                  # a recipe with mixup and a weight average: the bare loop does that work too
                  "tasks.run_overrides=['suite=quick','task.mixup_alpha=0.2','trainer.ema_decay=0.9']",
                  timeout=600)
    assert out.returncode == 0, out.stderr
    frame = pd.read_csv(tmp_path / "speed.csv")
    attention = frame[frame["section"] == "attention"]
    assert len(attention) == 2 * 5 * 2  # lengths x impls x modes
    assert set(attention["model"]) == {"core", "torch", "torch_no_weights", "timm", "projections"}
    ok = attention[attention["status"] == "ok"]
    expected = [speed.step_flops(speed.impl_flops(i, 2, n, 32), m) / 1e9
                for i, n, m in zip(ok["model"], ok["seq_len"], ok["mode"], strict=True)]
    assert ok["gflop_per_step"].tolist() == pytest.approx(expected)
    assert (ok["tokens_per_s"] == ok["samples_per_s"] * ok["seq_len"]).all()
    share = ok["achieved_gflop_s"] / ok["matmul_peak_gflop_s"]
    assert ok["peak_share"].tolist() == pytest.approx(share.tolist())
    tasks = frame[frame["section"] == "task"]
    assert sorted(tasks["model"] + "/" + tasks["mode"]) == [
        "image/digits:attention/infer", "image/digits:attention/train",
        "image/digits:gru/infer", "image/digits:gru/train"]
    train = tasks[tasks["mode"] == "train"]
    assert (train["engine_samples_per_s"] > 0).all() and train["data_share"].notna().all()
    assert (train["timing_spread"] == 0).all()  # one repeat: nothing to compare
    assert "core / torch step time" not in out.stdout  # the reference point was not measured
    assert (tmp_path / "speed.parquet").is_file()


@pytest.mark.parametrize("override, message", [
    ("attention.num_heads=3", "attention.num_heads=3 does not divide attention.dim=256"),
    ("attention.impls=[flash]", "unknown attention impl 'flash'"),
    ("dtype=fp8", "dtype must be float32 or bf16"),
    ("iters=0", "iters must be >= 1"),
    ("nonsense=1", "unknown config key 'nonsense'"),
    ("tasks.run_overrides=['trainer.ema_decay=2']", "trainer.ema_decay must be > 0 and < 1"),
])
def test_speed_bad_input_is_one_line(tmp_path, override, message):
    out = run_cli("speed", f"results_dir={tmp_path}", override)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr
    assert not (tmp_path / "speed.csv").exists()
