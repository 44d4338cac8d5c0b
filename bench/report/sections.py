"""``mhab report``: report.md and a self-contained report.html from the results table.

This module draws and writes; what the report says (tables, verdicts) is computed from the
run records in ``bench.report.findings``. A section without data says what to run to fill it.
"""

from __future__ import annotations

import html
import io
import math
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter  # noqa: E402

from bench.records.attention_examples import load_example  # noqa: E402
from bench.records.columns import BY_NAME, COLUMNS  # noqa: E402
from bench.records.numbers import compact, fmt, whole  # noqa: E402
from bench.records.record import tuning_role  # noqa: E402
from bench.records.table import (  # noqa: E402
    PARAMS_TOLERANCE,
    PROCESSOR,
    aggregate,
    confidence_interval,
    counted_records,
    label,
    mixed_code,
    to_frame,
)
from bench.report import sizes  # noqa: E402
from bench.report.findings import (  # noqa: E402
    ATTENTION,
    attention_distances,
    direction,
    distance_findings,
    distance_spread,
    heads_findings,
    heads_table,
    higher_is_better,
    learning_curves,
    length_buckets,
    length_table,
    long_range_findings,
    model_verdicts,
    on_processor,
    speed_findings,
    time_to_quality,
    time_to_quality_findings,
)
from bench.report.published import published_for  # noqa: E402
from bench.report.tuning import (  # noqa: E402
    best_settings,
    expected_max_curves,
    ordering,
    stored_trial_states,
    trials_table,
    tuning_cost,
)

TITLES = dict(
    [
        ("results", "Results per task"),
        ("tradeoff", "Accuracy against throughput"),
        ("scaling", "Throughput and memory against sequence length"),
        ("quality", "Learning curves and time to quality"),
        ("length", "Metric by input length"),
        ("heads", "Heads ablation"),
        ("distance", "How far each head looks"),
        ("attention", "Attention maps"),
        ("samples", "Sample outputs"),
        ("published", "Beside published scores"),
        ("tuning", "Tuned comparisons"),
        ("sizes", "Along training-set size and model size"),
        ("claims", "The article's claims against the data"),
    ]
)


@dataclass
class Section:
    key: str
    title: str
    markdown: list[str] = field(default_factory=list)  # paragraphs / tables (Markdown)
    html: list[str] = field(default_factory=list)
    figures: list[tuple[str, bytes]] = field(default_factory=list)  # (caption, PNG)

    def text(self, line: str) -> None:
        self.markdown.append(line)
        self.html.append(f"<p>{html.escape(line)}</p>")

    def table(self, frame: pd.DataFrame, text_cells: bool = False) -> None:
        """``text_cells``: the cells are free text (user data), escaped in the Markdown too."""
        self.markdown.append((frame.map(escape_cell) if text_cells else frame).to_markdown(index=False))
        self.html.append(frame.to_html(index=False, escape=True, border=0, classes="table"))

    def figure(self, caption: str, fig) -> None:
        # constrained layout: a panel's axis label never runs into its neighbour's ticks
        fig.set_layout_engine("constrained")
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
        plt.close(fig)
        self.figures.append((caption, buffer.getvalue()))


def readable_log_axis(axis, base: float = 10) -> None:
    """Label a log axis (after plotting, so its range is known) with plain numbers that do not
    overlap: 1-2-5 steps when the data span under two decades, powers of ``base`` otherwise;
    thousands as 20k; minor ticks unlabelled. Matplotlib's default labels every minor tick of a
    short range in scientific notation ("2x10^3 3x10^3 4x10^3"), which runs together on a small
    panel, and "10,000 20,000" run together on a third of the page."""
    low, high = sorted(axis.get_view_interval())
    decades = math.log10(high / low) if low > 0 else math.inf
    subs = (1.0, 2.0, 5.0) if base == 10 and decades < 2 else (1.0,)
    locator = LogLocator(base=base, subs=subs, numticks=8)
    powers = range(math.floor(math.log(low, base)), math.ceil(math.log(high, base)) + 1) if low > 0 else ()
    if sum(low <= sub * base**p <= high for p in powers for sub in subs) < 2:
        # Too narrow for those (LogLocator would then tick every 100 or so): it reads as linear.
        locator = MaxNLocator(nbins=4, steps=[1, 2, 5, 10])
    axis.set_major_locator(locator)
    axis.set_major_formatter(FuncFormatter(lambda value, _: compact(value)))
    axis.set_minor_formatter(NullFormatter())


# ---------------------------------------------------------------- sections
def _results_table(group: pd.DataFrame, metric: str) -> pd.DataFrame:
    """One task's aggregate as the report shows it: the columns that ``bench.records.columns``
    gives a header, in its order, and the test metric (mean ± 95% CI) after the seeds."""
    table = {}
    for column in (c for c in COLUMNS if c.header):
        values = group.get(column.aggregate_name)
        if values is None or not column.header_shown(values):
            continue
        table[column.header] = values.map(column.format)
        if column.aggregate_name == "seeds":
            table[f"test {metric}, {direction(higher_is_better(group))} (mean ± 95% CI)"] = [
                f"{m:.4g} ± {c:.2g}" if not math.isnan(c) else f"{m:.4g} (1 seed)"
                for m, c in zip(group["mean"], group["ci95"], strict=True)]
    return pd.DataFrame(table)


