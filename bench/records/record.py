"""Run records: one JSON per run, in its own directory, written atomically."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import time
import types
import typing
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypedDict

from bench.errors import BenchError, working_on
from bench.records.atomic import atomic_write_json
from bench.records.defaults import DEFAULT_SCALE, FULL_TRAINING_SET

RECORD = "record.json"
SCHEMA_VERSION = 1
# Keys that say where things are or how they are shown, not what is computed: they stay out
# of the config hash, so the same experiment has the same hash on every machine and seed.
UNHASHED_KEYS = ("results_dir", "data_dir", "cache_dir", "progress", "logger", "seed", "device", "force",
                 "on_code_change")


@dataclass(frozen=True)
class Later:
    """A key that configs gained after runs were recorded, and ``absent``: the value that does
    what a config without it did, where ``when`` holds (dotted key -> value)."""

    key: str
    absent: Any
    when: tuple[tuple[str, Any], ...] = ()


# The one rule for old records: a config without a key of ``LATER`` reads as its ``absent``
# value, and a key at that value stays out of the config hash. So a key added with a default
# that keeps what runs did leaves every earlier experiment's hash as it was: its records still
# resume and group. tests/test_config_hashes.py pins every shipped experiment's hash; a new key
# missing here fails it and says what to do.
LATER: tuple[Later, ...] = (
    Later("tuning", None),
    Later("trainer.dtype", "float32"),
    Later("trainer.compile", False),
    Later("trainer.batching", "random"),
    Later("trainer.max_tokens", None),
    Later("task.root", None, when=(("task.name", "image"),)),
    Later("task.frontend", "patch", when=(("task.name", "asr"),)),
    Later("task.frontend_channels", 16, when=(("task.name", "asr"),)),
    Later("task.image_size", 32, when=(("task.name", "image"),)),
    Later("task.channels", 3, when=(("task.name", "image"),)),
    # model configs name their builder since families became one file each; before, the
    # family chose it
    Later("model._target_", "models.attention_family.build", when=(("model.family", "attention"),)),
    Later("model._target_", "models.rnn_family.build", when=(("model.family", "rnn"),)),
    # the reference family says it is not matched since baselines' widths are computed
    Later("model.match_params", False, when=(("model.family", "attention"),)),
    Later("scale", DEFAULT_SCALE),
    Later("task.train_fraction", FULL_TRAINING_SET),
    Later("task.train_subset_seed", 0),
    # attention configs name tie_embeddings since a task's settings reach them by
    # interpolation; before, only the seq2seq tasks set it (to the builder's default)
    *(Later("model.tie_embeddings", True, when=(("model.family", "attention"), ("task.name", name)))
      for name in ("image", "speech", "asr", "recall")),
)


def _get(config: dict[str, Any], dotted: str) -> Any:
    section, _, key = dotted.rpartition(".")
    holder = config.get(section) if section else config
    return holder.get(key) if isinstance(holder, dict) else None


def with_later_keys(config: dict[str, Any], present: bool) -> dict[str, Any]:
    """``config`` with each key of ``LATER`` that applies to it at its ``absent`` value: set
    where missing (``present``), or removed where at that value (what the hash reads)."""
    config = {k: dict(v) if isinstance(v, dict) else v for k, v in config.items()}
    for later in LATER:
        if any(_get(config, key) != value for key, value in later.when):
            continue
        group, _, key = later.key.rpartition(".")
        if not group:  # a top-level key
            section: Any = config
        elif present:
            section = config.setdefault(group, {})
        else:
            section = config.get(group)
        if not isinstance(section, dict):
            continue
        if present:
            section.setdefault(key, later.absent)
        elif key in section and section[key] == later.absent and type(section[key]) is type(later.absent):
            del section[key]
    return config


def config_hash(config: dict[str, Any]) -> str:
    """Short sha256 of a resolved config (plain data: ``bench.setup.compose.resolved_config``)
    without the keys in ``UNHASHED_KEYS``, nor those of ``LATER`` at their ``absent`` values."""
    data = {k: v for k, v in config.items() if k not in UNHASHED_KEYS and k != "hydra"}
    data = _without_unread_model_settings(data)
    # A suite is a `# @package _global_` override, so its runs have no `suite` key where a run
    # alone has `suite: {}`: hashed alike, a suite's run resumes and groups with the same
    # experiment run on its own.
    data.setdefault("suite", {})
    data = with_later_keys(data, present=False)
    blob = json.dumps(data, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def _without_unread_model_settings(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` without what reaches the experiment only through other keys: the task's
    settings per model family (``task.models``: the model's resolved keys hold what it read),
    and the reference model where the model is not sized against it."""
    config = dict(config)
    if isinstance(config.get("task"), dict) and "models" in config["task"]:
        config["task"] = {k: v for k, v in config["task"].items() if k != "models"}
    if not (isinstance(config.get("model"), dict) and config["model"].get("match_params")):
        config.pop("reference", None)
    return config


