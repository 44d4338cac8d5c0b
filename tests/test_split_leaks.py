"""No example in two splits: for every dataset, no input (image, recording, utterance, source
text) of one split is in another. Validation that shares examples with training rewards
remembering them, and one that shares them with the test lets model selection peek at it."""

import hashlib

import pytest
import torch

from bench.setup.build import build_task
from bench.setup.compose import compose_config
from bench.task import BatchDataset
from tasks.text_pairs import TextPairs, disjoint_sources

SPLITS = ("train", "val", "test")
OFFLINE = {
    "digits": ["task=image", "task.dataset=digits"],
    "synth_digits": ["task=speech", "task.dataset=synth_digits"],
    "synth_strings": ["task=asr", "task.dataset=synth_strings", "task.sizes={train:300,val:60,test:60}"],
    "numbers": ["task=translation", "task.dataset=numbers"],
    "reports": ["task=summarization", "task.dataset=reports"],
    "recall": ["task=recall", "task.seq_len=16"],
}
DATA_ROOT = {
    "fashion_mnist": ["task=image", "task.dataset=fashion_mnist"],
    "fsdd": ["task=speech", "task.dataset=fsdd"],
    "fsdd_strings": ["task=asr", "task.dataset=fsdd_strings", "task.sizes={train:2000,val:300,test:300}"],
    "multi30k": ["task=translation", "task.dataset=multi30k"],
    "aeslc": ["task=summarization", "task.dataset=aeslc"],
}


def example_key(dataset, i: int) -> str:
    """A digest of example ``i``'s input: its source text (a text pair: the rule is on texts;
    two long emails may still share their first tokens once cut), else its tensor (the valid
    frames, for a padded utterance)."""
    if hasattr(dataset, "src_text"):
        return hashlib.sha1(dataset.src_text[i].encode()).hexdigest()
    item = dataset[[i]] if isinstance(dataset, BatchDataset) else dataset[i]
    x = item[0]
    if isinstance(dataset, BatchDataset) and x.dim() == 4:  # (1, C, bins, frames) and its length
        x = x[..., : int(item[1][0])]
    data = x.contiguous().numpy().tobytes() if isinstance(x, torch.Tensor) else repr(x).encode()
    return hashlib.sha1(data).hexdigest()


def shared_examples(overrides: list[str], tmp_path) -> dict[str, int]:
    cfg = compose_config("config", [*overrides, f"cache_dir={tmp_path / 'c'}"], "run")
    splits = build_task(cfg).load(0)
    keys = {name: {example_key(getattr(splits, name), i) for i in range(len(getattr(splits, name)))}
            for name in SPLITS}
    pairs = (("train", "val"), ("train", "test"), ("val", "test"))
    return {f"{a}&{b}": len(keys[a] & keys[b]) for a, b in pairs}


def test_disjoint_sources_keeps_the_test_and_drops_repeats_elsewhere():
    raw = {"train": TextPairs(["a", "b", "c", "d"], ["A", "B", "C", "D"]),
           "val": TextPairs(["b", "e", "t"], ["B", "E", "T"]),
           "test": TextPairs(["t", "c"], ["T", "C"])}
    out, dropped = disjoint_sources(raw)
    assert out["test"] is raw["test"]  # as published
    assert out["val"].sources == ["b", "e"] and out["train"].sources == ["a", "d"]
    assert out["train"].references == [["A"], ["D"]]
    assert dropped == {"val": 1, "train": 2}


@pytest.mark.slow
@pytest.mark.parametrize("dataset", list(OFFLINE))
def test_no_offline_example_is_in_two_splits(dataset, tmp_path):
    assert shared_examples(OFFLINE[dataset], tmp_path) == {"train&val": 0, "train&test": 0, "val&test": 0}


@pytest.mark.slow
@pytest.mark.parametrize("dataset", list(DATA_ROOT))
def test_no_example_of_the_data_root_is_in_two_splits(dataset, data_dir, tmp_path):
    assert shared_examples([*DATA_ROOT[dataset], f"data_dir={data_dir}"], tmp_path) == {
        "train&val": 0, "train&test": 0, "val&test": 0}
