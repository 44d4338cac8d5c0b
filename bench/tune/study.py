"""Running a plan: trials through Optuna's ask-and-tell interface, each an ordinary run
(``bench.experiment``) scored on validation, then the finals.

Crash safety: a worker claims a trial under the plan's lock and holds the trial's own lock
(``fcntl``, released by the kernel however its holder ends) while the trial runs. A trial
still RUNNING in the storage whose lock nobody holds lost its worker (``kill -9``, a power
cut): the next worker marks it failed, or complete when its run record was written before
the worker died. So a rerun of the same command completes each study to exactly
``tune.trials`` finished trials, none counted twice.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.samplers import BaseSampler, RandomSampler, TPESampler
from optuna.trial import Trial, TrialState

from bench.errors import BenchError, RunFailed
from bench.records import record
from bench.records.table import ATTENTION_FAMILY, PARAMS_TOLERANCE
from bench.run.lock import file_lock, lock_path
from bench.setup.build import build_task
from bench.setup.compose import compose_config, experiment_hash
from bench.tune.plan import Family, Plan, trial_overrides

log = logging.getLogger(__name__)
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"  # Hydra's, as mhab run logs
optuna.logging.set_verbosity(optuna.logging.WARNING)  # the trials' own lines say what happens


def open_storage(url: str) -> optuna.storages.BaseStorage:
    """An RDB storage for a URL, Optuna's journal file for a ``.log`` path."""
    if "://" not in url:
        from optuna.storages.journal import JournalFileBackend

        _make_folder(Path(url).expanduser().parent, url)
        return optuna.storages.JournalStorage(JournalFileBackend(str(Path(url).expanduser())))
    guard: contextlib.AbstractContextManager = contextlib.nullcontext()
    if url.startswith("sqlite:///"):  # the default: a file under the results dir
        path = Path(url.removeprefix("sqlite:///"))
        _make_folder(path.parent, url)
        # two workers starting together would both create its tables: one at a time
        guard = file_lock(path.parent / f".{path.name}.create.lock", wait=True)
    try:
        with guard:
            return optuna.storages.RDBStorage(url)
    except Exception as e:  # noqa: BLE001 - a wrong URL, a missing driver, a server that is down
        reason = " ".join(str(e).split())[:200]
        raise BenchError(f"cannot open tune.storage={url} ({type(e).__name__}: {reason})") from None


def _make_folder(folder: Path, url: str) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BenchError(f"cannot create the folder of tune.storage={url}: {e.filename or folder} "
                         f"({e.strerror}); choose a storage path in a writable folder") from None


def open_studies(plan: Plan, storage: optuna.storages.BaseStorage) -> dict[str, optuna.Study]:
    return {f.model: optuna.create_study(
        study_name=f.study, storage=storage, load_if_exists=True, sampler=make_sampler(plan, 0),
        direction="maximize" if f.higher_is_better else "minimize") for f in plan.families}


def make_sampler(plan: Plan, number: int) -> BaseSampler:
    """Trial ``number``'s sampler, seeded by the study's seed and the trial's number: workers
    and reruns draw what one uninterrupted process would (one sampler per process would
    restart its generator in each, so two workers' first trials would be the same draw), and
    with ``random`` every family's trial n tries the same values of the keys they share. TPE
    reads the finished trials from the storage, so its draw is the history's and the number's."""
    seed = plan.settings.seed * 1_000_003 + number
    if plan.settings.sampler == "tpe":
        return TPESampler(seed=seed)
    return RandomSampler(seed=seed)


def suggest(trial: Trial, key: str, dist: BaseDistribution) -> Any:
    if isinstance(dist, CategoricalDistribution):
        return trial.suggest_categorical(key, dist.choices)
    if isinstance(dist, IntDistribution):
        return trial.suggest_int(key, dist.low, dist.high, step=dist.step, log=dist.log)
    return trial.suggest_float(key, dist.low, dist.high, step=dist.step, log=dist.log)


