"""Length-bucketed batches (fairseq's and ESPnet's batching by length, fixed batch size).

A batch of random examples is padded to its longest one: with AESLC's emails (median 99
subwords, 15% cut at 256) nearly every random batch of 64 is 256 wide. Bucketing draws a pool
of many batches at random, sorts the pool by length and cuts it into batches, so a batch holds
examples of similar length; the batch order is then shuffled, so training still sees a new
mix of lengths every epoch. torch has no such sampler (``BatchSampler`` takes any order but
does not sort), hence this small one.

``trainer.max_tokens`` batches by size instead (fairseq's ``--max-tokens``): the examples are
sorted by length once (ties broken by a seeded shuffle) and cut into batches that each hold
as many as fit under that many padded positions; every epoch shuffles the batches' order.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

import torch
from torch import Tensor
from torch.utils.data import Sampler

BATCHINGS = ("random", "bucketed")


class BucketBatchSampler(Sampler[list[int]]):
    """Batches of ``batch_size`` indices of similar ``lengths``.

    ``shuffle``: every epoch, a permutation from ``generator`` is cut into pools of
    ``pool_batches`` batches, each pool sorted by length and cut into batches, and the batches
    shuffled. Without ``shuffle`` (evaluation): the whole set sorted by length, longest first,
    so the widest batch comes first and memory peaks at once; the task puts outputs back by
    each batch's index column."""

    def __init__(self, lengths: Tensor, batch_size: int, shuffle: bool,
                 generator: torch.Generator | None = None, pool_batches: int = 50) -> None:
        super().__init__()
        self.lengths = torch.as_tensor(lengths, dtype=torch.long)
        self.batch_size, self.shuffle, self.generator = batch_size, shuffle, generator
        self.pool_size = batch_size * pool_batches

    def __len__(self) -> int:
        return math.ceil(len(self.lengths) / self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        if not self.shuffle:
            order = torch.argsort(self.lengths, descending=True, stable=True)
            yield from (chunk.tolist() for chunk in order.split(self.batch_size))
            return
        order = torch.randperm(len(self.lengths), generator=self.generator)
        batches: list[Tensor] = []
        for pool in order.split(self.pool_size):
            pool = pool[torch.argsort(self.lengths[pool], stable=True)]
            batches.extend(pool.split(self.batch_size))
        for i in torch.randperm(len(batches), generator=self.generator).tolist():
            yield batches[i].tolist()


class TokenBatchSampler(Sampler[list[int]]):
    """Batches of similar ``lengths`` holding at most ``max_tokens`` padded positions each
    (batch size x its longest example), formed once, in a new order every epoch."""

    def __init__(self, lengths: Tensor, max_tokens: int, generator: torch.Generator) -> None:
        super().__init__()
        lengths = torch.as_tensor(lengths, dtype=torch.long)
        if len(lengths) and int(lengths.max()) > max_tokens:
            raise ValueError(f"an example of {int(lengths.max())} positions does not fit under "
                             f"max_tokens={max_tokens}")
        self.generator = generator
        tie_break = torch.randperm(len(lengths), generator=generator)
        order = tie_break[torch.argsort(lengths[tie_break], stable=True)].tolist()
        self.batches: list[list[int]] = []
        for i in order:  # sorted ascending, so the newest example is the batch's longest
            batch = self.batches[-1] if self.batches else None
            if batch is None or (len(batch) + 1) * int(lengths[i]) > max_tokens:
                self.batches.append([i])
            else:
                batch.append(i)

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[list[int]]:
        for i in torch.randperm(len(self.batches), generator=self.generator).tolist():
            yield list(self.batches[i])


def padding_share(batches: list[list[int]], lengths: Tensor) -> float:
    """Padded positions over all positions when each batch is padded to its longest example."""
    padded = sum(len(batch) * int(lengths[batch].max()) for batch in batches if batch)
    real = sum(int(lengths[batch].sum()) for batch in batches if batch)
    return 1.0 - real / padded if padded else 0.0


def padding_shares(lengths: Tensor, batch_size: int, seed: int,
                   bucketed: Iterable[list[int]] | None = None) -> dict[str, float]:
    """The padding share of one training epoch, drawn both ways (from generators of their own,
    so the run's batch order is untouched): what bucketing saves on this data. ``bucketed``:
    the batches to weigh on the bucketed side (say, a ``TokenBatchSampler``'s), else
    ``BucketBatchSampler``'s of ``batch_size``."""
    random = torch.randperm(len(lengths), generator=torch.Generator().manual_seed(seed)).split(batch_size)
    if bucketed is None:
        bucketed = BucketBatchSampler(lengths, batch_size, True, torch.Generator().manual_seed(seed))
    return {"random": padding_share([b.tolist() for b in random], lengths),
            "bucketed": padding_share(list(bucketed), lengths)}
