"""Experiments from Python (a notebook, a teaching session) without shelling out to ``mhab``.

The same code paths as the command line: configs composed with Hydra's compose API from the
same ``conf/``, the same checks before anything runs, the same records, tables and reports.
A mistake raises ``BenchError`` with the message ``mhab`` would print; a run that fails after
it started raises ``RunFailed`` (its record says why).

    from bench import api
    rec = api.run(["task=image", "task.dataset=digits", "model=gru", "trainer.epochs=3"])
    records = api.multirun(["suite=quick", "task=translation"])
    frame = api.table("results/quick")
    path = api.report("results/quick")
    finals = api.tune(["task=asr", "model=attention,lstm,gru", "tune.trials=16"])
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig

from bench.errors import BenchError
from bench.setup.compose import compose_config, sweep_jobs
from bench.setup.paths import check_results_dir

__all__ = ["run", "multirun", "tune", "table", "report", "BenchError"]


def run(overrides: list[str] | None = None) -> dict[str, Any]:
    """One run (``mhab run OVERRIDES``); its record. An experiment and seed already recorded
    ok is not rerun (``force=true`` reruns it): its record comes back with ``skipped``."""
    return _run_checked(compose_config("config", list(overrides or []), "run"))


def _run_checked(cfg: DictConfig) -> dict[str, Any]:
    from bench.experiment import run_experiment

    check_results_dir(cfg.results_dir)
    return run_experiment(cfg)


def sweep(overrides: list[str] | None = None) -> list[list[str]]:
    """The runs ``mhab run -m OVERRIDES`` starts, each as its override list: every
    combination of the command line's sweeps (``model=attention,gru``) and the suite's own
    (``hydra.sweeper.params``), as Hydra's basic sweeper forms them."""
    return sweep_jobs(list(overrides or []))


def multirun(overrides: list[str] | None = None) -> list[dict[str, Any]]:
    """A sweep (``mhab run -m OVERRIDES``), one run after another in this process; the records
    in sweep order. Every run's config is checked before the first starts."""
    from bench.setup.build import validate

    cfgs = [compose_config("config", point, "run") for point in sweep(overrides)]
    for cfg in cfgs:
        validate(cfg)
    return [_run_checked(cfg) for cfg in cfgs]


def tune(overrides: list[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """``mhab tune OVERRIDES``: the same search for each family of ``model=a,b,...``, then each
    family's best trial with ``tune.seeds`` seeds on test; the finals' records by model. A
    family whose trials failed ``tune.max_failed`` times raises ``RunFailed``."""
    from bench.tune.plan import make_plan
    from bench.tune.study import run_tune

    return run_tune(make_plan(list(overrides or [])))


def table(results_dir: str | Path = "results") -> pd.DataFrame:
    """Every run record under ``results_dir`` as one row (``mhab table``; not saved). The mean,
    CI and per-seed values of each experiment: ``bench.records.table.aggregate(table(...))``."""
    from bench.records.table import load

    frame = load(results_dir)
    if frame.empty:
        raise BenchError(f"no run records under {results_dir}/runs; run 'mhab run' first")
    return frame


def report(results_dir: str | Path = "results") -> Path:
    """Write ``report.md`` and ``report.html`` for ``results_dir`` (``mhab report``); the
    Markdown's path."""
    from bench.report.render import write_report

    table(results_dir)  # the same error as mhab report for a folder without records
    return write_report(results_dir)[0]
