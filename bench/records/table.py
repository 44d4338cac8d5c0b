"""All run records under a results dir as one pandas DataFrame, saved as parquet and CSV,
and aggregated over seeds with t-distribution confidence intervals."""

from __future__ import annotations

import hashlib
import io
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
from scipy import stats

from bench.records.atomic import atomic_write, atomic_write_text
from bench.records.columns import COLUMNS, NAMES
from bench.records.numbers import fmt, whole
from bench.records.record import RECORD, UNHASHED_KEYS, read_record, with_later_keys

GROUP = ["task", "dataset", "model", "variant", "setting"]
# The column that names the processor (or GPU) a run was timed on. Quality pools over it;
# throughput, wall time and time to quality are compared only within one (``by_processor``).
PROCESSOR = "device_name"
ATTENTION_FAMILY = "attention"
PARAMS_TOLERANCE = 0.10  # a baseline's parameters within 10% of attention's: a fair comparison
MAX_SETTING_KEYS = 3
# The experiment axes the report draws against, read from each record's config: (config key,
# whether a sweep along it compares models). The runs of one sweep are those whose configs
# agree on everything but the axis and the variant label (and the model section, where the
# sweep compares models); ``<axis>_sweep`` names that group.
AXES = {"num_heads": ("model.num_heads", False), "seq_len": ("task.seq_len", True)}


def _row(rec: dict) -> dict:
    return {**{column.name: column.value(rec) for column in COLUMNS}, **axis_values(rec.get("config"))}


def axis_values(config: dict | None) -> dict[str, Any]:
    """Each axis's value in ``config`` and the sweep it belongs to (None without one)."""
    flat = flatten_config(with_later_keys({k: v for k, v in (config or {}).items()
                                     if k not in (*UNHASHED_KEYS, "hydra", "variant")}, present=True))
    out: dict[str, Any] = {}
    for axis, (key, across_models) in AXES.items():
        if key not in flat:
            out[axis] = out[f"{axis}_sweep"] = None
            continue
        rest = {k: v for k, v in flat.items() if k != key and not (across_models and k.startswith("model."))}
        out[axis] = json.loads(flat[key])
        out[f"{axis}_sweep"] = hashlib.sha256(json.dumps(rest, sort_keys=True).encode()).hexdigest()[:12]
    return out


def metric_by_length(rec: dict) -> dict | None:
    """A record's test metric by input length (``test_details["metric_by_length"]``); records
    written before it was generic kept translation's BLEU by source length, read as the same."""
    details = rec.get("test_details") or {}
    if "metric_by_length" in details:
        return details["metric_by_length"]
    if "bleu_by_source_length" in details:
        return {"unit": "source subword tokens", "metric": "bleu",
                "buckets": [{"length": b["source_tokens"], "count": b["sentences"], "value": b["bleu"]}
                            for b in details["bleu_by_source_length"]]}
    return None


