"""Suites and claim experiments compose; an interrupted sweep resumes without duplicates."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from bench.records.record import config_hash
from bench.setup.compose import CONF_DIR, resolved_config, sweep_points
from tests.conftest import ROOT, read_records, run_cli

SUITES = sorted(p.stem for p in (Path(CONF_DIR) / "suite").glob("*.yaml") if p.stem != "none")
CLAIMS = sorted(p.stem for p in (Path(CONF_DIR) / "claim").glob("*.yaml") if p.stem != "none")
# How long the sweep tests wait for a run to finish: ample on a quiet machine (they take about a
# minute there), and enough that a machine busy with other training does not fail them.
SLOW_MACHINE_S = 900


def _compose(overrides):
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose("config", overrides=overrides, return_hydra_config=True)


@pytest.mark.slow
@pytest.mark.parametrize("suite", SUITES)
def test_every_job_of_every_suite_composes(suite):
    cfg = _compose([f"suite={suite}"])
    params = cfg.hydra.sweeper.params
    assert params, f"suite {suite} sweeps nothing"
    assert cfg.results_dir == f"results/{suite.split('_')[0]}"  # claims_heads, claims_length: claims
    # Compose each combination of the sweep, as the launcher will.
    combos = [[]]
    for key, values in params.items():
        combos = [c + [f"{key}={v}"] for c in combos for v in str(values).split(",")]
    hashes = set()
    for combo in combos:
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            job = compose("config", overrides=[f"suite={suite}", *combo])
        assert job.model.name in ("attention", "lstm", "gru")
        hashes.add((config_hash(resolved_config(job)), job.seed))
    assert len(hashes) == len(combos)  # every job is a distinct experiment


def test_quick_suite_uses_only_offline_datasets():
    for task, dataset in (("image", "digits"), ("speech", "synth_digits"), ("translation", "numbers"),
                          ("asr", "synth_strings"), ("summarization", "reports")):
        assert _compose(["suite=quick", f"task={task}"]).task.dataset == dataset


def test_claim_experiments_compose_with_a_variant_label():
    heads = _compose(["claim=heads", "model.num_heads=2"])
    assert heads.variant == "heads_2" and heads.model.num_heads == 2 and heads.model.dim == 64
    length = _compose(["claim=length", "model=gru", "task.seq_len=256"])
    assert length.variant == "length_256" and length.task.name == "recall" and length.model.name == "gru"
    assert CLAIMS == ["heads", "length"]


def test_claims_are_sweeps_over_keys_with_the_hashes_of_their_earlier_files():
    """The claims suites sweep model.num_heads and task.seq_len x model; each job has the hash
    its own claim file gave it before (b406709), so recorded claims runs resume and group; the
    RNNs' since their widths are computed (match_params), a new experiment."""
    earlier = {("claim=heads", "model.num_heads=2"): "44d1cbc37275",
               ("claim=length", "model=lstm", "task.seq_len=64"): "1809ec21d829",
               ("claim=length", "model=attention", "task.seq_len=1024"): "8e8f459f5e67"}
    for overrides, digest in earlier.items():
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            assert config_hash(resolved_config(compose("config", overrides=list(overrides)))) == digest
    params = _compose(["suite=claims_length"]).hydra.sweeper.params
    assert params["task.seq_len"] == "16,64,256,1024" and params["model"] == "attention,lstm,gru"
    assert _compose(["suite=claims_heads"]).hydra.sweeper.params["model.num_heads"] == "1,2,4,8"


def test_sweep_points_use_every_value_once():
    points = sweep_points(["model=attention,lstm,gru", "seed=0,1", "task=image"])
    assert points == [
        ["model=attention", "seed=0", "task=image"],
        ["model=lstm", "seed=0", "task=image"],
        ["model=gru", "seed=0", "task=image"],
        ["model=attention", "seed=1", "task=image"],
    ]


