"""The command line as a user types it: help, one-line errors, tiny runs writing records."""

from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import read_records, run_cli

BUDGET = ["trainer.max_steps=6", "trainer.batch_size=32", "trainer.infer_iters=2",
          "trainer.timing_warmup_steps=1"]
TINY = ["task=image", "task.dataset=digits", *BUDGET]
TINY_TASKS = {
    "image": TINY,
    "speech": ["task=speech", "task.dataset=synth_digits", "task.synth_per_digit=10", *BUDGET],
    "translation": ["task=translation", "task.dataset=numbers", "task.vocab_size=150",
                    "task.numbers_sizes={train:300,val:20,test:20}", "model.dim=32", "model.depth=1",
                    *BUDGET],
}
NOTES = {"image": "one row per step", "speech": "one spectrogram frame per step",
         "translation": "without attention"}


def test_help_lists_subcommands():
    out = run_cli("--help")
    assert out.returncode == 0
    assert "run" in out.stdout and "table" in out.stdout


def test_run_help_lists_groups_and_choices():
    out = run_cli("run", "--help")
    assert out.returncode == 0
    assert "model: attention, gru, lstm" in out.stdout
    assert "task: asr, image, recall, speech, summarization, translation" in out.stdout
    chosen, internal = out.stdout.split("== Groups set by those choices (not typed) ==")
    assert "suite: claims_heads, claims_length, none, quick, scale_data, scale_model, standard" in chosen
    assert "suite_task" not in chosen and "suite_task" in internal  # what users choose comes first
    assert "scale=xs|s|m|l" in out.stdout


@pytest.mark.slow
@pytest.mark.parametrize("task", list(TINY_TASKS))
@pytest.mark.parametrize("model", ["attention", "lstm", "gru"])
def test_tiny_run_writes_a_valid_record(tmp_path, task, model):
    out = run_cli("run", *TINY_TASKS[task], f"model={model}", "seed=7", f"results_dir={tmp_path}",
                  f"cache_dir={tmp_path / 'cache'}")
    assert out.returncode == 0, out.stderr
    (rec,) = read_records(tmp_path)
    assert rec["status"] == "ok" and rec["model"] == model and rec["seed"] == 7
    assert rec["task"] == task and rec["dataset"] == TINY_TASKS[task][1].split("=")[1]
    assert 0.0 <= rec["test_metric"] <= (100.0 if task == "translation" else 1.0)
    assert rec["steps"] == 6 and rec["config"]["trainer"]["max_steps"] == 6
    assert rec["params"] > 1000 and rec["flops_per_sample"] > 0
    for key in ("train_samples_per_s", "infer_samples_per_s", "infer_latency_ms_median",
                "peak_memory_mb", "wall_time_s"):
        assert rec[key] > 0, key
    assert len(rec["config_hash"]) == 12
    assert f"best validation {rec['metric_name']}" in rec["checkpoint_selection"]
    env = rec["environment"]
    assert env["torch"] and env["device"] == "cpu" and env["torch_threads"] >= 1
    assert "git_revision" in env
    for package in ("timm", "sacrebleu", "hydra-core", "torchaudio"):
        assert env["packages"][package] == metadata.version(package)
    if model != "attention":
        assert NOTES[task] in rec["model_notes"]
    if task == "translation":
        details = rec["test_details"]
        assert details["bleu_signature"].startswith("nrefs:1") and 0 <= details["chrf"] <= 100
        by_length = details["metric_by_length"]
        assert by_length["metric"] == "bleu" and by_length["unit"] == "source subword tokens"
        assert sum(b["count"] for b in by_length["buckets"]) == 20 and len(details["samples"]) == 5
        assert rec["metric_name"] == "bleu" and details["perplexity"] > 1
    assert (Path(rec["run_dir"]) / "best.pt").is_file()
    if model == "attention":  # per-head attention on a real test example, for the report
        example = torch.load(Path(rec["run_dir"]) / rec["attention_example"], weights_only=True)
        heads = example["heads"]
        assert heads.shape[0] == rec["config"]["model"]["num_heads"]
        if task == "translation":
            assert heads.shape[1:] == (len(example["target_tokens"]), len(example["source_tokens"]))
            torch.testing.assert_close(heads.sum(-1), torch.ones(heads.shape[:2]))  # rows sum to 1
        else:
            assert example["kind"] == "patch_grid" and heads.dim() == 3
        distance = rec["attention_distance"]  # every head of every layer, over the test set
        model_cfg = rec["config"]["model"]
        assert distance["unit"] == ("token" if task == "translation" else "patch")
        per_layer_head = np.array(distance["per_layer_head"])
        assert per_layer_head.shape == (model_cfg["depth"], model_cfg["num_heads"])
        assert (per_layer_head > 0).all() and distance["queries"] > 0
    else:
        assert "attention_example" not in rec and "attention_distance" not in rec


@pytest.mark.slow
def test_rnn_with_additive_attention_is_labelled(tmp_path):
    out = run_cli("run", *TINY_TASKS["translation"], "model=gru", "model.additive_attention=true",
                  f"results_dir={tmp_path}", f"cache_dir={tmp_path / 'cache'}")
    assert out.returncode == 0, out.stderr
    (rec,) = read_records(tmp_path)
    assert rec["model"] == "gru+additive_attn"
    assert "additive (Bahdanau) attention" in rec["model_notes"]
    assert "not the multi-head dot-product core" in rec["model_notes"]


@pytest.mark.slow
def test_sweep_records_every_run_and_table_prints_them(tmp_path):
    out = run_cli("run", "-m", *TINY, "model=attention,gru", "seed=0,1", f"results_dir={tmp_path}")
    assert out.returncode == 0, out.stderr
    recs = read_records(tmp_path)
    assert sorted((r["model"], r["seed"]) for r in recs) == [
        ("attention", 0), ("attention", 1), ("gru", 0), ("gru", 1)]
    assert len({r["run_dir"] for r in recs}) == 4
    # Seeds share a config hash; models do not.
    hashes = {(r["model"], r["seed"]): r["config_hash"] for r in recs}
    assert hashes[("gru", 0)] == hashes[("gru", 1)] != hashes[("attention", 0)]
    table = run_cli("table", str(tmp_path), "--all")
    assert table.returncode == 0
    runs_part, aggregate_part = table.stdout.split("\n\n")[:2]
    assert runs_part.count("digits") == 4 and aggregate_part.count("digits") == 2  # 4 runs, 2 models
    compact = run_cli("table", str(tmp_path))  # by default a row per experiment, a few columns
    assert compact.stdout.count("digits") == 2 and "(4 runs; --all" in compact.stdout
    assert max(len(line) for line in compact.stdout.splitlines() if "digits" in line) < 160  # a terminal's
    import pandas as pd

    assert len(pd.read_csv(tmp_path / "results.csv")) == 4


@pytest.mark.slow
def test_same_seed_gives_the_same_result(tmp_path):
    for sub in ("a", "b"):
        out = run_cli("run", *TINY, "model=gru", f"results_dir={tmp_path / sub}")
        assert out.returncode == 0, out.stderr
    (a,), (b,) = read_records(tmp_path / "a"), read_records(tmp_path / "b")
    assert a["test_metric"] == b["test_metric"] and a["test_loss"] == b["test_loss"]


def test_console_script_is_installed():
    import subprocess
    import sys

    script = Path(sys.executable).parent / "mhab"
    out = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "report" in out.stdout
