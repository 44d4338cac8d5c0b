"""The data-size axis: a training subset of ``task.train_fraction`` of the training split.

The subset is nested (the 10% subset lies inside the 30% one), drawn from one seeded order of
the training examples, class-stratified where the task has classes (each class keeps its
share, at least one example), and the same for every run seed and model family: seeds vary the
model, not the data. Validation and test are untouched.

The budget stays in training samples seen: the subset is repeated to the full split's length,
so an epoch is as many samples as before, a smaller set is seen more times in it, and the
recipe (epochs, warm-up, validation cadence, schedules) means the same compute at every size.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import Dataset, TensorDataset

from bench.errors import BenchError
from bench.records.defaults import FULL_TRAINING_SET
from bench.task import BatchDataset

log = logging.getLogger(__name__)
# Fewer distinct training examples than this many batches: the run goes on, said in its log
# line and its record (a model can still be trained; its score means less).
FEW_BATCHES = 4


def nested_subset(count: int, fraction: float, seed: int, classes: Tensor | None = None) -> Tensor:
    """Indices of ``fraction`` of ``count`` examples, ascending: the first of one seeded order,
    per class where ``classes`` (one label per example) is given."""
    order = torch.randperm(count, generator=torch.Generator().manual_seed(seed))
    labels = torch.zeros(count, dtype=torch.long) if classes is None else classes[order]
    kept = []
    for label in labels.unique():
        members = order[labels == label]  # this class, in the seeded order
        kept.append(members[: max(1, math.ceil(fraction * len(members) - 1e-9))])
    return torch.cat(kept).sort().values


class RepeatedSubset(BatchDataset):
    """``base`` restricted to ``indices`` and repeated to ``length`` examples: example ``i`` is
    ``base[indices[i % len(indices)]]``. Indexed by a whole batch, as ``base`` is."""

    def __init__(self, base: Dataset, indices: Tensor, length: int) -> None:
        self.base, self.indices, self.length = base, indices, length

    def __len__(self) -> int:
        return self.length

    def _map(self, index: Any) -> Tensor:
        return self.indices[torch.as_tensor(index) % len(self.indices)]

    def __getitem__(self, index: Any):
        mapped = self._map(index)
        if isinstance(self.base, TensorDataset):
            return self.base[mapped]
        return self.base[mapped.tolist()]

    def example_lengths(self) -> Tensor | None:
        lengths = self.base.example_lengths() if isinstance(self.base, BatchDataset) else None
        return None if lengths is None else lengths[self._map(torch.arange(self.length))]


def train_subset(train: Dataset, fraction: float, seed: int,
                 classes: Tensor | None) -> tuple[Dataset, dict[str, Any]]:
    """The training split at ``fraction``, and what the record says of it."""
    full = len(train)
    if fraction >= 1.0:
        return train, {"train_fraction": FULL_TRAINING_SET, "train_examples": full}
    indices = nested_subset(full, fraction, seed, classes)
    info = {"train_fraction": fraction, "train_examples": len(indices), "train_examples_full": full,
            "epoch_examples": full, "stratified": classes is not None,
            "budget": "an epoch is the full split's size in samples: the subset repeated "
                      f"{full / len(indices):.1f} times"}
    return RepeatedSubset(train, indices, full), info


def check_training_size(info: dict[str, Any], batch_size: int) -> dict[str, Any]:
    """``info`` (``train_subset``'s) with a ``small_training_set`` note when the distinct
    training examples come to fewer than ``FEW_BATCHES`` batches (also logged). A training
    fraction that leaves less than one batch is refused: every step would see the same few
    examples, repeated to the full split's length."""
    examples, fraction = info["train_examples"], info["train_fraction"]
    full = info.get("train_examples_full", examples)
    if fraction < 1.0 and examples < batch_size:
        needed = math.ceil(100 * batch_size / full) / 100
        raise BenchError(f"task.train_fraction={fraction:g} leaves {examples} of the {full:,} training "
                         f"examples, less than one batch (trainer.batch_size={batch_size}), repeated "
                         f"to {full:,} per epoch; raise task.train_fraction to at least {min(needed, 1):g}")
    if examples >= FEW_BATCHES * batch_size:
        return info
    note = (f"{examples} distinct training examples, fewer than {FEW_BATCHES} batches of "
            f"{batch_size}: a small training set, its scores mean less")
    log.warning("%s", note)
    return {**info, "small_training_set": note}

