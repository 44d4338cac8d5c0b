"""One experiment from a composed config: task -> data -> model -> engine -> run record."""

from __future__ import annotations

import logging
import random
import sys
import time
import traceback
from typing import Any

import numpy as np
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from bench import engine, measure, record
from bench.acceleration import check_compile, check_dtype
from bench.environment import environment, resolve_device
from bench.errors import BenchError, RunFailed, Terminated
from bench.task import Task

log = logging.getLogger(__name__)
# With progress=auto and stderr not a terminal, a progress line this often (seconds) instead of a bar.
PROGRESS_LOG_S = 60.0


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# key: (type, lowest allowed, highest allowed or None, lowest inclusive?)
_NUMERIC_RULES = {
    "seed": (int, 0, None, True),
    "trainer.epochs": (int, 1, None, True),
    "trainer.batch_size": (int, 1, None, True),
    "trainer.eval_batch_size": (int, 1, None, True),
    "trainer.max_steps": (int, 1, None, True),
    "trainer.lr": (float, 0, None, False),
    "trainer.weight_decay": (float, 0, None, True),
    "trainer.warmup_epochs": (float, 0, None, True),
    "trainer.ema_decay": (float, 0, 1, False),
    "trainer.timing_warmup_steps": (int, 0, None, True),
    "trainer.infer_iters": (int, 1, None, True),
    "model.dim": (int, 1, None, True),
    "model.depth": (int, 1, None, True),
    "model.num_heads": (int, 1, None, True),
    "model.dropout": (float, 0, 1, True),
    "task.mixup_alpha": (float, 0, None, True),
}


# Every model key some code reads. Hydra refuses unknown keys, except those added with `+`;
# this catches a `+model.` key that no model would read (a typo, or a key of another group).
MODEL_KEYS = {
    "name", "family", "cell", "dim", "depth", "num_heads", "mlp_ratio", "dropout", "attn_dropout",
    "pos_encoding", "bidirectional", "pool", "additive_attention", "embed_dim", "tie_embeddings",
}


def validate(cfg: DictConfig) -> None:
    """Catch impossible hyper-parameters before anything is built or written."""
    unread = sorted(set(cfg.model) - MODEL_KEYS)
    if unread:
        raise BenchError(
            f"model.{unread[0]} is not a model setting, so it would be ignored; check the "
            f"spelling, or whether it belongs to the task (task.{unread[0]})"
        )
    for key, (kind, low, high, inclusive) in _NUMERIC_RULES.items():
        value = OmegaConf.select(cfg, key, default=None)
        if value is None:
            continue
        is_number = isinstance(value, int | float) and not isinstance(value, bool)
        if not is_number or (kind is int and not isinstance(value, int)):
            raise BenchError(f"{key} must be {'an integer' if kind is int else 'a number'}, "
                             f"got {value!r}")
        too_low = value < low if inclusive else value <= low
        if too_low or (high is not None and value >= high):
            bound = f">= {low}" if inclusive else f"> {low}"
            span = f"{bound} and < {high}" if high is not None else bound
            raise BenchError(f"{key} must be {span}, got {value}")
    check_dtype(cfg.trainer.dtype, "trainer.dtype")
    check_compile(cfg.trainer.compile, resolve_device(cfg.device), "trainer.compile")
    if cfg.get("progress", "auto") not in ("auto", True, False):
        raise BenchError(f"progress must be auto, true or false, got {cfg.progress!r}")
    m = cfg.model
    if "num_heads" in m and m.dim % m.num_heads:
        fits = max(h for h in range(1, m.num_heads + 1) if m.dim % h == 0)
        raise BenchError(
            f"model.num_heads={m.num_heads} does not divide model.dim={m.dim} "
            f"(each head gets dim / num_heads channels); try model.num_heads={fits}"
        )


def show_progress(setting: bool | str) -> bool:
    if setting == "auto":
        return sys.stderr.isatty()
    return bool(setting)


def build_task(cfg: DictConfig) -> Task:
    try:
        return instantiate(cfg.task, data_dir=cfg.data_dir, cache_dir=cfg.cache_dir)
    except InstantiationException as e:
        cause = e.__cause__
        if isinstance(cause, BenchError):
            raise cause from None
        raise BenchError(f"task={cfg.task.name}: bad task settings ({cause or e})") from None


def run_experiment(cfg: DictConfig) -> dict[str, Any]:
    """Run one experiment and write its record; return the record.

    Config and data mistakes raise ``BenchError`` before a run directory exists. A failure
    after training started writes a record with ``status: failed`` and raises ``RunFailed``.
    """
    validate(cfg)
    resolved = record.resolved_config(cfg)
    config_hash = record.config_hash(resolved)
    if not cfg.get("force", False):
        done = record.find_ok_record(cfg.results_dir, config_hash, cfg.seed)
        if done is not None:  # resume: this experiment and seed already have an ok record
            log.info("skipping: already recorded ok in %s (force=true reruns it)", done["run_dir"])
            return {**done, "skipped": True}
    device = resolve_device(cfg.device)
    task = build_task(cfg)
    seed_everything(cfg.seed)
    splits = task.load(cfg.seed)
    splits.check_not_empty()
    try:
        model = task.build_model(cfg.model, splits).to(device)
    except ValueError as e:  # impossible shapes found by the model itself
        raise BenchError(str(e)) from None

    base = {
        "task": task.name,
        "dataset": task.dataset,
        "model": task.model_label(cfg.model),
        "model_family": cfg.model.family,
        "variant": cfg.get("variant") or "default",
        "seed": cfg.seed,
        "config_hash": config_hash,
        "metric_name": task.metric_name,
        "higher_is_better": task.higher_is_better,
        "params": measure.count_parameters(model),
        "model_notes": task.model_notes(cfg.model),
        "data": splits.info,
        "config": resolved,
        "environment": environment(device),
    }
    stem = f"{task.name}-{task.dataset}-{base['model']}-s{cfg.seed}-{config_hash[:8]}"
    run_dir = record.new_run_dir(cfg.results_dir, stem)
    base["run_id"] = run_dir.name
    base["run_dir"] = str(run_dir)
    log.info("run %s: %s params", run_dir.name, f"{base['params']:,}")

    started = time.time()
    base["started_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started))
    try:
        bar = show_progress(cfg.progress)
        results = engine.fit(
            task, model, splits, cfg.trainer, device, run_dir, cfg.seed, bar,
            log_every_s=PROGRESS_LOG_S if cfg.progress == "auto" and not bar else None,
        )
    except KeyboardInterrupt as e:
        # Ctrl-C or SIGTERM: say so in this run's record (a rerun retries it) and stop the sweep.
        how = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted (Ctrl-C)"
        record.write_record(run_dir, {**base, "status": "interrupted", "error": how,
                                      "wall_time_s": time.time() - started})
        raise
    except Exception as e:
        reason = str(e) if isinstance(e, RunFailed) else f"{type(e).__name__}: {e}"
        rec = {**base, "status": "failed", "error": reason,
               "traceback": traceback.format_exc(), "wall_time_s": time.time() - started}
        record.write_record(run_dir, rec)
        raise RunFailed(f"run {run_dir.name} failed: {reason}") from e
    rec = {**base, "status": "ok", **results, "wall_time_s": time.time() - started}
    record.write_record(run_dir, rec)
    return rec
