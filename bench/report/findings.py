"""What the report says, computed from the results table and the run records: the tables it
draws and the verdicts on the article's claims. Nothing here draws or writes (``bench.report.sections``
does); everything is read from recorded fields: the model family, the config's axes, the
record's metric by length.

Attention is compared with each baseline family on its own (every recorded ``model_family``
other than ``attention``), never with "the RNN" as a whole.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from bench.records.columns import BY_NAME
from bench.records.numbers import fmt
from bench.records.table import PROCESSOR, label, metric_by_length
from bench.report.stats import Difference, holm, verdict, welch

ATTENTION = "attention"


def higher_is_better(rows: pd.DataFrame) -> bool:
    """The recorded direction of the rows' metric (records from before it was recorded were
    all higher-is-better)."""
    if "higher_is_better" not in rows or rows.empty:
        return True
    value = rows["higher_is_better"].iloc[0]
    return True if value is None or (isinstance(value, float) and math.isnan(value)) else bool(value)


def best_row(rows: pd.DataFrame, column: str = "mean") -> pd.Series:
    """The row with the best ``column`` in the metric's direction."""
    return rows.loc[rows[column].idxmax() if higher_is_better(rows) else rows[column].idxmin()]


def direction(higher: bool) -> str:
    return "higher is better" if higher else "lower is better"


def indication(holds: bool) -> str:
    """The word for a finding without a test of its difference (one measurement per run, or
    means without a per-seed spread): an indication for or against the claim, never a verdict."""
    return "indication for" if holds else "indication against"


def baselines(group: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The rows of each baseline family in ``group``, by family."""
    others = group[group["model_family"] != ATTENTION]
    return {family: rows for family, rows in others.groupby("model_family", sort=True)}


# What sets one point of the size axes apart (``bench.report.sizes``): a verdict compares
# models at the same training-set size and model scale, never across them.
SIZE_KEYS = ("train_fraction", "scale")


def at_the_same_size(rows: pd.DataFrame, row: pd.Series) -> pd.DataFrame:
    """``rows`` at ``row``'s training-set size and model scale, and on its processor (where the
    table has them: timings are compared on one processor model only)."""
    for key in (*SIZE_KEYS, PROCESSOR):
        if key in rows and key in row:
            rows = rows[rows[key] == row[key]]
    return rows


def _sweeps(agg: pd.DataFrame, axis: str, by: list[str]) -> pd.DataFrame:
    """The aggregate rows that belong to a sweep along ``axis``: rows that share everything
    but the axis (``<axis>_sweep``) and take at least two of its values."""
    if agg.empty or axis not in agg:
        return agg.iloc[0:0].assign(**{axis: []})
    rows = agg[agg[axis].notna()]
    counts = rows.groupby([*by, f"{axis}_sweep"], dropna=False)[axis].transform("nunique")
    rows = rows[counts >= 2].copy()
    rows[axis] = rows[axis].astype(int)
    return rows


def heads_table(agg: pd.DataFrame) -> pd.DataFrame:
    """The heads ablation: attention runs that differ only in ``model.num_heads``."""
    rows = _sweeps(agg[agg["model_family"] == ATTENTION] if "model_family" in agg else agg,
                   "num_heads", ["task", "dataset", "model"])
    return rows.rename(columns={"num_heads": "heads"})


def length_table(agg: pd.DataFrame) -> pd.DataFrame:
    """The sequence-length sweep (``task.seq_len``), every model, with tokens/s = samples/s x L."""
    rows = _sweeps(agg, "seq_len", ["task", "dataset"])
    if rows.empty:
        return rows.assign(train_tokens_per_s=[])
    rows["train_tokens_per_s"] = rows["train_samples_per_s"] * rows["seq_len"]
    return rows


def length_buckets(records: list[dict]) -> pd.DataFrame:
    """Every record's metric by input length, one row per bucket (``length`` in order)."""
    rows = []
    for r in records:
        detail = metric_by_length(r)
        for bucket in (detail or {}).get("buckets", []):
            rows.append({"task": r["task"], "dataset": r["dataset"], "model": r["label"],
                         "model_family": r.get("model_family"), "seed": r["seed"],
                         "higher_is_better": r.get("higher_is_better", True),
                         "unit": detail["unit"], "metric": detail["metric"], **bucket})
    return pd.DataFrame(rows)


def difference(a: pd.Series, b: pd.Series) -> Difference:
    """Welch's test of aggregate row ``a``'s seeds against row ``b``'s (a minus b)."""
    return welch(a["values"], b["values"])


