"""One build path, config -> task -> splits -> model, for ``mhab run`` and ``mhab speed``
alike: the same checks and the same one-line errors wherever a model is built.

A model config names its builder (``_target_``, a ``models.inputs`` family builder); its other
keys, but ``name`` and ``family``, are that builder's keyword arguments, so the settings a
model takes come from the builder's signature.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from bench.errors import BenchError
from bench.run.acceleration import check_compile, check_dtype
from bench.run.engine import TrainerSettings
from bench.run.environment import resolve_device
from bench.setup.matching import WIDTH_KEY, count_on_meta, match_parameters
from bench.setup.schema import check_section, dataclass_hints, required_fields, signature_hints
from bench.setup.settings import RunSettings, TrainSubsetSettings
from bench.setup.subsets import check_training_size, train_subset
from bench.setup.task_models import check_task_models
from bench.task import Splits, Task
from models.inputs import Built, InputKind

# Model config keys that label a run or say how it is sized rather than configure the builder.
LABEL_KEYS = ("_target_", "name", "family", "match_params")
# Task config keys the adapter does not take as arguments: ``models`` (each family's settings
# on the task, read by the model yamls) and the harness's own (``TrainSubsetSettings``, for
# every task alike); and those ``build_task`` passes.
SUBSET_HINTS = dataclass_hints(TrainSubsetSettings)
HARNESS_TASK_KEYS = ("models", *SUBSET_HINTS)
TASK_LABEL_KEYS = ("_target_", *HARNESS_TASK_KEYS)
TASK_INJECTED = ("data_dir", "cache_dir")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def locate(target: Any, key: str) -> Any:
    """The object a ``_target_`` names (``package.module.name``), or a one-line error."""
    module_name, _, attribute = str(target).rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError) as e:
        raise BenchError(f"{key} '{target}' cannot be imported ({e}); check the module path and "
                         f"that its package is importable (PYTHONPATH)") from None


def model_builder(model_cfg: DictConfig) -> Callable[..., Built]:
    """The function a model config names as its ``_target_``."""
    target = model_cfg.get("_target_")
    if not target:
        raise BenchError(f"model '{model_cfg.get('name')}' names no builder; add _target_: "
                         f"package.module.build to its conf/model yaml")
    builder = locate(target, "model._target_")
    if not callable(builder):
        raise BenchError(f"model._target_ '{target}' is not a function")
    return builder


def model_settings(model_cfg: DictConfig) -> dict[str, Any]:
    """The builder's keyword arguments: every model key but the labels."""
    settings = OmegaConf.to_container(model_cfg, resolve=True)
    return {k: v for k, v in settings.items() if k not in LABEL_KEYS}


def check_model_keys(model_cfg: DictConfig) -> None:
    """Every model key is an argument of the builder, of the type and in the range its
    annotation declares, and every argument without a default is set: a typo is not silently
    ignored, a missing width is not a TypeError later."""
    builder = model_builder(model_cfg)
    hints, takes_any = signature_hints(builder, skip=1)  # the first parameter takes the inputs
    settings = model_settings(model_cfg)
    if model_cfg.get("match_params") and settings.get(WIDTH_KEY) is None:
        settings.pop(WIDTH_KEY, None)  # computed by the build (bench.setup.matching)
        hints = {k: v for k, v in hints.items() if k != WIDTH_KEY}
    unread = sorted(set(settings) - set(hints))
    if unread and not takes_any:
        raise BenchError(
            f"model.{unread[0]} is not a model setting, so it would be ignored; check the "
            f"spelling, or whether it belongs to the task (task.{unread[0]})"
        )
    params = inspect.signature(builder).parameters
    missing = [name for name in hints if params[name].default is inspect.Parameter.empty
               and name not in settings]
    if missing:
        raise BenchError(f"model '{model_cfg.get('name')}' needs model.{missing[0]}; set it in its "
                         f"yaml or pass +model.{missing[0]}=VALUE")
    check_section("model.", settings, hints, "model", takes_any=True)


