"""A synthetic long-range task: recall the first token of a noisy sequence.

Each sequence holds ``seq_len`` tokens; the first is the class (one of ``num_classes``), the
rest are random distractors. The answer therefore sits ``seq_len - 1`` steps before the end:
the dependency distance grows with the length. An RNN must carry it through every step; an
attention model can look it up directly. Sweeping ``task.seq_len`` measures accuracy,
tokens/s and activation memory against sequence length on the same engine and budget.
"""

from __future__ import annotations

from typing import Annotated

import torch
from torch.utils.data import TensorDataset

from bench.errors import BenchError
from bench.task import ClassificationTask, Splits, split_sizes
from models.constraints import AT_LEAST_1, NON_NEGATIVE, Range
from models.inputs import TokenSequence


class RecallTask(ClassificationTask):
    def __init__(self, name: str, dataset: str, data_dir: str | None, cache_dir: str,
                 seq_len: Annotated[int, Range(ge=2)] = 64, num_classes: Annotated[int, Range(ge=2)] = 8,
                 vocab_size: Annotated[int, Range(ge=2)] = 32,
                 sizes: dict[str, Annotated[int, AT_LEAST_1]] | None = None,
                 data_seed: Annotated[int, NON_NEGATIVE] = 0) -> None:
        super().__init__(name, dataset, data_dir, cache_dir)
        if dataset != "first_token":
            raise BenchError(f"unknown recall dataset '{dataset}'; choose first_token")
        if seq_len < 2:
            raise BenchError(f"task.seq_len must be >= 2 (the answer and a distractor), got {seq_len}")
        if not 2 <= num_classes <= vocab_size:
            raise BenchError(f"task.num_classes must be in [2, vocab_size={vocab_size}], got {num_classes}")
        self.seq_len, self.num_classes, self.vocab_size = seq_len, num_classes, vocab_size
        self.sizes = split_sizes("task.sizes", sizes, {"train": 4000, "val": 500, "test": 1000})
        self.data_seed = data_seed

    def load(self, seed: int) -> Splits:
        g = torch.Generator().manual_seed(self.data_seed)
        parts = {}
        for split, n in self.sizes.items():
            tokens = torch.randint(self.num_classes, self.vocab_size, (n, self.seq_len), generator=g)
            labels = torch.randint(0, self.num_classes, (n,), generator=g)
            tokens[:, 0] = labels  # class tokens appear only at the first position
            parts[split] = TensorDataset(tokens, labels)
        info = {"seq_len": self.seq_len, "dependency_distance": self.seq_len - 1,
                "num_classes": self.num_classes, "vocab_size": self.vocab_size,
                "sizes": {k: len(v) for k, v in parts.items()}, "chance": 1 / self.num_classes}
        return Splits(parts["train"], parts["val"], parts["test"], info)

    def input_kind(self, splits: Splits) -> TokenSequence:
        return TokenSequence(self.vocab_size, self.seq_len, self.num_classes)
