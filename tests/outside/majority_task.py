"""A task from outside the project, for the test that adding one takes one adapter file and
its configs: say whether a bit string holds more ones than zeros (every bit counts, so the
answer needs the whole sequence), written against ``bench.task`` and ``models.inputs`` only.
"""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

from bench.errors import BenchError
from bench.task import ClassificationTask, Splits
from models.inputs import TokenSequence


class MajorityTask(ClassificationTask):
    def __init__(self, name: str, dataset: str, data_dir: str | None, cache_dir: str,
                 seq_len: int = 15, sizes: dict | None = None, data_seed: int = 0) -> None:
        super().__init__(name, dataset, data_dir, cache_dir)
        if dataset != "bits":
            raise BenchError(f"unknown majority dataset '{dataset}'; choose bits")
        if seq_len < 1 or seq_len % 2 == 0:
            raise BenchError(f"task.seq_len must be odd (no ties), got {seq_len}")
        self.seq_len, self.data_seed = seq_len, data_seed
        self.sizes = dict(sizes or {"train": 2000, "val": 200, "test": 200})

    def load(self, seed: int) -> Splits:
        g = torch.Generator().manual_seed(self.data_seed)
        parts = {}
        for split, n in self.sizes.items():
            bits = torch.randint(0, 2, (n, self.seq_len), generator=g)
            parts[split] = TensorDataset(bits, (bits.sum(1) > self.seq_len // 2).long())
        info = {"seq_len": self.seq_len, "sizes": {k: len(v) for k, v in parts.items()}}
        return Splits(parts["train"], parts["val"], parts["test"], info)

    def input_kind(self, splits: Splits) -> TokenSequence:
        return TokenSequence(vocab_size=2, seq_len=self.seq_len, num_classes=2)
