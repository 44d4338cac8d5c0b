"""How long a sweep would take on this machine, from the wall times of runs already recorded.

Each run the sweep would start is composed as ``mhab run`` composes it; its config hash (which
leaves out the seed, results_dir and the other keys that do not change what is trained) finds
the recorded runs of the same experiment, in any results dir given. The estimate of a run is
the wall time of its own seed's record, else the mean over the experiment's other seeds; a
run with no record of its experiment is counted apart, never guessed. A run already recorded
ok in the sweep's own results dir is done (the sweep skips it): the totals are of what is left.
"""

from __future__ import annotations

import heapq
import math
from pathlib import Path
from statistics import mean

import pandas as pd
from omegaconf import DictConfig

from bench.errors import BenchError
from bench.records.defaults import FULL_TRAINING_SET
from bench.records.record import find_ok_record
from bench.records.table import read_records
from bench.setup.compose import compose_config, experiment_hash, sweep_jobs

GROUP = ["task", "dataset", "model"]


def read_all(results_dirs: list[str | Path]) -> list[dict]:
    return [rec for results_dir in results_dirs for rec in read_records(results_dir)]


def recorded_wall_times(records: list[dict]) -> dict[str, dict[int, list[dict]]]:
    """The ok runs of ``records`` by config hash (as ``read_records`` computes it from each
    record's config), then seed: wall time and threads."""
    found: dict[str, dict[int, list[dict]]] = {}
    for rec in records:
        if rec.get("status") != "ok" or not rec.get("config") or rec.get("wall_time_s") is None:
            continue
        runs = found.setdefault(rec["config_hash"], {}).setdefault(int(rec["seed"]), [])
        runs.append({"wall_time_s": float(rec["wall_time_s"]),
                     "threads": (rec.get("environment") or {}).get("torch_threads")})
    return found


def sweep_configs(overrides: list[str]) -> list[DictConfig]:
    """The config of every run ``mhab run -m OVERRIDES`` would start, composed as it would."""
    return [compose_config("config", job, "estimate") for job in sweep_jobs(overrides)]


def estimate_jobs(configs: list[DictConfig], results_dirs: list[str | Path]) -> pd.DataFrame:
    """One row per run of a sweep (``sweep_configs``): what it trains, and the wall time its
    records say it takes (NaN where none of its experiment is recorded)."""
    recorded = recorded_wall_times(read_all(results_dirs))
    rows = []
    for cfg in configs:
        by_seed = recorded.get(experiment_hash(cfg), {})
        own = by_seed.get(int(cfg.seed), [])
        basis = own or [run for runs in by_seed.values() for run in runs]
        source = "this seed" if own else "other seeds" if basis else "no record"
        if not basis and cfg.task.get("train_fraction", FULL_TRAINING_SET) < FULL_TRAINING_SET:
            # a training subset keeps the budget in samples seen (bench.setup.subsets): it
            # trains as long as the whole split does
            by_seed = recorded.get(experiment_hash(full_data(cfg)), {})
            basis = [run for runs in by_seed.values() for run in runs]
            source = "the whole training split" if basis else source
        done = Path(cfg.results_dir).is_dir() and find_ok_record(
            cfg.results_dir, experiment_hash(cfg), int(cfg.seed)) is not None
        rows.append({
            "task": cfg.task.name, "dataset": cfg.task.dataset, "model": cfg.model.name,
            "seed": int(cfg.seed), "done": done, "records": sum(len(runs) for runs in by_seed.values()),
            "from": source,
            "wall_time_s": mean(run["wall_time_s"] for run in basis) if basis else math.nan,
            "threads": ",".join(sorted({str(run["threads"]) for run in basis if run["threads"]})),
        })
    return pd.DataFrame(rows)


def full_data(cfg: DictConfig) -> DictConfig:
    """``cfg`` on the whole training split."""
    whole = cfg.copy()
    whole.task.train_fraction = FULL_TRAINING_SET
    return whole


