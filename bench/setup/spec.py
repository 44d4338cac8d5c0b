"""One build path, config -> ``RunSpec`` -> ``Setup``, for ``mhab run`` and ``mhab speed`` alike.

``prepare`` makes a composed config typed, once: checks it, resolves it, names it (config
hash, code) and builds its task; ``build`` loads the data and builds the model. What runs
below reads the ``RunSpec`` and the ``Setup``, never the config."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from omegaconf import DictConfig

from bench.records.defaults import FULL_TRAINING_SET
from bench.records.record import config_hash
from bench.run.engine import TrainerSettings
from bench.run.environment import resolve_device
from bench.setup.build import (
    build_model,
    build_task,
    matched_model,
    seed_everything,
    trainer_settings,
    validate,
)
from bench.setup.fingerprint import source_fingerprint
from bench.setup.settings import RunSettings, TuningTag
from bench.setup.subsets import check_training_size, train_subset
from bench.task import Splits, Task
from models.inputs import Built


@dataclass
class RunSpec:
    """One run, as plain data and typed settings: its identity (the resolved config and its
    hash, the code that answers it), its top-level settings, the engine's recipe, the task
    (built, data not yet loaded) and the model's settings."""

    config: dict[str, Any]  # resolved: what the record holds
    config_hash: str
    code: dict[str, dict[str, str]]  # bench.setup.fingerprint
    settings: RunSettings
    trainer: TrainerSettings
    task: Task
    model: dict[str, Any]  # the model section: its builder (_target_), labels and settings
    reference: dict[str, Any] | None  # the model a matched family is sized against

    @property
    def model_name(self) -> str:
        return str(self.model.get("name"))

    @property
    def model_family(self) -> str:
        return str(self.model.get("family") or self.model_name)

    @property
    def variant(self) -> str:
        return str(self.settings.variant or "default")

    @property
    def tuning_role(self) -> str | None:
        """``trial`` or ``final`` for a run of ``mhab tune``, None for a plain run."""
        return None if self.settings.tuning is None else self.settings.tuning.role


def prepare(cfg: DictConfig) -> RunSpec:
    """``cfg`` checked (``validate``: every impossible setting is a one-line ``BenchError``
    here), resolved and typed; its task built."""
    config = validate(cfg)  # resolved once, to plain data
    top = {f.name: config[f.name] for f in dataclasses.fields(RunSettings) if f.name in config}
    if top.get("tuning") is not None:
        top["tuning"] = TuningTag(**top["tuning"])
    return RunSpec(config=config, config_hash=config_hash(config), code=source_fingerprint(config),
                   settings=RunSettings(**top), trainer=trainer_settings(config["trainer"]),
                   task=build_task(config), model=config["model"], reference=config.get("reference"))


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


def build(spec: RunSpec) -> Setup:
    """Load (or build and cache) the data of a prepared run (``bench.setup.spec.prepare``),
    seed, and build the model on the run's device. Every mistake here is a ``BenchError``
    before any result is written."""
    device = resolve_device(spec.settings.device)
    # Subnormal floats run 10-100x slower on x86 CPUs. Gradients through hundreds of RNN steps
    # decay into them: a GRU seq2seq step on 256-subword emails took 20 s with them, 3 s
    # without. Flushing them to zero changes nothing else (they are below 1.2e-38).
    torch.set_flush_denormal(True)
    task = spec.task
    seed_everything(spec.settings.seed)
    splits = task.load(spec.settings.seed)
    splits.check_not_empty()
    subsets = spec.config["task"]
    splits.train, subset = train_subset(splits.train, subsets.get("train_fraction", FULL_TRAINING_SET),
                                        subsets.get("train_subset_seed", 0), task.train_classes(splits))
    splits.info = {**splits.info, **check_training_size(subset, spec.trainer.batch_size)}
    inputs = task.input_kind(splits)
    model_cfg, param_match = matched_model(spec.model, spec.reference, inputs)
    built = build_model(model_cfg, inputs, device)
    return Setup(task, splits, built.module.to(device), built, device, spec.trainer,
                 f"{spec.model_name}{built.label_suffix}", param_match)
