"""What ``mhab tune``'s records say: each study's expected best validation score against the
number of trials (Dodge et al., EMNLP 2019, "Show Your Work"), the budgets over which one
family stays ahead of another, each family's best settings and what its tuning cost. Read
from run records (their ``tuning`` tag); where they and the study storage can disagree, from
what ``mhab tune`` did: the best trial is the one its finals repeat, and the failed trials are
the storage's count (a worker killed mid-trial leaves no record, only a failed trial)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from bench.records.record import UNHASHED_KEYS, tuning_role
from bench.records.table import flatten_config


def expected_max(scores: list[float], n: int, higher_is_better: bool = True) -> tuple[float, float]:
    """The expected best of ``n`` trials drawn with replacement from ``scores`` (the study's
    trials, independent draws), and its standard deviation: with v(1) <= ... <= v(N) ordered
    worst to best, E[best of n] = sum_i v(i) * ((i/N)^n - ((i-1)/N)^n) (Dodge et al. 2019).
    Written out here: no maintained library ships the estimator."""
    ordered = np.sort(np.asarray(scores, dtype=float))
    if not higher_is_better:
        ordered = ordered[::-1]  # worst (highest) first
    total = len(ordered)
    i = np.arange(1, total + 1)
    weights = (i / total) ** n - ((i - 1) / total) ** n
    mean = float(np.sum(weights * ordered))
    second = float(np.sum(weights * ordered**2))
    return mean, math.sqrt(max(0.0, second - mean**2))


def _trials(records: list[dict]) -> pd.DataFrame:
    rows = [{"task": r["task"], "dataset": r["dataset"], "model": r["model"],
             "model_family": r.get("model_family"), "study": r["tuning"]["study"],
             "trial": r["tuning"]["trial"], "status": r["status"], "val_metric": r.get("val_metric"),
             "higher_is_better": r.get("higher_is_better", True), "metric_name": r.get("metric_name"),
             "wall_s": r.get("wall_time_s"), "config": r.get("config") or {}}
            for r in records if tuning_role(r) == "trial"]
    return pd.DataFrame(rows)


def trials_table(records: list[dict]) -> pd.DataFrame:
    """One row per tuning trial run (ok or not), the latest record of each trial."""
    trials = _trials(records)
    if trials.empty:
        return trials
    return trials.drop_duplicates(["study", "trial"], keep="last").reset_index(drop=True)


def expected_max_curves(trials: pd.DataFrame) -> pd.DataFrame:
    """Per study: the expected best validation score of n trials, n = 1..N (N: its ok trials),
    with its standard deviation, and the wall time n trials take on average."""
    rows = []
    ok = trials[trials["status"] == "ok"] if not trials.empty else trials
    for (task, dataset, model, study), group in ok.groupby(["task", "dataset", "model", "study"]) \
            if not ok.empty else ():
        scores, higher = group["val_metric"].astype(float).tolist(), bool(group["higher_is_better"].iloc[0])
        per_trial_s = float(group["wall_s"].astype(float).mean())
        for n in range(1, len(scores) + 1):
            mean, std = expected_max(scores, n, higher)
            rows.append({"task": task, "dataset": dataset, "model": model, "study": study,
                         "model_family": group["model_family"].iloc[0], "n": n, "expected": mean,
                         "std": std, "wall_min": n * per_trial_s / 60, "trials": len(scores),
                         "metric_name": group["metric_name"].iloc[0], "higher_is_better": higher})
    return pd.DataFrame(rows)


def ordering(a: pd.DataFrame, b: pd.DataFrame, name_a: str, name_b: str) -> str:
    """Over which budgets ``a``'s expected-best curve is ahead of ``b``'s, in words (n from 1
    to the smaller study's trials)."""
    higher = bool(a["higher_is_better"].iloc[0])
    n = min(a["n"].max(), b["n"].max())
    ea = a.set_index("n")["expected"].loc[1:n]
    eb = b.set_index("n")["expected"].loc[1:n]
    ahead = (ea > eb) if higher else (ea < eb)
    tied = np.isclose(ea, eb)
    if n == 1:  # one trial: a point, not a curve over budgets
        standing = "tie" if tied.all() else "ahead of" if ahead.all() else "behind"
        return (f"{name_a} and {name_b} tie after their one trial" if standing == "tie" else
                f"{name_a} {standing} {name_b} after one trial each (no curve over budgets)")
    if tied.all():
        return f"{name_a} and {name_b} tie at every budget from 1 to {n} trials"
    if ahead[~tied].all():
        return f"{name_a} ahead of {name_b} at every budget from 1 to {n} trials"
    if not ahead.any():
        return f"{name_a} behind {name_b} at every budget from 1 to {n} trials"
    flips = [k for k in range(2, n + 1) if ahead[k] != ahead[k - 1]]
    if len(flips) == 1:
        k = flips[0]
        who, other = (name_a, name_b) if ahead[k] else (name_b, name_a)
        return (f"{who} ahead of {other} from {k} trials on (the curves cross at about {k} trials): no "
                f"budget-free verdict")
    return (f"the curves cross {len(flips)} times (at {', '.join(map(str, flips))} trials): no "
            f"budget-free verdict")


def best_settings(trials: pd.DataFrame, chosen: dict[str, int] | None = None) -> pd.DataFrame:
    """Per study: its best trial and the values of the keys its trials varied (the sampled
    ones: the keys whose recorded values differ between trials). ``chosen``: the trial each
    study's finals repeat (what ``mhab tune`` took as best, among its first ``tune.trials``),
    named instead of the best of every recorded trial."""
    rows, chosen = [], chosen or {}
    ok = trials[trials["status"] == "ok"] if not trials.empty else trials
    for (task, dataset, model, study), group in ok.groupby(["task", "dataset", "model", "study"]) \
            if not ok.empty else ():
        higher = bool(group["higher_is_better"].iloc[0])
        best = group.loc[group["val_metric"].astype(float).idxmax() if higher
                         else group["val_metric"].astype(float).idxmin()]
        if study in chosen and (group["trial"] == chosen[study]).any():
            best = group[group["trial"] == chosen[study]].iloc[0]
        # what the trials varied, not where they ran (cache_dir, results_dir: not the experiment)
        flat = [flatten_config({k: v for k, v in c.items() if k not in {"tuning", "hydra", *UNHASHED_KEYS}})
                for c in group["config"]]
        varied = sorted(k for k in set().union(*flat) if len({f.get(k) for f in flat}) > 1)
        mine = flatten_config(best["config"])
        rows.append({"task": task, "dataset": dataset, "model": model, "study": study,
                     "best trial": int(best["trial"]), "val": float(best["val_metric"]),
                     "settings": ", ".join(f"{k}={_short(mine.get(k))}" for k in varied)})
    return pd.DataFrame(rows)


def _short(value: str | None) -> str:
    try:
        number = json.loads(value) if value is not None else None
    except ValueError:
        return str(value)
    return f"{number:.3g}" if isinstance(number, float) else str(number)


def tuning_cost(trials: pd.DataFrame, stored: dict[str, dict[str, int]] | None = None) -> pd.DataFrame:
    """Per study: trials finished, failed, and the wall time of them all; ``stored``: each
    study's trial counts by state in the storage, whose failures are taken where it has the study."""
    if trials.empty:
        return pd.DataFrame()
    grouped = trials.groupby(["task", "dataset", "model", "study"])
    cost = grouped.agg(trials=("status", lambda s: int((s == "ok").sum())),
                       failed=("status", lambda s: int((s != "ok").sum())),
                       wall_min=("wall_s", lambda s: float(s.astype(float).sum()) / 60)).reset_index()
    for i, study in cost["study"].items():
        if study in (stored or {}):
            cost.loc[i, "failed"] = stored[study].get("FAIL", 0)
    return cost


def stored_trial_states(results_dir: Path) -> dict[str, dict[str, int]]:
    """Each study's trial counts by state in the default storage under ``results_dir``
    (``tuning/optuna.db``), or nothing where there is none or it cannot be read."""
    path = Path(results_dir) / "tuning" / "optuna.db"
    if not path.is_file():
        return {}
    try:
        import optuna

        storage = optuna.storages.RDBStorage(f"sqlite:///{path.resolve()}")
        found = {}
        for summary in optuna.get_all_study_summaries(storage):
            study = optuna.load_study(study_name=summary.study_name, storage=storage)
            states = [t.state.name for t in study.get_trials(deepcopy=False)]
            found[summary.study_name] = {state: states.count(state) for state in set(states)}
        return found
    except Exception:  # noqa: BLE001 - a damaged storage: the records' counts stand
        return {}
