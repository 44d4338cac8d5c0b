"""Per-run logs in the tools researchers already use: TensorBoard event files, an MLflow
tracking store, or a CSV of metrics, beside the record (which stays the source of truth).

A logger is a side channel: when one fails (disk full, server gone) the run is told once, in
the log, and goes on without it; nothing a logger does can fail or corrupt the run.
"""

from __future__ import annotations

import contextlib
import csv
import logging
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

LOGGERS = ("tensorboard", "mlflow", "csv", "none")
log = logging.getLogger(__name__)


class RunLogger:
    """What the engine reports as it trains; this base logs nothing."""

    def step(self, step: int, values: dict[str, float]) -> None:
        """Training values at an optimizer step: loss, learning rate, samples/s."""

    def epoch(self, step: int, values: dict[str, float]) -> None:
        """Validation values after an epoch, placed at the step it ended on."""

    def finish(self, record: dict[str, Any]) -> None:
        """The finished run: hyper-parameters with the final test metric, the record."""

    def abort(self, status: str) -> None:
        """The run failed or was interrupted (``status`` as the record says)."""


class CSVLogger(RunLogger):
    """``metrics.csv`` in the run directory: one row per logged value (step, kind, name, value)."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "metrics.csv"
        with self.path.open("w", newline="") as f:
            csv.writer(f).writerow(["step", "kind", "name", "value"])

    def _rows(self, step: int, kind: str, values: dict[str, float]) -> None:
        with self.path.open("a", newline="") as f:
            csv.writer(f).writerows([step, kind, k, v] for k, v in values.items())

    def step(self, step: int, values: dict[str, float]) -> None:
        self._rows(step, "train", values)

    def epoch(self, step: int, values: dict[str, float]) -> None:
        self._rows(step, "val", values)

    def finish(self, record: dict[str, Any]) -> None:
        if record.get("test_metric") is not None:  # a tuning trial has none
            self._rows(record.get("steps", 0), "test", {"test_metric": record["test_metric"]})


class TensorBoardLogger(RunLogger):
    """Event files in the run directory, so ``tensorboard --logdir results`` shows every run:
    ``train/*`` per logged step, ``val/*`` per epoch, and the hyper-parameters (the config's
    scalar values) with the final test metric in the HParams tab."""

    def __init__(self, run_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter  # imports tensorboard: only when chosen

        self.writer = SummaryWriter(log_dir=str(run_dir))

    def step(self, step: int, values: dict[str, float]) -> None:
        for name, value in values.items():
            self.writer.add_scalar(f"train/{name}", value, step)

    def epoch(self, step: int, values: dict[str, float]) -> None:
        for name, value in values.items():
            self.writer.add_scalar(f"val/{name}", value, step)
        self.writer.flush()

    def finish(self, record: dict[str, Any]) -> None:
        test = record.get("test_metric")  # a tuning trial has none
        metrics = {f"hparam/test_{record['metric_name']}": math.nan if test is None else test,
                   "hparam/val_metric": record.get("val_metric") or math.nan}
        self.writer.add_hparams(hyper_parameters(record["config"]), metrics, run_name=".")
        self.writer.close()

    def abort(self, status: str) -> None:
        self.writer.close()


class MLflowLogger(RunLogger):
    """One MLflow run per benchmark run: params from the config, metrics as they come, tags from
    the record, the record as an artifact. The store is ``MLFLOW_TRACKING_URI`` when set, else
    a SQLite file under the results dir (``mlflow.db``, no server; artifacts in
    ``mlartifacts/`` beside it)."""

    def __init__(self, run_dir: Path, results_dir: Path, base: dict[str, Any]) -> None:
        import mlflow  # an optional extra: pip install 'mha-bench[mlflow]'

        self.mlflow = mlflow
        use_experiment(mlflow, results_dir, f"mha-bench/{base['task']}/{base['dataset']}")
        self.run = mlflow.start_run(run_name=base["run_id"], tags={
            key: str(base[key]) for key in ("task", "dataset", "model", "model_family", "variant",
                                            "seed", "config_hash", "run_id") if key in base})
        self.run_dir = run_dir
        mlflow.log_params(hyper_parameters(base["config"]))

    def step(self, step: int, values: dict[str, float]) -> None:
        self.mlflow.log_metrics({f"train_{k}": v for k, v in values.items()}, step=step)

    def epoch(self, step: int, values: dict[str, float]) -> None:
        self.mlflow.log_metrics({f"val_{k}": v for k, v in values.items()}, step=step)

    def finish(self, record: dict[str, Any]) -> None:
        if record.get("test_metric") is not None:  # a tuning trial has none
            self.mlflow.log_metrics({f"test_{record['metric_name']}": record["test_metric"]})
        self.mlflow.log_artifact(str(self.run_dir / "record.json"))
        self.mlflow.end_run()

    def abort(self, status: str) -> None:
        self.mlflow.end_run(status="KILLED" if status == "interrupted" else "FAILED")


REPORT_EXPERIMENT = "mha-bench/reports"
# MLflow retries an unreachable server for minutes by default (7 tries, 120 s timeouts); a side
# channel should not hold a run up: one try with a short timeout, unless the user set these.
SERVER_PATIENCE = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}
_LOCAL_STORES: set[str] = set()  # the tracking URIs this process set itself


def use_experiment(mlflow: Any, results_dir: Path, name: str) -> None:
    """Point MLflow at the user's tracking server (``MLFLOW_TRACKING_URI``) or else at the
    results dir's own SQLite store, with artifacts beside it rather than in ./mlruns, and
    make ``name`` the active experiment. ``mlflow.set_tracking_uri`` also writes the
    environment variable, so a URI this process set is not mistaken for the user's when the
    next run (a sweep from Python) has another results dir."""
    user_uri = os.environ.get("MLFLOW_TRACKING_URI")
    for key, value in SERVER_PATIENCE.items():  # a server that does not answer: give up soon, once
        os.environ.setdefault(key, value)
    if not user_uri or user_uri in _LOCAL_STORES:
        # SQLAlchemy percent-decodes the path of a sqlite URL: a '%' in a folder name is escaped
        local = f"sqlite:///{str((results_dir / 'mlflow.db').resolve()).replace('%', '%25')}"
        _LOCAL_STORES.add(local)
        mlflow.set_tracking_uri(local)
        if mlflow.get_experiment_by_name(name) is None:
            with contextlib.suppress(mlflow.exceptions.MlflowException):  # a parallel worker made it
                mlflow.create_experiment(name, (results_dir / "mlartifacts").resolve().as_uri())
    mlflow.set_experiment(name)


def hyper_parameters(config: dict[str, Any]) -> dict[str, Any]:
    """The config's scalar values, flattened to ``group.key`` (TensorBoard's and MLflow's
    parameters are flat and scalar)."""
    flat: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}{key}.")
        elif isinstance(node, bool | int | float | str):
            flat[prefix[:-1]] = node
        elif node is not None:
            flat[prefix[:-1]] = str(node)

    walk({k: v for k, v in config.items() if k not in ("hydra",)}, "")
    return flat


class SafeLogger(RunLogger):
    """Calls the wrapped logger; its first failure is reported once and turns it off."""

    def __init__(self, name: str, factory: Callable[[], RunLogger]) -> None:
        self.name, self.inner = name, None
        self.inner = self._guard(factory)

    def _guard(self, action: Callable[[], Any]) -> Any:
        try:
            return action()
        except Exception as e:  # noqa: BLE001 - whatever a logger raises, the run goes on
            reason = " ".join(str(e).split())
            log.warning("logger=%s failed and is off for the rest of this run (%s: %s); the run and "
                        "its record are unaffected", self.name, type(e).__name__,
                        reason if len(reason) <= 200 else reason[:200] + "...")
            self.inner = None
            return None

    def step(self, step: int, values: dict[str, float]) -> None:
        if self.inner is not None:
            self._guard(lambda: self.inner.step(step, values))

    def epoch(self, step: int, values: dict[str, float]) -> None:
        if self.inner is not None:
            self._guard(lambda: self.inner.epoch(step, values))

    def finish(self, record: dict[str, Any]) -> None:
        if self.inner is not None:
            self._guard(lambda: self.inner.finish(record))

    def abort(self, status: str) -> None:
        if self.inner is not None:
            self._guard(lambda: self.inner.abort(status))


def build_logger(name: str, run_dir: Path, results_dir: Path, base: dict[str, Any]) -> RunLogger:
    """The run's logger by ``logger=`` name, wrapped so that its failures never reach the run."""
    factories = {
        "tensorboard": lambda: TensorBoardLogger(run_dir),
        "mlflow": lambda: MLflowLogger(run_dir, results_dir, base),
        "csv": lambda: CSVLogger(run_dir),
    }
    if name == "none":
        return RunLogger()
    return SafeLogger(name, factories[name])