def check_task_keys(task_cfg: DictConfig) -> None:
    """Every task key is an argument of its adapter, of the declared type and range."""
    adapter = locate(task_cfg.get("_target_"), "task._target_")
    hints, takes_any = signature_hints(adapter, exclude=TASK_INJECTED)
    settings = {k: v for k, v in task_cfg.items() if k not in TASK_LABEL_KEYS}
    check_section("task.", settings, hints, "task", takes_any)
    subset = {k: v for k, v in task_cfg.items() if k in SUBSET_HINTS}
    check_section("task.", subset, SUBSET_HINTS, "task")


def validate(cfg: DictConfig) -> None:
    """Catch impossible settings before anything is built or written: every key of the top
    level, the task, the model and the trainer against its declared type and range
    (``bench.setup.schema``), then what only several keys together can say."""
    check_section("", cfg, dataclass_hints(RunSettings), "top-level", required=required_fields(RunSettings))
    check_task_keys(cfg.task)
    check_model_keys(cfg.model)
    if cfg.model.get("match_params") and cfg.get("reference") is not None:
        check_model_keys(cfg.reference)
    check_task_models(cfg)
    check_section("trainer.", cfg.trainer, dataclass_hints(TrainerSettings), "trainer",
                  required=required_fields(TrainerSettings))
    check_dtype(cfg.trainer.dtype, "trainer.dtype")
    check_compile(cfg.trainer.compile, resolve_device(cfg.device), "trainer.compile")
    check_progress(cfg.get("progress", "auto"))
    if cfg.logger == "mlflow" and importlib.util.find_spec("mlflow") is None:
        raise BenchError("logger=mlflow needs MLflow, an optional extra: pip install 'mha-bench[mlflow]' "
                         "(or choose logger=tensorboard, csv or none)")
    m = cfg.model
    if "num_heads" in m and m.get("dim") is not None and m.dim % m.num_heads:
        fits = max(h for h in range(1, m.num_heads + 1) if m.dim % h == 0)
        raise BenchError(
            f"model.num_heads={m.num_heads} does not divide model.dim={m.dim} "
            f"(each head gets dim / num_heads channels); try model.num_heads={fits}"
        )


def check_progress(value: Any) -> None:
    """``progress`` of ``mhab run`` and ``mhab speed`` alike: auto, true or false."""
    if value not in ("auto", True, False):
        raise BenchError(f"progress must be auto, true or false, got {value!r}")


def build_task(cfg: DictConfig) -> Task:
    settings = OmegaConf.to_container(cfg.task, resolve=True)
    for key in HARNESS_TASK_KEYS:  # read by the model configs and the build, not by the adapter
        settings.pop(key, None)
    try:
        return instantiate(settings, data_dir=cfg.data_dir, cache_dir=cfg.cache_dir)
    except InstantiationException as e:
        cause = e.__cause__
        if isinstance(cause, BenchError):
            raise cause from None
        raise BenchError(f"task={cfg.task.name}: bad task settings ({cause or e})") from None


# What training holds per parameter, in bytes: float32 weights, gradients and AdamW's two
# moments (the weight average and activations come on top).
TRAINING_BYTES_PER_PARAMETER = 16


