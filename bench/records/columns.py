"""The results table's columns, each defined once: where its value comes from in a run
record, how seeds are combined in the aggregate, how the report heads it and writes its
numbers, and what it means. ``mhab table``, the report's per-task tables and the docs' table
of columns (``docs/results.md``, checked by a test) all read this list.

Adding a column is one line here plus the code that measures it into the record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.records.numbers import fmt, scaled, whole


@dataclass(frozen=True)
class Column:
    name: str
    meaning: str
    aggregate: str | None = None  # how seeds combine (a pandas aggregation); None: not aggregated
    aggregated_as: str | None = None  # the aggregate's column name, when not ``name``
    header: str | None = None  # the report's per-task table heads it so; None: not shown there
    header_only_if_any: bool = False  # shown there only where some row has a value
    format: Callable[[Any], str] = fmt  # how its numbers are written for reading
    in_run_list: bool = False  # shown in ``mhab table``'s list of runs
    read: Callable[[dict], Any] | None = None  # from a record; default ``record[name]``

    @property
    def aggregate_name(self) -> str:
        return self.aggregated_as or self.name

    def value(self, record: dict) -> Any:
        return self.read(record) if self.read else record.get(self.name)


def _environment(key: str) -> Callable[[dict], Any]:
    return lambda record: (record.get("environment") or {}).get(key)


COLUMNS: tuple[Column, ...] = (
    Column("task", "the task adapter (`task.name`)", in_run_list=True),
    Column("dataset", "the task's dataset (`task.dataset`)", in_run_list=True),
    Column("model", "the model's name, with the family's size or ablation where it has one",
           header="model", format=str, in_run_list=True),
    Column("model_family", "the model family (`attention`, `rnn`, or your own)", aggregate="first"),
    Column("variant", "the free ablation label (`variant=`), `default` without one", header="variant",
           format=str, read=lambda record: record.get("variant") or "default"),
    Column("setting", "what sets this run's config apart from others of the same task, dataset, "
           "model and variant (`trainer.epochs=10`); empty when there is one config",
           header="setting", header_only_if_any=True, format=str, in_run_list=True,
           read=lambda record: None),
    Column("seed", "the run's seed; aggregated as the number of distinct seeds", aggregate="nunique",
           aggregated_as="seeds", header="seeds", format=whole, in_run_list=True),
    Column("status", "`ok`, `failed` or `interrupted`", in_run_list=True),
    Column("metric_name", "the task's test metric (accuracy, bleu, wer, rougeL...)", aggregate="first"),
    Column("higher_is_better", "the metric's direction", aggregate="first"),
    Column("test_metric", "the metric on the test split, of the best-validation checkpoint; "
           "aggregated as mean, std, ci95 (t-distribution) and the per-seed values",
           in_run_list=True),
    Column("val_metric", "the best validation metric (what chose the checkpoint)"),
    Column("params", "trainable parameters", aggregate="mean", header="params", format=whole,
           in_run_list=True),
    Column("train_samples_per_s", "training throughput after the timing warm-up steps",
           aggregate="mean", header="train samples/s", in_run_list=True),
    Column("infer_samples_per_s", "inference throughput on a test batch", aggregate="mean",
           header="inference samples/s", in_run_list=True),
    Column("infer_latency_ms_median", "median latency of one inference batch (ms)"),
    Column("flops_per_sample", "forward FLOPs per example (torch's FLOP counter)", aggregate="mean",
           header="GFLOPs/sample", format=scaled(1e9)),
    Column("train_activation_mb", "memory the training step's activations take (MB)", aggregate="mean"),
    Column("peak_memory_mb", "peak memory of the run (MB)", aggregate="max"),
    Column("epochs_run", "epochs trained", aggregate="mean", header="epochs",
           format=lambda value: fmt(value, 3)),
    Column("wall_time_s", "the run's wall time, building and measuring included (s)", aggregate="mean",
           header="wall (min)", format=scaled(60, 3), in_run_list=True),
    Column("device", "`cpu` or `cuda`", read=_environment("device")),
    Column("device_name", "the processor or GPU", read=_environment("device_name")),
    Column("config_hash", "the experiment: a hash of the config without seed and paths"),
    Column("run_id", "the run directory's name"),
    Column("error", "why a run did not finish ok"),
    Column("num_heads", "the config's `model.num_heads` (the heads axis)", aggregate="first"),
    Column("num_heads_sweep", "the heads sweep the run belongs to", aggregate="first"),
    Column("seq_len", "the config's `task.seq_len` (the length axis)", aggregate="first"),
    Column("seq_len_sweep", "the length sweep the run belongs to", aggregate="first"),
)
NAMES: list[str] = [column.name for column in COLUMNS]
BY_NAME: dict[str, Column] = {column.name: column for column in COLUMNS}


def markdown() -> str:
    """The table of columns as the docs give it (``mhab table --columns`` prints it)."""
    lines = ["| column | meaning | over seeds |", "|---|---|---|"]
    for c in COLUMNS:
        over = {"first": "one value", "nunique": f"count (`{c.aggregate_name}`)", None: "-"}.get(
            c.aggregate, c.aggregate if c.aggregated_as is None else f"{c.aggregate} (`{c.aggregate_name}`)")
        if c.name == "test_metric":
            over = "mean, std, ci95, values"
        lines.append(f"| `{c.name}` | {c.meaning} | {over} |")
    return "\n".join(lines)
