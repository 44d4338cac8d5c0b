"""Publishing a written report beside the runs it reads, where they were logged to MLflow."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from bench.run.loggers import REPORT_EXPERIMENT, use_experiment

log = logging.getLogger(__name__)


def publish_report(results_dir: Path, records: list[dict[str, Any]], files: list[Path]) -> None:
    """Where the results dir's runs were logged to MLflow (a record says ``logger: mlflow``),
    the report's files become the artifacts of an MLflow run named after the results dir, in
    the same store, so the report sits beside the runs it reads. Like a run's logger, it is a
    side channel: a failure is logged once and the report stands."""
    if not any((r.get("config") or {}).get("logger") == "mlflow" for r in records):
        return
    try:
        import mlflow

        use_experiment(mlflow, results_dir, REPORT_EXPERIMENT)
        with mlflow.start_run(run_name=f"report {results_dir.resolve().name}",
                              tags={"results_dir": str(results_dir.resolve()), "runs": str(len(records))}):
            for path in files:
                mlflow.log_artifact(str(path))
    except Exception as e:  # noqa: BLE001 - any failure of a side channel, reported once
        log.warning("the report was written, but not logged to MLflow (%s: %s)", type(e).__name__, e)
