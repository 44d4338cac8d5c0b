"""At what cost: the comparison along training-set size (``task.train_fraction``) and model
size (``scale``), from the aggregate table. Per task, each model's test metric at each point
with its seed band; in words, where attention's curve crosses each baseline's; and the two
claims' findings: does attention's standing improve as data grows, and as parameters grow?"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from bench.records.defaults import DEFAULT_SCALE, FULL_TRAINING_SET
from bench.records.numbers import compact, fmt, scaled
from bench.report.findings import ATTENTION, Finding, higher_is_better, no_data
from bench.report.stats import holm, verdict, welch


@dataclass(frozen=True)
class Axis:
    key: str  # the aggregate column that tells the points apart
    fixed: str  # the other axis' column, held at its default
    default: object  # that default
    x: str  # the column the curve is drawn against
    noun: str  # what x counts, in words
    suite: str  # what fills it


DATA = Axis("train_fraction", "scale", DEFAULT_SCALE, "train_examples", "training examples",
            "mhab run -m suite=scale_data task=TASK")
MODEL = Axis("scale", "train_fraction", FULL_TRAINING_SET, "params", "parameters",
             "mhab run -m suite=scale_model task=TASK")
AXES = {"data": DATA, "model": MODEL}
CLAIMS = {"data": "Attention needs more data than an RNN: its standing against the RNN improves as the "
                  "training set grows",
          "model": "Attention makes better use of parameters: its standing against the RNN improves as "
                   "both grow"}


def points(agg: pd.DataFrame, axis: Axis) -> pd.DataFrame:
    """The aggregate rows of a sweep along ``axis``: default variant, the other axis at its
    default, in tasks and datasets that have at least two of the axis' values."""
    if agg.empty or axis.key not in agg:
        return agg.iloc[0:0]
    rows = agg[(agg["variant"] == "default") & (agg[axis.fixed] == axis.default)]
    counts = rows.groupby(["task", "dataset"])[axis.key].transform("nunique")
    return rows[counts >= 2]


def _curve(rows: pd.DataFrame, axis: Axis) -> pd.DataFrame:
    """One model's points, in the order of the axis (by its x)."""
    return rows.sort_values(axis.x)


def _shared(attention: pd.DataFrame, baseline: pd.DataFrame, axis: Axis) -> pd.DataFrame:
    """The points both curves have, in ``attention``'s order along x; the baseline's columns
    end in ``_b``."""
    return _curve(attention, axis).merge(baseline, on=axis.key, suffixes=("", "_b"))


def crossing(a: pd.DataFrame, b: pd.DataFrame, axis: Axis, name_a: str, name_b: str) -> str:
    """Where ``a``'s curve (means) is ahead of ``b``'s along ``axis``, in words: the points
    both have, in ``a``'s order along x."""
    shared = _shared(a, b, axis)
    if shared.empty:
        return f"{name_a} and {name_b} share no point along the {axis.noun}"
    sign = 1 if higher_is_better(a) else -1
    ahead = list(sign * (shared["mean"] - shared["mean_b"]) > 0)
    xs = [compact(float(x)) for x in shared[axis.x]]
    span = f"from {xs[0]} to {xs[-1]} {axis.noun}"
    if all(ahead):
        return f"{name_a} ahead of {name_b} at every point {span}"
    if not any(ahead):
        return f"{name_a} behind {name_b} at every point {span}"
    flips = [i for i in range(1, len(ahead)) if ahead[i] != ahead[i - 1]]
    if len(flips) == 1:
        i = flips[0]
        how = "overtakes" if ahead[i] else "falls behind"
        return f"{name_a} {how} {name_b} between {xs[i - 1]} and {xs[i]} {axis.noun}"
    between = ", ".join(f"{xs[i - 1]}-{xs[i]}" for i in flips)
    return f"the curves of {name_a} and {name_b} cross {len(flips)} times ({between} {axis.noun})"


def _lead(point: pd.Series, higher: bool) -> list[float]:
    """Per seed (both sides in seed order), attention's lead over the baseline at a merged
    point, in the metric's better direction."""
    sign = 1 if higher else -1
    return [sign * (a - b) for a, b in zip(point["values"], point["values_b"], strict=False)]


def findings(agg: pd.DataFrame, axis_name: str) -> list[Finding]:
    """Per task, dataset and baseline model: attention's lead at the largest point against its
    lead at the smallest (per seed, Welch's test of the two), Holm-corrected across them."""
    axis = AXES[axis_name]
    rows = points(agg, axis)
    if rows.empty:
        return no_data(f"no sweep along the {axis.noun}: `{axis.suite}`")
    cases = []
    for (task, dataset), group in rows.groupby(["task", "dataset"]):
        higher = higher_is_better(group)
        attention = group[group["model_family"] == ATTENTION]
        for model, baseline in group[group["model_family"] != ATTENTION].groupby("model"):
            shared = _shared(attention, baseline, axis)
            if len(shared) < 2:
                continue
            small, large = shared.iloc[0], shared.iloc[-1]
            cases.append((f"{task}/{dataset} vs {model}", _lead(small, higher), _lead(large, higher),
                          small, large))
    if not cases:
        return no_data(f"no baseline shares two points with attention along the {axis.noun}")
    tests = holm([welch(large, small) for _, small, large, _, _ in cases])
    out = []
    for (where, small, large, p_small, p_large), test in zip(cases, tests, strict=True):
        numbers = (f"attention's lead {np.mean(small):+.4g} at {compact(p_small[axis.x])} {axis.noun}, "
                   f"{np.mean(large):+.4g} at {compact(p_large[axis.x])} (per seed, in the metric's "
                   f"better direction)")
        if min(len(small), len(large)) < 2:
            holds = np.mean(large) > np.mean(small)
            out.append(Finding(where, "indication for" if holds else "indication against",
                               numbers + "; one seed, so no test"))
        else:
            out.append(Finding(where, verdict(test, claimed_positive=True),
                               numbers + f"; change {test.describe()}"))
    return out


def curve_table(rows: pd.DataFrame, axis: Axis) -> pd.DataFrame:
    """What the figure draws, as a table: per model and point, the metric with its seed band
    and the costs it is drawn against."""
    table = rows[["task", "dataset", "model", axis.key, axis.x, "train_flops", "wall_time_s", "mean",
                  "ci95", "seeds"]].sort_values(["task", "dataset", "model", axis.x])
    return table.assign(**{axis.x: table[axis.x].map(lambda v: fmt(v, 3)),
                           "train_flops": table["train_flops"].map(scaled(1e12, 3)),
                           "wall_time_s": table["wall_time_s"].map(scaled(60, 3)),
                           "mean": table["mean"].map(fmt), "ci95": table["ci95"].map(fmt)}) \
        .rename(columns={"train_flops": "train TFLOPs", "wall_time_s": "wall (min)",
                         "mean": "test metric", "ci95": "± 95% CI"})
