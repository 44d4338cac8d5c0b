"""What the engine needs from a task adapter, and the shared classification adapter.

An adapter owns what is specific to its modality: data, the frontend that turns inputs into
tokens or steps, the head, and the metric. The engine never looks inside a batch itself.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    RandomSampler,
    SequentialSampler,
    TensorDataset,
)

from bench.data.batching import BATCHINGS, BucketBatchSampler, TokenBatchSampler, padding_shares
from bench.errors import BenchError
from bench.records.attention_examples import AttentionExample, PatchGridExample
from models.inputs import InputKind

Batch = tuple[Tensor, ...]


class BatchDataset(Dataset):
    """A dataset indexed by a whole batch at once: ``dataset[indices]`` is the collated batch.
    ``TensorDataset`` is one; an adapter subclasses this for data that needs more than
    stacking (padding, say) and does that work once, not on every step."""

    def __getitem__(self, indices: list[int]) -> Batch:
        raise NotImplementedError

    def example_lengths(self) -> Tensor | None:
        """Each example's length, for length-bucketed batches; None: all the same length."""
        return None


SPLITS = ("train", "val", "test")


def split_sizes(key: str, sizes: dict | None, default: dict[str, int]) -> dict[str, int]:
    """A generated dataset's split sizes: ``default`` when unset, else exactly train, val, test."""
    if sizes is None:
        return dict(default)
    if sorted(sizes) != sorted(SPLITS):
        raise BenchError(f"{key} must name exactly train, val and test, got {', '.join(sizes) or 'none'}; "
                         f"e.g. {key}={{train:1000,val:100,test:100}}")
    return {split: int(sizes[split]) for split in SPLITS}


@dataclass
class Splits:
    train: Dataset
    val: Dataset
    test: Dataset
    info: dict[str, Any] = field(default_factory=dict)

    def check_not_empty(self) -> None:
        for name in ("train", "val", "test"):
            if len(getattr(self, name)) == 0:
                raise BenchError(f"the {name} split is empty; check the dataset files and split settings")


