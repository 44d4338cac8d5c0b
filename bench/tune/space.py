"""Search spaces: ``search/<task>.yaml`` (in ``conf/`` or on ``hydra.searchpath``) as Optuna
distributions, one space per model family: the ``shared`` keys, the same for every family,
plus the family's own under ``families`` (never a shared key again: one range per shared key).
A space is checked before any trial runs: something to search, every key a setting of the run
config, every range non-empty, and its ends, its choices and every value of a short integer
range allowed by the run's own checks (its schema and build rules, through ``validate``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from bench.errors import BenchError
from bench.setup.compose import config_dirs

Space = dict[str, BaseDistribution]


def space_file(task: str, searchpath: list[str] | None) -> Path:
    """The search space of ``task``: the last ``search/<task>.yaml`` on the search path (a
    user's own folder wins over ``conf/``, as Hydra's search path orders them)."""
    found = [folder / "search" / f"{task}.yaml" for folder in config_dirs(searchpath)]
    found = [path for path in found if path.is_file()]
    if not found:
        raise BenchError(f"no search space for task '{task}': write search/{task}.yaml in conf/ or in a "
                         f"folder on hydra.searchpath (the format: docs/tuning.md)")
    return found[-1]


def load_space(path: Path, family: str) -> Space:
    """The distributions of ``family`` in the space at ``path``, in the file's order."""
    try:
        raw = OmegaConf.load(path)
    except Exception as e:  # noqa: BLE001 - any parse error is the user's file
        raise BenchError(f"cannot read the search space {path} ({' '.join(str(e).split())})") from None
    unknown = set(raw) - {"shared", "families"}
    if not isinstance(raw, DictConfig) or unknown:
        raise BenchError(f"search space {path}: the top level holds 'shared' and 'families' only"
                         + (f", not {', '.join(sorted(map(str, unknown)))}" if unknown else ""))
    shared = dict(raw.get("shared") or {})
    own = dict((raw.get("families") or {}).get(family) or {})
    if overlap := sorted(set(map(str, shared)) & set(map(str, own))):
        raise BenchError(f"search space {path}: families.{family}.{overlap[0]} overrides the shared "
                         f"range; the keys the families share must have one range: keep it in shared "
                         f"only, or move it out of shared into every family")
    specs = {**shared, **own}
    if not specs:
        raise BenchError(f"search space {path} gives {family} nothing to search (shared and "
                         f"families.{family} are empty), so every trial would be the default recipe; "
                         f"add a key, e.g. trainer.lr: {{low: 1.0e-4, high: 1.0e-2, log: true}}")
    return {str(key): distribution(path, str(key), spec) for key, spec in specs.items()}


def distribution(path: Path, key: str, spec: Any) -> BaseDistribution:
    """One key's distribution from ``{low, high[, log, step]}`` or ``{choices: [...]}``."""
    where = f"search space {path}: {key}"
    if not isinstance(spec, DictConfig):
        raise BenchError(f"{where} must be {{low: A, high: B}} or {{choices: [...]}}, got {spec!r}")
    spec = OmegaConf.to_container(spec)
    if "choices" in spec:
        choices = spec.pop("choices")
        if spec or not isinstance(choices, list | ListConfig) or not choices:
            raise BenchError(f"{where}: choices must be a non-empty list, alone, got {choices!r}")
        return CategoricalDistribution(list(choices))
    if set(spec) - {"low", "high", "log", "step"} or not {"low", "high"} <= set(spec):
        raise BenchError(f"{where} must have low and high (and optionally log, step), got "
                         f"{', '.join(spec) or 'nothing'}")
    low, high = spec["low"], spec["high"]
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (low, high)):
        raise BenchError(f"{where}: low and high must be numbers, got {low!r} and {high!r}")
    if not low < high:
        raise BenchError(f"{where}: the range {low}..{high} is empty; give low < high")
    log = bool(spec.get("log", False))
    if log and low <= 0:
        raise BenchError(f"{where}: a log range needs low > 0, got {low}")
    if isinstance(low, int) and isinstance(high, int):
        return IntDistribution(low, high, log=log, step=int(spec.get("step") or 1))
    return FloatDistribution(float(low), float(high), log=log, step=spec.get("step"))


def as_override(key: str, value: Any) -> str:
    """``key=value`` as Hydra reads it back as the same value."""
    if isinstance(value, str):
        return f"{key}='{value}'"
    return f"{key}={value!r}"


# An integer range of at most this many values is checked value by value: a constraint that
# holds at both ends can fail between them (heads that must divide a width, say).
EVERY_VALUE_UP_TO = 64


def extremes(space: Space) -> list[dict[str, Any]]:
    """Value sets that together reach every end of every range, every choice, and every value
    of a short integer range: all lows, all highs, then each further value of each key."""
    def ends(d: BaseDistribution) -> list[Any]:
        if isinstance(d, CategoricalDistribution):
            return list(d.choices)
        if isinstance(d, IntDistribution) and not d.log and (d.high - d.low) // d.step < EVERY_VALUE_UP_TO:
            values = list(range(d.low, d.high + 1, d.step))
            return [values[0], values[-1], *values[1:-1]]
        return [d.low, d.high]

    options = {key: ends(d) for key, d in space.items()}
    points = [{k: v[0] for k, v in options.items()}, {k: v[min(1, len(v) - 1)] for k, v in options.items()}]
    for key, values in options.items():
        points += [{**points[0], key: value} for value in values[2:]]
    return points


def check_space(path: Path, space: Space, check: Callable[[list[str]], None]) -> None:
    """Every value set of ``extremes`` through ``check`` (compose and validate the run with
    these overrides); its one-line error is prefixed with the file it came from."""
    for point in extremes(space):
        try:
            check([as_override(k, v) for k, v in point.items()])
        except BenchError as e:
            raise BenchError(f"search space {path}: {e}") from None