@pytest.mark.slow
def test_interrupted_sweep_resumes_without_losing_or_duplicating(tmp_path):
    args = ["run", "-m", "task=image", "task.dataset=digits", "model=gru", "seed=0,1,2",
            "trainer.epochs=2", "trainer.batch_size=32", "trainer.infer_iters=1",
            "trainer.timing_warmup_steps=1", f"results_dir={tmp_path}"]
    proc = subprocess.Popen([sys.executable, "-m", "bench", *args], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + SLOW_MACHINE_S
    while time.time() < deadline and not read_records(tmp_path):
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # as hard as a crash or a pulled plug
    proc.wait()
    before = {r["seed"]: r["run_dir"] for r in read_records(tmp_path)}
    assert 1 <= len(before) < 3
    out = run_cli(*args, timeout=SLOW_MACHINE_S)
    assert out.returncode == 0, out.stderr
    after = read_records(tmp_path)
    assert sorted(r["seed"] for r in after) == [0, 1, 2]  # each run recorded exactly once
    assert all(r["status"] == "ok" for r in after)
    for r in after:  # the finished runs were kept, not redone
        if r["seed"] in before:
            assert r["run_dir"] == before[r["seed"]]


@pytest.mark.parametrize("launcher", [["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
                                      ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5"]])
@pytest.mark.slow
def test_parallel_launchers_record_every_run_once(tmp_path, launcher):
    out = run_cli("run", "-m", *launcher, "task=image", "task.dataset=digits", "model=gru,lstm",
                  "seed=0,1", "trainer.max_steps=2", "trainer.infer_iters=1",
                  "trainer.timing_warmup_steps=1", f"results_dir={tmp_path}", timeout=600)
    assert out.returncode == 0, out.stderr
    recs = read_records(tmp_path)
    assert sorted((r["model"], r["seed"]) for r in recs) == [("gru", 0), ("gru", 1), ("lstm", 0), ("lstm", 1)]
    assert len({r["run_dir"] for r in recs}) == 4 and all(r["status"] == "ok" for r in recs)


@pytest.mark.parametrize("launcher", [["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
                                      ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5"]])
@pytest.mark.slow
def test_a_failed_run_in_a_parallel_sweep_fails_the_sweep_not_the_others(tmp_path, launcher):
    # lr 1e30 makes the loss non-finite within a few steps; the runs live in other processes
    out = run_cli("run", "-m", *launcher, "task=image", "task.dataset=digits", "model=gru",
                  "trainer.lr=1e-3,1e30", "trainer.max_steps=6", "trainer.batch_size=32",
                  "trainer.infer_iters=1", "trainer.timing_warmup_steps=1",
                  f"results_dir={tmp_path}", timeout=600)
    assert out.returncode == 1
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("mhab: error: 1 run(s) of the sweep failed") and "non-finite" in last
    by_lr = {r["config"]["trainer"]["lr"]: r for r in read_records(tmp_path)}
    assert by_lr[1e-3]["status"] == "ok"
    assert by_lr[1e30]["status"] == "failed" and "non-finite training loss" in by_lr[1e30]["error"]


def _in_progress(root):
    return [p for p in root.glob("runs/*/best.pt") if not (p.parent / "record.json").exists()]


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_with_finished_results_intact(tmp_path):
    # 8 epochs: the second run is still training 2 s after the first one's record
    args = ["run", "-m", "task=image", "task.dataset=digits", "model=gru", "seed=0,1,2",
            "trainer.epochs=8", "trainer.batch_size=16", "trainer.infer_iters=1",
            "trainer.timing_warmup_steps=1", f"results_dir={tmp_path}"]
    # A shell without job control starts background jobs with SIGINT ignored, and Python
    # keeps an ignored SIGINT: restore the default so the child sees Ctrl-C as a user would.
    proc = subprocess.Popen([sys.executable, "-m", "bench", *args], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + SLOW_MACHINE_S
    while time.time() < deadline and not read_records(tmp_path):
        time.sleep(0.1)
    time.sleep(2)  # into the next run
    finished = [r for r in read_records(tmp_path) if r["status"] == "ok"]
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted" in err
    after = {r["run_dir"]: r for r in read_records(tmp_path)}
    assert finished and len(finished) < 3
    for rec in finished:  # finished runs are untouched
        assert after[rec["run_dir"]] == rec
    assert {r["status"] for r in after.values() if r not in finished} <= {"interrupted"}
    assert not _in_progress(tmp_path)  # the run that was cut short has its record


@pytest.mark.slow
def test_sigterm_records_the_run_it_cut_short(tmp_path):
    # `kill` or a scheduler's time limit sends SIGTERM: the run says so in its record, no traceback.
    args = ["run", "task=image", "task.dataset=digits", "model=gru", "trainer.epochs=200",
            "trainer.batch_size=16", "trainer.infer_iters=1", "trainer.timing_warmup_steps=1",
            f"results_dir={tmp_path}"]
    proc = subprocess.Popen([sys.executable, "-m", "bench", *args], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + SLOW_MACHINE_S
    while time.time() < deadline and not _in_progress(tmp_path):
        time.sleep(0.1)
    assert _in_progress(tmp_path), "the run did not reach its first checkpoint"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("mhab: error: terminated")
    (rec,) = read_records(tmp_path)
    assert rec["status"] == "interrupted" and "SIGTERM" in rec["error"]
    assert not _in_progress(tmp_path)


def test_the_fast_translation_recipe_is_the_translation_recipe_bucketed_in_8_epochs():
    fast = _compose(["task=translation", "trainer=translation_fast"]).trainer
    shipped = _compose(["task=translation"]).trainer
    assert (fast.epochs, fast.batching, shipped.epochs, shipped.batching) == (8, "bucketed", 15, "random")
    assert {k: v for k, v in fast.items() if k not in ("epochs", "batching")} == \
        {k: v for k, v in shipped.items() if k not in ("epochs", "batching")}
