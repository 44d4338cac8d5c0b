"""Per-run logs read back with the tools' own readers; a failing logger never fails the run."""

import csv
import logging
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from bench.run.loggers import RunLogger, SafeLogger, hyper_parameters
from tests.conftest import read_records, run_cli

TINY = ["run", "task=image", "task.dataset=digits", "trainer.epochs=2", "trainer.max_steps=24",
        "trainer.infer_iters=1", "model.dim=16", "model.depth=1"]


def _run(tmp_path: Path, logger: str) -> tuple[dict, Path]:
    out = run_cli(*TINY, f"results_dir={tmp_path}", f"logger={logger}")
    assert out.returncode == 0, out.stderr
    rec = read_records(tmp_path)[0]
    return rec, Path(rec["run_dir"])


@pytest.mark.slow
def test_tensorboard_events_hold_training_validation_and_hparams(tmp_path):
    rec, run_dir = _run(tmp_path, "tensorboard")
    events = EventAccumulator(str(run_dir)).Reload()
    scalars = events.Tags()["scalars"]
    assert {"train/loss", "train/lr", "val/accuracy", "val/loss"} <= set(scalars)
    val = events.Scalars("val/accuracy")
    assert [e.value for e in val] == pytest.approx([h["val_metric"] for h in rec["history"]])
    assert [e.step for e in val] == [h["step"] for h in rec["history"]]
    steps = [e.step for e in events.Scalars("train/loss")]
    assert steps[:2] == [1, 10] and all(s % 10 == 0 for s in steps[1:])
    # the HParams tab: the config's values with the final test metric
    hparams = [f for f in run_dir.glob("**/events.out.tfevents.*")
               if "hparam/test_accuracy" in EventAccumulator(str(f)).Reload().Tags()["scalars"]]
    assert len(hparams) == 1
    final = EventAccumulator(str(hparams[0])).Reload().Scalars("hparam/test_accuracy")
    assert final[0].value == pytest.approx(rec["test_metric"])


@pytest.mark.slow
def test_csv_logger_writes_metrics_beside_the_record(tmp_path):
    rec, run_dir = _run(tmp_path, "csv")
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    val = [float(r["value"]) for r in rows if r["kind"] == "val" and r["name"] == "accuracy"]
    assert val == pytest.approx([h["val_metric"] for h in rec["history"]])
    assert [float(r["value"]) for r in rows if r["kind"] == "test"] == pytest.approx([rec["test_metric"]])


@pytest.mark.slow
def test_logger_none_writes_no_logs(tmp_path):
    _, run_dir = _run(tmp_path, "none")
    assert not list(run_dir.glob("events.out.tfevents.*")) and not (run_dir / "metrics.csv").exists()


class Exploding(RunLogger):
    def __init__(self) -> None:
        self.calls = 0

    def step(self, step, values):
        self.calls += 1
        raise OSError(28, "No space left on device")


def test_a_failing_logger_is_reported_once_and_switched_off(caplog):
    inner = Exploding()
    logger = SafeLogger("tensorboard", lambda: inner)
    with caplog.at_level(logging.WARNING):
        for step in range(5):
            logger.step(step, {"loss": 1.0})
        logger.epoch(5, {"accuracy": 0.5})
        logger.finish({"test_metric": 0.5})
    assert inner.calls == 1
    warnings = [r.getMessage() for r in caplog.records if "logger=tensorboard failed" in r.getMessage()]
    assert len(warnings) == 1 and "No space left on device" in warnings[0]


def test_a_logger_that_cannot_start_leaves_the_run_alone(caplog):
    def broken():
        raise ConnectionError("tracking server gone")

    logger = SafeLogger("mlflow", broken)
    logger.step(1, {"loss": 1.0})
    logger.abort("failed")
    assert logger.inner is None and "tracking server gone" in caplog.text


def test_hyper_parameters_are_the_configs_flat_scalars():
    flat = hyper_parameters({"model": {"dim": 64, "betas": [0.9, 0.99], "pool": None},
                             "trainer": {"lr": 0.001, "compile": False}, "seed": 3})
    assert flat == {"model.dim": 64, "model.betas": "[0.9, 0.99]", "trainer.lr": 0.001,
                    "trainer.compile": False, "seed": 3}


@pytest.mark.slow
def test_mlflow_run_in_a_local_sqlite_store(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow", reason="the mlflow extra: pip install 'mha-bench[mlflow]'")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # set_tracking_uri below writes it
    rec, run_dir = _run(tmp_path, "mlflow")
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["mha-bench/image/digits"], output_format="list")
    assert len(runs) == 1
    run = runs[0]
    assert run.info.run_name == rec["run_id"] and run.info.status == "FINISHED"
    assert run.data.tags["model"] == "attention" and run.data.tags["seed"] == "0"
    assert run.data.params["trainer.max_steps"] == "24"
    assert run.data.metrics["test_accuracy"] == pytest.approx(rec["test_metric"])
    history = mlflow.MlflowClient().get_metric_history(run.info.run_id, "val_accuracy")
    assert [m.value for m in history] == pytest.approx([h["val_metric"] for h in rec["history"]])
    artifacts = [a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)]
    assert "record.json" in artifacts and list((tmp_path / "mlartifacts").glob("**/record.json"))


@pytest.mark.slow
def test_the_report_of_mlflow_runs_is_logged_beside_them(tmp_path, caplog, monkeypatch):
    mlflow = pytest.importorskip("mlflow", reason="the mlflow extra: pip install 'mha-bench[mlflow]'")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    from bench.report.render import write_report

    _run(tmp_path, "mlflow")
    write_report(tmp_path)
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = mlflow.search_runs(experiment_names=["mha-bench/reports"], output_format="list")
    assert run.info.run_name == f"report {tmp_path.name}" and run.data.tags["runs"] == "1"
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    assert artifacts == {"report.md", "report.html"}
    # A store that cannot be written leaves the report written and says so once.
    (tmp_path / "mlflow.db").write_text("not a database")
    paths = write_report(tmp_path)
    assert all(p.is_file() for p in paths) and "not logged to MLflow" in caplog.text


@pytest.mark.slow
def test_a_report_of_runs_without_mlflow_makes_no_store(tmp_path):
    from bench.report.render import write_report

    _run(tmp_path, "csv")
    write_report(tmp_path)
    assert not (tmp_path / "mlflow.db").exists()


def test_runs_in_one_process_log_to_their_own_results_dirs_store(tmp_path, monkeypatch):
    """mlflow.set_tracking_uri also sets MLFLOW_TRACKING_URI; the second run of a Python
    session must not take the first one's store for the user's server."""
    mlflow = pytest.importorskip("mlflow", reason="the mlflow extra: pip install 'mha-bench[mlflow]'")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    from bench import api

    for name in ("first", "second"):
        api.run([*TINY[1:], f"results_dir={tmp_path / name}", "logger=mlflow"])
    for name in ("first", "second"):
        mlflow.set_tracking_uri(f"sqlite:///{(tmp_path / name / 'mlflow.db').resolve()}")
        runs = mlflow.search_runs(experiment_names=["mha-bench/image/digits"], output_format="list")
        assert len(runs) == 1, name