def model_verdicts(group: pd.DataFrame) -> list[str]:
    """For one task and dataset: each attention row against the best row of each baseline
    family, by Welch's t-test over seeds, Holm-corrected across the group's comparisons."""
    higher, metric = higher_is_better(group), group["metric_name"].iloc[0]
    pairs = [(family, a, best_row(same)) for family, rows in baselines(group).items()
             for _, a in group[group["model_family"] == ATTENTION].iterrows()
             if not (same := at_the_same_size(rows, a)).empty]
    tests = holm([difference(a, best) for _, a, best in pairs])
    out = []
    for (family, a, best), test in zip(pairs, tests, strict=True):
        name = label(a["model"], a["variant"], a["setting"])
        rival = label(best["model"], best["variant"], best["setting"])
        scores = (f"{metric} {a['mean']:.4g} ± {fmt(a['ci95'], 2)} vs {best['mean']:.4g} ± "
                  f"{fmt(best['ci95'], 2)} ({direction(higher)}")
        if min(test.n_a, test.n_b) < 2:
            out.append(f"{name} against the best {family} baseline, {rival}: {scores}; one seed, so "
                       f"no test and no verdict).")
            continue
        word = {"supported": "beats", "contradicted": "trails",
                "inconclusive": "is not significantly different from"}[verdict(test, claimed_positive=higher)]
        out.append(f"{name} {word} the best {family} baseline, {rival}: {scores}); {test.describe()}.")
    return out


# ---------------------------------------------------------------- claims
@dataclass(frozen=True)
class Finding:
    """One row of the report's front page: what the data say of a claim in one place."""

    where: str  # task/dataset, or "-" when there is no data
    verdict: str  # supported, contradicted, inconclusive, not supported, no data, ...
    numbers: str  # what the verdict rests on, in words


def no_data(how: str) -> list[Finding]:
    return [Finding("-", "no data", how)]


def heads_findings(agg: pd.DataFrame) -> list[Finding]:
    """Claim 1, per task and dataset: the best several-head row against the one-head row,
    Holm-corrected across the tasks."""
    pairs = []
    for (task, dataset), group in heads_table(agg).groupby(["task", "dataset"]):
        one, many = group[group["heads"] == 1], group[group["heads"] > 1]
        if not one.empty and not many.empty:
            pairs.append((f"{task}/{dataset}", best_row(many), one.iloc[0], higher_is_better(group)))
    if not pairs:
        return no_data("the heads ablation has not been run: `mhab run -m suite=claims_heads`")
    tests = holm([difference(many, one) for _, many, one, _ in pairs])
    return [
        Finding(where, verdict(test, claimed_positive=higher),
                f"{int(many['heads'])} heads {many['mean']:.4g} ± {fmt(many['ci95'], 2)} vs 1 head "
                f"{one['mean']:.4g} ± {fmt(one['ci95'], 2)}; {test.describe()}")
        for (where, many, one, higher), test in zip(pairs, tests, strict=True)
    ]


def on_processor(rows: pd.DataFrame, processor: object) -> str:
    """`` on <processor>`` where ``rows`` were timed on more than one processor model, else
    nothing: the place of a timing names its processor only when there is a choice."""
    several = PROCESSOR in rows and rows[PROCESSOR].nunique(dropna=False) > 1
    return f" on {processor}" if several else ""


def _rate(row: pd.Series) -> str:
    """A row's training samples/s as the report states it: the mean over seeds, with the
    half-width of its 95% interval where there are several (how noisy one measurement is)."""
    spread = row.get("train_samples_per_s_ci95")
    seeds = int(row["seeds"]) if "seeds" in row else 1
    if spread is None or spread != spread:
        return f"{row['train_samples_per_s']:.0f} samples/s, 1 run"
    return f"{row['train_samples_per_s']:.0f} ± {spread:.0f} samples/s over {seeds} seeds"