# The aggregate's timings: compared only between runs on one processor model.
TIMINGS = ("train_samples_per_s", "infer_samples_per_s", "wall_time_s")


def _timings_by_processor(timed: pd.DataFrame) -> pd.DataFrame:
    """One task's timings per model and processor model, as the report shows them."""
    table = {"model": [label(r.model, r.variant, r.setting) for r in timed.itertuples()],
             "processor": timed[PROCESSOR].fillna("unknown processor"),
             "seeds": timed["seeds"].map(whole)}
    for name in TIMINGS:
        table[BY_NAME[name].header] = timed[name].map(BY_NAME[name].format)
    return pd.DataFrame(table)


def results_section(frame: pd.DataFrame, agg: pd.DataFrame, timing: pd.DataFrame) -> Section:
    """Per task: the pooled aggregate (quality over every seed); where its runs were timed on
    more than one processor model, its timings are left out of that table and given per
    processor model beside it (``timing``: ``aggregate(..., by_processor=True)``)."""
    s = Section("results", TITLES["results"])
    if agg.empty:
        s.text("No successful runs yet: run `mhab run -m suite=quick`.")
    for (task, dataset), group in agg.groupby(["task", "dataset"]):
        metric = group["metric_name"].iloc[0]
        timed = timing[(timing["task"] == task) & (timing["dataset"] == dataset)]
        processors = timed[PROCESSOR].nunique(dropna=False)
        if processors > 1:
            group = group.assign(**{name: math.nan for name in TIMINGS})
        s.text(f"{task} / {dataset}")
        s.table(_results_table(group, metric))
        if processors > 1:
            s.text(f"These runs were made on {processors} processor models: the metric pools their "
                   f"seeds; throughput and wall time are compared within one processor model only:")
            s.table(_timings_by_processor(timed))
        for verdict in model_verdicts(group):
            s.text(verdict)
        unmatched = group[(group["params_vs_attention"] - 1).abs() > PARAMS_TOLERANCE]
        if len(unmatched):
            s.text("Not at matched parameters (more than 10% from the attention model's): "
                   + ", ".join(f"{label(r.model, r.variant, r.setting)} {r.params_vs_attention:.2f}x"
                               for r in unmatched.itertuples())
                   + "; a difference in the metric may be the parameter count's.")
        budgets = group.dropna(subset=["epochs_run"])
        if budgets["epochs_run"].round(1).nunique() > 1:
            s.text(
                "Not the same budget: these rows trained for different numbers of epochs ("
                + ", ".join(f"{label(r.model, r.variant, r.setting)}: {r.epochs_run:g}"
                            for r in budgets.itertuples())
                + "), so their metrics do not compare like for like."
            )
    for note in mixed_code(frame):
        s.text(f"Note: {note}; a difference between these runs may be the code's.")
    failed = frame[frame["status"] != "ok"]
    if len(failed):
        s.text(
            f"{len(failed)} run(s) did not finish ok and are left out: "
            + "; ".join(f"{r.task}/{r.dataset} {r.model} seed {r.seed} ({r.status}): {r.error}"
                        for r in failed.itertuples())
        )
    return s


def tradeoff_section(agg: pd.DataFrame) -> Section:
    s = Section("tradeoff", TITLES["tradeoff"])
    if agg.empty:
        s.text("No data.")
        return s
    if PROCESSOR not in agg:  # an aggregate pooled over processors: one panel per task
        agg = agg.assign(**{PROCESSOR: None})
    tasks = list(agg.groupby(["task", "dataset", PROCESSOR], dropna=False))
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.4), squeeze=False)
    for ax, ((task, dataset, processor), group) in zip(axes[0], tasks, strict=True):
        for row in group.itertuples():
            ax.errorbar(
                row.train_samples_per_s,
                row.mean,
                yerr=0 if math.isnan(row.ci95) else row.ci95,
                fmt="o",
                capsize=3,
                label=label(row.model, row.variant, row.setting),
            )
        ax.set_xscale("log")
        readable_log_axis(ax.xaxis)
        ax.set_xlabel("training samples/s (log)")
        ax.set_ylabel(f"test {group['metric_name'].iloc[0]} ({direction(higher_is_better(group))})")
        if not higher_is_better(group):  # WER: better is up here too
            ax.invert_yaxis()
        ax.set_title(f"{task} / {dataset}{on_processor(agg, processor)}")
        ax.legend(fontsize=7)
    per = "per task and processor model" if agg[PROCESSOR].nunique(dropna=False) > 1 else "per task"
    s.figure(f"Test metric (mean ± 95% CI) against training throughput, {per}.", fig)
    s.text("Up and to the right is better: more accurate and faster to train (the axis of a "
           "lower-is-better metric, such as WER, is inverted).")
    return s


