"""Mean attention distance per head: how far each head looks (Dosovitskiy et al. 2021, the
ViT paper's Fig. 7), measured on the test set for every model that can show its self-attention.

For one query token, the distance is the attention-weighted mean of its distances to the keys,
in the input's own units (patches on the grid, tokens, frames) as the model places its tokens
(``models.transformer.SelfAttentionMaps``). Tokens without a place (the cls token, padding)
are neither queries nor keys here; each query's weights over the placed keys are renormalised
to sum to one. A head's mean distance is the mean over every placed query of the test set;
``uniform`` is what a head attending evenly to every placed key would get.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor, nn

from models.transformer import SelfAttentionMaps


def distance_sums(observed: SelfAttentionMaps) -> tuple[Tensor, int]:
    """Per layer and head, the sum over the batch's placed queries of their mean attention
    distance: ((layers, heads), number of placed queries)."""
    distance, placed = _distances(observed.coordinates)
    sums = []
    for weights in observed.maps:
        w = weights.float() * placed[:, None, None, :]
        w = w / w.sum(-1, keepdim=True).clamp_min(torch.finfo(w.dtype).tiny)
        per_query = (w * distance[:, None]).sum(-1)  # (B, H, L)
        sums.append((per_query * placed[:, None, :]).sum((0, 2)))
    return torch.stack(sums), int(placed.sum())


def _distances(coordinates: Tensor) -> tuple[Tensor, Tensor]:
    """Every pair's distance (B, L, L) and which tokens are placed (B, L)."""
    coordinates = coordinates.float()
    placed = ~coordinates.isnan().any(-1)
    where = coordinates.nan_to_num(0.0)
    return torch.cdist(where, where), placed


def uniform_sum(coordinates: Tensor) -> float:
    """The sum over placed queries of the mean distance a head attending evenly to every
    placed key would have: the reference a spread of heads is read against."""
    distance, placed = _distances(coordinates)
    keys = placed[:, None, :].float()
    per_query = (distance * keys).sum(-1) / keys.sum(-1).clamp_min(1)
    return float((per_query * placed).sum())


@torch.no_grad()
def mean_attention_distance(model: nn.Module, batches: Iterable[tuple[Tensor, ...]]) -> dict | None:
    """``{unit, queries, per_layer_head: [[distance of head h in layer l]]}`` over ``batches``
    of model inputs; None for a model without ``self_attention_maps`` (the RNNs)."""
    if not hasattr(model, "self_attention_maps"):
        return None
    total, queries, uniform, unit = None, 0, 0.0, None
    for inputs in batches:
        observed = model.self_attention_maps(*inputs)
        sums, count = distance_sums(observed)
        total = sums if total is None else total + sums
        queries, unit = queries + count, observed.unit
        uniform += uniform_sum(observed.coordinates)
    if not queries:
        return None
    return {"unit": unit, "queries": queries, "per_layer_head": (total / queries).cpu().tolist(),
            "uniform": uniform / queries}
