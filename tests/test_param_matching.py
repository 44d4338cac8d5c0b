"""Parameter matching, computed: every matched family's width is sized so that its parameter
count is within 2% of the reference model's (attention), for every task and dataset, every
scale, and a family from outside the project, with no size file anywhere."""

import sys
from pathlib import Path

import pytest

from bench.errors import BenchError
from bench.run.measure import count_parameters
from bench.setup.build import build_model, build_task, matched_model, validate
from bench.setup.compose import CONF_DIR, compose_config
from bench.setup.task_models import scale_choices
from bench.task import Splits
from tests.conftest import ROOT

DATA_INFO = {  # (task, dataset): what the task's loader reports about the data
    ("image", "fashion_mnist"): {"input_shape": [1, 28, 28], "num_classes": 10},
    ("image", "digits"): {"input_shape": [1, 8, 8], "num_classes": 10},
    ("speech", "fsdd"): {"input_shape": [1, 40, 101], "num_classes": 10},
    ("speech", "synth_digits"): {"input_shape": [1, 40, 101], "num_classes": 10},
    ("translation", "multi30k"): {"vocab_size": 8000},
    ("translation", "quick"): {"vocab_size": 400},  # the quick suite's numbers corpus
    ("recall", "first_token"): {},
    ("summarization", "aeslc"): {"vocab_size": 8000},
    ("summarization", "quick"): {"vocab_size": 300},  # the quick suite's incident reports
    ("asr", "fsdd_strings"): {"max_frames": 788, "vocab_size": 12},
    ("asr", "synth_strings"): {"max_frames": 323, "vocab_size": 12},
}
TASKS = sorted(p.stem for p in (Path(CONF_DIR) / "task").glob("*.yaml"))
BASELINES = sorted(p.stem for p in (Path(CONF_DIR) / "model").glob("*.yaml") if p.stem != "attention")
VARIANTS = {"translation": [[], ["model.additive_attention=true"]],
            "summarization": [[], ["model.additive_attention=true"]]}
OUTSIDE = ROOT / "tests" / "outside"


def _setup(task_name: str, dataset: str, overrides: list[str]):
    chosen = ["suite=quick"] if dataset == "quick" else [f"task.dataset={dataset}"]
    cfg = compose_config("config", [f"task={task_name}", *chosen, *overrides], "run")
    cfg.data_dir, cfg.cache_dir = None, "unused"
    config = validate(cfg)  # the plain data the build reads
    return config, build_task(config).input_kind(Splits([], [], [], DATA_INFO[(task_name, dataset)]))


def _match(task_name: str, dataset: str, overrides: list[str]) -> dict:
    config, inputs = _setup(task_name, dataset, overrides)
    return matched_model(config["model"], config.get("reference"), inputs)[1]


def test_every_task_config_has_a_case():
    assert set(TASKS) == {task for task, _ in DATA_INFO}


def _cases():
    for task_name, dataset in DATA_INFO:
        cfg = compose_config("config", [f"task={task_name}"], "run")
        for scale in scale_choices(cfg.task.models.attention):
            yield task_name, dataset, scale


@pytest.mark.parametrize("model", BASELINES)
@pytest.mark.parametrize("task_name, dataset, scale", list(_cases()))
def test_every_baseline_is_matched_within_2_percent(task_name, dataset, scale, model):
    variants = [[]] if dataset == "quick" else VARIANTS.get(task_name, [[]])
    for extra in variants:
        facts = _match(task_name, dataset, [f"model={model}", f"scale={scale}", *extra])
        if scale == "s":  # counted on the meta device = counted on the model built
            attention_cfg, inputs = _setup(task_name, dataset, ["model=attention"])
            assert facts["target"] == count_parameters(build_model(attention_cfg["model"], inputs).module)
        assert facts["reference"] == "attention" and facts["computed"]
        assert abs(facts["gap"]) <= 0.02, (model, extra, facts)


@pytest.mark.parametrize("task_name, dataset",
                         [("image", "digits"), ("translation", "quick"), ("asr", "synth_strings")])
def test_the_matched_width_is_the_width_built(task_name, dataset):
    config, inputs = _setup(task_name, dataset, ["model=lstm"])
    model_cfg, facts = matched_model(config["model"], config["reference"], inputs)
    assert model_cfg["dim"] == facts["width"] and config["model"]["dim"] is None  # the config is left alone
    assert count_parameters(build_model(model_cfg, inputs).module) == facts["params"]


def test_each_scale_has_about_four_times_the_parameters_of_the_one_before():
    for task_name, dataset in DATA_INFO:
        counts = []
        for scale in ("xs", "s", "m", "l"):
            config, inputs = _setup(task_name, dataset, ["model=lstm", f"scale={scale}"])
            counts.append(matched_model(config["model"], config["reference"], inputs)[1]["target"])
        ratios = [b / a for a, b in zip(counts, counts[1:], strict=False)]
        assert all(2.0 <= r <= 4.5 for r in ratios), (task_name, dataset, counts, ratios)


