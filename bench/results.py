"""All run records under a results dir as one pandas DataFrame, saved as parquet and CSV,
and aggregated over seeds with t-distribution confidence intervals."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pandas as pd
from scipy import stats

from bench.io import atomic_write, atomic_write_text
from bench.record import RECORD, read_record

COLUMNS = [
    "task", "dataset", "model", "model_family", "variant", "seed", "status", "metric_name",
    "test_metric", "val_metric", "params", "train_samples_per_s", "infer_samples_per_s",
    "infer_latency_ms_median", "flops_per_sample", "train_activation_mb", "peak_memory_mb", "epochs_run",
    "wall_time_s", "device", "device_name", "config_hash", "run_id", "error",
]
GROUP = ["task", "dataset", "model", "variant"]


def _row(rec: dict) -> dict:
    env = rec.get("environment") or {}
    row = {key: rec.get(key) for key in COLUMNS}
    row["device"], row["device_name"] = env.get("device"), env.get("device_name")
    return row


def load(results_dir: str | Path) -> pd.DataFrame:
    """One row per run record under ``results_dir/runs`` (directories without a record, such
    as a run killed before it finished, are not rows)."""
    rows = [_row(read_record(p)) for p in sorted(Path(results_dir).glob(f"runs/*/{RECORD}"))]
    return pd.DataFrame(rows, columns=COLUMNS)


def save(frame: pd.DataFrame, results_dir: str | Path, stem: str = "results") -> list[Path]:
    """Write ``stem.parquet`` and ``stem.csv`` next to the runs, atomically."""
    results_dir = Path(results_dir)

    def parquet(f):
        buffer = io.BytesIO()
        frame.to_parquet(buffer, index=False)
        f.write(buffer.getvalue())

    return [atomic_write(results_dir / f"{stem}.parquet", parquet),
            atomic_write_text(results_dir / f"{stem}.csv", frame.to_csv(index=False))]


def confidence_interval(values: pd.Series, level: float = 0.95) -> float:
    """Half-width of the t-distribution CI of the mean; NaN for fewer than two values."""
    n = values.count()
    if n < 2:
        return math.nan
    return float(stats.t.ppf((1 + level) / 2, n - 1) * values.std(ddof=1) / math.sqrt(n))


def aggregate(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean, std and 95% CI of the test metric over seeds, per task, dataset, model and
    variant (ok runs only), with parameters and throughput beside them."""
    ok = frame[frame["status"] == "ok"]
    if ok.empty:
        return pd.DataFrame(columns=[*GROUP, "metric_name", "seeds", "mean", "std", "ci95"])
    grouped = ok.groupby(GROUP, dropna=False)
    out = grouped.agg(
        metric_name=("metric_name", "first"),
        seeds=("seed", "nunique"),
        mean=("test_metric", "mean"),
        std=("test_metric", "std"),
        params=("params", "mean"),
        flops_per_sample=("flops_per_sample", "mean"),
        train_samples_per_s=("train_samples_per_s", "mean"),
        infer_samples_per_s=("infer_samples_per_s", "mean"),
        train_activation_mb=("train_activation_mb", "mean"),
        peak_memory_mb=("peak_memory_mb", "max"),
        wall_time_s=("wall_time_s", "mean"),
    ).reset_index()
    out.insert(out.columns.get_loc("std") + 1, "ci95",
               [confidence_interval(g["test_metric"]) for _, g in grouped])
    return out


def summary_columns(frame: pd.DataFrame) -> list[str]:
    wanted = ["task", "dataset", "model", "seed", "status", "test_metric", "params",
              "train_samples_per_s", "infer_samples_per_s", "wall_time_s"]
    return [c for c in wanted if c in frame.columns]
