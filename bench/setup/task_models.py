"""A task's settings for each model family, and the scale axis.

A task's yaml may hold ``models.<family>``: that family's settings on this task (depth,
dropout, bidirectional...), and ``models.<family>.scales.<scale>``: what changes at another
``scale=`` (the reference family's width and depth). A model yaml reads them through
``${task_model:KEY,DEFAULT}``, so a command-line ``model.KEY=`` still wins: it replaces the
interpolation. A family the task names no settings for may declare whose it reads instead
(``task_settings: rnn`` in its yaml: a new recurrent family takes the RNNs' depth and direction
on every task). Widths of the families sized by ``match_params`` are not kept anywhere: the
build computes them (``bench.setup.matching``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import Container, OmegaConf

from bench.errors import BenchError
from bench.records.defaults import DEFAULT_SCALE  # other scales are named in ``scales``


def family_settings(root: Mapping, model: Mapping) -> tuple[str | None, Mapping]:
    """Whose settings on the config's task (composed, or resolved to plain data) a model reads,
    and those settings: its own family's where the task names them, else those of the family
    its ``task_settings`` declares; ``{}`` where the task names neither."""
    models = (root.get("task") or {}).get("models") or {}
    family = model.get("family")
    settings = models.get(family) if family else None
    if not isinstance(settings, Mapping) and model.get("task_settings"):
        family = model.get("task_settings")
        settings = models.get(family)
    return family, settings if isinstance(settings, Mapping) else {}


def task_model_setting(key: str, default: Any = None, *, _parent_: Container, _root_: Container) -> Any:
    """The task's ``key`` for the family of the model node holding the interpolation, at the
    run's scale; ``default`` where the task says nothing."""
    _, settings = family_settings(_root_, _parent_)
    scales = settings.get("scales") or {}
    at_scale = scales.get(_root_.get("scale", DEFAULT_SCALE)) or {}
    if key in at_scale:
        return at_scale[key]
    return settings.get(key, default)


OmegaConf.register_new_resolver("task_model", task_model_setting, replace=True)


def scale_choices(settings: Mapping) -> list[str]:
    """The scales a family's ``settings`` on a task give: the default and those ``scales`` names."""
    scales = settings.get("scales") or {}
    return [DEFAULT_SCALE, *(name for name in scales if name != DEFAULT_SCALE)]


def check_task_models(config: Mapping) -> None:
    """Every setting the task gives the model's family is one the model config has (a typo
    would be silently unread), and ``scale=`` is one the sized family (the reference, or the
    model itself when it is not matched) has on this task: a scale nobody defines would
    silently run the default size."""
    model = config["model"]
    family, settings = family_settings(config, model)
    given = [k for k in settings if k != "scales"]
    given += [k for at_scale in (settings.get("scales") or {}).values() for k in (at_scale or {})]
    borrowed = family != model.get("family")  # another family's settings: read only what it asks for
    for key in [] if borrowed else given:
        if key not in model:
            raise BenchError(f"task.models.{family}.{key} is not a setting of "
                             f"model={model['name']}, so it would be unread; check the spelling, or "
                             f"read it in the model's yaml ({key}: ${{task_model:{key},DEFAULT}})")
    scale = config.get("scale", DEFAULT_SCALE)
    sized = config.get("reference") if model.get("match_params") else model
    family, settings = family_settings(config, sized) if sized is not None else (None, {})
    choices = scale_choices(settings)
    if scale not in choices:
        raise BenchError(f"scale={scale} is not a size of {family} on task={config['task']['name']}; "
                         f"choose one of {', '.join(choices)} (or add it under task.models.{family}.scales)")
