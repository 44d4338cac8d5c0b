"""What the report says, computed from the results table and the run records: the tables it
draws and the verdicts on the article's claims. Nothing here draws or writes (``bench.report``
does); everything is read from recorded fields: the model family, the config's axes, the
record's metric by length.

Attention is compared with each baseline family on its own (every recorded ``model_family``
other than ``attention``), never with "the RNN" as a whole.
"""

from __future__ import annotations

import math

import pandas as pd

from bench.results import label, metric_by_length

ATTENTION = "attention"


def fmt(value: float, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}g}"


def compare(a_mean: float, a_ci: float, b_mean: float, b_ci: float) -> str:
    """'higher', 'lower' or 'overlap' for a against b, by their 95% intervals."""
    a_ci, b_ci = (0.0 if math.isnan(c) else c for c in (a_ci, b_ci))
    if a_mean - a_ci > b_mean + b_ci:
        return "higher"
    if a_mean + a_ci < b_mean - b_ci:
        return "lower"
    return "overlap"


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


def judge(a_mean: float, a_ci: float, b_mean: float, b_ci: float, higher: bool) -> str:
    """'better', 'worse' or 'overlap' for a against b, by their 95% intervals and the metric's
    direction."""
    order = compare(a_mean, a_ci, b_mean, b_ci)
    if order == "overlap":
        return order
    return "better" if (order == "higher") == higher else "worse"


def direction(higher: bool) -> str:
    return "higher is better" if higher else "lower is better"


