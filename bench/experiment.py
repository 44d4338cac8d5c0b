"""One experiment from a composed config: task -> data -> model -> engine -> run record."""

from __future__ import annotations

import logging
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from bench.errors import BenchError, RunFailed, Terminated
from bench.records import record
from bench.run import engine, measure
from bench.run.environment import environment, machine_load
from bench.run.lock import run_lock
from bench.run.loggers import build_logger
from bench.setup.fingerprint import changed
from bench.setup.spec import RunSpec, build, prepare

log = logging.getLogger(__name__)
# With progress=auto and stderr not a terminal, a progress line this often (seconds) instead of a bar.
PROGRESS_LOG_S = 60.0


def show_progress(setting: bool | str) -> bool:
    if setting == "auto":
        return sys.stderr.isatty()
    return bool(setting)


def _record_failure(spec: RunSpec, error: Exception, started: float) -> None:
    """A run that failed while its data or model was being built: recorded ``failed`` with
    its traceback (what there is to say of it), then ``RunFailed``."""
    reason = f"{type(error).__name__}: {error}"
    seed = spec.settings.seed
    stem = record.run_stem(spec.task.name, spec.task.dataset, spec.model_name, seed, spec.config_hash)
    run_dir = record.new_run_dir(spec.settings.results_dir, stem)
    identity = record.RunRecord(
        task=spec.task.name, dataset=spec.task.dataset, model=spec.model_name,
        model_family=spec.model_family, variant=spec.variant, seed=seed, config_hash=spec.config_hash,
        config=spec.config, run_id=run_dir.name, run_dir=str(run_dir))
    record.write_record(run_dir, record.make_record(
        identity, "failed", started, error=f"while building the run: {reason}",
        traceback=traceback.format_exc()))
    raise RunFailed(f"run {run_dir.name} failed while building: {reason}") from error


def run_experiment(cfg: DictConfig) -> dict[str, Any]:
    """Run one experiment and write its record; return the record.

    Config and data mistakes raise ``BenchError`` before a run directory exists. A failure
    after training started writes a record with ``status: failed`` and raises ``RunFailed``.
    """
    spec = prepare(cfg)  # the config's last reader: below, typed settings and plain data
    data = spec.task.data_fingerprint()  # the experiment is its config, its data and its code
    if (done := _recorded_ok(spec, data)) is not None:
        return done
    run = spec.settings
    with run_lock(run.results_dir, spec.config_hash, run.seed) as other:
        if other is not None:  # another sweep runs this very job now: never run it twice
            log.warning("skipping: %s seed %s (config %s) is being run by %s; its record will be "
                        "in %s", spec.model_name, run.seed, spec.config_hash, other, run.results_dir)
            return {"skipped": True, "locked_by": other}
        if (done := _recorded_ok(spec, data)) is not None:  # finished while we looked
            return done
        return _train_and_record(spec, data)


def _recorded_ok(spec: RunSpec, data: str | None) -> dict[str, Any] | None:
    """This experiment and seed's earlier ok record on the same data and code, marked skipped
    (unless force=true). A record made with other model or task code is reused, rerun or
    refused as ``on_code_change`` says (refused by default: nothing is reused silently)."""
    run = spec.settings
    if run.force:
        return None
    done = record.find_ok_record(run.results_dir, spec.config_hash, run.seed, data,
                                 accept=lambda rec: not changed(rec.get("code"), spec.code))
    if done is None:
        older = record.find_ok_record(run.results_dir, spec.config_hash, run.seed, data)
        if older is None or run.on_code_change == "rerun":
            return None
        if run.on_code_change == "refuse":
            raise BenchError(
                f"{spec.model_name} seed {run.seed} has an ok record in {older['run_dir']} made with "
                f"other code ({', '.join(changed(older.get('code'), spec.code))} changed since); rerun it "
                f"with on_code_change=rerun, or keep that record with on_code_change=reuse")
        done = older
    log.info("skipping: already recorded ok in %s (force=true reruns it)", done["run_dir"])
    return {**done, "skipped": True}


def _train_and_record(spec: RunSpec, data: str | None) -> dict[str, Any]:
    try:
        setup = build(spec)
    except BenchError:
        raise
    except Exception as e:  # a bug, not a user mistake: recorded as a failed run like any other
        _record_failure(spec, e, started=time.time())
    task, splits, model, device, trainer, run = (setup.task, setup.splits, setup.model, setup.device,
                                                  setup.trainer, spec.settings)
    base = record.RunRecord(
        task=task.name,
        dataset=task.dataset,
        model=setup.model_label,
        model_family=spec.model_family,
        variant=spec.variant,
        seed=run.seed,
        config_hash=spec.config_hash,
        data_fingerprint=data,
        code=spec.code,
        metric_name=task.metric_name,
        higher_is_better=task.higher_is_better,
        params=measure.count_parameters(model),
        model_notes=setup.built.notes,
        param_match=setup.param_match,
        data={**splits.info, "batching": task.batching_info(
            splits.train, trainer.batching, trainer.batch_size, run.seed, trainer.max_tokens)},
        config=spec.config,
        environment=environment(device),
    )
    if run.tuning is not None:
        base["tuning"] = spec.config["tuning"]
    stem = record.run_stem(task.name, task.dataset, base["model"], run.seed, spec.config_hash)
    run_dir = record.new_run_dir(run.results_dir, stem)
    base["run_id"] = run_dir.name
    base["run_dir"] = str(run_dir)
    log.info("run %s: %s params", run_dir.name, f"{base['params']:,}")

    # the logger is a side channel: its set-up (a server's answer, say) stays out of the run's time
    run_logger = build_logger(run.logger, run_dir, Path(run.results_dir), base)
    started = time.time()
    base["started_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started))
    try:
        bar = show_progress(run.progress)
        results = engine.fit(
            task, model, splits, trainer, device, run_dir, run.seed, bar,
            log_every_s=PROGRESS_LOG_S if run.progress == "auto" and not bar else None,
            logger=run_logger, test=spec.tuning_role != "trial",
        )
    except KeyboardInterrupt as e:
        # Ctrl-C or SIGTERM: say so in this run's record (a rerun retries it) and stop the sweep.
        how = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted (Ctrl-C)"
        record.write_record(run_dir, record.make_record(base, "interrupted", started, error=how))
        run_logger.abort("interrupted")
        raise
    except Exception as e:
        reason = str(e) if isinstance(e, RunFailed) else f"{type(e).__name__}: {e}"
        record.write_record(run_dir, record.make_record(
            base, "failed", started, error=reason, traceback=traceback.format_exc()))
        run_logger.abort("failed")
        raise RunFailed(f"run {run_dir.name} failed: {reason}") from e
    rec = record.make_record(base, "ok", started, **results, load_average=machine_load())
    record.write_record(run_dir, rec)
    run_logger.finish(rec)
    return rec