def run_stem(task: str, dataset: str, model: str, seed: int, config_hash: str) -> str:
    """What a run directory is named after (``find_ok_record`` looks runs up by its tail)."""
    return f"{task}-{dataset}-{model}-s{seed}-{config_hash[:8]}"


def new_run_dir(results_dir: str | Path, stem: str) -> Path:
    """A fresh directory under ``results_dir/runs``; two runs never share one, even when
    started in the same second by parallel workers (the uuid part makes the name unique and
    ``mkdir`` without ``exist_ok`` makes sure of it)."""
    runs = Path(results_dir) / "runs"
    try:
        runs.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BenchError(f"cannot create results_dir '{results_dir}' ({e.strerror}); "
                         f"pass a writable results_dir=PATH") from None
    if not os.access(runs, os.W_OK):
        raise BenchError(f"results_dir '{results_dir}' is not writable; pass results_dir=PATH")
    while True:
        name = f"{time.strftime('%Y%m%d-%H%M%S')}-{stem}-{uuid.uuid4().hex[:6]}"
        try:
            (runs / name).mkdir()
            return runs / name
        except FileExistsError:
            continue


Number = int | float


class RunRecord(TypedDict, total=False):
    """A run record (``runs/<run>/record.json``): one type for every run, ok or not. What is
    read from it anywhere (tables, report, estimate) is a field here; a record is checked
    against these types when written and when read (``record_problem``)."""

    schema_version: int
    status: Literal["ok", "failed", "interrupted"]
    error: str  # why a run is not ok
    traceback: str
    # what ran
    task: str
    dataset: str
    model: str
    model_family: str
    variant: str
    seed: int
    config_hash: str
    data_fingerprint: str | None  # the data beyond the config (a user's folder): Task.data_fingerprint
    code: dict[str, Any]  # the model's and task's source: bench.setup.fingerprint.source_fingerprint
    config: dict[str, Any]  # the resolved config, hydra's own keys left out
    run_id: str
    run_dir: str
    started_at: str
    environment: dict[str, Any]  # bench.run.environment: device, versions, git commit, threads
    data: dict[str, Any]  # split sizes, batching, what the task read
    model_notes: str
    tuning: dict[str, Any] | None  # mhab tune's runs: {study, trial, role}; see tuning_role
    param_match: dict[str, Any] | None  # a matched model: {reference, target, params, gap, width, computed}
    # what it measured (bench.run.engine, bench.run.final)
    metric_name: str
    higher_is_better: bool
    params: int
    val_metric: Number | None
    test_metric: Number | None  # a finite number in an ok record
    test_loss: Number | None
    test_details: dict[str, Any]
    best_epoch: int
    epochs_run: int
    steps: int
    checkpoint_selection: str
    history: list[dict[str, Any]]
    train_seconds: Number
    attention_path: str | None  # sdpa | matmul: the core's path under the run's dtype; None without it
    train_samples_per_s: Number | None
    train_timed_steps: int
    flops_per_sample: Number | None
    train_activation_mb: Number | None
    train_activation_batch: int
    peak_memory_mb: Number | None
    peak_memory_kind: str
    infer_batch_size: int
    infer_samples_per_s: Number | None
    infer_latency_ms_median: Number | None
    attention_distance: dict[str, Any]
    attention_example: str
    final_seconds: dict[str, Any]  # after training: test, flops, attention, inference_speed
    load_average: list[Any] | None  # the machine's 1/5/15-minute load when the run ended
    wall_time_s: Number


# Every record has these; an ok one has ``OK_FIELDS`` too.
REQUIRED_FIELDS = ("status", "task", "dataset", "model", "seed", "config_hash", "run_id", "run_dir")
OK_FIELDS = ("metric_name", "test_metric", "params")
STATUSES = ("ok", "failed", "interrupted")