def baselines(group: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The rows of each baseline family in ``group``, by family."""
    others = group[group["model_family"] != ATTENTION]
    return {family: rows for family, rows in others.groupby("model_family", sort=True)}


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


def model_verdicts(group: pd.DataFrame) -> list[str]:
    """For one task and dataset: each attention row against the best row of each baseline
    family, in the metric's direction, by 95% CIs over seeds."""
    higher, metric = higher_is_better(group), group["metric_name"].iloc[0]
    out = []
    for family, rows in baselines(group).items():
        best = best_row(rows)
        for _, a in group[group["model_family"] == ATTENTION].iterrows():
            seeds = int(min(a["seeds"], best["seeds"]))
            name = label(a["model"], a["variant"], a["setting"])
            rival = label(best["model"], best["variant"], best["setting"])
            scores = (f"{metric} {a['mean']:.4g} ± {fmt(a['ci95'], 2)} vs {best['mean']:.4g} ± "
                      f"{fmt(best['ci95'], 2)} ({direction(higher)}")
            if seeds < 2:
                out.append(f"{name} against the best {family} baseline, {rival}: {scores}; one seed, so "
                           f"no interval and no verdict).")
                continue
            word = {"better": "beats", "worse": "trails", "overlap": "is within the 95% CIs of"}[
                judge(a["mean"], a["ci95"], best["mean"], best["ci95"], higher)]
            out.append(f"{name} {word} the best {family} baseline, {rival}: {scores}; {seeds} seeds).")
    return out


# ---------------------------------------------------------------- claims
def heads_verdict(agg: pd.DataFrame) -> str:
    heads = heads_table(agg)
    verdicts = []
    for (task, dataset), group in heads.groupby(["task", "dataset"]):
        one, many = group[group["heads"] == 1], group[group["heads"] > 1]
        if one.empty or many.empty:
            continue
        best, one = best_row(many), one.iloc[0]
        if one["seeds"] < 2 or best["seeds"] < 2:
            verdicts.append(f"{task}/{dataset}: inconclusive (one seed)")
            continue
        word = {"better": "supported", "worse": "not supported", "overlap": "inconclusive at these CIs"}[
            judge(best["mean"], best["ci95"], one["mean"], one["ci95"], higher_is_better(group))]
        verdicts.append(
            f"{task}/{dataset}: {word} ({int(best['heads'])} heads {best['mean']:.4g} ± "
            f"{best['ci95']:.2g} vs 1 head {one['mean']:.4g} ± {one['ci95']:.2g}, "
            f"{int(min(best['seeds'], one['seeds']))} seeds)"
        )
    return "; ".join(verdicts) + "." if verdicts else "No data: the heads ablation has not been run."


def speed_verdict(agg: pd.DataFrame) -> str:
    ratios, parts = [], []

    def name(row: pd.Series) -> str:  # the variant is the section; the setting sets rows apart
        return label(row["model"], "default", row["setting"])

    default = agg[agg["variant"] == "default"] if not agg.empty else agg
    for (task, dataset), group in default.groupby(["task", "dataset"]):
        for family, rows in baselines(group).items():
            fastest = rows.loc[rows["train_samples_per_s"].idxmax()]
            for _, row in group[group["model_family"] == ATTENTION].iterrows():
                ratio = row["train_samples_per_s"] / fastest["train_samples_per_s"]
                ratios.append(ratio)
                parts.append(f"{task}/{dataset}: {name(row)} trains at {ratio:.2f}x the samples/s "
                             f"of the fastest {family} baseline, {name(fastest)}")
    for (task, seq_len), group in length_table(agg).groupby(["task", "seq_len"]):
        for family, rows in baselines(group).items():
            for _, row in group[group["model_family"] == ATTENTION].iterrows():
                ratio = row["train_tokens_per_s"] / rows["train_tokens_per_s"].max()
                ratios.append(ratio)
                parts.append(f"{task} at {seq_len} tokens: {name(row)} at {ratio:.2f}x the training "
                             f"tokens/s of the fastest {family} baseline")
    if not parts:
        return "No data."
    if all(r > 1 for r in ratios):
        verdict = "Supported on this hardware"
    elif all(r < 1 for r in ratios):
        verdict = "Not supported on this hardware"
    else:
        verdict = "Mixed on this hardware"
    return f"{verdict}: " + "; ".join(parts) + " (throughput, one measurement per run: no CI)."


def long_range_verdict(agg: pd.DataFrame, records: list[dict]) -> str:
    lengths = length_table(agg)
    if not lengths.empty:
        longest = lengths["seq_len"].max()
        group = lengths[lengths["seq_len"] == longest]
        attn = group[group["model_family"] == ATTENTION]
        verdicts = []
        for family, rows in baselines(group).items() if not attn.empty else ():
            a, best = attn.iloc[0], best_row(rows)
            if min(a["seeds"], best["seeds"]) < 2:
                word = "Inconclusive (one seed)"
            else:
                word = {"better": "Supported", "worse": "Not supported",
                        "overlap": "Inconclusive at these CIs"}[judge(a["mean"], a["ci95"], best["mean"],
                                                                      best["ci95"], higher_is_better(group))]
            verdicts.append(
                f"{word}: recalling a token {longest - 1} steps back, attention scores "
                f"{a['mean']:.3g} ± {fmt(a['ci95'], 2)} vs the best {family} baseline "
                f"({best['model']}) {best['mean']:.3g} ± {fmt(best['ci95'], 2)}, "
                f"{int(min(a['seeds'], best['seeds']))} seeds."
            )
        if verdicts:
            return " ".join(verdicts)
    return _by_length_verdict(length_buckets(records))


def _by_length_verdict(buckets: pd.DataFrame) -> str:
    if buckets.empty:
        return "No data: needs runs of attention and a baseline that record their metric by input length."
    verdicts = []
    for (task, dataset), group in buckets.groupby(["task", "dataset"]):
        attention = group[group["model_family"] == ATTENTION]
        labels = attention["model"].unique()
        if len(labels) != 1 or (group["model_family"] == ATTENTION).all():
            if len(labels) > 1:
                verdicts.append(f"{task}/{dataset}: inconclusive, several attention settings have length "
                                f"buckets; compare them in the table of metric by input length")
            continue
        order = list(dict.fromkeys(group["length"]))
        if attention["length"].nunique() < 2:  # one bucket says nothing about length
            verdicts.append(f"{task}/{dataset}: no data, all test inputs fall in one length bucket; run "
                            f"the recall length sweep (`mhab run -m suite=claims_length`) or longer inputs")
            continue
        longest = [b for b in order if b in set(attention["length"])][-1]
        at_longest = group[group["length"] == longest]
        mean = at_longest.groupby(["model_family", "model"])["value"].mean()
        attn = float(mean[ATTENTION].iloc[0])
        metric, unit = group["metric"].iloc[0], group["unit"].iloc[0]
        higher = higher_is_better(group)
        for family, by_model in mean.drop(ATTENTION, level=0).groupby(level=0):
            by_model = by_model.droplevel(0)
            best_model = by_model.idxmax() if higher else by_model.idxmin()
            best = by_model[best_model]
            word = "supported" if (attn > best if higher else attn < best) else "not supported"
            verdicts.append(
                f"{task}/{dataset}: {word} on the longest bucket ({longest} {unit}): attention {metric} "
                f"{attn:.3g} vs the best {family} baseline, {best_model}, {best:.3g} "
                f"({direction(higher)}; means over "
                f"{at_longest['seed'].nunique()} seeds; no per-bucket CI, so indicative)"
            )
    if not verdicts:
        return "No data: needs runs of attention and a baseline that record their metric by input length."
    return "; ".join(verdicts) + "."