def memory_bytes(device: torch.device) -> int | None:
    """The device's total memory (CUDA), or this machine's RAM."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[1]
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(builder: Callable[..., Built], inputs: InputKind, settings: dict, what: str,
                 device: torch.device) -> None:
    """Count the model's parameters on the meta device (no memory, and the random stream put
    back as it was) and refuse a model whose training state alone exceeds the device's memory,
    before allocating it: an allocation far beyond memory is a one-line error, not a crash."""
    try:
        params = count_on_meta(builder, inputs, settings)
    except Exception:  # noqa: BLE001 - the real build reports its own errors
        return
    need, have = params * TRAINING_BYTES_PER_PARAMETER, memory_bytes(device)
    if have is not None and need > have:
        raise BenchError(f"{what} has {params:,} parameters, whose training state needs "
                         f"{need / 2**30:,.0f} GiB, more than the {have / 2**30:,.0f} GiB of "
                         f"{device.type}; make it smaller")


def build_model(model_cfg: DictConfig, inputs: InputKind, device: torch.device | None = None) -> Built:
    """The model a config names, for the task's input kind. Impossible shapes the model finds
    itself (a patch larger than the input) and an input kind it cannot read are user errors."""
    builder, settings = model_builder(model_cfg), model_settings(model_cfg)
    sizes = ", ".join(f"model.{k}={v}" for k, v in settings.items()
                      if isinstance(v, int) and not isinstance(v, bool)) or "its settings"
    check_memory(builder, inputs, settings, f"model={model_cfg.get('name')} with {sizes}",
                 device or torch.device("cpu"))
    try:
        built = builder(inputs, **settings)
    except ValueError as e:
        raise BenchError(str(e)) from None
    except (MemoryError, RuntimeError) as e:
        if isinstance(e, RuntimeError) and "allocate" not in str(e):
            raise
        raise BenchError(f"model={model_cfg.get('name')} with {sizes} does not fit in memory "
                         f"({str(e).splitlines()[0]}); make it smaller") from None
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
    trainer: TrainerSettings  # the engine's recipe, typed
    model_label: str  # the model's name in records and tables (a variant sets itself apart)
    param_match: dict[str, Any] | None = None  # bench.setup.matching: how the width was sized


def trainer_settings(trainer_cfg: DictConfig) -> TrainerSettings:
    """The recipe as the engine takes it, from a ``trainer`` config ``validate`` has checked."""
    values = OmegaConf.to_container(trainer_cfg, resolve=True)
    return TrainerSettings(**{**values, "betas": tuple(values["betas"])})


def build(cfg: DictConfig, task: Task | None = None) -> Setup:
    """Build the task of a ``cfg`` already passed through ``validate`` (``mhab run`` and
    ``mhab speed`` validate first, before their own work), or take the one ``build_task`` made,
    load (or build and cache) the data, seed, and build the model on the run's device. Every
    mistake here is a ``BenchError`` before any result is written."""
    device = resolve_device(cfg.device)
    # Subnormal floats run 10-100x slower on x86 CPUs. Gradients through hundreds of RNN steps
    # decay into them: a GRU seq2seq step on 256-subword emails took 20 s with them, 3 s
    # without. Flushing them to zero changes nothing else (they are below 1.2e-38).
    torch.set_flush_denormal(True)
    task = task or build_task(cfg)
    seed_everything(cfg.seed)
    splits = task.load(cfg.seed)
    splits.check_not_empty()
    splits.train, subset = train_subset(splits.train, cfg.task.get("train_fraction", 1.0),
                                        cfg.task.get("train_subset_seed", 0), task.train_classes(splits))
    splits.info = {**splits.info, **check_training_size(subset, cfg.trainer.batch_size)}
    inputs = task.input_kind(splits)
    model_cfg, param_match = matched_model(cfg, inputs)
    built = build_model(model_cfg, inputs, device)
    return Setup(task, splits, built.module.to(device), built, device, trainer_settings(cfg.trainer),
                 f"{cfg.model.name}{built.label_suffix}", param_match)


def matched_model(cfg: DictConfig, inputs: InputKind) -> tuple[DictConfig, dict[str, Any] | None]:
    """``cfg.model`` with its width computed where it is matched (``match_params``) and has
    none, and what the record says of the matching (None for a model that is not matched)."""
    model_cfg, reference = cfg.model, cfg.get("reference")
    if not model_cfg.get("match_params"):
        return model_cfg, None
    if reference is None:
        raise BenchError("model.match_params is true but the config names no reference model; "
                         "add `- model@reference: attention` to its defaults list")
    if reference.get("match_params") and reference.get(WIDTH_KEY) is None:
        raise BenchError(f"the reference model ({reference.get('name')}) is itself sized by matching; "
                         f"give it a width: reference.{WIDTH_KEY}=N reference.match_params=false")
    try:
        facts = match_parameters(model_builder(model_cfg), model_settings(model_cfg),
                                 model_builder(reference), model_settings(reference), inputs,
                                 str(model_cfg.get("name")))
    except ValueError as e:  # the reference cannot be built for this input
        raise BenchError(f"the reference model ({reference.get('name')}): {e}") from None
    matched = OmegaConf.merge(model_cfg, {WIDTH_KEY: facts["width"]})
    return matched, {"reference": reference.get("name"), **facts}
