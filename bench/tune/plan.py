"""What ``mhab tune OVERRIDES`` will do, worked out and checked before any trial runs: its
settings (``conf/tune.yaml``), one study per family named by ``model=``, each family's run
overrides, search space and metric direction, and the storage the studies live in."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from omegaconf import DictConfig

from bench.errors import BenchError
from bench.setup.build import build_task, validate
from bench.setup.compose import compose_config, parse_overrides
from bench.setup.paths import check_results_dir
from bench.setup.schema import check_section, dataclass_hints, required_fields
from bench.tune.space import Space, as_override, check_space, load_space, space_file
from models.constraints import AT_LEAST_1, NON_NEGATIVE

# Keys that say where and how a run is kept or shown, not what it learns: a study's name
# does not depend on them, so moving the results dir or the device resumes the same study.
NOT_IN_STUDY_NAME = ("results_dir", "data_dir", "cache_dir", "device", "progress", "logger", "hydra.")


@dataclass
class TuneSettings:
    """``conf/tune.yaml``: the type and range of every key, checked before anything runs."""

    trials: Annotated[int, AT_LEAST_1]
    seeds: Annotated[int, AT_LEAST_1]
    sampler: Literal["random", "tpe"]
    seed: Annotated[int, NON_NEGATIVE]
    storage: str | None
    jobs: Annotated[int, AT_LEAST_1]
    study: str | None
    finals: bool
    max_failed: Annotated[int, AT_LEAST_1] | None


@dataclass
class Family:
    """One model family's study: its runs' overrides (``model=`` included), space and name."""

    model: str
    study: str
    overrides: list[str]
    space: Space
    space_file: Path
    higher_is_better: bool
    metric_name: str


@dataclass
class Plan:
    settings: DictConfig  # the tune section, checked against TuneSettings
    storage: str
    results_dir: str
    task: str
    dataset: str
    families: list[Family]

    @property
    def max_failed(self) -> int:
        limit = self.settings.max_failed
        return self.settings.trials if limit is None else limit


def split_arguments(overrides: list[str]) -> tuple[list[str], list[str]]:
    """``tune.*`` overrides (for ``conf/tune.yaml``) and the rest (for every run)."""
    tune = [o for o in overrides if o.lstrip("+~").startswith("tune.")]
    return tune, [o for o in overrides if o not in tune]


def tune_settings(overrides: list[str]) -> DictConfig:
    cfg = compose_config("tune", overrides, "tune")
    check_section("tune.", cfg.tune, dataclass_hints(TuneSettings), "tune",
                  required=required_fields(TuneSettings))
    return cfg.tune


def models_and_base(overrides: list[str]) -> tuple[list[str], list[str]]:
    """The models ``model=a,b,c`` names (the default model when absent) and the overrides
    every run shares; any other sweep is an error (a study searches, it does not sweep)."""
    models, base = [], []
    for text, override in zip(overrides, parse_overrides(overrides), strict=True):
        if override.key_or_group == "model":
            models = [str(v) for v in override.sweep_iterator()] if override.is_sweep_override() \
                else [str(override.value())]
        elif override.is_sweep_override():
            raise BenchError(f"mhab tune sweeps only model=; '{text}' is a sweep: give one value (the "
                             f"search space, search/<task>.yaml, says what the trials vary)")
        else:
            base.append(text)
    if len(set(models)) != len(models):
        raise BenchError(f"model={','.join(models)} names a model twice; name each once")
    return models, base


def searchpath(overrides: list[str]) -> list[str]:
    for override in parse_overrides(overrides):
        if override.key_or_group == "hydra.searchpath":
            return [str(v) for v in override.value()]
    return []


def study_digest(base: list[str], space: Space, settings: DictConfig) -> str:
    """What makes a study the same protocol: the runs' shared overrides that change what is
    learned, the family's search space, and the sampler with its seed. Change any and a new
    study starts (with its own name), never an append to the old one."""
    kept = sorted(o for o in base if not o.lstrip("+~").startswith(NOT_IN_STUDY_NAME))
    blob = json.dumps({"overrides": kept, "space": {k: repr(d) for k, d in space.items()},
                       "sampler": settings.sampler, "seed": settings.seed}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:8]


def default_storage(results_dir: str) -> str:
    return f"sqlite:///{Path(results_dir).expanduser().resolve() / 'tuning' / 'optuna.db'}"


def make_plan(overrides: list[str]) -> Plan:
    """Every family's study, checked: settings, runs, search space and storage. Nothing is
    written but the results dir."""
    tune_overrides, run_overrides = split_arguments(overrides)
    settings = tune_settings(tune_overrides)
    models, base = models_and_base(run_overrides)
    families = []
    for model in models or [None]:
        overrides_of_model = [*base, f"model={model}"] if model else base
        cfg = compose_config("config", overrides_of_model, "tune")
        validate(cfg)
        check_results_dir(cfg.results_dir)
        path = space_file(cfg.task.name, searchpath(base))
        space = load_space(path, cfg.model.get("family") or cfg.model.name)
        check_space(path, space, lambda extra, o=overrides_of_model: validate(
            compose_config("config", [*o, *extra], "tune")))
        task = build_task(cfg)
        prefix = settings.study or f"{task.name}-{task.dataset}"
        families.append(Family(
            model=cfg.model.name, study=f"{prefix}-{cfg.model.name}-{study_digest(base, space, settings)}",
            overrides=[*base, f"model={cfg.model.name}"], space=space, space_file=path,
            higher_is_better=task.higher_is_better, metric_name=task.metric_name))
    storage = settings.storage or default_storage(cfg.results_dir)
    if "://" not in storage and not storage.endswith(".log"):
        raise BenchError(f"tune.storage={storage} is neither a database URL (sqlite:///PATH, "
                         f"postgresql://...) nor a journal file path ending .log")
    return Plan(settings=settings, storage=storage, results_dir=str(cfg.results_dir),
                task=task.name, dataset=task.dataset, families=families)


def trial_overrides(family: Family, params: dict, number: int, role: str) -> list[str]:
    """A run of ``family``'s study: its overrides, the sampled values, and its tuning tag."""
    tag = f"tuning={{study:'{family.study}',trial:{number},role:{role}}}"
    return [*family.overrides, *(as_override(k, v) for k, v in params.items()), tag]
