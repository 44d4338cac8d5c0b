"""Adding a model family takes one file and one yaml, and adding a task one adapter file and
its configs: a 1-D convolution family and a majority-vote task, both defined under
tests/outside (outside bench/, models/, tasks/ and conf/), run through `mhab run`, found by
Hydra's search path and Python's import path alone."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from bench.errors import BenchError
from bench.setup.build import build_model
from models.inputs import TokenSequence
from tests.conftest import ROOT, read_records, run_cli
from tests.test_cli import BUDGET, TINY_TASKS

OUTSIDE = ROOT / "tests" / "outside"
SEARCH = f"hydra.searchpath=[file://{OUTSIDE / 'conf'}]"
ENV = {"PYTHONPATH": str(OUTSIDE)}
TASKS = {**TINY_TASKS, "recall": ["task=recall", "task.seq_len=16",
                                  "task.sizes={train:200,val:50,test:50}", *BUDGET],
         "asr": ["task=asr", "task.dataset=synth_strings", "task.sizes={train:40,val:8,test:8}", *BUDGET],
         "summarization": ["task=summarization", "task.dataset=reports",
                           "task.reports_sizes={train:200,val:10,test:12}", *BUDGET]}
NOTES = {"image": "rows", "speech": "frames", "translation": "causal convolution decoder",
         "recall": "over the tokens", "asr": "CTC head", "summarization": "causal convolution decoder"}


def test_the_project_does_not_know_the_outside_family_or_task():
    for folder in ("bench", "models", "tasks", "conf"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in (".py", ".yaml"):
                text = path.read_text()
                assert "conv1d" not in text and "majority" not in text, path


@pytest.mark.slow
@pytest.mark.parametrize("task", list(TASKS))
def test_a_family_from_outside_runs_on_every_task(tmp_path, task):
    # the tiny sizes go to the reference the family is matched to
    overrides = [o.replace("model.", "reference.", 1) if o.startswith("model.") else o for o in TASKS[task]]
    out = run_cli("run", *overrides, SEARCH, "model=conv1d", f"results_dir={tmp_path}",
                  f"cache_dir={tmp_path / 'c'}", env=ENV)
    assert out.returncode == 0, out.stderr
    (rec,) = read_records(tmp_path)
    assert rec["status"] == "ok" and rec["task"] == task
    assert rec["model"] == "conv1d" and rec["model_family"] == "conv1d"
    assert NOTES[task] in rec["model_notes"]
    assert rec["config"]["model"]["kernel_size"] == 3 and rec["params"] > 0
    assert abs(rec["param_match"]["gap"]) <= 0.02
    assert rec["steps"] == 6 and rec["test_metric"] >= 0


@pytest.mark.slow
def test_a_task_from_outside_runs_every_model(tmp_path):
    out = run_cli("run", "-m", SEARCH, "task=majority", "model=attention,lstm,gru,conv1d",
                  "trainer.epochs=2", *BUDGET[2:], f"results_dir={tmp_path}", env=ENV)
    assert out.returncode == 0, out.stderr
    records = read_records(tmp_path)
    assert sorted(r["model"] for r in records) == ["attention", "conv1d", "gru", "lstm"]
    for rec in records:
        assert rec["status"] == "ok" and rec["task"] == "majority" and rec["dataset"] == "bits"
        assert rec["epochs_run"] == 2 and rec["config"]["trainer"]["batch_size"] == 64  # its recipe
        assert 0.0 <= rec["test_metric"] <= 1.0
    params = {r["model"]: r["params"] for r in records}
    for rec in records:  # every family matched to the attention model, with no size file
        if rec["model"] != "attention":
            match = rec["param_match"]
            assert match["target"] == params["attention"] and match["params"] == rec["params"]
            assert abs(match["gap"]) <= 0.02 and match["width"] > 0
    assert "the attention model's parameters" not in out.stdout  # no unmatched warning


@pytest.mark.slow
def test_a_family_run_at_a_width_of_its_own_is_said_to_be_unmatched(tmp_path):
    out = run_cli("run", "-m", SEARCH, "task=majority", "model=attention,conv1d", "model.dim=16",
                  "trainer.epochs=1", *BUDGET[2:], f"results_dir={tmp_path}", env=ENV)
    assert out.returncode == 0, out.stderr
    (conv,) = [r for r in read_records(tmp_path) if r["model"] == "conv1d"]
    match = conv["param_match"]  # measured against the reference (the task's attention model)
    assert not match["computed"] and match["width"] == 16 and match["params"] == conv["params"]
    ratio = match["params"] / match["target"]
    assert abs(ratio - 1) > 0.1  # 16 wide is not the reference's count
    assert f"conv1d has {ratio:.2f}x the attention model's parameters on majority/bits" in out.stdout


def test_the_family_builder_signature_is_its_settings(tmp_path):
    out = run_cli("run", *TASKS["image"], SEARCH, "model=conv1d", "+model.kernel=5",
                  f"results_dir={tmp_path}", env=ENV)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "mhab: error: model.kernel is not a model setting, so it would be ignored; check the "
        "spelling, or whether it belongs to the task (task.kernel)"]
    assert not (Path(tmp_path) / "runs").exists()


def test_an_unimportable_builder_is_a_one_line_error(tmp_path):
    out = run_cli("run", *TASKS["image"], SEARCH, "model=conv1d", f"results_dir={tmp_path}")
    assert out.returncode == 2
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("mhab: error: model._target_ 'conv1d_family.build' cannot be imported")


def test_an_input_kind_a_family_cannot_read_is_a_user_error():
    cfg = OmegaConf.create({"_target_": "models.attention_family.build", "name": "attention",
                            "dim": 8, "depth": 1, "num_heads": 2})
    build_model(cfg, TokenSequence(vocab_size=5, seq_len=4, num_classes=2))  # it reads this one
    with pytest.raises(BenchError, match="attention model family has no reader for str inputs"):
        build_model(cfg, "not an input kind")


def test_run_help_lists_the_models_and_tasks_on_the_search_path():
    out = run_cli("run", "--help", SEARCH, env=ENV)
    assert out.returncode == 0, out.stderr
    groups = dict(line.strip().split(": ", 1) for line in out.stdout.splitlines()
                  if line.startswith(("  task: ", "  model: ")))
    assert "majority" in groups["task"].split(", ") and "image" in groups["task"].split(", ")
    assert groups["model"].split(", ") == ["attention", "conv1d", "gru", "lstm"]
    plain = run_cli("run", "--help")
    assert "conv1d" not in plain.stdout and "majority" not in plain.stdout


@pytest.mark.slow
def test_speed_times_a_family_and_task_from_the_search_path(tmp_path):
    import pandas as pd

    out = run_cli("speed", SEARCH, "tasks.names=[majority]", "tasks.models=[attention,conv1d]",
                  "attention.enabled=false", "tasks.timed_steps=1", "tasks.repeats=1",
                  "tasks.min_seconds=0", "matmul_size=64", f"results_dir={tmp_path}", env=ENV)
    assert out.returncode == 0, out.stderr
    timed = pd.read_csv(tmp_path / "speed.csv")
    assert set(timed["model"]) == {"majority/bits:attention", "majority/bits:conv1d"}
    assert (timed["status"] == "ok").all()


@pytest.mark.slow
def test_editing_a_familys_source_does_not_reuse_its_old_record_silently(tmp_path):
    import shutil

    outside = tmp_path / "outside"
    shutil.copytree(OUTSIDE, outside)
    args = ["run", f"hydra.searchpath=[file://{outside / 'conf'}]", "task=majority", "model=conv1d",
            "trainer.epochs=1", *BUDGET[2:], f"results_dir={tmp_path / 'r'}"]
    env = {"PYTHONPATH": str(outside)}
    assert run_cli(*args, env=env).returncode == 0
    (first,) = read_records(tmp_path / "r")
    assert {role: code["module"] for role, code in first["code"].items()} == {
        "model": "conv1d_family", "task": "majority_task"}
    family = outside / "conv1d_family.py"
    family.write_text(family.read_text() + "\n# an edit a user makes\n")
    refused = run_cli(*args, env=env)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "made with other code (conv1d_family changed since)" in refused.stderr
    assert "on_code_change=rerun" in refused.stderr
    assert run_cli(*args, "on_code_change=rerun", env=env).returncode == 0
    second = [r for r in read_records(tmp_path / "r") if r["run_id"] != first["run_id"]]
    assert len(second) == 1 and second[0]["code"]["model"]["sha256"] != first["code"]["model"]["sha256"]
    again = run_cli(*args, env=env)  # the new code's record now answers: skipped, nothing new
    assert again.returncode == 0 and len(read_records(tmp_path / "r")) == 2


def test_a_new_family_reads_the_task_settings_it_declares(tmp_path, monkeypatch):
    """A family the tasks name no settings for says whose it reads (``task_settings: rnn``):
    the RNNs' depth on every task, its own entry where a task gives one, its yaml's default
    where it declares none."""
    from bench.setup.build import validate
    from bench.setup.compose import compose_config

    monkeypatch.syspath_prepend(str(OUTSIDE))
    models = tmp_path / "conf" / "model"
    models.mkdir(parents=True)
    (models / "mine.yaml").write_text(
        "_target_: conv1d_family.build\nname: mine\nfamily: mine\nmatch_params: true\n"
        "task_settings: rnn\ndim: null\ndepth: ${task_model:depth,7}\nkernel_size: 3\n")
    search = f"hydra.searchpath=[file://{tmp_path / 'conf'}]"

    def depth(*overrides: str) -> int:
        cfg = compose_config("config", [search, "task=speech", "model=mine", *overrides], "run")
        return validate(cfg)["model"]["depth"]

    assert depth("task.models.rnn.depth=5") == 5  # the RNNs' setting on this task
    assert depth("task.models.rnn.depth=5", "+task.models.mine.depth=3") == 3  # its own wins
    assert depth("task.models.rnn.depth=5", "~model.task_settings") == 7  # none declared: the default
    # the RNNs' other settings (bidirectional, dropout...) are theirs: unread here, not an error
    assert validate(compose_config("config", [search, "task=summarization", "model=mine"], "run"))
