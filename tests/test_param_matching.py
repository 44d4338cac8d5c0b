"""The RNN baselines are sized, through conf/model_size, to the attention model's parameter
count within 10%, for every task and dataset, under the task's default config."""

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from bench.cli import CONF_DIR
from bench.measure import count_parameters
from bench.task import Splits

CASES = {  # (task, dataset): what the task's loader reports about the data
    ("image", "fashion_mnist"): {"input_shape": [1, 28, 28], "num_classes": 10},
    ("image", "digits"): {"input_shape": [1, 8, 8], "num_classes": 10},
    ("speech", "fsdd"): {"input_shape": [1, 40, 101], "num_classes": 10},
    ("speech", "synth_digits"): {"input_shape": [1, 40, 101], "num_classes": 10},
    ("translation", "multi30k"): {"vocab_size": 8000},
    ("translation", "quick"): {"vocab_size": 400},  # the quick suite's numbers corpus
}
BASELINES = {
    "image": [["model=lstm"], ["model=gru"]],
    "speech": [["model=lstm"], ["model=gru"]],
    "translation": [["model=lstm"], ["model=gru"], ["model=lstm", "model.additive_attention=true"],
                    ["model=gru", "model.additive_attention=true"]],
}


def _params(task_name, dataset, overrides, info):
    chosen = ["suite=quick"] if dataset == "quick" else [f"task.dataset={dataset}"]
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=[f"task={task_name}", *chosen, *overrides])
    task = instantiate(cfg.task, data_dir=None, cache_dir="unused")
    return count_parameters(task.build_model(cfg.model, Splits([], [], [], info)))


@pytest.mark.parametrize("task_name, dataset", list(CASES))
def test_rnn_baselines_match_attention_parameters_within_10_percent(task_name, dataset):
    info = CASES[(task_name, dataset)]
    attention = _params(task_name, dataset, ["model=attention"], info)
    baselines = BASELINES[task_name][:2] if dataset == "quick" else BASELINES[task_name]
    for overrides in baselines:
        rnn = _params(task_name, dataset, overrides, info)
        assert abs(rnn - attention) / attention <= 0.10, (overrides, rnn, attention)
