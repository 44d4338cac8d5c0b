"""Every baseline is sized, through conf/model_size, to the attention model's parameter count
within 10%, for every task and dataset under the task's default config: one case per
conf/task x conf/model pairing (and each translation RNN with additive attention)."""

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from bench.run.measure import count_parameters
from bench.setup.build import build_model, build_task
from bench.setup.compose import CONF_DIR
from bench.task import Splits

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
MODELS = sorted(p.stem for p in (Path(CONF_DIR) / "model").glob("*.yaml"))
VARIANTS = {"translation": [[], ["model.additive_attention=true"]],
            "summarization": [[], ["model.additive_attention=true"]]}


def _params(task_name: str, dataset: str, overrides: list[str]) -> int:
    chosen = ["suite=quick"] if dataset == "quick" else [f"task.dataset={dataset}"]
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=[f"task={task_name}", *chosen, *overrides])
    cfg.data_dir, cfg.cache_dir = None, "unused"
    task = build_task(cfg)
    kind = task.input_kind(Splits([], [], [], DATA_INFO[(task_name, dataset)]))
    return count_parameters(build_model(cfg.model, kind).module)


def test_every_task_config_has_a_case():
    assert set(TASKS) == {task for task, _ in DATA_INFO}


@pytest.mark.slow
@pytest.mark.parametrize("model", [m for m in MODELS if m != "attention"])
@pytest.mark.parametrize("task_name, dataset", list(DATA_INFO))
def test_baseline_matches_attention_parameters_within_10_percent(task_name, dataset, model):
    attention = _params(task_name, dataset, ["model=attention"])
    variants = [[]] if dataset == "quick" else VARIANTS.get(task_name, [[]])
    for extra in variants:
        baseline = _params(task_name, dataset, [f"model={model}", *extra])
        assert abs(baseline - attention) / attention <= 0.10, (model, extra, baseline, attention)


@pytest.mark.parametrize("model", [m for m in MODELS if m != "attention"])
@pytest.mark.parametrize("dataset", ["fsdd_strings", "synth_strings"])
def test_the_conv2d_front_end_keeps_asr_parameters_matched(dataset, model):
    attention = _params("asr", dataset, ["model=attention", "task.frontend=conv2d"])
    baseline = _params("asr", dataset, [f"model={model}", "task.frontend=conv2d"])
    assert abs(baseline - attention) / attention <= 0.10, (baseline, attention)
    assert attention != _params("asr", dataset, ["model=attention"])  # the front end did change