def sample(plan: Plan, family: Family, study: optuna.Study, trial: Trial) -> dict[str, Any]:
    """Trial ``trial``'s values of ``family``'s search space, drawn by its own sampler."""
    study.sampler = make_sampler(plan, trial.number)  # before the first suggest draws
    return {key: suggest(trial, key, dist) for key, dist in family.space.items()}


def trial_lock(plan: Plan, study: str, number: int) -> Path:
    return Path(plan.results_dir) / "locks" / f"tune-{study}-t{number}.lock"


def counts(study: optuna.Study) -> dict[TrialState, int]:
    found = {state: 0 for state in TrialState}
    for t in study.get_trials(deepcopy=False):
        found[t.state] += 1
    return found


def reap(plan: Plan, family: Family, study: optuna.Study) -> None:
    """Finish the trials of ``study`` whose worker died: complete when their record was
    written (the worker died before telling), failed otherwise."""
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        with file_lock(trial_lock(plan, family.study, t.number)) as other:
            if other is not None:
                continue  # its worker is alive
            hash_, seed = t.user_attrs.get("config_hash"), t.user_attrs.get("seed")
            done = record.find_ok_record(plan.results_dir, hash_, seed, t.user_attrs.get("data")) \
                if hash_ is not None else None
            if done is not None:
                study.tell(t.number, done["val_metric"], skip_if_finished=True)
                continue
            study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)
            log.warning("tune %s: trial %d lost its worker (killed?); marked failed", family.study, t.number)


def claim(plan: Plan, studies: dict[str, optuna.Study],
          held: contextlib.ExitStack) -> tuple[Family, Trial] | None:
    """The next trial to run, of the family with the fewest finished and running trials (so
    families advance together), or None when every study has all its trials. Under the plan's
    lock: two workers never both take the last trial; the trial's own lock is taken before the
    plan's is let go (and held in ``held``), so no other worker takes it for an orphan."""
    lock = Path(plan.results_dir) / "locks" / f"tune-{plan.families[0].study}.plan.lock"
    with file_lock(lock, wait=True):
        open_families = []
        for family in plan.families:
            study = studies[family.model]
            reap(plan, family, study)
            n = counts(study)
            taken = n[TrialState.COMPLETE] + n[TrialState.RUNNING]
            if taken < plan.settings.trials and n[TrialState.FAIL] < plan.max_failed:
                open_families.append((taken, family))
        if not open_families:
            return None
        family = min(open_families, key=lambda pair: pair[0])[1]
        study = studies[family.model]
        trial = study.ask()
        other = held.enter_context(file_lock(trial_lock(plan, family.study, trial.number)))
        assert other is None, "a trial just asked is nobody else's"
        return family, trial


def run_trial(plan: Plan, family: Family, study: optuna.Study, trial: Trial) -> None:
    """One trial (its lock held by the caller): sample, run (validation only), tell. A run that
    fails is a failed trial; a user mistake (BenchError) or Ctrl-C fails the trial and stops
    the worker."""
    from bench.experiment import run_experiment

    started = time.time()
    try:
        params = sample(plan, family, study, trial)
        cfg = compose_config("config", trial_overrides(family, params, trial.number, "trial"), "tune")
        trial.set_user_attr("config_hash", experiment_hash(cfg))
        trial.set_user_attr("seed", int(cfg.seed))
        trial.set_user_attr("data", build_task(cfg).data_fingerprint())  # what finds its record again
        rec = run_experiment(cfg)
    except RunFailed as e:
        trial.set_user_attr("error", str(e))
        study.tell(trial, state=TrialState.FAIL)
        log.warning("tune %s: trial %d failed (%s); the study goes on", family.study, trial.number, e)
        return
    except BaseException:
        study.tell(trial, state=TrialState.FAIL)
        raise
    trial.set_user_attr("wall_s", time.time() - started)
    study.tell(trial, rec["val_metric"])
    progress(plan, family, study, trial.number, rec["val_metric"])