@pytest.mark.parametrize("task_name, dataset, scale", list(_cases()))
def test_a_family_from_outside_is_matched_with_no_size_file(task_name, dataset, scale, monkeypatch):
    monkeypatch.syspath_prepend(str(OUTSIDE))
    sys.modules.pop("conv1d_family", None)
    facts = _match(task_name, dataset, ["model=conv1d", f"scale={scale}",
                                        f"hydra.searchpath=[file://{OUTSIDE / 'conf'}]"])
    assert abs(facts["gap"]) <= 0.02, facts


def test_a_width_given_is_kept_and_its_gap_recorded():
    facts = _match("image", "digits", ["model=gru", "model.dim=40"])
    assert facts["width"] == 40 and not facts["computed"] and facts["gap"] < -0.5


def test_the_attention_model_is_not_matched():
    assert _match("image", "digits", ["model=attention"]) is None


@pytest.mark.parametrize("overrides, said", [
    (["model=lstm", "scale=xxl"],
     "scale=xxl is not a size of attention on task=image; choose one of s, xs, m, l"),
    (["model=attention", "scale=huge"], "scale=huge is not a size of attention"),
    (["model=lstm", "+task.models.rnn.depht=3"], "task.models.rnn.depht is not a setting of model=lstm"),
])
def test_an_unknown_scale_or_task_model_setting_is_a_one_line_error(overrides, said):
    cfg = compose_config("config", ["task=image", "task.dataset=digits", *overrides], "run")
    with pytest.raises(BenchError, match=said.replace("(", r"\(")) as e:
        validate(cfg)
    assert "\n" not in str(e.value)


def test_a_reference_sized_by_matching_itself_is_a_one_line_error():
    with pytest.raises(BenchError, match="the reference model .lstm. is itself sized by matching"):
        _match("image", "digits", ["model=gru", "model@reference=lstm"])


def test_a_tiny_model_that_cannot_be_matched_within_2_percent_warns(caplog):
    tiny = ["reference.dim=8", "reference.depth=1", "reference.num_heads=2"]
    facts = _match("image", "digits", ["model=lstm", *tiny])
    assert abs(facts["gap"]) > 0.02  # one unit of width is more than 2% of so small a model
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert f"model.dim={facts['width']}" in warning and "not within 2%" in warning


def test_run_with_an_unknown_scale_exits_2_with_one_line(tmp_path):
    from tests.conftest import run_cli

    out = run_cli("run", "task=image", "task.dataset=digits", "model=lstm", "scale=xxl",
                  f"results_dir={tmp_path}")
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0, out.stderr
    assert "scale=xxl is not a size of attention on task=image" in out.stderr
    assert not (tmp_path / "runs").exists()


def test_a_matched_model_is_sized_against_the_attention_model_its_overrides_build():
    facts = _match("image", "digits", ["model=gru", "model.depth=2"])
    attention_cfg, inputs = _setup("image", "digits", ["model=attention", "model.depth=2"])
    assert facts["target"] == count_parameters(build_model(attention_cfg["model"], inputs).module)
    assert facts["target"] < _match("image", "digits", ["model=gru"])["target"]  # 2 layers, not 4
    assert abs(facts["gap"]) <= 0.02
    cfg, _ = _setup("image", "digits", ["model=gru", "model.depth=2", "model.dropout=0.1"])
    assert cfg["reference"]["depth"] == 2 and cfg["reference"]["dropout"] == 0.1  # the keys the reference has
    assert cfg["reference"]["name"] == "attention" and "cell" not in cfg["reference"]  # never its identity


@pytest.mark.slow
def test_a_sweep_with_model_overrides_compares_at_matched_parameters(tmp_path):
    from bench.records.table import load
    from tests.conftest import read_records, run_cli

    out = run_cli("run", "-m", "task=image", "task.dataset=digits", "model=attention,gru", "model.depth=2",
                  "trainer.max_steps=2", "trainer.infer_iters=1", "trainer.timing_warmup_steps=1",
                  f"results_dir={tmp_path}")
    assert out.returncode == 0, out.stderr
    assert "not a comparison at matched parameters" not in out.stderr
    records = {r["model"]: r for r in read_records(tmp_path)}
    assert records["gru"]["param_match"]["target"] == records["attention"]["params"]
    ratio = load(tmp_path).set_index("model").loc["gru", "params_vs_attention"]
    assert ratio == pytest.approx(records["gru"]["params"] / records["attention"]["params"])
    assert abs(ratio - 1) <= 0.02
