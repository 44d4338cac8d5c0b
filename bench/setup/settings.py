"""The settings a run reads outside its task, model and trainer, as typed classes: the top
level of ``conf/config.yaml`` (the engine's recipe is ``bench.run.engine.TrainerSettings``).
``bench.setup.schema`` checks a composed config against them before anything runs; a task's
and a model's settings are their builders' signatures."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from bench.records.defaults import DEFAULT_SCALE, FULL_TRAINING_SET
from models.constraints import NON_NEGATIVE, Range


@dataclass
class TuningTag:
    """What ``mhab tune`` sets on the runs it starts: its study, the trial's number and the
    run's role, a ``trial`` (scored on validation, never tested) or a ``final`` (the best
    trial's settings again with another seed, tested)."""

    study: str
    trial: Annotated[int, NON_NEGATIVE]
    role: Literal["trial", "final"]


@dataclass
class RunSettings:
    """The top level of ``conf/config.yaml`` (the groups are checked against their own code)."""

    seed: Annotated[int, NON_NEGATIVE]
    device: str  # checked by bench.run.environment.resolve_device
    results_dir: str
    data_dir: str | None
    cache_dir: str
    progress: Any  # auto | true | false: checked below with its own message
    logger: Literal["tensorboard", "mlflow", "csv", "none"]  # bench.run.loggers.LOGGERS
    variant: str | int | None
    force: bool
    task: Any
    model: Any
    trainer: Any
    scale: str = DEFAULT_SCALE  # the model size (bench.setup.task_models): s is each task's default size
    reference: Any = None  # the model matched families are sized against (conf/model, model@reference)
    suite: Any = None  # {} from suite=none; absent from a suite's runs (a _global_ override)
    claim: Any = None
    tuning: TuningTag | None = None  # set by mhab tune; a plain run has none
    # what a rerun does with an ok record made with other model or task code (bench.setup.fingerprint)
    on_code_change: Literal["refuse", "rerun", "reuse"] = "refuse"


@dataclass
class TrainSubsetSettings:
    """Task keys every task has, read by the build rather than the adapter
    (``bench.setup.subsets``): the data-size axis."""

    # the share of the training split used
    train_fraction: Annotated[float, Range(gt=0, le=1)] = FULL_TRAINING_SET
    train_subset_seed: Annotated[int, NON_NEGATIVE] = 0  # the seeded order the nested subsets are cut from
