"""All run records under a results dir as one pandas DataFrame."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.record import RECORD, read_record

COLUMNS = [
    "task", "dataset", "model", "variant", "seed", "status", "metric_name", "test_metric",
    "val_metric", "params", "train_samples_per_s", "infer_samples_per_s",
    "infer_latency_ms_median", "flops_per_sample", "peak_memory_mb", "epochs_run",
    "wall_time_s", "config_hash", "run_id", "error",
]


def load(results_dir: str | Path) -> pd.DataFrame:
    """One row per run record under ``results_dir/runs``; nested fields are left out."""
    rows = []
    for path in sorted(Path(results_dir).glob(f"runs/*/{RECORD}")):
        rec = read_record(path)
        rows.append({key: rec.get(key) for key in COLUMNS})
    return pd.DataFrame(rows, columns=COLUMNS)


def summary_columns(frame: pd.DataFrame) -> list[str]:
    wanted = ["task", "dataset", "model", "seed", "status", "test_metric", "params",
              "train_samples_per_s", "infer_samples_per_s", "wall_time_s"]
    return [c for c in wanted if c in frame.columns]
