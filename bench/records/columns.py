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

from bench.records.defaults import DEFAULT_SCALE, FULL_TRAINING_SET
from bench.records.numbers import fmt, scaled, whole


@dataclass(frozen=True)
class Column:
    name: str
    meaning: str
    aggregate: str | None = None  # how seeds combine (a pandas aggregation); None: not aggregated
    aggregated_as: str | None = None  # the aggregate's column name, when not ``name``
    header: str | None = None  # the report's per-task table heads it so; None: not shown there
    # whether the report's table shows it, given the column's values there; default: always
    header_shown: Callable[[Any], bool] = lambda values: True
    format: Callable[[Any], str] = fmt  # how its numbers are written for reading
    in_run_list: bool = False  # shown in ``mhab table``'s list of runs
    read: Callable[[dict], Any] | None = None  # from a record; default ``record[name]``

    @property
    def aggregate_name(self) -> str:
        return self.aggregated_as or self.name

    def value(self, record: dict) -> Any:
        return self.read(record) if self.read else record.get(self.name)


def _trainer(key: str, absent: Any) -> Callable[[dict], Any]:
    return lambda record: ((record.get("config") or {}).get("trainer") or {}).get(key, absent)


def _environment(key: str) -> Callable[[dict], Any]:
    return lambda record: (record.get("environment") or {}).get(key)


def _train_examples(record: dict) -> Any:
    data = record.get("data") or {}
    return data.get("train_examples", (data.get("sizes") or {}).get("train"))


def _train_flops(record: dict) -> Any:
    """Training compute: 3x the forward FLOPs (forward and backward) of every sample seen."""
    data, flops, epochs = record.get("data") or {}, record.get("flops_per_sample"), record.get("epochs_run")
    seen = data.get("epoch_examples", _train_examples(record))
    return 3 * flops * epochs * seen if None not in (flops, epochs, seen) else None


def _code_fingerprint(record: dict) -> str | None:
    code = record.get("code") or {}
    return " ".join(f"{role}:{(code[role] or {}).get('sha256', '')[:6]}" for role in sorted(code)) or None


def _tuning(key: str) -> Callable[[dict], Any]:
    return lambda record: (record.get("tuning") or {}).get(key)


