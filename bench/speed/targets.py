"""What ``mhab speed``'s rows say: the targets at the reference point and of the engine, each
judged against its goal in ``GOALS`` with a 95% CI where it has one; the SDPA kernel choice;
a summary of the reference rounds. Nothing here measures (``bench.speed.benchmark`` does).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import pandas as pd
import scipy.stats

# The reference point of the core's targets.
TARGET = {"batch_size": 32, "seq_len": 128, "dim": 256, "num_heads": 8}


@dataclass(frozen=True)
class Goal:
    name: str
    value: float
    higher_is_better: bool


# Every goal ``mhab speed`` judges, in one place.
GOALS = {
    "core_vs_torch": Goal("core / torch step time (fwd+bwd)", 0.55, higher_is_better=False),
    "core_vs_timm": Goal("core / timm step time (fwd+bwd)", 1.05, higher_is_better=False),
    "peak_share": Goal("core share of its round's matmul peak (fwd+bwd)", 0.70, higher_is_better=True),
    # bfloat16 on matrix units (AMX): the matmuls speed up 4-6x, the softmax and the copies
    # between them do not, so the share of the (much higher) peak is lower
    "peak_share_bf16": Goal("core share of its round's bf16 matmul peak (fwd+bwd)", 0.50,
                            higher_is_better=True),
    "bf16_speedup": Goal("core bf16 speed-up: float32 / bf16 step time (fwd+bwd)", 2.0,
                         higher_is_better=True),
    "engine_overhead": Goal("engine overhead", 0.05, higher_is_better=False),
    "data_share": Goal("data time / step time", 1.0, higher_is_better=False),
}


def median_ci(values: list[float]) -> tuple[float, float, float]:
    """The median and its distribution-free 95% confidence interval, from order statistics
    (``scipy.stats.quantile_test``): (median, low, high). It narrows as values are added; with
    fewer than 6 values no pair of order statistics covers 95%, and low and high are NaN."""
    median = statistics.median(values)
    ci = scipy.stats.quantile_test(values, q=median, p=0.5).confidence_interval(0.95)
    return median, float(ci.low), float(ci.high)


def paired_overhead(bare: list[float], engine: list[float]) -> tuple[float, float, float]:
    """Engine overhead from alternating repeats: each engine pass is compared with the bare
    pass just before it, and the median of those pairs counts, so a burst of machine noise
    that lands on one pass moves one pair, not the verdict. Returns ``median_ci`` of the
    per-pair overheads 1 - engine / bare."""
    return median_ci([1 - e / b for b, e in zip(bare, engine, strict=True)])


def reference_summary(frame: pd.DataFrame) -> str | None:
    """How many reference rounds the targets come from, and how far the machine's own speed
    moved between them: ratios closer to a goal than that swing are not decided by one round."""
    ref = frame[frame["section"] == "reference"]
    if ref.empty:
        return None
    peaks = ref.groupby("round")["round_peak_gflop_s"].first()
    return (f"reference point (B={TARGET['batch_size']}, L={TARGET['seq_len']}, D={TARGET['dim']}, "
            f"H={TARGET['num_heads']}): targets are medians over {len(peaks)} rounds; the rounds' "
            f"matmul peaks ran from {peaks.min():.1f} to {peaks.max():.1f} GFLOP/s")


def _dtypes(frame: pd.DataFrame) -> pd.Series:
    """Each row's precision; a speed.csv from before ``dtypes`` measured one, named per row."""
    return frame["dtype"] if "dtype" in frame else pd.Series("float32", index=frame.index)


def precision_speedups(frame: pd.DataFrame) -> pd.DataFrame:
    """Each task model's training samples/s in each precision and bf16's speed-up over float32;
    empty unless the run measured both."""
    tasks = frame[(frame["section"] == "task") & (frame["mode"] == "train")]
    if tasks.empty or not {"float32", "bf16"} <= set(_dtypes(tasks)):
        return pd.DataFrame()
    table = tasks.pivot_table(index="model", columns="dtype", values="samples_per_s", sort=False)
    table = table.rename(columns={"float32": "float32 samples/s", "bf16": "bf16 samples/s"})
    table["bf16 / float32"] = table["bf16 samples/s"] / table["float32 samples/s"]
    paths = tasks[tasks["dtype"] == "bf16"].set_index("model").get("attention_path")
    if paths is not None:
        table["bf16 attention path"] = paths.reindex(table.index).fillna("-")
    table.columns.name = None
    return table.reset_index()


def backend_choice(frame: pd.DataFrame) -> pd.DataFrame:
    """The core's step time (ms) at each grid point and mode under each pinned SDPA kernel, and
    the fastest of them; empty unless the run measured several (``attention.sdpa_backends``).
    A kernel that could not run a point is left blank there."""
    core = frame[(frame["section"] == "attention") & (frame["model"] == "core")]
    if "sdpa_backend" not in core or core["sdpa_backend"].nunique() < 2:
        return pd.DataFrame()
    ok = core[core["status"] == "ok"]
    index = ["dtype", "mode", "batch_size", "seq_len"] if "dtype" in ok else ["mode", "batch_size", "seq_len"]
    table = ok.pivot_table(index=index, columns="sdpa_backend",
                           values="step_ms").reindex(columns=list(dict.fromkeys(core["sdpa_backend"])))
    table = table.dropna(how="all")  # a point no kernel could run has only its status rows
    table["fastest"] = table.idxmin(axis=1)
    table.columns.name = None
    return table.reset_index()


