"""Config hashes name experiments: resume and tables trust them. Every shipped experiment's
hash is pinned here (``tests/config_hashes.json``), so a change that moves one cannot pass
silently."""

import json

import pytest

from bench.records.record import LATER, config_hash, with_later_keys
from bench.setup.compose import compose_config, experiment_hash, resolved_config, sweep_jobs
from tests.conftest import ROOT

PINS = ROOT / "tests" / "config_hashes.json"
FIX = (
    "the config hash of '{point}' moved from {pinned} to {now}. If you added a config key, add it "
    "to LATER in bench/records/record.py with the value that does what configs without it did, "
    "so earlier records keep their hash (they resume and group). If the experiment itself really "
    "changed (a new recipe), its records are a new experiment: say so in the commit and pin the "
    "new hash with `python -m tests.test_config_hashes`."
)


def _points() -> list[list[str]]:
    """Every default task x model pairing, and every run of every shipped suite (seeds aside)."""
    tasks = sorted(p.stem for p in (ROOT / "conf" / "task").glob("*.yaml"))
    models = sorted(p.stem for p in (ROOT / "conf" / "model").glob("*.yaml"))
    points = [[f"task={t}", f"model={m}"] for t in tasks for m in models]
    suites = sorted(p.stem for p in (ROOT / "conf" / "suite").glob("*.yaml") if p.stem != "none")
    for suite in suites:
        for job in sweep_jobs([f"suite={suite}"]):
            point = [o for o in job if not o.startswith("seed=")]
            if point not in points:
                points.append(point)
    return points


def current_hashes() -> dict[str, str]:
    return {" ".join(point): experiment_hash(compose_config("config", point, "run")) for point in _points()}


@pytest.mark.slow
def test_every_shipped_experiment_keeps_its_pinned_hash():
    pinned, now = json.loads(PINS.read_text()), current_hashes()
    assert sorted(now) == sorted(pinned), (
        "the shipped experiments changed (a task, model or suite added or removed): pin them with "
        "`python -m tests.test_config_hashes`")
    moved = [FIX.format(point=p, pinned=pinned[p], now=now[p]) for p in sorted(now) if now[p] != pinned[p]]
    assert not moved, "\n".join(moved)


def test_a_new_key_changes_the_hash_unless_it_is_at_its_absent_value():
    config = resolved_config(compose_config("config", ["task=image", "model=gru"], "run"))
    before = config_hash(config)
    config["trainer"]["label_smoothing"] = 0.0  # a key LATER does not know: a new experiment
    assert config_hash(config) != before
    del config["trainer"]["label_smoothing"]
    config["trainer"].pop("dtype")  # a record from before trainer.dtype: read as float32
    assert config_hash(config) == before


@pytest.mark.parametrize("later", LATER, ids=lambda later: f"{later.key}@{dict(later.when)}")
def test_each_later_key_fills_and_leaves_the_hash_as_its_absent_value(later):
    config = {"task": {"name": "image"}, "model": {"family": "attention"}, "trainer": {}}
    for key, value in later.when:
        section, _, name = key.rpartition(".")
        config[section][name] = value
    filled = with_later_keys(config, present=True)
    section, _, name = later.key.rpartition(".")
    assert (filled[section] if section else filled)[name] == later.absent  # a top-level key: no section
    assert config_hash(filled) == config_hash(config)


def test_a_later_key_applies_only_where_its_condition_holds():
    # task.root came later to the image task only: asr had it from the start, in its hash
    asr = resolved_config(compose_config("config", ["task=asr"], "run"))
    without_root = {**asr, "task": {k: v for k, v in asr["task"].items() if k != "root"}}
    assert config_hash(without_root) != config_hash(asr)


if __name__ == "__main__":  # pin the hashes of today's shipped experiments
    PINS.write_text(json.dumps(current_hashes(), indent=1, sort_keys=True) + "\n")
    print(f"pinned {PINS}")