def scaling_section(results_dir: Path, agg: pd.DataFrame) -> Section:
    s = Section("scaling", TITLES["scaling"])
    lengths = length_table(agg)
    path = results_dir / "speed.csv"
    if lengths.empty and not path.is_file():
        s.text("No data: run `mhab run -m suite=claims_length` (recall over 16..1024 tokens) or "
               "`mhab speed`.")
        return s
    if not lengths.empty:
        fig = _against_length(
            lengths,
            ("train_tokens_per_s", "training tokens/s"),
            ("train_activation_mb", "activation memory per batch (MiB)"),
        )
        s.figure(
            "Recall task: training tokens/s and autograd activation memory per batch against "
            "sequence length (same batch size and parameter budget for every model).",
            fig,
        )
        s.table(
            lengths[["model", "seq_len", "train_tokens_per_s", "train_activation_mb", "mean", "ci95"]]
            .rename(columns={"mean": "test accuracy"})
            .sort_values(["model", "seq_len"])
        )
    if path.is_file():
        _speed_tables(s, pd.read_csv(path))
    return s


def _speed_tables(s: Section, speed: pd.DataFrame) -> None:
    """``mhab speed``'s table: the core against torch and timm over length, its targets, and
    the task models."""
    from bench.speed.targets import backend_choice, precision_speedups, reference_summary, targets

    context = speed.iloc[0]
    measured = speed[speed["section"] == "attention"]
    backends = list(dict.fromkeys(measured.get("sdpa_backend", pd.Series(dtype=str)).dropna()))
    attention = measured[measured["status"] == "ok"].copy()
    dtypes = list(dict.fromkeys(speed["dtype"]))
    s.text(f"`mhab speed` on {context['device_name']} ({context['threads']} threads), torch "
           f"{context['torch']}, dtype{'s' if len(dtypes) > 1 else ''} {', '.join(dtypes)}, torch.compile: "
           f"{context['compile']}, SDPA backend{'s' if len(backends) > 1 else ''}: "
           f"{', '.join(backends) or 'auto'}. bfloat16 hardware: "
           f"{context.get('cpu_bf16_flags', 'not recorded')}.")
    if len(backends) > 1:  # one line per impl and pinned kernel
        attention["model"] = attention["model"] + " [" + attention["sdpa_backend"] + "]"
    if len(dtypes) > 1:  # and per precision
        attention["model"] = attention["model"] + " " + attention["dtype"]
    train = attention[attention["mode"] == "train"]
    if not train.empty:
        batch = int(train["batch_size"].min())
        curve = train[train["batch_size"] == batch]
        fig = _against_length(curve, ("tokens_per_s", "tokens/s"), ("peak_memory_mb", "memory (MiB)"))
        s.figure(
            f"Speed benchmark, forward+backward at batch {batch}, width {int(curve['dim'].iloc[0])}, "
            f"{int(curve['num_heads'].iloc[0])} heads, {', '.join(dtypes)}, on {context['device_name']} "
            f"({context['threads']} threads): tokens/s and memory ({curve['memory_kind'].iloc[0]}) "
            f"against sequence length.", fig)
        peaks = speed.groupby("dtype", sort=False)["matmul_peak_gflop_s"].first()
        s.text("Matmul peak measured in the same run: " + ", ".join(
            f"{peak:.1f} GFLOP/s in {dtype}" for dtype, peak in peaks.items()) + ".")
        s.table(attention[["model", "mode", "batch_size", "seq_len", "step_ms", "tokens_per_s",
                           "achieved_gflop_s", "peak_share", "peak_memory_mb"]])
    if not (choice := backend_choice(speed)).empty:
        s.text("The core's step time (ms) under each pinned SDPA kernel, and the fastest; a dash "
               "is a kernel that cannot run that point.")
        s.table(choice.astype(object).where(choice.notna(), "-"))
    goals = targets(speed)
    if not goals.empty:
        rounds = reference_summary(speed)
        s.text((f"{rounds[0].upper()}{rounds[1:]}. " if rounds else "") + "ci_low and ci_high bound "
               "the 95% confidence interval of each median (none under 6 repeats); a goal inside it "
               "is undecided.")
        s.table(goals)
    tasks = speed[speed["section"] == "task"]
    if not tasks.empty:
        columns = ["model", "dtype", "mode", "batch_size", "params", "step_ms", "samples_per_s",
                   "achieved_gflop_s", "peak_share", "engine_overhead", "engine_overhead_ci_low",
                   "engine_overhead_ci_high", "data_share"]
        s.table(tasks[[c for c in columns if c in tasks]])
    if not (speedups := precision_speedups(speed)).empty:
        s.text("Training samples/s of each task model in float32 and in bfloat16, with the attention "
               "core's path in bfloat16.")
        s.table(speedups)


