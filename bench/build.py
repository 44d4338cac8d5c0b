"""One build path, config -> task -> splits -> model, for ``mhab run`` and ``mhab speed``
alike: the same checks and the same one-line errors wherever a model is built.

A model config names its builder (``_target_``, a ``models.inputs`` family builder); its other
keys, but ``name`` and ``family``, are that builder's keyword arguments, so the settings a
model takes come from the builder's signature.
"""

from __future__ import annotations

import importlib
import inspect
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from bench.acceleration import check_compile, check_dtype
from bench.environment import resolve_device
from bench.errors import BenchError
from bench.task import Splits, Task
from models.inputs import Built, InputKind

# Model config keys that label a run rather than configure the builder.
LABEL_KEYS = ("_target_", "name", "family")

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


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def model_builder(model_cfg: DictConfig) -> Callable[..., Built]:
    """The function a model config names as its ``_target_``."""
    target = model_cfg.get("_target_")
    if not target:
        raise BenchError(f"model '{model_cfg.get('name')}' names no builder; add _target_: "
                         f"package.module.build to its conf/model yaml")
    module_name, _, attribute = str(target).rpartition(".")
    try:
        builder = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as e:
        raise BenchError(f"model._target_ '{target}' cannot be imported ({e}); check the "
                         f"module path and that its package is importable (PYTHONPATH)") from None
    if not callable(builder):
        raise BenchError(f"model._target_ '{target}' is not a function")
    return builder


def model_settings(model_cfg: DictConfig) -> dict[str, Any]:
    """The builder's keyword arguments: every model key but the labels."""
    settings = OmegaConf.to_container(model_cfg, resolve=True)
    return {k: v for k, v in settings.items() if k not in LABEL_KEYS}


def check_model_keys(model_cfg: DictConfig) -> None:
    """Every model key is an argument of the builder, and every argument without a default
    is set: a typo is not silently ignored, a missing width is not a TypeError later."""
    params = inspect.signature(model_builder(model_cfg)).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    named = [name for name, p in params.items()
             if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    settings = model_settings(model_cfg)
    unread = sorted(set(settings) - set(named[1:]))  # the first parameter takes the inputs
    if unread and not takes_any:
        raise BenchError(
            f"model.{unread[0]} is not a model setting, so it would be ignored; check the "
            f"spelling, or whether it belongs to the task (task.{unread[0]})"
        )
    missing = [name for name in named[1:]
               if params[name].default is inspect.Parameter.empty and name not in settings]
    if missing:
        raise BenchError(f"model '{model_cfg.get('name')}' needs model.{missing[0]}; set it in its "
                         f"yaml or pass +model.{missing[0]}=VALUE")


def validate(cfg: DictConfig) -> None:
    """Catch impossible hyper-parameters before anything is built or written."""
    check_model_keys(cfg.model)
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
    if "num_heads" in m and "dim" in m and m.dim % m.num_heads:
        fits = max(h for h in range(1, m.num_heads + 1) if m.dim % h == 0)
        raise BenchError(
            f"model.num_heads={m.num_heads} does not divide model.dim={m.dim} "
            f"(each head gets dim / num_heads channels); try model.num_heads={fits}"
        )


def build_task(cfg: DictConfig) -> Task:
    try:
        return instantiate(cfg.task, data_dir=cfg.data_dir, cache_dir=cfg.cache_dir)
    except InstantiationException as e:
        cause = e.__cause__
        if isinstance(cause, BenchError):
            raise cause from None
        raise BenchError(f"task={cfg.task.name}: bad task settings ({cause or e})") from None


def build_model(model_cfg: DictConfig, inputs: InputKind) -> Built:
    """The model a config names, for the task's input kind. Impossible shapes the model finds
    itself (a patch larger than the input) and an input kind it cannot read are user errors."""
    try:
        built = model_builder(model_cfg)(inputs, **model_settings(model_cfg))
    except ValueError as e:
        raise BenchError(str(e)) from None
    if not isinstance(built, Built):
        raise BenchError(f"model._target_ '{model_cfg._target_}' returned {type(built).__name__}, "
                         f"not a models.inputs.Built(module, notes)")
    return built


@dataclass
class Setup:
    """Everything a run trains: its task, data and model, on its device."""

    task: Task
    splits: Splits
    model: torch.nn.Module
    built: Built
    device: torch.device

    def model_label(self, model_cfg: DictConfig) -> str:
        """The model's name in records and tables (a variant sets itself apart)."""
        return f"{model_cfg.name}{self.built.label_suffix}"


def build(cfg: DictConfig) -> Setup:
    """Validate ``cfg``, build its task, load (or build and cache) the data, seed, and build
    the model on the run's device. Every mistake here is a ``BenchError`` before any result
    is written."""
    validate(cfg)
    device = resolve_device(cfg.device)
    task = build_task(cfg)
    seed_everything(cfg.seed)
    splits = task.load(cfg.seed)
    splits.check_not_empty()
    built = build_model(cfg.model, task.input_kind(splits))
    return Setup(task, splits, built.module.to(device), built, device)
