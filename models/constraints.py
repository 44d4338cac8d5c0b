"""Constraints a model builder or task adapter declares on its settings, in its signature:
``dim: Annotated[int, Range(ge=1)]``, ``dropout: Annotated[float, Range(ge=0, lt=1)]``, or a
``Literal`` of the choices. ``bench.setup.schema`` checks every config value against them before a
run starts; the types alone (int, float, bool, str, tuples, dicts, ``| None``) are checked too.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Range:
    """Bounds on a number: ``ge``/``gt`` below (inclusive / exclusive), ``le``/``lt`` above."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def describe(self) -> str:
        parts = [f"{op} {bound:g}" for op, bound in ((">=", self.ge), (">", self.gt), ("<=", self.le),
                                                     ("<", self.lt)) if bound is not None]
        return " and ".join(parts)

    def holds(self, value: float) -> bool:
        return ((self.ge is None or value >= self.ge) and (self.gt is None or value > self.gt)
                and (self.le is None or value <= self.le) and (self.lt is None or value < self.lt))


AT_LEAST_1 = Range(ge=1)
NON_NEGATIVE = Range(ge=0)
POSITIVE = Range(gt=0)
FRACTION = Range(ge=0, lt=1)  # dropout and the like: 0 included, 1 not