def tune_jobs(plan, results_dirs: list[str | Path]) -> pd.DataFrame:
    """One row per run ``mhab tune`` would start (``bench.tune.plan.Plan``): each family's
    trials, then its finals. A run's estimate is the mean wall time of its study's recorded
    runs of the same role, else of the family's default-recipe runs (same overrides, no
    sampled values): a trial trains as long as a default run when its epochs are the
    recipe's, and skips the test."""
    records = read_all(results_dirs)
    recorded = recorded_wall_times(records)
    studies: dict[tuple[str, str], list[float]] = {}
    for rec in records:
        if rec.get("status") == "ok" and rec.get("tuning") and rec.get("wall_time_s") is not None:
            studies.setdefault((rec["tuning"]["study"], rec["tuning"]["role"]), []).append(
                float(rec["wall_time_s"]))
    rows = []
    settings = plan.settings
    for family in plan.families:
        default = compose_config("config", family.overrides, "estimate")
        defaults = [run for runs in recorded.get(experiment_hash(default), {}).values() for run in runs]
        for role, count in (("trial", settings.trials), ("final", settings.seeds if settings.finals else 0)):
            own = studies.get((family.study, role), [])
            basis = own or [run["wall_time_s"] for run in defaults]
            for i in range(count):
                rows.append({
                    "task": plan.task, "dataset": plan.dataset, "model": f"{family.model} {role}s",
                    "seed": i, "records": len(basis),
                    "from": "this study" if own else "default recipe" if basis else "no record",
                    "wall_time_s": mean(basis) if basis else math.nan,
                    "threads": ",".join(sorted({str(run["threads"]) for run in defaults if run["threads"]})),
                })
    return pd.DataFrame(rows)


def _union(threads: pd.Series) -> str:
    return ",".join(sorted({n for text in threads if text for n in text.split(",")}))


def by_task_and_model(jobs: pd.DataFrame) -> pd.DataFrame:
    """Runs, how many have an estimate, the mean minutes per run and the total hours, per task
    and model, in the sweep's order."""
    jobs = jobs.assign(done=jobs.get("done", False))
    grouped = jobs.groupby(GROUP, sort=False)
    table = grouped.agg(runs=("seed", "size"), done=("done", "sum"), estimated=("wall_time_s", "count"),
                        min_per_run=("wall_time_s", "mean"), hours=("wall_time_s", "sum"),
                        threads=("threads", _union))
    table["min_per_run"] /= 60
    table["hours"] /= 3600
    return table.reset_index()


def parallel_wall_time(wall_times: list[float], workers: int) -> float:
    """The wall time of runs dispatched in order, each to the first worker free, as a parallel
    launcher (joblib) does it."""
    free_at = [0.0] * workers
    for wall_time in wall_times:
        heapq.heapreplace(free_at, free_at[0] + wall_time)
    return max(free_at)


def summary(jobs: pd.DataFrame, workers: int = 1) -> str:
    """The total of what is left in words (runs already recorded ok are done), saying what it
    leaves out."""
    done = jobs["done"] if "done" in jobs else pd.Series(False, index=jobs.index)
    text = f"{len(jobs)} runs"
    if done.any():
        text += f", {int(done.sum())} already recorded ok (the sweep skips them), {int((~done).sum())} left"
    jobs = jobs[~done]
    measured = jobs["wall_time_s"].notna()
    hours = jobs["wall_time_s"].sum() / 3600
    text += f"; {measured.sum()} estimated from records: {hours:.1f} h one after another"
    if workers > 1:
        parallel = parallel_wall_time(jobs.loc[measured, "wall_time_s"].tolist(), workers) / 3600
        text += f", {parallel:.1f} h on {workers} parallel workers"
    if not measured.all():
        missing = jobs.loc[~measured, GROUP].drop_duplicates().astype(str).agg(" ".join, axis=1)
        text += (f"; {(~measured).sum()} runs have no record of their experiment and are not in "
                 f"the total ({', '.join(missing)})")
    return text


def check_results_dirs(results_dirs: list[str]) -> None:
    for results_dir in results_dirs:
        if not Path(results_dir).is_dir():
            raise BenchError(f"results dir '{results_dir}' not found; pass --records DIR for a "
                             f"folder that 'mhab run' wrote records to")