def progress(plan: Plan, family: Family, study: optuna.Study, number: int, value: float) -> None:
    trials = study.get_trials(deepcopy=False)
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    failed = sum(t.state == TrialState.FAIL for t in trials)
    walls = [t.user_attrs["wall_s"] for t in done if "wall_s" in t.user_attrs]
    left = max(0, plan.settings.trials - len(done))
    eta = "its last trial" if not left else \
        f"about {math.ceil(left * sum(walls) / len(walls) / plan.settings.jobs / 60)} min left" if walls \
        else "time left unknown"
    log.info("tune %s: trial %d of %d done, val %s %.4g (best %.4g, trial %d)%s; %s", family.study,
             len(done), plan.settings.trials, family.metric_name, value, study.best_value,
             study.best_trial.number, f", {failed} failed" if failed else "", eta)


def work(plan: Plan) -> None:
    """One worker: claim and run trials until every study has its trials."""
    if not logging.getLogger().handlers:  # a joblib worker process: say what it does, as the parent
        logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    studies = open_studies(plan, open_storage(plan.storage))
    while True:
        with contextlib.ExitStack() as held:  # the claimed trial's lock, until it is told
            if (claimed := claim(plan, studies, held)) is None:
                return
            family, trial = claimed
            run_trial(plan, family, studies[family.model], trial)


def best_trial(study: optuna.Study, trials: int, higher_is_better: bool) -> optuna.trial.FrozenTrial:
    """The best of the study's first ``trials`` finished trials (by number): every family's
    finals rest on the same number of trials, even when a study ran more (a lowered
    ``tune.trials``, a trial finished by a worker that was stopped)."""
    done = sorted((t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE),
                  key=lambda t: t.number)[:trials]
    return (max if higher_is_better else min)(done, key=lambda t: t.value)


def final_run(overrides: list[str]) -> dict[str, Any]:
    """A final's record; where another worker runs the same final now (two ``mhab tune`` on one
    results dir), its record, once that worker has written it."""
    from bench.experiment import run_experiment
    if not logging.getLogger().handlers:  # a joblib worker process
        logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    cfg = compose_config("config", overrides, "tune")
    rec = run_experiment(cfg)
    if "locked_by" in rec:
        log.info("tune: final %s seed %s is being run by %s; waiting for its record",
                 cfg.model.name, cfg.seed, rec["locked_by"])
        with run_lock_waiting(cfg.results_dir, experiment_hash(cfg), cfg.seed):
            pass
        rec = run_experiment(cfg)  # its record now (or this worker runs it, if that one failed)
    return rec


def check_matched(plan: Plan, best: dict[str, optuna.trial.FrozenTrial]) -> None:
    """The finals compare at matched parameters: each matched family's best trial has, as its
    run recorded, within ``PARAMS_TOLERANCE`` of the attention family's best trial's parameters.
    A search-space key that sizes a model (a depth, a head count: whatever changes the count)
    would make the families' best trials differ in size; that is refused before any final."""
    found = {}
    for model, trial in best.items():
        attrs = trial.user_attrs
        rec = record.find_ok_record(plan.results_dir, attrs.get("config_hash"), attrs.get("seed"),
                                    attrs.get("data")) if attrs.get("config_hash") else None
        if rec is not None:
            found[model] = rec
    reference = next((r for r in found.values() if r.get("model_family") == ATTENTION_FAMILY), None)
    if reference is None:
        return
    for model, rec in found.items():
        if not (rec.get("param_match") or {}).get("computed"):
            continue  # a width the user gave (or the reference itself): not sized by matching
        ratio = rec["params"] / reference["params"]
        if abs(ratio - 1) > PARAMS_TOLERANCE:
            raise RunFailed(
                f"the best trials differ in size ({reference['model']}: {reference['params']:,} "
                f"parameters, {model}: {rec['params']:,}, {ratio:.2f}x), so the tuned finals would not "
                f"compare at matched parameters: a key of the search space sizes the models; take it "
                f"out of the space (keys such as model.depth or model.num_heads) and tune again")


