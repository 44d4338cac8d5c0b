"""How numbers are written for reading, in tables, the report and the command line."""

from __future__ import annotations

import math


def fmt(value: float | None, digits: int = 4) -> str:
    """A number for reading: ``digits`` significant digits, thousands separated, never in
    scientific notation (11,010 rather than 1.101e+04; 0.0001234 as it is)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if abs(value) >= 10 ** digits:
        return f"{value:,.0f}"
    text = f"{value:.{digits}g}"
    if "e" not in text:
        return text
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))  # a tiny value, written out
    return f"{float(text):.{decimals}f}"


def compact(value: float) -> str:
    """A number in few characters, for axis ticks and sentences: 1.66k, 55k, 40M, 0.25."""
    for size, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.3g}{suffix}"
    return fmt(value, 3)


def whole(value: float | None) -> str:
    """A count, thousands separated: 1,433,274."""
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:,.0f}"


def scaled(divisor: float, digits: int = 4):
    """``fmt`` of the value divided by ``divisor`` (seconds as minutes, FLOPs as GFLOPs)."""
    return lambda value: fmt(None if value is None else value / divisor, digits)
