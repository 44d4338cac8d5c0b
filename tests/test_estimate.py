"""mhab estimate: a sweep's wall time from the records of runs of the same experiments."""

from __future__ import annotations

import math

import pytest

from bench.estimate import by_task_and_model, estimate_jobs, parallel_wall_time, summary, sweep_configs
from bench.setup.compose import compose_config, experiment_hash, resolved_config, sweep_jobs
from tests.conftest import run_cli, write_record


def test_a_suite_sweeps_the_product_of_its_keys_and_the_command_line_narrows_it():
    jobs = sweep_jobs(["suite=standard"])
    assert len(jobs) == 5 * 3 * 3
    assert len({tuple(sorted(job)) for job in jobs}) == len(jobs)
    narrowed = sweep_jobs(["suite=standard", "seed=0", "model=attention,gru"])
    assert len(narrowed) == 5 * 2
    assert all("seed=0" in job for job in narrowed)


def test_a_suite_run_hashes_as_the_same_experiment_run_alone():
    alone = compose_config("config", ["task=image", "model=gru"], "run")
    in_suite = compose_config("config", ["suite=standard", "task=image", "model=gru"], "run")
    assert "suite" in alone and "suite" not in in_suite  # a suite is a @package _global_ override
    assert experiment_hash(alone) == experiment_hash(in_suite)
    lstm = compose_config("config", ["task=image", "model=lstm"], "run")
    assert experiment_hash(alone) != experiment_hash(lstm)


def test_the_standard_suite_trains_translation_under_the_fast_recipe():
    fast = compose_config("config", ["task=translation", "trainer=translation_fast", "model=gru"], "run")
    suite = compose_config("config", ["suite=standard", "task=translation", "model=gru"], "run")
    assert experiment_hash(suite) == experiment_hash(fast)


def _record(root, job: list[str], seed: int, wall_time_s: float, threads: int = 1, suffix: str = "",
            **fields) -> None:
    cfg = compose_config("config", [*job, f"seed={seed}"], "run")
    write_record(root, f"{'-'.join(o.split('=')[1] for o in job)}-s{seed}{suffix}", seed=seed,
                 task=cfg.task.name, dataset=cfg.task.dataset, model=cfg.model.name,
                 config=resolved_config(cfg), config_hash=experiment_hash(cfg), wall_time_s=wall_time_s,
                 environment={"device": "cpu", "torch_threads": threads}, **fields)


SWEEP = ["task=image,speech", "model=attention,gru", "seed=0,1"]


def test_each_run_is_estimated_from_its_own_seed_else_the_others_else_not_at_all(tmp_path):
    image_gru = ["task=image", "model=gru"]
    _record(tmp_path / "a", image_gru, seed=0, wall_time_s=100.0)
    _record(tmp_path / "b", image_gru, seed=2, wall_time_s=300.0, threads=2)  # a seed the sweep does not run
    _record(tmp_path / "b", ["task=image", "model=attention"], seed=1, wall_time_s=50.0)
    _record(tmp_path / "b", ["task=image", "model=attention"], seed=0, wall_time_s=999.0, status="failed")
    _record(tmp_path / "b", ["task=image", "model=attention", "trainer.epochs=2"], seed=0, wall_time_s=7.0)

    jobs = estimate_jobs(sweep_configs(SWEEP), [tmp_path / "a", tmp_path / "b"])
    jobs = jobs.set_index(["task", "model", "seed"])
    assert len(jobs) == 8
    assert jobs.loc[("image", "gru", 0), ["wall_time_s", "from"]].tolist() == [100.0, "this seed"]
    assert jobs.loc[("image", "gru", 1), ["wall_time_s", "from"]].tolist() == [200.0, "other seeds"]
    assert jobs.loc[("image", "gru", 1), "threads"] == "1,2"
    # The failed run and the 2-epoch run are other experiments' or not ok: only seed 1's counts.
    assert jobs.loc[("image", "attention", 0), "wall_time_s"] == 50.0
    assert jobs.loc[("speech", "gru", 0), "from"] == "no record"
    assert math.isnan(jobs.loc[("speech", "gru", 0), "wall_time_s"])

    table = by_task_and_model(jobs.reset_index()).set_index(["task", "model"])
    assert table.loc[("image", "gru"), ["runs", "estimated"]].tolist() == [2, 2]
    assert table.loc[("image", "gru"), "hours"] == pytest.approx(300 / 3600)
    assert table.loc[("image", "gru"), "min_per_run"] == pytest.approx(150 / 60)
    assert table.loc[("speech", "attention"), "estimated"] == 0
    text = summary(jobs.reset_index(), workers=2)
    assert text.startswith("8 runs; 4 estimated from records: 0.1 h one after another")
    assert "4 runs have no record" in text and "speech fsdd attention" in text