def speed_findings(agg: pd.DataFrame) -> list[Finding]:
    """Claim 2 on throughput: each attention setting's training samples/s (tokens/s along a
    length sweep) against the fastest model of each baseline family at its size, on the same
    processor (``agg`` by processor: ``aggregate(..., by_processor=True)``)."""
    findings = []

    def name(row: pd.Series) -> str:  # the variant is the section; the setting sets rows apart
        return label(row["model"], "default", row["setting"])

    def faster(ratio: float) -> str:
        return indication(ratio > 1)

    default = agg[agg["variant"] == "default"] if not agg.empty else agg
    for (task, dataset), group in default.groupby(["task", "dataset"]):
        timed = group.dropna(subset=["train_samples_per_s"])  # a run too short to time has none
        for family, rows in baselines(timed).items():
            for _, row in timed[timed["model_family"] == ATTENTION].iterrows():
                if (same := at_the_same_size(rows, row)).empty:
                    continue
                fastest = same.loc[same["train_samples_per_s"].idxmax()]
                ratio = row["train_samples_per_s"] / fastest["train_samples_per_s"]
                findings.append(Finding(
                    f"{task}/{dataset}{on_processor(agg, row.get(PROCESSOR))}", faster(ratio),
                    f"{name(row)} trains at {ratio:.2f}x the samples/s of the fastest {family} "
                    f"baseline, {name(fastest)} ({_rate(row)} against {_rate(fastest)}; each run's "
                    f"steady-state training samples/s, data loading included)"))
    for (task, seq_len), group in length_table(agg).groupby(["task", "seq_len"]):
        for family, rows in baselines(group).items():
            for _, row in group[group["model_family"] == ATTENTION].iterrows():
                ratio = row["train_tokens_per_s"] / rows["train_tokens_per_s"].max()
                findings.append(Finding(
                    f"{task} at {seq_len} tokens", faster(ratio),
                    f"{name(row)} at {ratio:.2f}x the training tokens/s of the fastest {family} "
                    f"baseline; one measurement per run, no CI"))
    return findings or no_data("no timed runs")


def long_range_findings(agg: pd.DataFrame, records: list[dict]) -> list[Finding]:
    """Claim 3: at the longest recall length, attention against the best row of each baseline
    family (Holm-corrected across families); without a length sweep, metric by input length."""
    lengths = length_table(agg)
    if not lengths.empty:
        longest = lengths["seq_len"].max()
        group = lengths[lengths["seq_len"] == longest]
        attn = group[group["model_family"] == ATTENTION]
        pairs = [(family, attn.iloc[0], best_row(rows)) for family, rows in baselines(group).items()
                 ] if not attn.empty else []
        tests = holm([difference(a, best) for _, a, best in pairs])
        findings = [
            Finding(f"{a['task']} at {longest} tokens", verdict(test, higher_is_better(group)),
                    f"recalling a token {longest - 1} steps back, attention scores {a['mean']:.3g} ± "
                    f"{fmt(a['ci95'], 2)} vs the best {family} baseline ({best['model']}) "
                    f"{best['mean']:.3g} ± {fmt(best['ci95'], 2)}; {test.describe()}")
            for (family, a, best), test in zip(pairs, tests, strict=True)
        ]
        if findings:
            return findings
    return _by_length_findings(length_buckets(records))


def _by_length_findings(buckets: pd.DataFrame) -> list[Finding]:
    missing = "needs runs of attention and a baseline that record their metric by input length"
    if buckets.empty:
        return no_data(missing)
    findings = []
    for (task, dataset), group in buckets.groupby(["task", "dataset"]):
        where = f"{task}/{dataset}"
        attention = group[group["model_family"] == ATTENTION]
        labels = attention["model"].unique()
        if len(labels) != 1 or (group["model_family"] == ATTENTION).all():
            if len(labels) > 1:
                findings.append(Finding(where, "inconclusive", "several attention settings have length "
                                        "buckets; compare them in the table of metric by input length"))
            continue
        order = list(dict.fromkeys(group["length"]))
        if attention["length"].nunique() < 2:  # one bucket says nothing about length
            findings.append(Finding(where, "no data", "all test inputs fall in one length bucket; run "
                                    "the recall length sweep (`mhab run -m suite=claims_length`) or "
                                    "longer inputs"))
            continue
        longest = [b for b in order if b in set(attention["length"])][-1]
        at_longest = group[group["length"] == longest]
        mean = at_longest.groupby(["model_family", "model"])["value"].mean()
        seeds = at_longest.groupby("model")["seed"].nunique()  # each side's own, never pooled
        attn, attn_seeds = float(mean[ATTENTION].iloc[0]), int(seeds[mean[ATTENTION].index[0]])
        metric, unit = group["metric"].iloc[0], group["unit"].iloc[0]
        higher = higher_is_better(group)
        for family, by_model in mean.drop(ATTENTION, level=0).groupby(level=0):
            by_model = by_model.droplevel(0)
            best_model = by_model.idxmax() if higher else by_model.idxmin()
            best = by_model[best_model]
            word = indication(attn > best if higher else attn < best)
            findings.append(Finding(
                where, f"{word} on the longest bucket",
                f"{longest} {unit}: attention {metric} {attn:.3g} vs the best {family} baseline, "
                f"{best_model}, {best:.3g} ({direction(higher)}); "
                f"{_seeds_each(attn_seeds, int(seeds[best_model]))}, no per-bucket CI, so indicative"))
    return findings or no_data(missing)