class Task(abc.ABC):
    """One benchmark task. Subclasses are built from ``conf/task/*.yaml`` via ``_target_``."""

    metric_name: str = "metric"
    higher_is_better: bool = True

    def __init__(self, name: str, dataset: str, data_dir: str | None, cache_dir: str) -> None:
        self.name = name
        self.dataset = dataset
        self.data_dir = data_dir
        self.cache_dir = cache_dir

    @abc.abstractmethod
    def load(self, seed: int) -> Splits:
        """Read (or build and cache) the train/val/test splits."""

    def data_fingerprint(self) -> str | None:
        """What identifies the data beyond the config, for data that can change under the same
        config (a user's folder): a digest, cheap to compute before anything is loaded. Resume
        and tables treat runs on other data as other experiments. None: the config fixes the
        data (a generated set, or a shipped one whose files are checked against checksums)."""
        return None

    def train_classes(self, splits: Splits) -> Tensor | None:
        """One class label per training example, so that a training subset
        (``task.train_fraction``) keeps each class's share; None: the task has no classes."""
        return None

    @abc.abstractmethod
    def input_kind(self, splits: Splits) -> InputKind:
        """What this task hands a model (``models.inputs``): the shape of a batch's inputs
        and what the task needs back."""

    def loader(self, dataset: Dataset, batch_size: int, shuffle: bool, seed: int,
               num_workers: int = 0, batching: str = "random", max_tokens: int | None = None) -> DataLoader:
        """Batches of ``dataset``; ``batching="bucketed"`` groups examples of similar length
        (``bench.data.batching``), in training and in evaluation, where the task puts outputs
        back in order by each batch's index column. ``max_tokens`` (training batches only)
        sizes each bucketed batch by padded positions instead of ``batch_size``."""
        generator = torch.Generator().manual_seed(seed)
        lengths = self._lengths(dataset, batching, max_tokens)
        if batching == "bucketed":
            by_tokens = max_tokens is not None and shuffle
            sampler = (self._token_sampler(lengths, max_tokens, generator) if by_tokens
                       else BucketBatchSampler(lengths, batch_size, shuffle, generator))
            return DataLoader(dataset, sampler=sampler, batch_size=None, num_workers=num_workers,
                              persistent_workers=num_workers > 0)
        if isinstance(dataset, BatchDataset | TensorDataset):
            # A batch of in-memory tensors is one indexing op per tensor, not one per sample
            # plus a collate: the same batches, in the same order, for a fraction of the cost.
            order = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
            return DataLoader(dataset, sampler=BatchSampler(order, batch_size, drop_last=False),
                              batch_size=None, generator=generator, num_workers=num_workers,
                              persistent_workers=num_workers > 0)
        return DataLoader(
            dataset, batch_size=batch_size, shuffle=shuffle, generator=generator,
            num_workers=num_workers,
            persistent_workers=num_workers > 0,
        )

    def batching_info(self, dataset: Dataset, batching: str, batch_size: int, seed: int,
                      max_tokens: int | None = None) -> dict:
        """What the record says of the training batches: the batching and, for examples of
        varying length, one epoch's padding share (padded / all positions) both ways."""
        lengths = self._lengths(dataset, batching, max_tokens)
        info: dict[str, Any] = {"mode": batching}
        by_tokens = None
        if max_tokens is not None:
            by_tokens = self._token_sampler(lengths, max_tokens, torch.Generator().manual_seed(seed))
            info.update(max_tokens=max_tokens, batches_per_epoch=len(by_tokens))
        if lengths is not None:
            info["padding_share"] = padding_shares(lengths, batch_size, seed, by_tokens)
        return info

    def _lengths(self, dataset: Dataset, batching: str, max_tokens: int | None = None) -> Tensor | None:
        if batching not in BATCHINGS:
            raise BenchError(f"unknown trainer.batching '{batching}'; choose one of {', '.join(BATCHINGS)}")
        if max_tokens is not None and batching != "bucketed":
            raise BenchError(f"trainer.max_tokens={max_tokens} sizes bucketed batches: add "
                             f"trainer.batching=bucketed, or drop trainer.max_tokens")
        lengths = dataset.example_lengths() if isinstance(dataset, BatchDataset) else None
        if batching == "bucketed" and lengths is None:
            raise BenchError(f"trainer.batching=bucketed needs examples of varying length; task "
                             f"'{self.name}' (dataset '{self.dataset}') has none: use "
                             f"trainer.batching=random")
        return lengths

    @staticmethod
    def _token_sampler(lengths: Tensor, max_tokens: int, generator: torch.Generator) -> TokenBatchSampler:
        try:
            return TokenBatchSampler(lengths, max_tokens, generator)
        except ValueError:
            longest = int(lengths.max())
            raise BenchError(f"trainer.max_tokens={max_tokens} is less than the longest training "
                             f"example ({longest} positions): raise it to at least {longest}") from None

    @staticmethod
    def to_device(batch: Batch, device: torch.device) -> Batch:
        return tuple(t.to(device, non_blocking=True) for t in batch)

    def model_inputs(self, batch: Batch) -> Batch:
        """The model's positional inputs from a batch (all but the targets by default)."""
        return batch[:-1]

    def augment(self, batch: Batch) -> Batch:
        """Training-time augmentation on a batch already on the device."""
        return batch

    def attention_example(self, model: nn.Module, splits: Splits,
                          device: torch.device) -> AttentionExample | None:
        """Per-head attention weights on one real test example, for the report; None when the
        model has none to show."""
        return None

    @abc.abstractmethod
    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        """Mean training loss of one batch."""

    def infer(self, model: nn.Module, inputs: Batch) -> object:
        """What inference means for this task (timed as inference throughput)."""
        return model(*inputs)

    @abc.abstractmethod
    def evaluate(self, model: nn.Module, loader: DataLoader, device: torch.device,
                 final: bool = False) -> dict:
        """``{"metric": ..., "loss": ...}`` over a whole split; ``final`` marks the test
        evaluation, where a task may add details (kept in the record as ``test_details``)."""