def _against_length(frame: pd.DataFrame, *columns: tuple[str, str]):
    """One log-log panel per (column, label), a line per model, against ``seq_len``."""
    fig, axes = plt.subplots(1, len(columns), figsize=(4.5 * len(columns), 3.4))
    for ax, (column, axis_label) in zip(axes, columns, strict=True):
        for model, group in frame.groupby("model"):
            group = group.sort_values("seq_len")
            ax.plot(group["seq_len"], group[column], marker="o", label=model)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        readable_log_axis(ax.xaxis, base=2)
        readable_log_axis(ax.yaxis)
        ax.set_xlabel("sequence length")
        ax.set_ylabel(axis_label)
        ax.legend(fontsize=7)
    return fig


def _curve_panel(ax, group: pd.DataFrame, x: str, scale: float, xlabel: str) -> None:
    """Validation metric against ``x``, per model: the mean over seeds and their min-max band."""
    for model, runs in group.groupby("model"):
        by_epoch = runs.groupby("epoch")
        mean_x, metric = by_epoch[x].mean() / scale, by_epoch["val_metric"]
        ax.plot(mean_x, metric.mean(), marker="o", markersize=3, label=model)
        if runs["seed"].nunique() > 1:
            ax.fill_between(mean_x, metric.min(), metric.max(), alpha=0.2)
    if x == "epoch":
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(xlabel)
    ax.legend(fontsize=7)


def opened(key: str, empty: bool, missing: str, intro: str) -> Section:
    """A section that starts with what it shows, or, without data, with how to get some."""
    s = Section(key, TITLES[key])
    s.text(missing if empty else intro)
    return s


def quality_section(records: list[dict]) -> Section:
    curves = learning_curves(records)
    s = opened("quality", curves.empty,
               "No learning curves yet: runs record the wall time of each validation since this "
               "version; run `mhab run -m suite=quick`.",
               "Validation metric against epoch and against wall time (training and validation), "
               "mean over seeds with their min-max band. Time to quality: the wall time and "
               "training samples each model needed to first reach a target on validation, mean "
               "over the seeds that reached it.")
    if curves.empty:
        return s
    ttq = time_to_quality(curves)
    for (task, dataset, processor), group in curves.groupby(["task", "dataset", PROCESSOR]):
        metric = group["metric_name"].iloc[0]
        where = f"{task} / {dataset}{on_processor(curves, processor)}"
        fig, (by_epoch, by_time) = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
        _curve_panel(by_epoch, group, "epoch", 1, "epoch")
        _curve_panel(by_time, group, "wall_s", 60, "wall time (min)")
        by_epoch.set_ylabel(f"validation {metric} ({direction(higher_is_better(group))})")
        if not higher_is_better(group):  # WER: better is up, as in every figure of the report
            by_epoch.invert_yaxis()  # the axes share y: both panels turn
        fig.suptitle(where)
        s.figure(f"{where}: validation {metric} against epoch and wall time.", fig)
        rows = ttq[(ttq["task"] == task) & (ttq["dataset"] == dataset) & (ttq[PROCESSOR] == processor)]
        s.text(f"{where}: time to quality")  # the figures come after the tables: name each table
        s.table(pd.DataFrame({
            "target": [f"{t} ({v:.4g})" for t, v in zip(rows["target"], rows["target_value"], strict=True)],
            "model": rows["model"],
            "seeds reaching it": [f"{r} of {n}" for r, n in zip(rows["reached"], rows["seeds"], strict=True)],
            "wall time (min)": (rows["wall_s"] / 60).map(
                lambda v: "not reached" if math.isnan(v) else fmt(v, 3)),
            "training samples": rows["train_samples"].map(
                lambda v: "not reached" if math.isnan(v) else f"{v:,.0f}"),
        }))
    return s


def length_section(records: list[dict]) -> Section:
    s = Section("length", TITLES["length"])
    buckets = length_buckets(records)
    if buckets.empty:
        s.text("No length buckets yet: runs of tasks with inputs of varying length (translation) "
               "record their metric by input length.")
        return s
    for (task, dataset), group in buckets.groupby(["task", "dataset"]):
        metric, unit = group["metric"].iloc[0], group["unit"].iloc[0]
        mean = group.groupby(["model", "length"], sort=False)["value"].mean().reset_index()
        order = list(dict.fromkeys(group["length"]))
        fig, ax = plt.subplots(figsize=(5.5, 3.4))
        for model, g in mean.groupby("model"):
            g = g.set_index("length").reindex(order)
            ax.plot(order, g["value"], marker="o", label=model)
        higher = higher_is_better(group)
        ax.set_xlabel(f"input length ({unit})")
        ax.set_ylabel(f"test {metric} ({direction(higher)})")
        if not higher:  # WER: better is up, as in every figure of the report
            ax.invert_yaxis()
        ax.set_title(f"{task} / {dataset}")
        ax.legend(fontsize=7)
        s.figure(f"{task} / {dataset}: test {metric} by input length (mean over seeds).", fig)
        s.text(f"{task} / {dataset}: test {metric} by input length ({unit}), mean over seeds")
        table = mean.pivot(index="length", columns="model", values="value").reindex(order)
        table.columns.name = None  # the models head their columns; no empty "model" column
        s.table(table.reset_index())
    return s