COLUMNS: tuple[Column, ...] = (
    Column("task", "the task: `image`, `speech`, `asr`, `translation`, `summarization`, `recall` or "
           "your own", in_run_list=True),
    Column("dataset", "the task's dataset (`task.dataset`)", in_run_list=True),
    Column("model", "`attention`, `lstm`, `gru`; translation RNNs with additive attention are "
           "`gru+additive_attn` / `lstm+additive_attn`", header="model", format=str, in_run_list=True),
    Column("model_family", "the model config's `family`: `attention`, `rnn`, or a family of your own; "
           "the report compares attention with each other family as a baseline of its own",
           aggregate="first"),
    Column("scale", "the model size (`scale=`): `s` is each task's default; `xs`, `m`, `l` about 4x "
           "the parameters apart", aggregate="first", format=str,
           read=lambda record: (record.get("config") or {}).get("scale", DEFAULT_SCALE)),
    Column("train_fraction", "the share of the training split trained on (`task.train_fraction`; a "
           "nested subset, the budget in samples seen unchanged)", aggregate="first",
           read=lambda record: ((record.get("config") or {}).get("task") or {}).get("train_fraction",
                                                                                   FULL_TRAINING_SET)),
    Column("train_examples", "training examples (of the subset, with `task.train_fraction`)",
           aggregate="mean", read=_train_examples),
    Column("variant", "the `variant=` label (`default` when unset); claims use `heads_N` and `length_L`",
           header="variant", format=str, read=lambda record: record.get("variant") or "default"),
    Column("setting", "empty, unless the same task, dataset, model and variant was run with different "
           "configs: then the keys that differ, such as `trainer.epochs=10` (so different experiments "
           "are never averaged as seeds of one)",
           header="setting", header_shown=lambda values: values.astype(bool).any(), format=str,
           in_run_list=True,
           read=lambda record: None),  # set by the table, from every record of the group
    Column("seed", "the run's seed", aggregate="nunique", aggregated_as="seeds", header="seeds",
           format=whole, in_run_list=True),
    Column("status", "`ok`, `failed` or `interrupted`", in_run_list=True),
    Column("metric_name", "`accuracy` (image, speech, recall), `wer` (asr), `bleu` (translation) or "
           "`rougeL` (summarization)", aggregate="first"),
    Column("higher_is_better", "the metric's direction, as the task recorded it (WER: false); "
           "checkpoint selection, aggregates and verdicts follow it", aggregate="first"),
    Column("test_metric", "test score of the best-validation checkpoint (WER as a fraction, BLEU and "
           "ROUGE x100)", in_run_list=True),
    Column("val_metric", "the best validation score (the one that chose the checkpoint)"),
    Column("params", "trainable parameters", aggregate="mean", header="params", format=whole,
           in_run_list=True),
    Column("params_vs_attention", "params over the reference's: as the run recorded it when its width "
           "was matched (`param_match`), else over the attention model's of the same task, dataset and "
           "scale (mean of its default-variant runs); outside 0.9-1.1 the comparison is not at matched "
           "parameters, and the report says so", aggregate="mean", header="params vs attention",
           format=lambda value: "-" if value != value or value is None else f"{value:.2f}x",
           read=lambda record: None),  # set by the table, from the attention runs
    Column("train_samples_per_s", "steady-state training throughput (warm-up steps excluded)",
           aggregate="mean", header="train samples/s", in_run_list=True),
    Column("infer_samples_per_s", "inference throughput on one test batch (translation: greedy "
           "decoding)", aggregate="mean", header="inference samples/s", in_run_list=True),
    Column("infer_latency_ms_median", "median latency of one inference batch"),
    Column("flops_per_sample", "forward FLOPs per sample (torch's FLOP counter, with the CPU attention "
           "and RNN kernels counted)", aggregate="mean", header="GFLOPs/sample", format=scaled(1e9)),
    Column("train_activation_mb", "MiB autograd saves for backward in one training batch (the model's "
           "own memory cost, comparable across runs)", aggregate="mean"),
    Column("peak_memory_mb", "CUDA max allocated, or the process' peak RSS on CPU (process-wide: in a "
           "sequential sweep it includes earlier runs)", aggregate="max"),
    Column("train_flops", "training compute: 3x the forward FLOPs of every sample seen (epochs run x "
           "the epoch's samples)", aggregate="mean", format=scaled(1e12), read=_train_flops),
    Column("epochs_run", "epochs trained (fewer than configured when `trainer.max_steps` stops early)",
           aggregate="mean", header="epochs", format=lambda value: fmt(value, 3)),
    Column("wall_time_s", "wall time of the run, data loading to last measurement", aggregate="mean",
           header="wall (min)", format=scaled(60, 3), in_run_list=True),
    Column("dtype", "`float32`, or `bf16` (autocast to bfloat16); the report's tables show it where "
           "a run is not float32", aggregate="first", header="dtype",
           header_shown=lambda values: bool(set(values.dropna()) - {"float32"}), format=str,
           read=_trainer("dtype", "float32")),
    Column("attention_path", "the attention core's path: `sdpa` (torch's fused kernel) or `matmul` "
           "(explicit matmuls), with `(train)` and `(infer)` where the two differ; empty without the core",
           aggregate="first"),
    Column("device", "`cpu` or `cuda`", read=_environment("device")),
    Column("device_name", "the processor or GPU model; the report compares throughput, wall time and "
           "time to quality only between runs on the same one", read=_environment("device_name")),
    Column("git_revision", "the commit of mha-bench the run trained with (`-dirty`: with uncommitted "
           "changes); the report names the revisions its records come from",
           read=_environment("git_revision")),
    Column("code_fingerprint", "the source of the model family's and the task's modules (`model:<sha> "
           "task:<sha>`, 6 hex each; empty for records made before it was kept); `mhab table` and the "
           "report say where one comparison mixes them", read=_code_fingerprint),
    Column("study", "`mhab tune`'s study the run belongs to (empty for a plain run)", aggregate="first",
           read=_tuning("study"), in_run_list=True),
    Column("trial", "the study's trial number: a trial's own, or the trial a final repeats",
           read=_tuning("trial"), in_run_list=True),
    Column("role", "`trial` (scored on validation; no test metric, left out of the aggregate and the "
           "report's default-recipe results) or `final` (the best trial's settings with another seed, "
           "tested); empty for a plain run", aggregate="first", read=_tuning("role"), in_run_list=True),
    Column("config_hash", "sha256 (12 hex) of the resolved config without paths, device and seed"),
    Column("run_id", "the run directory's name"),
    Column("error", "why a failed run failed"),
    Column("num_heads", "an axis the report draws against, from the recorded config "
           "(`model.num_heads`)", aggregate="first"),
    Column("num_heads_sweep", "the group of runs whose configs differ only in `model.num_heads`",
           aggregate="first"),
    Column("seq_len", "an axis the report draws against, from the recorded config (`task.seq_len`)",
           aggregate="first"),
    Column("seq_len_sweep", "the group of runs whose configs differ only in `task.seq_len` and the model",
           aggregate="first"),
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
