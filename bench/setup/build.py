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
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig

from bench.errors import BenchError
from bench.run.acceleration import check_compile, check_dtype
from bench.run.engine import TrainerSettings
from bench.run.environment import resolve_device
from bench.setup.compose import resolved_config
from bench.setup.matching import WIDTH_KEY, count_on_meta, match_parameters
from bench.setup.schema import check_section, dataclass_hints, required_fields, signature_hints
from bench.setup.settings import RunSettings, TrainSubsetSettings
from bench.setup.task_models import check_task_models
from bench.task import Task
from models.inputs import Built, InputKind

# Model config keys that label a run or say how it is sized rather than configure the builder.
LABEL_KEYS = ("_target_", "name", "family", "match_params", "task_settings")
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


def plain(section: Mapping) -> dict[str, Any]:
    """A config section as plain data (a ``DictConfig`` resolved; a dict copied)."""
    return resolved_config(section) if isinstance(section, DictConfig) else dict(section)


def model_builder(model_cfg: Mapping) -> Callable[..., Built]:
    """The function a model config names as its ``_target_``."""
    target = model_cfg.get("_target_")
    if not target:
        raise BenchError(f"model '{model_cfg.get('name')}' names no builder; add _target_: "
                         f"package.module.build to its conf/model yaml")
    builder = locate(target, "model._target_")
    if not callable(builder):
        raise BenchError(f"model._target_ '{target}' is not a function")
    return builder


def model_settings(model_cfg: Mapping) -> dict[str, Any]:
    """The builder's keyword arguments: every model key but the labels."""
    return {k: v for k, v in plain(model_cfg).items() if k not in LABEL_KEYS}


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


def check_task_keys(task_cfg: Mapping) -> None:
    """Every task key is an argument of its adapter, of the declared type and range."""
    adapter = locate(task_cfg.get("_target_"), "task._target_")
    hints, takes_any = signature_hints(adapter, exclude=TASK_INJECTED)
    settings = {k: v for k, v in task_cfg.items() if k not in TASK_LABEL_KEYS}
    check_section("task.", settings, hints, "task", takes_any)
    subset = {k: v for k, v in task_cfg.items() if k in SUBSET_HINTS}
    check_section("task.", subset, SUBSET_HINTS, "task")


def validate(cfg: Mapping) -> dict[str, Any]:
    """Catch impossible settings before anything is built or written: every key of the top
    level, the task, the model and the trainer against its declared type and range
    (``bench.setup.schema``), then what only several keys together can say. Returns the
    config as plain data, resolved once here: every check reads that."""
    config = plain(cfg)
    check_section("", config, dataclass_hints(RunSettings), "top-level",
                  required=required_fields(RunSettings))
    model, trainer = config["model"], config["trainer"]
    check_task_keys(config["task"])
    check_model_keys(model)
    if model.get("match_params") and config.get("reference") is not None:
        check_model_keys(config["reference"])
    check_task_models(config)
    check_section("trainer.", trainer, dataclass_hints(TrainerSettings), "trainer",
                  required=required_fields(TrainerSettings))
    check_dtype(trainer["dtype"], "trainer.dtype")
    check_compile(trainer["compile"], resolve_device(config["device"]), "trainer.compile")
    check_progress(config.get("progress", "auto"))
    if config["logger"] == "mlflow" and importlib.util.find_spec("mlflow") is None:
        raise BenchError("logger=mlflow needs MLflow, an optional extra: pip install 'mha-bench[mlflow]' "
                         "(or choose logger=tensorboard, csv or none)")
    dim, heads = model.get("dim"), model.get("num_heads")
    if heads is not None and dim is not None and dim % heads:
        fits = max(h for h in range(1, heads + 1) if dim % h == 0)
        raise BenchError(f"model.num_heads={heads} does not divide model.dim={dim} "
                         f"(each head gets dim / num_heads channels); try model.num_heads={fits}")
    return config


def check_progress(value: Any) -> None:
    """``progress`` of ``mhab run`` and ``mhab speed`` alike: auto, true or false."""
    if value not in ("auto", True, False):
        raise BenchError(f"progress must be auto, true or false, got {value!r}")


def trainer_settings(trainer_cfg: Mapping) -> TrainerSettings:
    """The recipe as the engine takes it, from a ``trainer`` config ``validate`` has checked."""
    values = plain(trainer_cfg)
    return TrainerSettings(**{**values, "betas": tuple(values["betas"])})


def build_task(config: Mapping) -> Task:
    """The task adapter a config (composed, or resolved to plain data) names, data not loaded."""
    settings = plain(config["task"])
    for key in HARNESS_TASK_KEYS:  # read by the model configs and the build, not by the adapter
        settings.pop(key, None)
    try:
        return instantiate(settings, data_dir=config["data_dir"], cache_dir=config["cache_dir"])
    except InstantiationException as e:
        cause = e.__cause__
        if isinstance(cause, BenchError):
            raise cause from None
        raise BenchError(f"task={settings.get('name')}: bad task settings ({cause or e})") from None


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


def build_model(model_cfg: Mapping, inputs: InputKind, device: torch.device | None = None) -> Built:
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
        raise BenchError(f"model._target_ '{model_cfg['_target_']}' returned {type(built).__name__}, "
                         f"not a models.inputs.Built(module, notes)")
    return built


def matched_model(model_cfg: dict[str, Any], reference: dict[str, Any] | None,
                  inputs: InputKind) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The model's settings with its width computed where it is matched (``match_params``)
    and has none, and what the record says of the matching (None for a model not matched)."""
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
    return {**model_cfg, WIDTH_KEY: facts["width"]}, {"reference": reference.get("name"), **facts}