def heads_section(agg: pd.DataFrame) -> Section:
    s = Section("heads", TITLES["heads"])
    heads = heads_table(agg)
    if heads.empty:
        s.text("No heads ablation: run `mhab run -m suite=claims_heads` (heads 1/2/4/8 at fixed width).")
        return s
    for (task, dataset), group in heads.groupby(["task", "dataset"]):
        fig, ax = plt.subplots(figsize=(4.5, 3.2))
        group = group.sort_values("heads")
        ax.errorbar(group["heads"], group["mean"], yerr=group["ci95"].fillna(0), marker="o", capsize=3)
        ax.set_xscale("log", base=2)
        readable_log_axis(ax.xaxis, base=2)
        ax.set_xlabel("heads (fixed width)")
        ax.set_ylabel(f"test {group['metric_name'].iloc[0]}")
        ax.set_title(f"{task} / {dataset}")
        s.figure(f"Heads ablation on {task} / {dataset}.", fig)
        s.table(group[["heads", "seeds", "mean", "ci95", "params"]])
    return s


def distance_section(records: list[dict]) -> Section:
    distances = attention_distances(records)
    s = opened("distance", distances.empty,
               "No attention distances yet: attention runs record each head's mean attention "
               "distance per layer over the test set.",
               "Each head's mean attention distance per layer over the test set (as in the ViT "
               "paper, Fig. 7): for every query token, the distance to each key weighted by "
               "attention, in the input's units (patches on the grid, tokens, frames); cls tokens "
               "and padding left out. A dot is one head of one seed; the table gives the nearest- "
               "and farthest-looking head, mean over seeds, and the distance even attention over "
               "every key would give (dashed), which heads are read against.")
    if distances.empty:
        return s
    spread = distance_spread(distances)
    for (task, dataset), group in distances.groupby(["task", "dataset"]):
        models = sorted(group["model"].unique())
        fig, ax = plt.subplots(figsize=(5.5, 3.4))
        for i, model in enumerate(models):
            runs = group[group["model"] == model]
            offset = (i - (len(models) - 1) / 2) * 0.12
            dots = ax.scatter(runs["layer"] + offset, runs["distance"], s=14, alpha=0.7, label=model)
            if runs["uniform"].notna().any():
                ax.axhline(runs["uniform"].mean(), color=dots.get_facecolor()[0], linestyle="--",
                           linewidth=1, label=f"{model}: even attention")
        ax.set_xticks(sorted(group["layer"].unique()))
        ax.set_xlabel("layer")
        ax.set_ylabel(f"mean attention distance ({group['unit'].iloc[0]} units)")
        ax.set_title(f"{task} / {dataset}")
        ax.legend(fontsize=7)
        s.figure(f"{task} / {dataset}: each head's mean attention distance per layer.", fig)
        rows = spread[(spread["task"] == task) & (spread["dataset"] == dataset)]
        s.text(f"{task} / {dataset}: the nearest- and farthest-looking head per layer")
        s.table(pd.DataFrame({
            "model": rows["model"], "layer": rows["layer"], "heads": rows["heads"], "seeds": rows["seeds"],
            "nearest head": rows["nearest"].map(lambda v: fmt(v, 3)),
            "farthest head": rows["farthest"].map(lambda v: fmt(v, 3)),
            "mean over heads": rows["mean"].map(lambda v: fmt(v, 3)),
            "even attention": rows["uniform"].map(lambda v: fmt(v, 3)),
            "unit": rows["unit"],
        }))
    return s


def attention_section(records: list[dict]) -> Section:
    s = Section("attention", TITLES["attention"])
    shown = set()
    for rec in records:
        key = (rec["task"], rec["dataset"])
        if not rec.get("attention_example") or key in shown:
            continue
        path = Path(rec["run_dir"]) / rec["attention_example"]
        if not path.is_file():
            continue
        try:
            example = load_example(path)
        except Exception as e:  # noqa: BLE001 - a damaged or tampered file is skipped, never run
            s.text(f"Skipped {path.name} of run {rec['run_id']}: not a readable tensor file "
                   f"({type(e).__name__}).")
            continue
        shown.add(key)
        s.figure(
            f"{rec['task']} / {rec['dataset']}: per-head attention of the {rec['label']} "
            f"model (seed {rec['seed']}) on the first test example.",
            example.figure(),
        )
    if not shown:
        s.text("No attention maps yet: attention runs save one test example's per-head weights.")
    return s


def samples_section(records: list[dict]) -> Section:
    """The first seed's sample outputs (references and hypotheses) per task, dataset and model,
    as the task recorded them; every cell is escaped (transcripts are user text)."""
    s = Section("samples", TITLES["samples"])
    shown = set()
    for rec in sorted(records, key=lambda r: (r["task"], r["dataset"], r["label"], r["seed"])):
        samples = (rec.get("test_details") or {}).get("samples")
        key = (rec["task"], rec["dataset"], rec["label"])
        if not samples or key in shown or not all(isinstance(x, dict) for x in samples):
            continue
        shown.add(key)
        s.text(f"{rec['task']} / {rec['dataset']}: {rec['label']}, seed {rec['seed']}, first "
               f"{len(samples)} test examples.")
        s.table(pd.DataFrame(samples).map(shorten), text_cells=True)
    if not shown:
        s.text("No samples yet: tasks that write text (translation, asr) keep a few test outputs.")
    return s


