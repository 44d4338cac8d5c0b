"""mhab tune: the same search for every family, trials that never read the test split, finals
on test, a failed trial that does not stop the study, a kill -9 that a rerun completes, and
the expected-maximum estimator against hand-computed values."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pandas as pd
import pytest

from bench import api
from bench.report.tuning import expected_max, ordering
from tests.conftest import ROOT, read_records, run_cli

TINY = ["task=image", "task.dataset=digits", "trainer.max_steps=6", "trainer.infer_iters=1",
        "model.dim=16", "model.depth=1", "logger=none", "progress=false"]


def test_expected_max_matches_hand_computed_values():
    scores = [0.5, 0.1, 0.9]  # sorted: 0.1, 0.5, 0.9
    assert expected_max(scores, 1)[0] == pytest.approx(0.5)  # one draw: the mean
    # n = 2: weights (1/3)^2 = 1/9, (2/3)^2 - 1/9 = 3/9, 1 - 4/9 = 5/9
    assert expected_max(scores, 2)[0] == pytest.approx((0.1 * 1 + 0.5 * 3 + 0.9 * 5) / 9)
    lower = expected_max(scores, 2, higher_is_better=False)[0]
    assert lower == pytest.approx((0.9 * 1 + 0.5 * 3 + 0.1 * 5) / 9)
    mean, std = expected_max(scores, 1)
    assert std == pytest.approx(pd.Series(scores).std(ddof=0))  # one draw: the scores' own spread
    assert expected_max(scores, 200)[0] == pytest.approx(0.9, abs=1e-6)  # many draws: the best
    assert expected_max(scores, 200)[1] == pytest.approx(0.0, abs=1e-3)


def _curve(values: list[float], higher: bool = True) -> pd.DataFrame:
    return pd.DataFrame({"n": range(1, len(values) + 1), "expected": values, "higher_is_better": higher})


def test_ordering_says_over_which_budgets_one_family_leads():
    assert ordering(_curve([0.5, 0.6, 0.7]), _curve([0.4, 0.5, 0.6]), "attention", "gru") == \
        "attention ahead of gru at every budget from 1 to 3 trials"
    crossed = ordering(_curve([0.4, 0.6, 0.7]), _curve([0.5, 0.55, 0.6]), "attention", "gru")
    assert crossed.startswith("attention ahead of gru from 2 trials on (the curves cross at about 2 trials): "
                              "no budget-free verdict")
    wer = ordering(_curve([0.1, 0.08], higher=False), _curve([0.2, 0.1], higher=False), "attention", "lstm")
    assert wer == "attention ahead of lstm at every budget from 1 to 2 trials"  # lower WER leads


def _study_counts(results_dir: Path) -> dict[str, dict[str, int]]:
    from bench.report.tuning import stored_trial_states

    return stored_trial_states(results_dir)


@pytest.mark.slow
def test_every_family_gets_the_same_trials_and_only_finals_see_the_test(tmp_path):
    finals = api.tune([*TINY, "model=attention,gru", "tune.trials=3", "tune.seeds=2",
                       f"results_dir={tmp_path}"])
    assert sorted(finals) == ["attention", "gru"]
    records = read_records(tmp_path)
    trials = [r for r in records if r.get("tuning", {}).get("role") == "trial"]
    assert sorted((r["model"], r["tuning"]["trial"]) for r in trials) == [
        ("attention", 0), ("attention", 1), ("attention", 2), ("gru", 0), ("gru", 1), ("gru", 2)]
    for rec in trials:  # validation only: the test split is never read
        assert rec["status"] == "ok" and rec["test_metric"] is None and "test_details" not in rec
        assert 0 <= rec["val_metric"] <= 1
    # the same draw of the shared keys for every family's trial n (common random numbers)
    by_trial = {(r["model"], r["tuning"]["trial"]): r["config"]["trainer"] for r in trials}
    for n in range(3):
        assert by_trial[("attention", n)]["lr"] == by_trial[("gru", n)]["lr"]
    assert len({by_trial[("attention", n)]["lr"] for n in range(3)}) == 3
    for model, runs in finals.items():
        assert [r["seed"] for r in runs] == [0, 1] and all(r["tuning"]["role"] == "final" for r in runs)
        # best by validation; of tied trials, the first by number (bench.tune.study.best_trial)
        mine = sorted((r for r in trials if r["model"] == model), key=lambda r: r["tuning"]["trial"])
        best = max(mine, key=lambda r: r["val_metric"])
        assert {r["tuning"]["trial"] for r in runs} == {best["tuning"]["trial"]}
        assert runs[0]["config"]["trainer"] == best["config"]["trainer"]
        assert all(0 <= r["test_metric"] <= 1 for r in runs)
    frame = api.table(tmp_path)
    assert set(frame["role"]) == {"trial", "final"} and frame["study"].notna().all()
    from bench.records.table import aggregate

    agg = aggregate(frame)  # trials, untested, are left out of the aggregate
    assert sorted(agg["model"]) == ["attention", "gru"] and (agg["seeds"] == 2).all()
    report = api.report(tmp_path).read_text()
    section = report.split("## Tuned comparisons")[1]
    assert "image / digits: attention" in section and ("every budget" in section or "cross" in section)
    assert "The default recipe's verdict beside the tuned one" in section
    assert "Attention against the RNNs at the default recipe and after the same tuning" in report
    again = api.tune([*TINY, "model=attention,gru", "tune.trials=3", "tune.seeds=2",
                      f"results_dir={tmp_path}"])
    assert all(r.get("skipped") for runs in again.values() for r in runs)  # nothing run twice
    assert len(read_records(tmp_path)) == len(records)


@pytest.mark.slow
def test_a_failed_trial_is_recorded_and_the_study_goes_on(tmp_path, monkeypatch):
    from bench.run import engine

    real, calls = engine.fit, []

    def fail_first(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("the first trial's model blew up")
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "fit", fail_first)
    api.tune([*TINY, "model=gru", "tune.trials=2", "tune.finals=false", f"results_dir={tmp_path}"])
    (counts,) = _study_counts(tmp_path).values()
    assert counts == {"COMPLETE": 2, "FAIL": 1}
    records = read_records(tmp_path)
    failed = [r for r in records if r["status"] == "failed"]
    assert len(failed) == 1 and "blew up" in failed[0]["error"] and failed[0]["tuning"]["trial"] == 0
    assert sorted(r["tuning"]["trial"] for r in records if r["status"] == "ok") == [1, 2]


@pytest.mark.slow
def test_kill_9_mid_trial_then_the_same_command_completes_each_study_exactly(tmp_path):
    args = [*TINY, "trainer.max_steps=60", "model=attention,gru", "tune.trials=3", "tune.finals=false",
            f"results_dir={tmp_path}"]
    env = {**os.environ, "BENCH_CACHE_DIR": str(tmp_path / "c")}
    tune = subprocess.Popen([sys.executable, "-m", "bench", "tune", *args], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and tune.poll() is None:  # wait for trial 2 to be under way
        runs = list((tmp_path / "runs").glob("*")) if (tmp_path / "runs").exists() else []
        if len(runs) >= 3 and sum((r / "record.json").exists() for r in runs) < len(runs):
            break
        time.sleep(0.05)
    assert tune.poll() is None, "the tune finished before it could be killed"
    os.killpg(tune.pid, signal.SIGKILL)
    tune.wait()
    out = run_cli("tune", *args, env={"BENCH_CACHE_DIR": str(tmp_path / "c")})
    assert out.returncode == 0, out.stderr
    counts = _study_counts(tmp_path)
    assert sorted(c.get("COMPLETE") for c in counts.values()) == [3, 3]
    assert sum(c.get("FAIL", 0) for c in counts.values()) <= 1  # the killed trial, unless it was told
    assert not any(c.get("RUNNING") for c in counts.values())
    ok_trials = [r for r in read_records(tmp_path) if r["status"] == "ok"]
    per_study = pd.Series([r["tuning"]["study"] for r in ok_trials]).value_counts()
    assert sorted(per_study) == [3, 3]  # none counted twice


@pytest.mark.parametrize("task", ["image", "speech", "asr", "translation", "summarization", "recall"])
def test_every_shipped_search_space_holds_for_every_family(task, tmp_path):
    from bench.tune.plan import make_plan

    plan = make_plan([f"task={task}", "model=attention,lstm,gru", f"results_dir={tmp_path}"])
    spaces = {f.model: f.space for f in plan.families}
    shared = set(spaces["lstm"])
    assert shared and shared == set(spaces["gru"]) and shared <= set(spaces["attention"])
    for key in shared:  # the same range for the keys every family has
        assert spaces["attention"][key] == spaces["lstm"][key]
    assert not any(key.startswith("model.") and key.split(".")[1] in ("dim", "depth", "num_heads")
                   for space in spaces.values() for key in space)  # tuning never buys parameters
    assert not (tmp_path / "tuning").exists()  # a plan writes nothing


def test_the_finals_rest_on_the_first_trials_of_each_study():
    from bench.tune.study import best_trial

    study = optuna.create_study(direction="minimize")
    for value in (0.3, 0.2, 0.25, 0.1):  # the fourth is beyond tune.trials=3
        trial = study.ask()
        study.tell(trial, value)
    failed = study.ask()
    study.tell(failed, state=optuna.trial.TrialState.FAIL)
    assert best_trial(study, 3, higher_is_better=False).number == 1
    assert best_trial(study, 4, higher_is_better=False).number == 3
    assert best_trial(study, 3, higher_is_better=True).number == 0


def test_best_settings_name_what_the_trials_varied_not_where_they_ran():
    from bench.report.tuning import best_settings, trials_table

    def trial(n, lr, cache, val):
        return {"task": "asr", "dataset": "d", "model": "gru", "model_family": "rnn", "status": "ok",
                "tuning": {"study": "s", "trial": n, "role": "trial"}, "val_metric": val,
                "higher_is_better": False, "metric_name": "wer", "wall_time_s": 60.0,
                "config": {"cache_dir": cache, "trainer": {"lr": lr, "epochs": 5}}}

    best = best_settings(trials_table([trial(0, 0.001, "a", 0.2), trial(1, 0.003, "/b", 0.1)]))
    assert best.loc[0, "best trial"] == 1 and best.loc[0, "settings"] == "trainer.lr=0.003"


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_two_workers_and_a_resume_draw_what_one_process_would(tmp_path, sampler):
    import contextlib
    import shutil

    from bench.tune.plan import make_plan
    from bench.tune.study import claim, open_storage, open_studies, sample

    def plan_at(results):
        return make_plan([*TINY, "model=gru", f"tune.sampler={sampler}", "tune.trials=6",
                          f"results_dir={results}"])

    def next_draw(plan, held):  # a worker (its own study objects, as a process has) takes a trial
        studies = open_studies(plan, open_storage(plan.storage))
        family, trial = claim(plan, studies, held)
        return studies[family.model], trial, sample(plan, family, studies[family.model], trial)

    plan = plan_at(tmp_path / "a")
    with contextlib.ExitStack() as held:
        drawn = [next_draw(plan, held) for _ in range(2)]  # two workers, both trials running
        assert [t.number for _, t, _ in drawn] == [0, 1]
        assert drawn[0][2] != drawn[1][2]  # not the same draw twice
        for study, trial, _ in drawn:
            study.tell(trial, 0.5 + 0.1 * trial.number)
    shutil.copytree(tmp_path / "a", tmp_path / "b")  # the same history, seen by another process
    with contextlib.ExitStack() as held:
        resumed = next_draw(plan, held)[2]
        elsewhere = next_draw(plan_at(tmp_path / "b"), held)[2]
    assert resumed == elsewhere  # the draw is the history's and the trial number's, not the process's
    assert plan.families[0].study == plan_at(tmp_path / "b").families[0].study


def test_another_sampler_or_seed_is_another_study(tmp_path):
    from bench.tune.plan import make_plan

    def name(*extra):
        return make_plan([*TINY, "model=gru", f"results_dir={tmp_path}", *extra]).families[0].study

    assert len({name(), name("tune.sampler=tpe"), name("tune.seed=1"), name("tune.sampler=random")}) == 3


def test_a_report_of_a_study_whose_trials_all_failed_says_so(tmp_path):
    from bench.report.render import write_report
    from tests.conftest import write_record

    for i in range(2):
        write_record(tmp_path, f"t{i}-s0-h-{i}", status="failed", test_metric=None, error="boom",
                     model="gru", model_family="rnn", val_metric=None,
                     tuning={"study": "image-digits-gru-abc", "trial": i, "role": "trial"})
    tuning = write_report(tmp_path)[0].read_text().split("## Tuned comparisons")[1]
    assert "No trial finished ok" in tuning
    assert "| image  | digits    | gru     |        0 |        2 |" in tuning


def test_a_one_trial_study_is_a_point_not_a_budget_range():
    a, b = _curve([0.8]), _curve([0.7])
    point = "after one trial each (no curve over budgets)"
    assert ordering(a, b, "attention", "gru") == f"attention ahead of gru {point}"
    assert ordering(b, a, "gru", "attention") == f"gru behind attention {point}"


def test_a_final_another_worker_is_running_is_awaited_not_a_crash(tmp_path):
    import threading

    from bench.records.record import config_hash
    from bench.run.lock import file_lock, lock_path
    from bench.setup.compose import compose_config, resolved_config
    from bench.tune.study import final_run
    from tests.conftest import write_record

    overrides = [*TINY, "model=gru", f"results_dir={tmp_path}", "seed=1",
                 "tuning={study:'s',trial:0,role:final}"]
    cfg = compose_config("config", overrides, "tune")
    digest = config_hash(resolved_config(cfg))
    got = {}
    with file_lock(lock_path(tmp_path, digest, 1)) as held:  # the other worker's final, running
        assert held is None
        worker = threading.Thread(target=lambda: got.update(rec=final_run(overrides)))
        worker.start()
        worker.join(timeout=3)
        assert worker.is_alive()  # waiting for the other worker, not failing on its missing metric
        write_record(tmp_path, f"20260101-000000-image-digits-gru-s1-{digest[:8]}-aaaaaa", model="gru",
                     seed=1, config=resolved_config(cfg), config_hash=digest, test_metric=0.77,
                     tuning={"study": "s", "trial": 0, "role": "final"})
    worker.join(timeout=60)
    assert got["rec"]["test_metric"] == 0.77 and got["rec"]["skipped"]


@pytest.mark.slow
def test_two_workers_one_killed_then_the_command_again_completes_each_study_exactly(tmp_path):
    """Two `mhab tune` processes on one results dir (as on two machines), one killed with
    kill -9 mid-trial: the other goes on, and the same command again leaves every study with
    exactly its trials, distinct draws, none counted twice, and one set of finals."""
    args = [*TINY, "trainer.max_steps=40", "model=attention,gru", "tune.trials=3", "tune.seeds=1",
            "tune.sampler=tpe", f"results_dir={tmp_path}"]
    env = {**os.environ, "BENCH_CACHE_DIR": str(tmp_path / "c")}
    workers = [subprocess.Popen([sys.executable, "-m", "bench", "tune", *args], cwd=ROOT, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True) for _ in range(2)]
    deadline = time.time() + 300
    while time.time() < deadline and workers[0].poll() is None:  # both at work, trials under way
        runs = list((tmp_path / "runs").glob("*")) if (tmp_path / "runs").exists() else []
        if len(runs) >= 3 and sum((r / "record.json").exists() for r in runs) < len(runs):
            break
        time.sleep(0.05)
    assert workers[0].poll() is None, f"the tune ended before it could be killed: {workers[0].stderr.read()}"
    os.killpg(workers[0].pid, signal.SIGKILL)
    workers[0].wait()
    _, survivor_err = workers[1].communicate(timeout=600)
    assert workers[1].returncode == 0, survivor_err
    out = run_cli("tune", *args, env={"BENCH_CACHE_DIR": str(tmp_path / "c")})
    assert out.returncode == 0, out.stderr
    counts = _study_counts(tmp_path)
    assert sorted(c.get("COMPLETE") for c in counts.values()) == [3, 3]
    assert not any(c.get("RUNNING") for c in counts.values())
    records = read_records(tmp_path)
    trials = [r for r in records if r["status"] == "ok" and r["tuning"]["role"] == "trial"]
    per_study = pd.Series([r["tuning"]["study"] for r in trials]).value_counts()
    assert sorted(per_study) == [3, 3]  # none counted twice
    for study in per_study.index:  # distinct draws: no two trials of a study alike
        draws = [r["config"]["trainer"]["lr"] for r in trials if r["tuning"]["study"] == study]
        assert len(set(draws)) == len(draws)
    finals = [r for r in records if r["status"] == "ok" and r["tuning"]["role"] == "final"]
    assert sorted(r["model"] for r in finals) == ["attention", "gru"]  # one final each, seed 0


def test_finals_are_refused_when_the_best_trials_differ_in_size(monkeypatch):
    from types import SimpleNamespace

    from bench.errors import RunFailed
    from bench.tune import study as tune_study

    sizes = {"a": ("attention", "attention", 69_194), "g": ("gru", "rnn", 135_130),
             "l": ("lstm", "rnn", 70_000)}
    monkeypatch.setattr(tune_study.record, "find_ok_record", lambda results, digest, seed, data: {
        "model": sizes[digest][0], "model_family": sizes[digest][1], "params": sizes[digest][2],
        "param_match": {"computed": digest != "a" and not digest.endswith("given")}})
    sizes["g-given"] = ("gru", "rnn", 135_130)  # a width the user gave: unmatched by choice, not refused
    plan = SimpleNamespace(results_dir="unused")

    def best(digest):
        return SimpleNamespace(user_attrs={"config_hash": digest, "seed": 0, "data": None})

    tune_study.check_matched(plan, {"attention": best("a"), "lstm": best("l")})  # 1.01x: matched
    tune_study.check_matched(plan, {"attention": best("a"), "gru": best("g-given")})
    with pytest.raises(RunFailed, match=r"gru: 135,130, 1.95x.*sizes the models"):
        tune_study.check_matched(plan, {"attention": best("a"), "gru": best("g")})


def test_the_report_names_what_tune_did_where_records_and_storage_can_disagree(tmp_path):
    from bench.report.tuning import best_settings, stored_trial_states, trials_table, tuning_cost

    def trial(n, val):
        return {"task": "asr", "dataset": "d", "model": "gru", "model_family": "rnn", "status": "ok",
                "tuning": {"study": "s", "trial": n, "role": "trial"}, "val_metric": val,
                "higher_is_better": False, "metric_name": "wer", "wall_time_s": 60.0,
                "config": {"trainer": {"lr": 0.001 * (n + 1)}}}

    trials = trials_table([trial(0, 0.3), trial(1, 0.2), trial(2, 0.1)])  # trial 2: run beyond tune.trials=2
    assert best_settings(trials).loc[0, "best trial"] == 2  # the best of every record
    assert best_settings(trials, {"s": 1}).loc[0, "best trial"] == 1  # what the finals repeat
    # a worker killed mid-trial leaves a failed trial in the storage and no record
    storage = f"sqlite:///{tmp_path / 'tuning' / 'optuna.db'}"
    (tmp_path / "tuning").mkdir()
    study = optuna.create_study(study_name="s", storage=storage, direction="minimize")
    for value in (0.3, 0.2, 0.1):
        study.tell(study.ask(), value)
    study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)
    stored = stored_trial_states(tmp_path)
    assert stored == {"s": {"COMPLETE": 3, "FAIL": 1}}
    assert tuning_cost(trials).loc[0, "failed"] == 0
    assert tuning_cost(trials, stored).loc[0, "failed"] == 1
    assert stored_trial_states(tmp_path / "nowhere") == {}
