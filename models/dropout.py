"""Dropout for every model family, with a cheaper mask on a CPU in a low precision.

torch's CPU dropout draws one random number per element (``bernoulli_``); in a bfloat16
training step of the Multi30k Transformer on matrix units (AMX) that drawing took more time
than all the matmuls. On a CPU in a low precision (a bfloat16 tensor, or CPU autocast on) the
mask here is cut from 16 random bits per element, four elements per 64-bit draw of the same
generator, so a seeded run repeats itself. Its keep probability is the nearest multiple of
1/65536 to ``1 - p``, and kept elements are scaled by the inverse of that probability, so the
expectation is exact. Float32 runs (and every CUDA run) take ``F.dropout`` unchanged, so their
numbers stay bit-identical to those published before this path existed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_LEVELS = 1 << 16  # 16 random bits per element


def packed_mask_applies(x: Tensor) -> bool:
    """Whether ``dropout`` cuts its mask from packed random bits for ``x``."""
    if x.device.type != "cpu":
        return False
    if x.dtype.is_floating_point and x.dtype.itemsize < 4:
        return True
    return torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu").itemsize < 4


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """``F.dropout(x, p, training)``; on a CPU in a low precision, with the packed-bit mask."""
    if not training or p == 0.0 or not packed_mask_applies(x):
        return F.dropout(x, p, training)
    dropped_levels = round(p * _LEVELS)
    if dropped_levels >= _LEVELS:
        return x * 0.0
    # Scaling after the mask, as a Python float, rounds each product once: a bfloat16 mask
    # holding 1 / keep would bias every kept element by the same rounding.
    return torch.where(packed_keep_mask(x, dropped_levels), x, 0.0) * (_LEVELS / (_LEVELS - dropped_levels))


def packed_keep_mask(x: Tensor, dropped_levels: int) -> Tensor:
    """A bool mask shaped like ``x``, True where an element is kept: where its 16 random bits,
    read as a signed number, are at least ``dropped_levels - 32768`` (so each element is
    dropped with probability ``dropped_levels / 65536``)."""
    draws = torch.empty((x.numel() + 3) // 4, dtype=torch.int64, device=x.device)
    bits = draws.random_(torch.iinfo(torch.int64).min, None).view(torch.int16)[: x.numel()]
    return bits.view(x.shape) >= dropped_levels - _LEVELS // 2


class Dropout(nn.Dropout):
    """``nn.Dropout`` through ``dropout``: a drop-in for every model family."""

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)