# ---------------------------------------------------------------- time to quality
def _seeds_each(attention: int, baseline: int) -> str:
    """How many seeds each side's mean is over, in words."""
    if attention == baseline:
        return f"means over {attention} seed{'s' * (attention != 1)} each"
    return f"means over {attention} (attention) and {baseline} (baseline) seeds"


def learning_curves(records: list[dict]) -> pd.DataFrame:
    """Every validation of every record: one row per (run, epoch), with the samples seen and
    wall time since training began (records from before these were recorded have none)."""
    rows = []
    for r in records:
        for h in r.get("history") or []:
            if "wall_s" not in h:
                continue
            rows.append({"task": r["task"], "dataset": r["dataset"],
                         **{key: BY_NAME[key].value(r) for key in SIZE_KEYS},
                         PROCESSOR: BY_NAME[PROCESSOR].value(r) or "unknown processor", "model": r["label"],
                         "model_family": r.get("model_family"), "seed": r["seed"],
                         "metric_name": r.get("metric_name"),
                         "higher_is_better": r.get("higher_is_better", True), "epoch": h["epoch"],
                         "train_samples": h["train_samples"], "wall_s": h["wall_s"],
                         "val_metric": h["val_metric"]})
    return pd.DataFrame(rows)


def baseline_target(family: str) -> str:
    """The name of the time-to-quality target a baseline family sets."""
    return f"best {family} baseline's final"


def quality_targets(curves: pd.DataFrame, share: float = 0.95) -> dict[str, float]:
    """For one task, dataset and size (training-set size and model scale): the targets time to
    quality is measured against, by name. One per baseline family (``best rnn baseline's
    final``: that family's best model's best validation score, mean over its seeds), so each
    family is compared with attention on its own; and ``95% of the best``: ``share`` of the
    best model's (for a lower-is-better metric, the best divided by ``share``)."""
    higher = higher_is_better(curves)
    final = curves.groupby(["model", "model_family", "seed"])["val_metric"]
    final = (final.max() if higher else final.min()).groupby(["model", "model_family"]).mean()
    targets = {}
    baselines = final.drop(ATTENTION, level="model_family", errors="ignore")
    for family, scores in baselines.groupby(level="model_family"):
        targets[baseline_target(family)] = float(scores.max() if higher else scores.min())
    best = float(final.max() if higher else final.min())
    targets[f"{share:.0%} of the best"] = best * share if higher else best / share
    return targets


def time_to_quality(curves: pd.DataFrame) -> pd.DataFrame:
    """Per task, dataset, size, target and model: the wall time and training samples each seed
    needed to first reach the target on validation, mean over seeds; ``reached`` counts the
    seeds that did (the means are over those; none: not reached)."""
    rows = []
    places = ["task", "dataset", *SIZE_KEYS, PROCESSOR]
    for (task, dataset, *size, processor), group in curves.groupby(places) if not curves.empty else ():
        higher = higher_is_better(group)
        for target_name, target in quality_targets(group).items():
            for model, runs in group.groupby("model"):
                hits = []
                for _, run in runs.groupby("seed"):
                    run = run.sort_values("epoch")
                    reached = run[run["val_metric"] >= target] if higher else run[run["val_metric"] <= target]
                    if len(reached):
                        hits.append(reached.iloc[0])
                rows.append({"task": task, "dataset": dataset, **dict(zip(SIZE_KEYS, size, strict=True)),
                             PROCESSOR: processor,
                             "target": target_name, "target_value": target,
                             "model": model, "model_family": runs["model_family"].iloc[0],
                             "seeds": runs["seed"].nunique(), "reached": len(hits),
                             "wall_s": float(np.mean([h["wall_s"] for h in hits])) if hits else math.nan,
                             "train_samples": float(np.mean([h["train_samples"] for h in hits]))
                             if hits else math.nan})
    return pd.DataFrame(rows)