def test_runs_already_recorded_ok_in_the_sweeps_results_dir_are_done_and_not_in_the_total(tmp_path):
    results = tmp_path / "reference"
    sweep = [*SWEEP, f"results_dir={results}"]
    for seed, wall in ((0, 100.0), (1, 300.0)):  # named as runs are: ...-s<seed>-<hash>-<id>
        _record(results, ["task=image", "model=gru"], seed=seed, wall_time_s=wall, suffix="-h-1")
    _record(results, ["task=image", "model=attention"], seed=0, wall_time_s=50.0, status="failed",
            suffix="-h-2")
    jobs = estimate_jobs(sweep_configs(sweep), [results]).set_index(["task", "model", "seed"])
    assert jobs["done"].sum() == 2
    assert jobs.loc[("image", "gru"), "done"].all() and not jobs.loc[("image", "attention", 0), "done"]
    text = summary(jobs.reset_index(), workers=2)
    assert text.startswith("8 runs, 2 already recorded ok (the sweep skips them), 6 left; "
                           "0 estimated from records: 0.0 h one after another")
    table = by_task_and_model(jobs.reset_index()).set_index(["task", "model"])
    assert table.loc[("image", "gru"), ["runs", "done"]].tolist() == [2, 2]


def test_the_data_size_suite_is_estimated_from_the_whole_splits_runs(tmp_path):
    _record(tmp_path, ["task=image", "model=gru"], seed=0, wall_time_s=120.0)
    jobs = estimate_jobs(sweep_configs(["suite=scale_data", "task=image", "model=gru,lstm"]), [tmp_path])
    assert len(jobs) == 4 * 2 * 3  # fractions x models x seeds
    gru = jobs[jobs["model"] == "gru"]
    assert (gru["wall_time_s"] == 120.0).all()  # the same samples seen at every size
    assert set(gru["from"]) == {"this seed", "other seeds", "the whole training split"}
    assert jobs[jobs["model"] == "lstm"]["wall_time_s"].isna().all()  # never guessed


def test_parallel_workers_take_runs_in_order_as_each_frees():
    assert parallel_wall_time([3.0, 1.0, 1.0, 1.0], workers=2) == 3.0
    assert parallel_wall_time([1.0, 1.0, 1.0, 3.0], workers=2) == 4.0
    assert parallel_wall_time([2.0, 2.0], workers=1) == 4.0
    assert parallel_wall_time([2.0], workers=4) == 2.0


def test_estimate_command_prints_the_table_and_total(tmp_path):
    _record(tmp_path, ["task=image", "model=gru"], seed=0, wall_time_s=720.0)
    _record(tmp_path, ["task=image", "model=attention"], seed=0, wall_time_s=1800.0)
    out = run_cli("estimate", "-m", "task=image", "model=attention,gru,lstm", "--jobs", "2",
                  "--records", str(tmp_path))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["task", "dataset", "model", "runs", "done", "estimated", "min_per_run",
                                "hours", "threads"]
    assert lines[1].split()[:7] == ["image", "fashion_mnist", "attention", "1", "0", "1", "30"]
    assert out.stdout.strip().endswith(
        "3 runs; 2 estimated from records: 0.7 h one after another, 0.5 h on 2 parallel workers; "
        "1 runs have no record of their experiment and are not in the total (image fashion_mnist lstm)")
