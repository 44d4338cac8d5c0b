"""A task's settings for each model family, and the scale axis.

A task's yaml may hold ``models.<family>``: that family's settings on this task (depth,
dropout, bidirectional...), and ``models.<family>.scales.<scale>``: what changes at another
``scale=`` (the reference family's width and depth). A model yaml reads them through
``${task_model:KEY,DEFAULT}``, so a command-line ``model.KEY=`` still wins: it replaces the
interpolation. Widths of the families sized by ``match_params`` are not kept anywhere: the
build computes them (``bench.setup.matching``).
"""

from __future__ import annotations

from typing import Any

from omegaconf import Container, DictConfig, OmegaConf

from bench.errors import BenchError

# The scale every task's ``models`` settings describe; other scales are named in ``scales``.
DEFAULT_SCALE = "s"


def family_settings(root: Container, family: str | None) -> dict[str, Any]:
    settings = OmegaConf.select(root, f"task.models.{family}", default=None) if family else None
    return settings if isinstance(settings, DictConfig) else {}


def task_model_setting(key: str, default: Any = None, *, _parent_: Container, _root_: Container) -> Any:
    """The task's ``key`` for the family of the model node holding the interpolation, at the
    run's scale; ``default`` where the task says nothing."""
    settings = family_settings(_root_, _parent_.get("family"))
    scales = settings.get("scales") or {}
    at_scale = scales.get(_root_.get("scale", DEFAULT_SCALE)) or {}
    if key in at_scale:
        return at_scale[key]
    return settings.get(key, default)


OmegaConf.register_new_resolver("task_model", task_model_setting, replace=True)


def scale_choices(cfg: DictConfig, family: str | None) -> list[str]:
    """The scales ``family`` has on ``cfg``'s task: the default and those its ``scales`` name."""
    scales = family_settings(cfg, family).get("scales") or {}
    return [DEFAULT_SCALE, *(name for name in scales if name != DEFAULT_SCALE)]


def check_task_models(cfg: DictConfig) -> None:
    """Every setting the task gives the model's family is one the model config has (a typo
    would be silently unread), and ``scale=`` is one the sized family (the reference, or the
    model itself when it is not matched) has on this task: a scale nobody defines would
    silently run the default size."""
    settings = family_settings(cfg, cfg.model.get("family"))
    given = [k for k in settings if k != "scales"]
    given += [k for at_scale in (settings.get("scales") or {}).values() for k in (at_scale or {})]
    for key in given:
        if key not in cfg.model:
            raise BenchError(f"task.models.{cfg.model.family}.{key} is not a setting of "
                             f"model={cfg.model.name}, so it would be unread; check the spelling, or "
                             f"read it in the model's yaml ({key}: ${{task_model:{key},DEFAULT}})")
    scale = cfg.get("scale", DEFAULT_SCALE)
    sized = cfg.get("reference") if cfg.model.get("match_params") else cfg.model
    family = sized.get("family") if sized is not None else None
    choices = scale_choices(cfg, family)
    if scale not in choices:
        raise BenchError(f"scale={scale} is not a size of {family} on task={cfg.task.name}; choose one "
                         f"of {', '.join(choices)} (or add it under task.models.{family}.scales)")
