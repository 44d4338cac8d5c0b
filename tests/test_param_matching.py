"""The RNN baselines are sized, through conf/model_size, to the attention model's parameter
count within 10%, for every task and dataset, under the task's default config."""

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from bench.cli import CONF_DIR
from bench.measure import count_parameters
from bench.task import Splits

CASES = {  # (task, dataset): input shape the task's loader produces
    ("image", "fashion_mnist"): [1, 28, 28],
    ("image", "digits"): [1, 8, 8],
    ("speech", "fsdd"): [1, 40, 101],
    ("speech", "synth_digits"): [1, 40, 101],
}


def _params(task_name, dataset, model, shape):
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=[f"task={task_name}", f"model={model}",
                                           f"task.dataset={dataset}"])
    task = instantiate(cfg.task, data_dir=None, cache_dir="unused")
    splits = Splits([], [], [], {"input_shape": shape, "num_classes": 10})
    return count_parameters(task.build_model(cfg.model, splits))


@pytest.mark.parametrize("task_name, dataset", list(CASES))
def test_rnn_baselines_match_attention_parameters_within_10_percent(task_name, dataset):
    shape = CASES[(task_name, dataset)]
    counts = {m: _params(task_name, dataset, m, shape) for m in ("attention", "lstm", "gru")}
    for rnn in ("lstm", "gru"):
        gap = abs(counts[rnn] - counts["attention"]) / counts["attention"]
        assert gap <= 0.10, counts