def metric_by_length(lengths: list[int], edges: tuple[int, ...], unit: str, metric: str,
                     score: Callable[[list[int]], float]) -> dict:
    """The test metric per bucket of input length, the record detail every task that has
    lengths emits (``test_details["metric_by_length"]``) and the report draws: buckets
    ``1-edges[0]``, ..., ``edges[-1]+1`` and up, each scored by ``score(member indices)``;
    empty buckets are left out."""
    bounds = [0, *edges, math.inf]
    buckets = []
    for low, high in zip(bounds[:-1], bounds[1:], strict=True):
        members = [i for i, n in enumerate(lengths) if low < n <= high]
        if members:
            label = f"{low + 1}-{high}" if high != math.inf else f"{low + 1}+"
            buckets.append({"length": label, "count": len(members), "value": score(members)})
    return {"unit": unit, "metric": metric, "buckets": buckets}


class ClassificationTask(Task):
    """Cross-entropy training and accuracy, for any task whose batch is (*inputs, labels)."""

    metric_name = "accuracy"

    def __init__(self, *args, label_smoothing: float = 0.0, mixup_alpha: float = 0.0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.label_smoothing = label_smoothing
        self.mixup_alpha = mixup_alpha

    def train_classes(self, splits: Splits) -> Tensor | None:
        """The labels: the last tensor of a batch, here of the whole training split."""
        train = splits.train
        return train.tensors[-1] if isinstance(train, TensorDataset) else None

    @torch.no_grad()
    def attention_example(self, model: nn.Module, splits: Splits,
                          device: torch.device) -> PatchGridExample | None:
        """The cls token's last-layer attention over the patch grid, per head, for the first
        test example (models with a ``cls_attention_grid``: the ViT and the AST)."""
        if not hasattr(model, "cls_attention_grid"):
            return None
        item = splits.test[0]
        x = item[0][None].to(device)
        return PatchGridExample(input=item[0].cpu(), label=int(item[-1]),
                                heads=model.cls_attention_grid(x)[0].cpu())

    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        inputs, labels = self.model_inputs(batch), batch[-1]
        if not (self.mixup_alpha and model.training):
            return F.cross_entropy(model(*inputs), labels, label_smoothing=self.label_smoothing)
        # Mixup (Zhang et al., 2018) in timm's "batch" mode: one Beta(a, a) weight per batch,
        # each sample blended with the batch reversed. Written out because timm's Mixup needs
        # an even batch, and the engine keeps the last partial batch so every sample is seen.
        lam = float(np.random.beta(self.mixup_alpha, self.mixup_alpha))
        logits = model(*self.mix_inputs(inputs, lam))
        loss = lambda y: F.cross_entropy(logits, y, label_smoothing=self.label_smoothing)
        return lam * loss(labels) + (1 - lam) * loss(labels.flip(0))

    def mix_inputs(self, inputs: Batch, lam: float) -> Batch:
        """Blend each sample's input with the reversed batch's (the first input; the rest,
        such as lengths, kept)."""
        x, *rest = inputs
        return (lam * x + (1 - lam) * x.flip(0), *rest)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, loader: DataLoader, device: torch.device,
                 final: bool = False) -> dict:
        correct, total, loss_sum = 0, 0, 0.0
        for batch in loader:
            batch = self.to_device(batch, device)
            logits = model(*self.model_inputs(batch))
            labels = batch[-1]
            loss_sum += F.cross_entropy(logits, labels, reduction="sum").item()
            correct += (logits.argmax(-1) == labels).sum().item()
            total += labels.numel()
        return {"metric": correct / max(total, 1), "loss": loss_sum / max(total, 1)}