def verdict(value: float, low: float, high: float, goal: float, higher_is_better: bool,
            hint: str) -> tuple[str, bool | None]:
    """(goal text, met) for a median with its 95% CI: met or not when the goal lies outside the
    CI, None ("undecided") when inside. Without a CI the median decides, and the text says so."""
    text = f"{'>=' if higher_is_better else '<='} {goal}"
    met = bool(value >= goal if higher_is_better else value <= goal)
    if math.isnan(low):
        return f"{text} (by the median alone: fewer than 6 repeats give no 95% CI; {hint})", met
    if low <= goal <= high:
        return f"{text} (undecided: the goal is inside the 95% CI; {hint})", None
    return text, met


def targets(frame: pd.DataFrame) -> pd.DataFrame:
    """The issue's targets: ratios at the reference point, each the median over the reference
    rounds of that round's ratio, and the engine overhead of the task models; each with the
    95% CI of its median where it has one."""
    rows = []
    nan = float("nan")

    def add(name: str, value: float, goal: str, met: bool | None, low: float = nan,
            high: float = nan) -> None:
        rows.append({"target": name, "measured": value, "ci_low": low, "ci_high": high, "goal": goal,
                     "met": met})

    ref = frame[frame["section"] == "reference"]
    ref = ref[ref["status"] == "ok"] if not ref.empty else ref
    hint = "raise attention.reference_rounds or quiet the machine"

    def judged(goal: Goal, per_round: pd.Series, name: str) -> None:
        value, low, high = median_ci(per_round.dropna().tolist())
        add(name, value, *verdict(value, low, high, goal.value, goal.higher_is_better, hint), low, high)

    by_dtype = dict(list(ref.groupby(_dtypes(ref), sort=False))) if not ref.empty else {}
    for dtype, part in by_dtype.items():
        suffix = "" if len(by_dtype) == 1 else f", {dtype}"  # names each precision's targets
        step = part.pivot_table(index="round", columns="model", values="step_ms")
        for impl, goal in (("torch", GOALS["core_vs_torch"]), ("timm", GOALS["core_vs_timm"])):
            if {"core", impl} <= set(step):
                judged(goal, step["core"] / step[impl], goal.name + suffix)
        if {"projections", "torch"} <= set(step):  # what the core/torch ratio cannot go below
            floor, low, high = median_ci((step["projections"] / step["torch"]).dropna().tolist())
            add("floor: projections alone / torch" + suffix, floor, "(bound for core / torch)", None,
                low, high)
        if "core" in step:
            goal = GOALS["peak_share_bf16" if dtype == "bf16" else "peak_share"]
            shares = part[part["model"] == "core"].set_index("round")["round_peak_share"]
            share, low, high = median_ci(shares.dropna().tolist())
            if share > 1:  # no kernel beats the matmul it is made of: the peak was measured low
                add(goal.name + suffix, share, "none: a share above 1 means the rounds' matmul "
                    "peaks were measured on a loaded machine; rerun it quiet", None, low, high)
            else:
                judged(goal, shares, goal.name + suffix)
    if {"float32", "bf16"} <= set(by_dtype):
        core = ref[ref["model"] == "core"]
        core = core.pivot_table(index="round", columns=_dtypes(core), values="step_ms")
        goal = GOALS["bf16_speedup"]
        judged(goal, core["float32"] / core["bf16"], goal.name)
    tasks = frame[(frame["section"] == "task") & (frame["mode"] == "train")]
    if not tasks.empty:
        overhead_goal, data_goal = GOALS["engine_overhead"], GOALS["data_share"]
        median = float(tasks["engine_overhead"].median())
        add(f"{overhead_goal.name}, median over {len(tasks)} task models", median,
            f"<= {overhead_goal.value}", median <= overhead_goal.value)
        worst = tasks.loc[tasks["engine_overhead"].idxmax()]
        overhead = float(worst["engine_overhead"])
        low, high = (float(worst.get(f"engine_overhead_ci_{end}", nan)) for end in ("low", "high"))
        add(f"{overhead_goal.name}, worst ({worst['model']})", overhead,
            *verdict(overhead, low, high, overhead_goal.value, False,
                     "raise tasks.repeats or quiet the machine"), low, high)
        data = tasks.loc[tasks["data_share"].idxmax()]
        add(f"{data_goal.name}, worst ({data['model']})", float(data["data_share"]),
            f"< {data_goal.value:g}", bool(data["data_share"] < data_goal.value))
    return pd.DataFrame(rows, columns=["target", "measured", "ci_low", "ci_high", "goal", "met"])