def _recorded_score(rec: dict, key: str) -> float | None:
    """A record's test score under ``key``: its test metric, or a score its task recorded in
    ``test_details``."""
    if key == rec.get("metric_name"):
        return rec.get("test_metric")
    value = (rec.get("test_details") or {}).get(key)
    return float(value) if isinstance(value, int | float) else None


def _mean_and_interval(scores: list[float | None]) -> str:
    values = pd.Series([v for v in scores if v is not None], dtype=float)
    if values.empty:
        return "-"
    ci = confidence_interval(values)
    return f"{values.mean():.2f}" + ("" if math.isnan(ci) else f" ± {ci:.2f}")


def published_section(records: list[dict]) -> Section:
    """The suite's models beside the scores published for the same dataset
    (``bench.report.published``), on the keys each publication gives: mean ± 95% CI over seeds."""
    s = Section("published", TITLES["published"])
    shown = False
    places = sorted({(r["task"], r["dataset"]) for r in records})
    for task, dataset in places:
        if not (published := published_for(dataset)):
            continue
        keys = list(dict.fromkeys(k for p in published for k in p.scores))
        runs = [r for r in records if (r["task"], r["dataset"]) == (task, dataset)]
        rows = []
        for name in sorted({r["label"] for r in runs}):
            mine = [r for r in runs if r["label"] == name]
            row = {"model": f"{name} (this suite)", "seeds": len(mine)}
            for key in keys:
                row[key] = _mean_and_interval([_recorded_score(r, key) for r in mine])
            rows.append(row)
        for p in published:
            rows.append({"model": f"{p.model}; {p.source}", "seeds": "-",
                         **{key: f"{p.scores[key]:.2f}" if key in p.scores else "-" for key in keys}})
        s.text(f"{task} / {dataset}: test scores (mean ± 95% CI over seeds) beside those published. "
               f"A publication's model, budget and tooling differ from the suite's: its row is a "
               f"landmark for scale, not a comparison a verdict is drawn from.")
        s.table(pd.DataFrame(rows))
        for p in published:
            if p.note:
                s.text(f"{p.model}: {p.note}.")
        shown = True
    if not shown:
        s.text("No dataset with published scores here (bench/report/published.py lists them).")
    return s


def shorten(value: object, limit: int = 300) -> str:
    """A sample's text cut to ``limit`` characters (an email is a source too)."""
    text = str(value)
    return text if len(text) <= limit else text[:limit].rstrip() + " …"


def escape_cell(value: object) -> str:
    """A table cell as text that can neither start HTML in the Markdown nor break its table."""
    return html.escape(str(value), quote=False).replace("|", "&#124;").replace("\n", " ").replace("\r", " ")


# ---------------------------------------------------------------- claims
CLAIMS = (
    "1. Several heads see more than one",
    "2. Attention is more parallel and faster than RNNs",
    "3. Attention handles long-range dependencies",
    "4. " + sizes.CLAIMS["data"],
    "5. " + sizes.CLAIMS["model"],
)


def _counted(values: pd.Series, unknown: str) -> str:
    counts = values.fillna(unknown).value_counts()
    return ", ".join(f"{name} ({n} run{'s' * (n != 1)})" for name, n in sorted(counts.items()))


def provenance(frame: pd.DataFrame) -> str:
    """Where the records come from: the processor models and code revisions, counted, and how
    the report treats more than one processor model."""
    ok = frame[frame["status"] == "ok"]
    processors = ok[PROCESSOR].nunique(dropna=False)
    text = (f"Measured on: {_counted(ok[PROCESSOR], 'unknown hardware')}. Code: "
            f"{_counted(ok['git_revision'].str[:12], 'unknown revision')}.")
    if processors > 1:
        text += (f" The records come from {processors} processor models: throughput, wall time and "
                 f"time to quality are compared only between runs on the same one (per processor in "
                 f"the tables, findings and figures); test metrics are pooled across them.")
    return text