def flatten_config(config: dict, prefix: str = "") -> dict[str, str]:
    """``{"trainer.lr": "0.001", ...}``: each leaf of a nested config by its dotted key, as JSON."""
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict):
            flat.update(flatten_config(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = json.dumps(value, default=str)
    return flat


def setting_labels(configs: dict[str, dict[str, Any]]) -> dict[str, str]:
    """For configs (by hash) of one task, dataset, model and variant: a short label per hash
    naming the keys whose values differ, such as ``trainer.epochs=10``. Without such labels,
    runs of different experiments would be averaged as if they were seeds of one. ``mhab
    tune``'s runs are named by their study and trial (its sampled values would fill the label)."""
    tuned = {h: c["tuning"] for h, c in configs.items() if isinstance((c or {}).get("tuning"), dict)}
    configs = {h: c for h, c in configs.items() if h not in tuned}
    return {**{h: f"{'tuned: ' if t.get('role') == 'final' else ''}trial {t.get('trial')} ({t.get('study')})"
               for h, t in tuned.items()}, **_setting_labels(configs)}


def _setting_labels(configs: dict[str, dict[str, Any]]) -> dict[str, str]:
    if len(configs) < 2:
        return dict.fromkeys(configs, "")
    skip = {*UNHASHED_KEYS, "hydra", "variant"}
    flat = {h: flatten_config(with_later_keys({k: v for k, v in (c or {}).items() if k not in skip},
                                              present=True))
            for h, c in configs.items()}
    keys = sorted({k for f in flat.values() for k in f})
    differing = [k for k in keys if len({f.get(k, "null") for f in flat.values()}) > 1]
    labels = {}
    for h, f in flat.items():
        parts = [f"{k}={f.get(k, 'null')}" for k in differing[:MAX_SETTING_KEYS]]
        if len(differing) > MAX_SETTING_KEYS:
            parts.append(f"+{len(differing) - MAX_SETTING_KEYS} more (config {h[:8]})")
        labels[h] = ", ".join(parts) or f"config {h[:8]}"
    return labels


def read_records(results_dir: str | Path) -> list[dict[str, Any]]:
    """Every run record under ``results_dir/runs`` (directories without a record, such as a run
    killed before it finished, have none)."""
    return [read_record(p) for p in sorted(Path(results_dir).glob(f"runs/*/{RECORD}"))]


def _group(rec: dict) -> tuple:
    return tuple(rec.get(k) for k in GROUP[:-1])


def experiment(rec: dict) -> str:
    """What names an experiment in the table: its config hash, and its data where the record
    has a data fingerprint (a user's folder), so runs on changed data never count as seeds of
    the runs before the change."""
    fingerprint = rec.get("data_fingerprint")
    return f"{rec.get('config_hash')}/{fingerprint}" if fingerprint else str(rec.get("config_hash"))


def _settings(records: list[dict]) -> dict[tuple, dict[str, str]]:
    configs: dict[tuple, dict[str, Any]] = {}
    for rec in records:
        config = dict(rec.get("config") or {})
        if rec.get("data_fingerprint"):
            config["data"] = rec["data_fingerprint"][:8]  # labelled data=<digest> where it differs
        configs.setdefault(_group(rec), {})[experiment(rec)] = config
    return {group: setting_labels(by_hash) for group, by_hash in configs.items()}


def to_frame(records: list[dict]) -> pd.DataFrame:
    """One row per run record. Where one task, dataset, model and variant was run with
    different configs, ``setting`` names what differs."""
    # Labels come from the ok runs (a failed try of another config should not rename them);
    # a run that is not ok is labelled among all runs.
    among_ok = _settings([r for r in records if r.get("status") == "ok"])
    among_all = _settings(records)
    rows = []
    for rec in records:
        settings = among_ok if rec.get("status") == "ok" else among_all
        rows.append({**_row(rec), "setting": settings[_group(rec)][experiment(rec)]})
    frame = pd.DataFrame(rows, columns=NAMES)
    frame["params_vs_attention"] = params_vs_attention(frame, records)
    return frame


def params_vs_attention(frame: pd.DataFrame, records: list[dict]) -> pd.Series:
    """Each run's parameters over its reference's: the matched count it recorded
    (``param_match``), else the attention model's of its task, dataset and scale (the mean over
    its default-variant ok runs, else over all of them). A fair comparison keeps it within
    ``PARAMS_TOLERANCE``. NaN where there is nothing to compare with."""
    ratio = pd.Series(float("nan"), index=frame.index, dtype=float)
    ok = frame[(frame["status"] == "ok") & (frame["model_family"] == ATTENTION_FAMILY)]
    for (task, dataset, scale), rows in frame.groupby(["task", "dataset", "scale"], dropna=False):
        attention = ok[(ok["task"] == task) & (ok["dataset"] == dataset) & (ok["scale"] == scale)]
        default = attention[attention["variant"] == "default"]
        reference = (default if len(default) else attention)["params"].astype(float).mean()
        if reference and reference == reference:  # not NaN, not zero
            ratio[rows.index] = rows["params"].astype(float) / reference
    for i, rec in zip(frame.index, records, strict=True):
        if (match := rec.get("param_match")) and match.get("target"):
            ratio[i] = match["params"] / match["target"]
    return ratio


def unmatched_params(results_dir: str | Path, rec: dict) -> float | None:
    """A recorded run's parameters over the attention model's of its task and dataset (from
    the ok attention records under ``results_dir``), when that is more than
    ``PARAMS_TOLERANCE`` from 1; None when matched, or when there is nothing to compare with."""
    if rec.get("model_family") == ATTENTION_FAMILY or rec.get("status") != "ok":
        return None
    records = [r for r in read_records(results_dir)  # the ratio compares within a task and dataset
               if (r.get("task"), r.get("dataset")) == (rec["task"], rec["dataset"])]
    mine = [i for i, r in enumerate(records) if r.get("run_dir") == rec["run_dir"]]
    if not mine:
        return None
    ratio = float(to_frame(records)["params_vs_attention"].iloc[mine[0]])
    return None if ratio != ratio or abs(ratio - 1) <= PARAMS_TOLERANCE else ratio


def load(results_dir: str | Path) -> pd.DataFrame:
    """The table of every run record under ``results_dir/runs``."""
    return to_frame(read_records(results_dir))


def label(model: str, variant: str, setting: str) -> str:
    """How a row of the aggregate is named in figures: the model, then what sets it apart."""
    extra = [v for v in (variant if variant != "default" else "", setting) if v]
    return f"{model} ({'; '.join(extra)})" if extra else model


def counted_records(frame: pd.DataFrame, records: list[dict]) -> list[dict]:
    """The records the aggregate counts (ok, the latest of a rerun), each with ``label``: its
    name in tables and figures. ``frame`` is ``to_frame(records)``."""
    labels = {r.run_id: label(r.model, r.variant, r.setting) for r in latest_ok(frame).itertuples()}
    return [{**rec, "label": labels[rec["run_id"]]} for rec in records if rec.get("run_id") in labels]


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


def latest_ok(frame: pd.DataFrame) -> pd.DataFrame:
    """The ok runs, where a forced rerun of the same experiment and seed replaces the earlier
    run instead of counting as another seed."""
    ok = frame[(frame["status"] == "ok") & (frame["role"] != "trial")]  # a trial has no test metric
    ok = ok.sort_values("run_id", kind="stable")
    return ok.drop_duplicates([*GROUP, "config_hash", "seed"], keep="last")


def aggregate(frame: pd.DataFrame, by_processor: bool = False) -> pd.DataFrame:
    """Mean, std and 95% CI of the test metric over seeds, per task, dataset, model and
    variant (ok runs only), with parameters and throughput beside them; ``by_processor``:
    per processor model too (what timings are compared within)."""
    ok = latest_ok(frame)
    grouped = ok.groupby([*GROUP, PROCESSOR] if by_processor else GROUP, dropna=False)
    columns = {c.aggregate_name: (c.name, c.aggregate) for c in COLUMNS if c.aggregate}
    out = grouped.agg(**columns, mean=("test_metric", "mean"), std=("test_metric", "std")).reset_index()
    out.insert(out.columns.get_loc("std") + 1, "ci95",
               [confidence_interval(g["test_metric"]) for _, g in grouped])
    # how noisy the throughput of one run is: its spread over seeds (the report's claim 2)
    out["train_samples_per_s_ci95"] = [confidence_interval(g["train_samples_per_s"].dropna())
                                       for _, g in grouped]
    # each seed's test metric, in seed order: what a test of a difference needs (bench.report.stats)
    out["values"] = [tuple(g.sort_values("seed")["test_metric"]) for _, g in grouped]
    return out


def compact_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """What ``mhab table`` prints by default, one row per experiment: task, dataset, model
    (with its variant and setting where they are not the default), the test metric's mean ±
    the half-width of its 95% interval over seeds, the seeds, parameters, training samples/s
    and minutes per run. ``--all`` prints every column."""
    agg = aggregate(frame)
    model = [label(m, v, s) for m, v, s in zip(agg["model"], agg["variant"], agg["setting"], strict=True)]
    metric = [_mean_ci(m, c) for m, c in zip(agg["mean"], agg["ci95"], strict=True)]
    better = ["higher" if h else "lower" for h in agg["higher_is_better"]]
    return pd.DataFrame({
        "task": agg["task"], "dataset": agg["dataset"], "model": model,
        "metric": [f"{name} ({b} better)" for name, b in zip(agg["metric_name"], better, strict=True)],
        "test (mean ± 95% CI)": metric, "seeds": agg["seeds"],
        "params": [whole(p) for p in agg["params"]],
        "train samples/s": [fmt(v) for v in agg["train_samples_per_s"]],
        "wall min": [fmt(v / 60) for v in agg["wall_time_s"]],
    })


def run_list_columns(frame: pd.DataFrame) -> list[str]:
    """The columns ``mhab table`` lists each run with; ``mhab tune``'s three only when a run has
    them (files keep every column)."""
    tuned = frame["study"].notna().any() if "study" in frame else False
    return [c.name for c in COLUMNS if c.in_run_list and c.name in frame.columns
            and (tuned or c.name not in TUNING_COLUMNS)]


TUNING_COLUMNS = ("study", "trial", "role")


def _mean_ci(mean: float, ci95: float) -> str:
    """A mean and the half-width of its 95% interval, as tables print them."""
    return f"{fmt(mean)} ± {fmt(ci95, 2)}" if not math.isnan(ci95) else fmt(mean)


def _cell(row: pd.Series) -> str:
    return f"{_mean_ci(row['mean'], row['ci95'])} ({row['seeds']})"


def markdown_summary(frame: pd.DataFrame) -> str:
    """The results as a Markdown table for reading (the README's, from ``results/reference``:
    ``mhab table results/reference --markdown``): a row per task, dataset, variant and
    setting, a column per model, each cell the test metric's mean ± the half-width of its 95%
    interval over seeds, with the number of seeds; then the processors and code revisions the
    runs come from. A model without an ok run there reads "-"."""
    agg = aggregate(frame)
    if agg.empty:
        return "no ok run to show"
    # attention first, then the baselines in the order the table meets them
    attention_first = agg.sort_values("model_family", key=lambda f: f != ATTENTION_FAMILY, kind="stable")
    models = list(attention_first["model"].unique())
    lines = ["| task (dataset), test metric | " + " | ".join(models) + " |",
             "|---|" + "---|" * len(models)]
    for (task, dataset, variant, setting), rows in agg.groupby(["task", "dataset", "variant", "setting"],
                                                                dropna=False, sort=True):
        higher = bool(rows["higher_is_better"].iloc[0])
        extra = "; ".join(v for v in (variant if variant != "default" else "", setting) if v)
        place = f"{task} ({dataset}{'; ' + extra if extra else ''}), {rows['metric_name'].iloc[0]}"
        cells = {row["model"]: _cell(row) for _, row in rows.iterrows()}
        lines.append(f"| {place} ({'higher' if higher else 'lower'} is better) | "
                     + " | ".join(cells.get(m, "-") for m in models) + " |")
    ok = latest_ok(frame)
    processors = ", ".join(f"{name} ({n} runs)" for name, n in
                           sorted(ok[PROCESSOR].fillna("unknown processor").value_counts().items()))
    revisions = ", ".join(f"`{rev[:7]}`{'-dirty' if rev.endswith('-dirty') else ''} ({n} runs)" for rev, n in
                          sorted(ok["git_revision"].fillna("unknown").value_counts().items()))
    lines += ["", f"Each cell: mean ± half-width of the 95% interval over seeds (seeds in brackets). "
                  f"Processor: {processors}. Code: {revisions}."]
    return "\n".join(lines)


def mixed_code(frame: pd.DataFrame) -> list[str]:
    """A sentence for each task and dataset whose ok runs came from more than one code
    revision, and for each model there whose runs came from more than one version of its own or
    its task's source (each family's source differs from the others' by nature)."""
    notes = []
    ok = latest_ok(frame)
    checks = ((["task", "dataset"], "git_revision", "code revisions", 12),
              (["task", "dataset", "model"], "code_fingerprint", "versions of its model or task source",
               None))
    for keys, column, what, width in checks:
        for place, rows in ok.groupby(keys):
            counts = rows[column].dropna().str[:width].value_counts()
            if len(counts) > 1:
                notes.append(f"{'/'.join(place[:2])}{' ' + place[2] if len(place) > 2 else ''} mixes "
                             f"{len(counts)} {what}: "
                             + ", ".join(f"{value} ({n} runs)" for value, n in sorted(counts.items())))
    return notes

