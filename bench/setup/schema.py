"""One mechanism that checks every setting before a run: a value against its declared type
(the annotation of the builder, adapter or settings dataclass that reads it) and its
``models.constraints.Range``; a key nothing reads is refused, with the closest real key as a hint.

Types understood: int, float (finite: NaN and infinity are refused), bool, str, ``Literal``
choices, ``X | None``, ``tuple[int, int]``, ``tuple[int, ...]``, ``list[X]``, ``dict[str, X]``,
``dict``, ``Any``, and any of these inside ``Annotated[..., Range(...)]``.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal

from omegaconf import DictConfig, ListConfig, OmegaConf

from bench.errors import BenchError
from models.constraints import Range

Hints = dict[str, Any]


def signature_hints(function: Callable, skip: int = 0, exclude: tuple[str, ...] = ()) -> tuple[Hints, bool]:
    """The annotated keyword parameters of ``function`` (a class: its ``__init__``), past the
    first ``skip`` and without ``exclude``; and whether it takes ``**kwargs`` too."""
    target = function.__init__ if inspect.isclass(function) else function
    params = list(inspect.signature(target).parameters.values())
    if inspect.isclass(function):
        params = params[1:]  # self
    hints = typing.get_type_hints(target, include_extras=True)
    named = [p for p in params[skip:] if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params)
    return {p.name: hints.get(p.name, Any) for p in named if p.name not in exclude}, takes_any


def dataclass_hints(cls: type) -> Hints:
    hints = typing.get_type_hints(cls, include_extras=True)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def required_fields(cls: type) -> tuple[str, ...]:
    """The fields of a settings dataclass without a default: every config must give them."""
    missing = (dataclasses.MISSING,)
    return tuple(f.name for f in dataclasses.fields(cls)
                 if f.default in missing and f.default_factory in missing)


def check_keys(prefix: str, values: Mapping, hints: Hints, what: str, extra_hint: str = "") -> None:
    """A key of ``values`` that ``hints`` lacks is a setting nothing reads."""
    for key in values:
        if key in hints:
            continue
        close = difflib.get_close_matches(str(key), list(hints), n=1, cutoff=0.6)
        hint = f"did you mean {prefix}{close[0]}?" if close else (extra_hint or "check the spelling")
        article = "an" if what[:1] in "aeiou" else "a"
        raise BenchError(f"{prefix}{key} is not {article} {what} setting, so it would be ignored; {hint}")


def check_section(prefix: str, values: Mapping, hints: Hints, what: str, takes_any: bool = False,
                  extra_hint: str = "", required: tuple[str, ...] = ()) -> None:
    """Every key known, every ``required`` key present, and every value of its declared type
    and range."""
    if not takes_any:
        check_keys(prefix, values, hints, what, extra_hint)
    for key in required:
        if key not in values:
            raise BenchError(f"{prefix}{key} is missing, and every run needs it; give it a value "
                             f"({prefix}{key}=...) or leave the config's default in place")
    for key, value in values.items():
        if key in hints:
            check_value(f"{prefix}{key}", value, hints[key])


def check_value(key: str, value: Any, hint: Any) -> None:
    """``value`` against ``hint``; a list or mapping is checked item by item, so the message
    names the item (``trainer.betas[0] must be >= 0 and < 1, got 2``)."""
    if isinstance(value, DictConfig | ListConfig):  # mhab speed checks its composed config
        value = OmegaConf.to_container(value, resolve=True)
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise BenchError(f"{key} must be a mapping of settings, got {value!r}")
        return check_section(f"{key}.", value, dataclass_hints(hint), key.rsplit(".", 1)[-1])
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    optional = [a for a in args if a is not type(None)] if origin in (typing.Union, types.UnionType) else []
    if value is not None and len(optional) == 1:  # X | None with a value: X
        return check_value(key, value, optional[0])
    if origin in (tuple, list) and isinstance(value, list | tuple):
        fixed = origin is tuple and not (len(args) == 2 and args[1] is Ellipsis)
        if fixed and len(value) != len(args):
            raise BenchError(f"{key} must be {_describe(hint)}, got {value!r}")
        for i, item in enumerate(value):
            check_value(f"{key}[{i}]", item, args[i] if fixed else (args[0] if args else Any))
        return None
    if origin is dict and isinstance(value, dict) and len(args) == 2:
        for name, item in value.items():
            check_value(f"{key}.{name}", item, args[1])
        return None
    problem = _problem(value, hint)
    if problem:
        raise BenchError(f"{key} must be {problem}, got {value!r}")
    return None


def _describe(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        return _describe(args[0])
    if origin in (typing.Union, types.UnionType):
        named = [_describe(a) for a in args if a is not type(None)]
        return " or ".join(named) + (" or null" if type(None) in args else "")
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if origin in (tuple, list):
        if origin is tuple and len(args) == 2 and args[1] is Ellipsis or origin is list:
            return f"a list of {_describe(args[0]) if args else 'values'}"
        return f"a list of {len(args)} ({', '.join(_describe(a) for a in args)})"
    if origin is dict or hint is dict:
        return "a mapping" + (f" of {_describe(args[1])}" if len(args) == 2 else "")
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(
        hint, getattr(hint, "__name__", str(hint)))


def _problem(value: Any, hint: Any) -> str | None:
    """What ``value`` must be instead, or None when it fits ``hint``."""
    if hint is Any or hint is inspect.Parameter.empty:
        return None
    check = _CHECKS.get(typing.get_origin(hint)) or _CHECKS.get(hint)
    # a type this schema does not know: the code that reads it checks it
    return check(value, hint) if check else None


def _annotated_problem(value: Any, hint: Any) -> str | None:
    base, *rules = typing.get_args(hint)
    if problem := _problem(value, base):
        return problem
    ranges = [rule for rule in rules if isinstance(rule, Range)]
    return next((rule.describe() for rule in ranges if value is not None and not rule.holds(value)), None)


def _union_problem(value: Any, hint: Any) -> str | None:
    args = typing.get_args(hint)
    if value is None and type(None) in args:
        return None
    if any(_problem(value, a) is None for a in args if a is not type(None)):
        return None
    fitting = [a for a in args if a is not type(None) and _same_kind(value, a)]
    return _problem(value, fitting[0]) if len(fitting) == 1 else _describe(hint)


def _literal_problem(value: Any, hint: Any) -> str | None:
    args = typing.get_args(hint)
    return None if value in args and type(value) in {type(a) for a in args} else _describe(hint)


def _sequence_problem(value: Any, hint: Any) -> str | None:
    args = typing.get_args(hint)
    if not isinstance(value, list | tuple):
        return _describe(hint)
    if typing.get_origin(hint) is list or (len(args) == 2 and args[1] is Ellipsis):
        inner = args[0] if args else Any
        return next((_describe(hint) for v in value if _problem(v, inner)), None)
    if len(value) != len(args) or any(_problem(v, a) for v, a in zip(value, args, strict=False)):
        return _describe(hint)
    return None


def _mapping_problem(value: Any, hint: Any) -> str | None:
    args = typing.get_args(hint)
    if not isinstance(value, dict):
        return _describe(hint)
    if len(args) == 2 and any(_problem(v, args[1]) for v in value.values()):
        return _describe(hint)
    return None


def _float_problem(value: Any, hint: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _describe(hint)
    return None if math.isfinite(value) else "a finite number"


def _is(kind: Callable[[Any], bool]) -> Callable[[Any, Any], str | None]:
    return lambda value, hint: None if kind(value) else _describe(hint)


# By a hint's origin (``Annotated[...]``, ``X | Y``) or, for plain types, by the hint itself.
_CHECKS: dict[Any, Callable[[Any, Any], str | None]] = {
    typing.Annotated: _annotated_problem,
    typing.Union: _union_problem,
    types.UnionType: _union_problem,
    Literal: _literal_problem,
    tuple: _sequence_problem,
    list: _sequence_problem,
    dict: _mapping_problem,
    bool: _is(lambda v: isinstance(v, bool)),
    int: _is(lambda v: isinstance(v, int) and not isinstance(v, bool)),
    float: _float_problem,
    str: _is(lambda v: isinstance(v, str)),
}


def _same_kind(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of the broad kind of ``hint`` (a number for a bounded number), so a
    union names the bound that failed rather than every alternative."""
    base = typing.get_args(hint)[0] if typing.get_origin(hint) is typing.Annotated else hint
    if base in (int, float):
        return isinstance(value, int | float) and not isinstance(value, bool)
    return False