def claims_section(frame: pd.DataFrame, agg: pd.DataFrame, records: list[dict],
                   tuned: pd.DataFrame | None = None, timing: pd.DataFrame | None = None) -> Section:
    """The report's front page: the answer first, one table row per claim and place, with its
    verdict and the numbers it rests on; the per-task results follow."""
    s = Section("claims", TITLES["claims"])
    s.text(provenance(frame))
    s.text(
        "A verdict from seeds rests on Welch's t-test of the difference "
        "of the means (its 95% interval and p beside it), Holm-corrected across the comparisons "
        "of one claim: supported or contradicted when significant at 5%, inconclusive otherwise, "
        "and always with a single seed. A finding without such a test (throughput, one "
        "measurement per run; time to quality; metric by length) is only an indication for or "
        "against the claim, never a verdict."
    )
    curves = learning_curves(records)
    by_claim = {
        CLAIMS[0]: heads_findings(agg) + distance_findings(distance_spread(attention_distances(records))),
        CLAIMS[1]: speed_findings(agg if timing is None else timing)
        + time_to_quality_findings(time_to_quality(curves)),
        CLAIMS[2]: long_range_findings(agg, records),
        CLAIMS[3]: sizes.findings(agg, "data"),
        CLAIMS[4]: sizes.findings(agg, "model"),
    }
    rows = [(claim, f.where, f.verdict, f.numbers) for claim, findings in by_claim.items() for f in findings]
    s.table(pd.DataFrame(rows, columns=["claim", "where", "verdict", "numbers"]))
    if tuned is not None and len(tuned):
        s.text("Attention against the RNNs at the default recipe and after the same tuning for every "
               "family (`mhab tune`; see Tuned comparisons):")
        s.table(tuned, text_cells=True)
    return s


# ---------------------------------------------------------------- tuning
def _verdicts_of(records: list[dict]) -> dict[tuple[str, str], list[str]]:
    """Each task and dataset's attention-against-baselines verdicts over ``records``."""
    if not records:
        return {}
    agg = aggregate(to_frame(records))
    return {where: model_verdicts(group) for where, group in agg.groupby(["task", "dataset"])}


def tuned_and_default(all_records: list[dict]) -> pd.DataFrame:
    """Per task and dataset with tuned finals: the default recipe's verdicts beside the tuned
    ones (the same Welch test and Holm correction, over the finals' seeds)."""
    finals = [r for r in all_records if tuning_role(r) == "final"]
    tuned = _verdicts_of(finals)
    default = _verdicts_of([r for r in all_records if tuning_role(r) is None])
    rows = [{"where": f"{task}/{dataset}", "default recipe": " ".join(default.get((task, dataset)) or
                                                                       ["no default-recipe runs"]),
             "tuned (each family's best trial, its finals)": " ".join(verdicts)}
            for (task, dataset), verdicts in tuned.items()]
    return pd.DataFrame(rows)


def tuning_section(all_records: list[dict], side_by_side: pd.DataFrame,
                   results_dir: Path | None = None) -> Section:
    trials = trials_table(all_records)
    s = opened("tuning", trials.empty,
               "No tuning studies: run `mhab tune task=asr model=attention,lstm,gru` (docs/tuning.md).",
               "Every family searched the same space with the same number of trials and the same "
               "sampler (`mhab tune`); trials are scored on validation and never tested. The "
               "expected best validation score of n trials (Dodge et al. 2019, from each study's "
               "trials as independent draws; band: ± one standard deviation) shows whether an "
               "ordering holds at every tuning budget. The finals rerun each family's best trial "
               "with several seeds, on test.")
    if trials.empty:
        return s
    curves = expected_max_curves(trials)
    if curves.empty:
        s.text("No trial finished ok, so there is no expected-best curve and no best trial; what "
               "the trials cost and why they failed:")
    for (task, dataset), group in curves.groupby(["task", "dataset"]) if not curves.empty else ():
        metric, higher = group["metric_name"].iloc[0], bool(group["higher_is_better"].iloc[0])
        fig, (by_n, by_time) = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
        for (model, _), curve in group.groupby(["model", "study"]):
            for ax, x in ((by_n, "n"), (by_time, "wall_min")):
                ax.plot(curve[x], curve["expected"], marker="o", ms=3, label=model)
                ax.fill_between(curve[x], curve["expected"] - curve["std"], curve["expected"] + curve["std"],
                                alpha=0.2)
        by_n.set_xlabel("trials")
        by_time.set_xlabel("wall time of the trials (min)")
        by_n.set_ylabel(f"expected best val {metric} ({direction(higher)})")
        by_n.legend(fontsize=7)
        fig.suptitle(f"{task} / {dataset}")
        s.figure(f"{task} / {dataset}: expected best validation {metric} against trials and wall time.", fig)
        attention = group[group["model_family"] == ATTENTION]
        for (a_model, _), a in attention.groupby(["model", "study"]):
            rivals = group[group["model_family"] != ATTENTION]
            for (b_model, _), b in rivals.groupby(["model", "study"]):
                s.text(f"{task} / {dataset}: " + ordering(a, b, a_model, b_model) + ".")
    chosen = {r["tuning"]["study"]: r["tuning"]["trial"] for r in all_records if tuning_role(r) == "final"}
    if not (best := best_settings(trials, chosen)).empty:
        s.text("Each study's best trial and the values its trials varied:")
        s.table(best.drop(columns=["study"]).assign(val=lambda f: f["val"].map(lambda v: fmt(v, 4))),
                text_cells=True)
    cost = tuning_cost(trials, stored_trial_states(results_dir) if results_dir else None)
    s.text("What tuning cost, per study:")
    s.table(cost.drop(columns=["study"]).assign(wall_min=cost["wall_min"].map(lambda v: fmt(v, 3)))
            .rename(columns={"wall_min": "wall time (min)"}))
    if len(side_by_side):
        s.text("The default recipe's verdict beside the tuned one:")
        s.table(side_by_side, text_cells=True)
    else:
        s.text("No finals yet: they run once every study has its trials (tune.finals=true).")
    return s


