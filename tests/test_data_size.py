"""The data-size axis: ``task.train_fraction`` takes a nested, seeded, class-stratified subset
of the training split, repeated to the split's length so the budget in samples seen is the
same at every size; validation and test are untouched."""

import pytest
import torch
from torch.utils.data import TensorDataset

from bench.errors import BenchError
from bench.setup.build import validate
from bench.setup.compose import compose_config
from bench.setup.subsets import RepeatedSubset, nested_subset, train_subset
from bench.task import BatchDataset
from tests.conftest import read_records, run_cli

TINY = ["task=image", "task.dataset=digits", "model=lstm", "trainer.epochs=1", "trainer.batch_size=64",
        "trainer.infer_iters=1", "trainer.timing_warmup_steps=1", "logger=none"]


def test_subsets_are_nested_and_keep_each_class_share():
    classes = torch.arange(1000) % 4  # four classes of 250
    previous = set()
    for fraction in (0.03, 0.1, 0.3, 1.0):
        kept = nested_subset(1000, fraction, seed=0, classes=classes)
        assert previous <= set(kept.tolist())  # the smaller subset lies inside the larger
        counts = torch.bincount(classes[kept], minlength=4)
        assert counts.tolist() == [int(torch.tensor(fraction * 250).ceil())] * 4
        previous = set(kept.tolist())
    assert len(previous) == 1000


def test_without_classes_a_subset_is_a_nested_share_and_the_seed_picks_it():
    small, large = nested_subset(500, 0.1, seed=3), nested_subset(500, 0.3, seed=3)
    assert len(small) == 50 and len(large) == 150 and set(small.tolist()) <= set(large.tolist())
    assert not torch.equal(small, nested_subset(500, 0.1, seed=4))


def test_every_class_keeps_at_least_one_example():
    classes = torch.tensor([0] * 98 + [1, 2])
    kept = nested_subset(100, 0.05, seed=0, classes=classes)
    assert set(classes[kept].tolist()) == {0, 1, 2}


class Lengths(BatchDataset):
    def __init__(self, n: int) -> None:
        self.values = torch.arange(n)

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, indices):
        return (self.values[indices],)

    def example_lengths(self):
        return self.values + 1


def test_a_repeated_subset_is_the_full_length_and_reads_only_the_subset():
    base = TensorDataset(torch.arange(10) * 10, torch.arange(10) % 2)
    subset = RepeatedSubset(base, torch.tensor([1, 4]), length=10)
    assert len(subset) == 10
    assert subset[[0, 1, 2, 3]][0].tolist() == [10, 40, 10, 40]
    lengths = RepeatedSubset(Lengths(10), torch.tensor([2, 7]), length=6)
    assert lengths[[0, 1]][0].tolist() == [2, 7] and lengths.example_lengths().tolist() == [3, 8] * 3


def test_the_record_info_says_the_budget_stays_in_samples():
    base = TensorDataset(torch.zeros(200, 1), torch.arange(200) % 10)
    train, info = train_subset(base, 0.1, 0, base.tensors[-1])
    assert len(train) == 200 and info["train_examples"] == 20 and info["epoch_examples"] == 200
    assert info["stratified"] and "repeated 10.0 times" in info["budget"]
    same, full = train_subset(base, 1.0, 0, None)
    assert same is base and full == {"train_fraction": 1.0, "train_examples": 200}


@pytest.mark.parametrize("value", ["0", "1.5", "-0.1"])
def test_an_impossible_fraction_is_a_one_line_error(value):
    cfg = compose_config("config", ["task=image", f"task.train_fraction={value}"], "run")
    with pytest.raises(BenchError, match="task.train_fraction must be") as e:
        validate(cfg)
    assert "\n" not in str(e.value)


def test_every_task_has_the_fraction_with_the_same_default():
    for task in ("image", "speech", "asr", "translation", "summarization", "recall"):
        cfg = compose_config("config", [f"task={task}"], "run")
        assert cfg.task.train_fraction == 1.0 and cfg.task.train_subset_seed == 0


@pytest.mark.slow
def test_a_smaller_training_set_trains_for_the_same_samples(tmp_path):
    for fraction in ("1.0", "0.25"):
        out = run_cli("run", *TINY, f"task.train_fraction={fraction}", f"results_dir={tmp_path}")
        assert out.returncode == 0, out.stderr
    full, quarter = sorted(read_records(tmp_path), key=lambda r: -r["data"]["train_examples"])
    assert quarter["config_hash"] != full["config_hash"]  # another experiment
    assert quarter["data"]["train_examples"] < 0.26 * full["data"]["train_examples"]
    assert quarter["data"]["epoch_examples"] == full["data"]["train_examples"]
    assert quarter["steps"] == full["steps"]  # the same budget, in optimizer steps and samples
    for split in ("val", "test"):  # untouched
        assert quarter["data"]["sizes"][split] == full["data"]["sizes"][split]


@pytest.mark.slow
def test_a_subset_of_variable_length_utterances_batches_by_length(tmp_path):
    out = run_cli("run", "task=asr", "task.dataset=synth_strings", "task.sizes={train:40,val:8,test:8}",
                  "model=gru", "trainer.max_steps=4", "trainer.batch_size=8", "trainer.eval_batch_size=16",
                  "trainer.infer_iters=1", "task.train_fraction=0.5", f"results_dir={tmp_path}",
                  f"cache_dir={tmp_path / 'c'}", "logger=none")
    assert out.returncode == 0, out.stderr
    (rec,) = read_records(tmp_path)
    assert rec["data"]["train_examples"] == 20 and not rec["data"]["stratified"]
    assert rec["data"]["batching"]["mode"] == "bucketed"


def test_a_training_set_of_a_few_batches_is_said_and_less_than_one_is_refused(caplog):
    from bench.errors import BenchError
    from bench.setup.subsets import check_training_size

    full = {"train_fraction": 1.0, "train_examples": 5000}
    assert check_training_size(full, 128) == full  # plenty: nothing to say
    few = check_training_size({"train_fraction": 1.0, "train_examples": 300}, 128)
    assert few["small_training_set"].startswith("300 distinct training examples, fewer than 4 batches")
    assert "small training set" in caplog.text
    subset = {"train_fraction": 1e-9, "train_examples": 10, "train_examples_full": 1437}
    with pytest.raises(BenchError, match=r"leaves 10 of the 1,437 .* at least 0.09"):
        check_training_size(subset, 128)
    a_dataset_this_small = {"train_fraction": 1.0, "train_examples": 10}
    assert "small_training_set" in check_training_size(a_dataset_this_small, 128)  # said, not refused
