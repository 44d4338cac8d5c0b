"""Parameter matching, computed: a model with ``match_params: true`` and no width of its own
gets the width (``model.dim``) whose parameter count is nearest the reference model's
(``reference``: by default the attention model, at the same task, data and scale). Both are
counted on the meta device: nothing is allocated, and the random stream is put back."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from bench.errors import BenchError
from bench.run.measure import count_parameters
from models.inputs import Built, InputKind

log = logging.getLogger(__name__)

WIDTH_KEY = "dim"  # the setting matching sizes, in every family that is matched
TOLERANCE = 0.02  # the relative gap a computed width should reach
MAX_WIDTH = 1 << 16


def count_on_meta(builder: Callable[..., Built], inputs: InputKind, settings: dict[str, Any]) -> int:
    """Trainable parameters of ``builder(inputs, **settings)``, built on the meta device."""
    state = torch.get_rng_state()
    try:
        with torch.device("meta"):
            module = builder(inputs, **settings).module
    finally:
        torch.set_rng_state(state)
    return count_parameters(module)


def nearest_width(count: Callable[[int], int | None], target: int) -> tuple[int, int]:
    """The width whose count is nearest ``target``, and that count. ``count`` grows with the
    width and is None where a width is impossible for the family (heads that do not divide
    it, say): those are stepped over."""

    def valid_at_or_above(width: int) -> tuple[int, int] | None:
        for w in range(width, min(width + 64, MAX_WIDTH + 1)):
            if (n := count(w)) is not None:
                return w, n
        return None

    low = valid_at_or_above(1)
    if low is None:
        raise BenchError("no width from 1 to 64 builds this model; check its settings")
    if low[1] >= target:
        return low
    high = low
    while high[1] < target:  # double until the count passes the target
        if high[0] * 2 > MAX_WIDTH or (nxt := valid_at_or_above(high[0] * 2)) is None:
            return high
        low, high = high, nxt
    while high[0] - low[0] > 1:  # low's count < target <= high's
        found = valid_at_or_above((low[0] + high[0]) // 2)
        if found is None or found[0] >= high[0]:
            break
        low, high = (found, high) if found[1] < target else (low, found)
    return min((low, high), key=lambda pair: abs(pair[1] - target))


def match_parameters(builder: Callable[..., Built], settings: dict[str, Any],
                     reference_builder: Callable[..., Built], reference_settings: dict[str, Any],
                     inputs: InputKind, name: str) -> dict[str, Any]:
    """What the record says of a matched model: the reference's count (``target``), the width
    (computed where ``settings`` has none) and its count, and their relative gap."""
    target = count_on_meta(reference_builder, inputs, reference_settings)

    def count(width: int) -> int | None:
        try:
            return count_on_meta(builder, inputs, {**settings, WIDTH_KEY: width})
        except ValueError:  # a width the family cannot take
            return None

    given = settings.get(WIDTH_KEY)
    if given is None:
        width, params = nearest_width(count, target)
    else:
        width, params = given, count(given) or 0
    gap = (params - target) / target
    if given is None and abs(gap) > TOLERANCE:
        log.warning("%s: the nearest width (model.%s=%d) has %s parameters, %+.1f%% from the reference's "
                    "%s: not within %.0f%%", name, WIDTH_KEY, width, f"{params:,}", 100 * gap,
                    f"{target:,}", 100 * TOLERANCE)
    return {"target": target, "params": params, "gap": round(gap, 5), "width": width,
            "computed": given is None}