def time_to_quality_findings(ttq: pd.DataFrame) -> list[Finding]:
    """Claim 2 on time to quality: attention against the quickest model of each baseline
    family, to that family's best final validation score (where both reached it)."""
    findings = []
    if ttq.empty:
        return no_data("no time to quality yet (needs records with per-validation wall times)")
    for (task, dataset, *_, processor), group in ttq.groupby(["task", "dataset", *SIZE_KEYS, PROCESSOR]):
        where = f"{task}/{dataset}{on_processor(ttq, processor)}"
        baselines = group[group["model_family"] != ATTENTION]
        for family in baselines["model_family"].unique():
            rows = group[group["target"] == baseline_target(family)]
            quickest = rows[rows["model_family"] == family]
            quickest = quickest.loc[quickest["wall_s"].fillna(math.inf).idxmin()]
            for _, a in rows[rows["model_family"] == ATTENTION].iterrows():
                target = f"the best {family} baseline's final validation score ({a['target_value']:.4g})"
                if not a["reached"]:
                    findings.append(Finding(where, indication(False), f"{a['model']} never reached {target}"))
                elif quickest["reached"]:
                    speedup = quickest["wall_s"] / a["wall_s"]
                    findings.append(Finding(
                        where, indication(speedup > 1),
                        f"time to quality: {a['model']} reached {target} in {a['wall_s'] / 60:.3g} min, "
                        f"{speedup:.2f}x as fast as the quickest {family} baseline, {quickest['model']} "
                        f"({quickest['wall_s'] / 60:.3g} min); means over the seeds that reached it, "
                        f"validation included"))
    return findings or no_data("no time to quality yet (needs records with per-validation wall times)")


# ---------------------------------------------------------------- attention distance
def attention_distances(records: list[dict]) -> pd.DataFrame:
    """Every recorded head's mean attention distance: one row per (run, layer, head)."""
    rows = []
    for r in records:
        recorded = r.get("attention_distance")
        if not isinstance(recorded, dict):
            continue
        for layer, heads in enumerate(recorded.get("per_layer_head") or [], start=1):
            for head, value in enumerate(heads, start=1):
                rows.append({"task": r["task"], "dataset": r["dataset"], "model": r["label"],
                             "seed": r["seed"], "unit": recorded["unit"], "layer": layer,
                             "head": head, "distance": value,
                             "uniform": recorded.get("uniform", math.nan)})
    return pd.DataFrame(rows)


def distance_spread(distances: pd.DataFrame) -> pd.DataFrame:
    """Per task, dataset, model and layer: how near the nearest-looking head and how far the
    farthest-looking head attend (each seed's minimum and maximum over heads, mean over
    seeds: heads are not matched across seeds), and the mean over heads."""
    keys = ["task", "dataset", "model", "unit", "layer"]
    if distances.empty:
        return pd.DataFrame(columns=[*keys, "heads", "seeds", "nearest", "farthest", "mean", "uniform"])
    per_seed = distances.groupby([*keys, "seed"]).agg(
        nearest=("distance", "min"), farthest=("distance", "max"), mean=("distance", "mean"),
        heads=("distance", "count"), uniform=("uniform", "first"))
    return per_seed.groupby(keys).agg(
        heads=("heads", "max"), seeds=("heads", "size"), nearest=("nearest", "mean"),
        farthest=("farthest", "mean"), mean=("mean", "mean"), uniform=("uniform", "mean"),
    ).reset_index()


def distance_findings(spread: pd.DataFrame) -> list[Finding]:
    """Claim 1 beside the ablation: per task, dataset and several-head model, the range of
    distances its heads attend over in each layer (descriptive: no test)."""
    findings = []
    for (task, dataset, model), group in spread.groupby(["task", "dataset", "model"]):
        if group["heads"].max() < 2:
            continue
        unit, seeds = group["unit"].iloc[0], int(group["seeds"].min())
        layers = "; ".join(f"layer {r.layer}: {fmt(r.nearest, 2)} to {fmt(r.farthest, 2)}"
                           for r in group.sort_values("layer").itertuples())
        ratio = group["farthest"] / group["nearest"].clip(lower=1e-9)
        widest = group.loc[ratio.idxmax()]
        uniform = group["uniform"].mean()
        even = "" if math.isnan(uniform) else f"; even attention over all keys: {fmt(uniform, 2)}"
        findings.append(Finding(
            f"{task}/{dataset}", "descriptive (no test)",
            f"{model}'s heads, nearest- to farthest-looking, attend at mean distances in {unit} units: "
            f"{layers}; widest in layer {widest['layer']}, {widest['farthest'] / widest['nearest']:.1f}x; "
            f"mean over {seeds} seed{'s' if seeds > 1 else ''}{even}"))
    return findings
