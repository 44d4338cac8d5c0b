"""The Python API: the command line's runs, sweeps, tables, reports and errors, in-process."""

import pytest

from bench import api
from bench.errors import BenchError
from tests.conftest import run_cli

TINY = ["task=image", "task.dataset=digits", "trainer.epochs=1", "trainer.max_steps=3",
        "trainer.infer_iters=1", "model.dim=16", "model.depth=1", "logger=none"]


def test_run_returns_the_record_and_does_not_rerun_a_recorded_seed(tmp_path):
    rec = api.run([*TINY, f"results_dir={tmp_path}", "seed=4"])
    # what the run ran with beyond its config: its code, and how loaded the machine was
    assert set(rec["code"]) == {"model", "task"} and rec["code"]["task"]["module"] == "tasks.image"
    assert len(rec["load_average"]) == 3 and all(load >= 0 for load in rec["load_average"])
    assert rec["status"] == "ok" and rec["seed"] == 4 and rec["steps"] == 3
    assert (tmp_path / "runs" / rec["run_id"] / "record.json").exists()
    again = api.run([*TINY, f"results_dir={tmp_path}", "seed=4"])
    assert again["skipped"] and again["run_id"] == rec["run_id"]


def test_multirun_runs_every_combination_of_the_sweeps(tmp_path):
    records = api.multirun([*TINY, f"results_dir={tmp_path}", "model=attention,gru", "seed=0,1"])
    assert [(r["model"], r["seed"]) for r in records] == [("attention", 0), ("attention", 1),
                                                          ("gru", 0), ("gru", 1)]
    frame = api.table(tmp_path)
    assert len(frame) == 4 and set(frame["model"]) == {"attention", "gru"}
    path = api.report(tmp_path)
    assert path.name == "report.md" and "image / digits" in path.read_text()


def test_a_suites_own_sweeps_count_like_mhab_run_m():
    points = api.sweep(["suite=quick"])
    assert len(points) == 5 * 3
    assert {p[0] for p in points} == {f"task={t}" for t in ("image", "speech", "translation", "asr",
                                                             "summarization")}
    assert len(api.sweep(["suite=quick", "task=image"])) == 3  # the command line wins, key by key


def test_errors_are_the_clis_one_line_messages_as_exceptions(tmp_path):
    cli = run_cli("run", "task=video", f"results_dir={tmp_path}")
    message = cli.stderr.strip().removeprefix("mhab: error: ")
    with pytest.raises(BenchError) as e:
        api.run(["task=video", f"results_dir={tmp_path}"])
    assert str(e.value) == message
    with pytest.raises(BenchError, match="model.num_heads=3 does not divide model.dim=16"):
        api.multirun([*TINY, f"results_dir={tmp_path}", "model.num_heads=2,3"])
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())
    with pytest.raises(BenchError, match="no run records under"):
        api.table(tmp_path / "empty")


def test_a_sweep_without_values_is_an_error_in_the_api(tmp_path):
    for call in (api.sweep, api.multirun):
        with pytest.raises(BenchError, match="has no values, so there is nothing to run"):
            call([*TINY, f"results_dir={tmp_path}", "seed=range(0,0)"])
    assert not (tmp_path / "runs").exists()