def _types(hint: Any) -> tuple[type, ...]:
    """The runtime types a field's hint allows (``int | float | None`` -> int, float, NoneType)."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is Literal:
        return (str,)
    if args and typing.get_origin(hint) in (types.UnionType, typing.Union):
        return tuple(t for arg in args for t in _types(arg))
    return (typing.get_origin(hint) or hint,)


FIELD_TYPES: dict[str, tuple[type, ...]] = {
    name: _types(hint) for name, hint in typing.get_type_hints(RunRecord).items()}
_KIND = {str: "a string", int: "an integer", float: "a number", bool: "true or false", dict: "an object",
         list: "a list"}


def _field_problem(key: str, value: Any) -> str | None:
    allowed = FIELD_TYPES[key]
    if value is None and type(None) in allowed:
        return None
    fits = isinstance(value, allowed) and not (isinstance(value, bool) and bool not in allowed)
    if fits:
        return None
    kind = " or ".join(dict.fromkeys(_KIND[t] for t in allowed if t in _KIND))
    return f"'{key}' must be {kind}, got {value!r}"


def record_problem(rec: Any) -> str | None:
    """Why ``rec`` is not a run record, or None: a required field missing, or any field of
    ``RunRecord`` of the wrong type."""
    if not isinstance(rec, dict):
        return f"a record is a JSON object, this is a {type(rec).__name__}"
    required = REQUIRED_FIELDS + (OK_FIELDS if rec.get("status") == "ok" else ())
    for key in required:
        if key not in rec:
            return f"no '{key}'"
        if problem := _field_problem(key, rec[key]):
            return problem
    if rec["status"] not in STATUSES:
        return f"'status' must be one of {', '.join(STATUSES)}, got {rec['status']!r}"
    if rec["status"] == "ok" and tuning_role(rec) == "trial":
        if rec["test_metric"] is not None:
            return f"a tuning trial with a test_metric ({rec['test_metric']}): trials never see the test"
        if not (isinstance(rec.get("val_metric"), int | float) and math.isfinite(rec["val_metric"])):
            return f"an ok tuning trial without a finite val_metric ({rec.get('val_metric')})"
    elif rec["status"] == "ok" and not (isinstance(rec["test_metric"], int | float)
                                        and math.isfinite(rec["test_metric"])):
        return f"an ok run without a finite test_metric ({rec['test_metric']})"
    for key, value in rec.items():
        if key in FIELD_TYPES and key not in required and (problem := _field_problem(key, value)):
            return problem
    return None


def tuning_role(rec_or_config: Any) -> str | None:
    """``trial`` or ``final`` for a run of ``mhab tune`` (from its record or its config),
    None for a plain run. A trial is scored on validation only: it never reads the test split."""
    tag = rec_or_config.get("tuning") if hasattr(rec_or_config, "get") else None
    return tag.get("role") if hasattr(tag, "get") else None


def make_record(identity: RunRecord, status: str, started: float, **fields: Any) -> RunRecord:
    """The one place a record is put together: what ran (``identity``), how it ended, what it
    measured, and its wall time since ``started`` (``time.time()``)."""
    return RunRecord(**identity, status=status, **fields, wall_time_s=time.time() - started)


def write_record(run_dir: Path, record: RunRecord) -> Path:
    """Write ``record`` as ``run_dir/record.json``, atomically; a record that is not one (a
    field of the wrong type) is a bug, never written."""
    record = RunRecord(schema_version=SCHEMA_VERSION, **record)
    if problem := record_problem(record):
        raise ValueError(f"refusing to write a malformed run record to {run_dir}: {problem}")
    return atomic_write_json(run_dir / RECORD, record)


def read_record(path: str | Path) -> RunRecord:
    """A run record, checked, with its config hash computed again from its config: a record
    written before a change to what the hash leaves out (``LATER``, the suite key) still
    has the hash of the same experiment today. Its ``run_dir`` is the folder it was read from."""
    path = Path(path)
    with working_on(f"reading {path}"):
        return _read_record(path)


def _read_record(path: Path) -> RunRecord:
    try:
        text = path.read_text()
    except OSError as e:  # a colleague's record we may not read is not a damaged one
        raise BenchError(f"cannot read the run record {path} ({e.strerror}); ask its owner for read "
                         f"access (chmod a+r), or leave that results dir out") from None
    try:
        rec = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BenchError(f"malformed run record {path} ({e}); delete it or rerun that run") from None
    problem = record_problem(rec)
    if problem:
        raise BenchError(f"malformed run record {path} ({problem}); delete it or rerun that run")
    if isinstance(rec.get("config"), dict):
        rec["config_hash"] = config_hash(rec["config"])
    # the run's folder is where its record lies now: a results dir that was moved, copied or
    # published (bench.records.portable) reads the same from any checkout
    rec["run_dir"] = str(path.parent)
    return rec


def find_ok_record(results_dir: str | Path, config_hash: str, seed: int,
                   data_fingerprint: str | None = None,
                   accept: Callable[[dict[str, Any]], bool] = lambda rec: True) -> dict[str, Any] | None:
    """An earlier ``ok`` record of the same experiment (config hash and data fingerprint) and
    seed, if any: first among the runs named after this hash, then among the seed's runs
    named after an earlier hash of theirs (a damaged record there belongs to no run of this
    experiment: skipped). A record on other data (the folder changed since) is not one."""
    def ok(rec: dict[str, Any]) -> bool:
        return (rec.get("status") == "ok" and rec.get("config_hash") == config_hash
                and rec.get("seed") == seed and rec.get("data_fingerprint") == data_fingerprint
                and accept(rec))

    named = f"-s{seed}-{config_hash[:8]}-"
    runs = sorted(Path(results_dir).glob(f"runs/*-s{seed}-*/{RECORD}"))
    for path in (p for p in runs if named in p.parent.name):
        if ok(rec := read_record(path)):
            return rec
    for path in (p for p in runs if named not in p.parent.name):
        with contextlib.suppress(BenchError):
            if ok(rec := read_record(path)):
                return rec
    return None