def run_lock_waiting(results_dir: str, config_hash: str, seed: int) -> contextlib.AbstractContextManager:
    """The run lock of an experiment and seed, taken when its holder lets it go."""
    return file_lock(lock_path(results_dir, config_hash, seed), wait=True)


def finals(plan: Plan, studies: dict[str, optuna.Study]) -> dict[str, list[dict[str, Any]]]:
    """Each family's best trial again with seeds 0..tune.seeds-1, on test (on ``tune.jobs``
    workers); their records. A study with trials still running elsewhere gets its finals from
    a later run of the command."""
    runs: list[tuple[str, list[str]]] = []
    check_matched(plan, {f.model: best_trial(studies[f.model], plan.settings.trials, f.higher_is_better)
                         for f in plan.families
                         if counts(studies[f.model])[TrialState.COMPLETE] >= plan.settings.trials})
    for family in plan.families:
        study, n = studies[family.model], counts(studies[family.model])
        if n[TrialState.COMPLETE] < plan.settings.trials:
            log.warning("tune %s: %d of %d trials finished (%d running elsewhere); its finals start "
                        "when all have: run the same command again then", family.study,
                        n[TrialState.COMPLETE], plan.settings.trials, n[TrialState.RUNNING])
            continue
        best = best_trial(study, plan.settings.trials, family.higher_is_better)
        log.info("tune %s: best trial %d (val %s %.4g): %s; finals with seeds 0..%d", family.study,
                 best.number, family.metric_name, best.value,
                 ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                           for k, v in best.params.items()),
                 plan.settings.seeds - 1)
        runs += [(family.model, [*trial_overrides(family, best.params, best.number, "final"), f"seed={seed}"])
                 for seed in range(plan.settings.seeds)]
    if plan.settings.jobs == 1:
        records = [final_run(overrides) for _, overrides in runs]
    else:
        from joblib import Parallel, delayed

        records = Parallel(n_jobs=plan.settings.jobs, backend="loky")(
            delayed(final_run)(overrides) for _, overrides in runs)
    out: dict[str, list[dict[str, Any]]] = {}
    for (model, _), rec in zip(runs, records, strict=True):
        out.setdefault(model, []).append(rec)
    return out


def failed_families(plan: Plan, studies: dict[str, optuna.Study]) -> list[str]:
    """The families whose study stopped at ``tune.max_failed`` failed trials, in words."""
    out = []
    for family in plan.families:
        study = studies[family.model]
        n = counts(study)
        if n[TrialState.COMPLETE] < plan.settings.trials and n[TrialState.FAIL] >= plan.max_failed:
            first = next(t for t in study.get_trials(deepcopy=False) if t.state == TrialState.FAIL)
            out.append(f"{family.model}: {n[TrialState.FAIL]} trials failed (first: "
                       f"{first.user_attrs.get('error', 'its worker stopped before it finished')})")
    return out


def run_tune(plan: Plan) -> dict[str, list[dict[str, Any]]]:
    """The whole command: trials on ``tune.jobs`` workers, then the finals; the finals'
    records by model."""
    studies = open_studies(plan, open_storage(plan.storage))  # its tables and studies, made once
    if plan.settings.jobs == 1:
        work(plan)
    else:
        from joblib import Parallel, delayed

        workers = range(plan.settings.jobs)
        Parallel(n_jobs=plan.settings.jobs, backend="loky")(delayed(work)(plan) for _ in workers)
    if failures := failed_families(plan, studies):
        raise RunFailed(f"tuning stopped for {'; '.join(failures)}; raise tune.max_failed or fix the "
                        f"cause, then run the same command again")
    return finals(plan, studies) if plan.settings.finals else {}