# ---------------------------------------------------------------- sizes
def _size_figure(group: pd.DataFrame, axis: sizes.Axis, metric: str, higher: bool, processors: int = 1):
    """The test metric against the axis' own measure, training FLOPs and wall time: a line per
    model, its band the seeds' 95% interval. Runs timed on several ``processors`` models give
    no wall-time panel: wall time compares within one processor model only."""
    panels = ((axis.x, 1.0, axis.noun), ("train_flops", 1e12, "training TFLOPs"),
              ("wall_time_s", 60.0, "wall time (min)"))
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4), sharey=True)
    for ax, (x, scale, xlabel) in zip(axes, panels, strict=True):
        ax.set_xlabel(xlabel)
        # records written without the measure (by hand, or before it was recorded) leave it out
        known = group[pd.to_numeric(group[x], errors="coerce").gt(0)] if x in group else group.iloc[0:0]
        if x == "wall_time_s" and processors > 1:
            ax.text(0.5, 0.5, f"runs on {processors} processor models:\nwall time not compared",
                    ha="center", va="center", transform=ax.transAxes)
            continue
        if known.empty:
            ax.text(0.5, 0.5, "not recorded", ha="center", va="center", transform=ax.transAxes)
            continue
        for model, rows in known.groupby("model"):
            rows = rows.sort_values(axis.x)
            xs, band = rows[x].astype(float) / scale, rows["ci95"].fillna(0).astype(float)
            ax.plot(xs, rows["mean"], marker="o", markersize=3, label=model)
            ax.fill_between(xs, rows["mean"] - band, rows["mean"] + band, alpha=0.2)
        ax.set_xscale("log")
        readable_log_axis(ax.xaxis)
    axes[0].set_ylabel(f"test {metric} ({direction(higher)})")
    if not higher:  # WER: better is up here too (the panels share the axis)
        axes[0].invert_yaxis()
    axes[0].legend(fontsize=7)
    return fig


def sizes_section(agg: pd.DataFrame, timing: pd.DataFrame | None = None) -> Section:
    found = {name: sizes.points(agg, axis) for name, axis in sizes.AXES.items()}
    s = opened("sizes", all(rows.empty for rows in found.values()),
               "No sweep along training-set size or model size: `mhab run -m suite=scale_data "
               "task=image`, `mhab run -m suite=scale_model task=asr` (docs/sweeps.md).",
               "Each family at several training-set sizes (nested subsets; the budget in samples "
               "seen the same at every size) and model sizes (scale=; the RNNs matched to "
               "attention's parameters at each): the test metric with its seeds' 95% band, against "
               "the axis itself, training compute and wall time; better is up (a lower-is-better "
               "metric's axis is inverted).")
    for name, rows in found.items():
        axis = sizes.AXES[name]
        for (task, dataset), group in rows.groupby(["task", "dataset"]):
            metric, higher = group["metric_name"].iloc[0], higher_is_better(group)
            timed = timing[(timing["task"] == task) & (timing["dataset"] == dataset)] \
                if timing is not None else group.iloc[0:0]
            processors = max(1, timed[PROCESSOR].nunique(dropna=False)) if PROCESSOR in timed else 1
            s.figure(f"{task} / {dataset}: test {metric} against {axis.noun}, training FLOPs and "
                     f"wall time.", _size_figure(group, axis, metric, higher, processors))
            attention = group[group["model_family"] == ATTENTION]
            for a_model, a in attention.groupby("model"):
                for b_model, b in group[group["model_family"] != ATTENTION].groupby("model"):
                    s.text(f"{task} / {dataset}: " + sizes.crossing(a, b, axis, a_model, b_model) + ".")
        if not rows.empty:
            s.table(sizes.curve_table(rows, axis))
    return s


# ---------------------------------------------------------------- writing
def build(results_dir: Path, all_records: list[dict]) -> list[Section]:
    # The default-recipe sections read plain runs and tuned finals alike: a final is a run of
    # its own settings, labelled so. Trials, scored on validation only, appear under tuning.
    tested = [r for r in all_records if tuning_role(r) != "trial"]
    frame = to_frame(tested)
    records = counted_records(frame, tested)
    agg = aggregate(frame)
    timing = aggregate(frame, by_processor=True)
    side_by_side = tuned_and_default(all_records)
    return [
        claims_section(frame, agg, records, side_by_side, timing),
        results_section(frame, agg, timing),
        tradeoff_section(timing),
        scaling_section(results_dir, agg),
        quality_section(records),
        length_section(records),
        heads_section(agg),
        distance_section(records),
        attention_section(records),
        samples_section(records),
        published_section(records),
        tuning_section(all_records, side_by_side, results_dir),
        sizes_section(agg, timing),
    ]
