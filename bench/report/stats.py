"""Is one model better than another, over seeds? Welch's t-test of the difference of the means
with its 95% interval, and Holm's correction across the comparisons of one claim.

Two 95% intervals can overlap while the difference is significant, so a verdict from a test of
the difference says more than one from overlapping intervals (Welch rather than Student: the
models' seed variances differ).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

LEVEL = 0.95


@dataclass(frozen=True)
class Difference:
    """``a`` minus ``b``: the difference of the means, its interval, the test's p-value
    (``p_holm`` once corrected with the claim's other comparisons), seeds on each side."""

    diff: float
    low: float
    high: float
    p: float
    n_a: int
    n_b: int
    p_holm: float = math.nan

    def describe(self, digits: int = 3) -> str:
        if math.isnan(self.p):
            return f"difference {self.diff:+.{digits}g}, seeds {self.n_a} vs {self.n_b}: no test"
        p = self.p if math.isnan(self.p_holm) else self.p_holm
        name = "p" if math.isnan(self.p_holm) else "Holm-corrected p"
        return (f"difference {self.diff:+.{digits}g} (95% CI {self.low:+.{digits}g} to "
                f"{self.high:+.{digits}g}), Welch's t-test {name} = {p:.2g}, seeds {self.n_a} vs {self.n_b}")


def welch(a: Sequence[float], b: Sequence[float]) -> Difference:
    """Welch's t-test of mean(a) - mean(b) (scipy's ``ttest_ind(equal_var=False)``); no test
    (NaN p and interval) with fewer than two seeds on a side or no spread on either."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    diff = float(a.mean() - b.mean()) if len(a) and len(b) else math.nan
    if len(a) < 2 or len(b) < 2 or (a.std() == 0 and b.std() == 0):
        return Difference(diff, math.nan, math.nan, math.nan, len(a), len(b))
    with warnings.catch_warnings():  # a zero-variance side is a valid test, not a warning
        warnings.simplefilter("ignore", RuntimeWarning)
        result = stats.ttest_ind(a, b, equal_var=False)
        interval = result.confidence_interval(LEVEL)
    return Difference(diff, float(interval.low), float(interval.high), float(result.pvalue), len(a), len(b))


def holm(differences: list[Difference]) -> list[Difference]:
    """Holm's step-down correction across one claim's comparisons (those without a test are
    left out of the count). Hand-written: scipy has no Holm (its ``false_discovery_control``
    is Benjamini-Hochberg) and statsmodels would be a dependency for five lines."""
    tested = sorted((d.p, i) for i, d in enumerate(differences) if not math.isnan(d.p))
    adjusted, running = {}, 0.0
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * p))
        adjusted[i] = running
    return [replace(d, p_holm=adjusted.get(i, math.nan)) for i, d in enumerate(differences)]


def verdict(difference: Difference, claimed_positive: bool, alpha: float = 1 - LEVEL) -> str:
    """'supported' when the (corrected) test is significant in the claimed direction,
    'contradicted' when significant against it, 'inconclusive' otherwise (a single seed too)."""
    p = difference.p if math.isnan(difference.p_holm) else difference.p_holm
    if math.isnan(p) or p >= alpha:
        return "inconclusive"
    return "supported" if (difference.diff > 0) == claimed_positive else "contradicted"
