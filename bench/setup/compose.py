"""Composing configs: ``conf/`` with a user's overrides, for every command that reads it
(``run``, ``speed``); below the CLI, so nothing imports the CLI to compose."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import OverrideParseException
from omegaconf import DictConfig, OmegaConf

from bench.errors import BenchError
from bench.records.record import config_hash

CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")


def config_dirs(searchpath: list[str] | None = None) -> list[Path]:
    """``conf/`` and the folders of ``hydra.searchpath`` (``file://`` and ``pkg://`` entries),
    where a user's own models, tasks and suites live."""
    dirs = [Path(CONF_DIR)]
    for entry in searchpath or []:
        scheme, _, where = str(entry).partition("://")
        if scheme == "file":
            dirs.append(Path(where))
        elif scheme == "pkg":
            import importlib.resources

            package, _, sub = where.partition("/")
            try:
                dirs.append(Path(str(importlib.resources.files(package))) / sub)
            except ModuleNotFoundError:
                continue  # Hydra says so when it composes
    return dirs


def group_choices(searchpath: list[str] | None, *groups: str) -> str:
    """``  group: choice, choice`` per group, one per line, for ``mhab run --help``; the
    choices of ``conf/`` and of every folder on ``hydra.searchpath``."""
    lines, folders = [], config_dirs(searchpath)
    for group in groups:
        choices = sorted({p.stem for folder in folders for p in (folder / group).glob("*.yaml")})
        lines.append(f"  {group}: {', '.join(choices)}")
    return "\n".join(lines)


# The help template (conf/config.yaml) lists the groups a user chooses through this resolver.
OmegaConf.register_new_resolver("mhab_choices", group_choices, replace=True)


def one_line(exc: Exception) -> str:
    """Hydra's composition errors span several lines; say the same in one."""
    text = str(exc).strip()
    missing_group = re.search(r"Could not find '([\w/]+)/([^']+)'", text)
    if missing_group:
        group, choice = missing_group.groups()
        block = text.split("Available options", 1)[-1].split("Config search path", 1)[0]
        options = [line.strip() for line in block.splitlines()[1:] if line.strip()]
        return f"unknown {group} '{choice}'; choose one of: {', '.join(options)}"
    bad_key = re.search(r"Could not override '([^']+)'", text)
    if bad_key:
        return (f"unknown config key '{bad_key.group(1)}'; "
                f"check the spelling against the resolved config")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return "; ".join(line for line in lines if not line.startswith(("full_key", "object_type")))


def parse_overrides(overrides: list[str]) -> list:
    """Hydra's parse of ``overrides``; one that does not parse is a one-line error naming it."""
    parser, parsed = OverridesParser.create(), []
    for text in overrides:  # one at a time, so the message names the one that does not parse
        try:
            parsed += parser.parse_overrides([text])
        except OverrideParseException as e:
            reason = str(e).strip().splitlines()[0]
            raise BenchError(f"cannot read the override {text!r} ({reason}); check its brackets and "
                             f"quotes, and quote a value with spaces or non-ASCII characters: "
                             f"'key=\"value\"'") from None
    return parsed


def _sweep_values(overrides: list[str]) -> list[list[str]]:
    """Each override as the list of ``key=value`` overrides it stands for (one unless it sweeps)."""
    values = []
    for override, text in zip(parse_overrides(overrides), overrides, strict=True):
        if override.is_sweep_override():
            key = override.get_key_element()
            values.append([f"{key}={v}" for v in override.sweep_string_iterator()])
            if not values[-1]:
                raise BenchError(f"the sweep {text!r} has no values, so there is nothing to run; "
                                 f"give {key} at least one (e.g. {key}=0 or 'seed=range(0,3)')")
        else:
            values.append([text])
    return values


def sweep_points(overrides: list[str]) -> list[list[str]]:
    """Concrete override lists that together use every value of every sweep: the first value
    of each sweep, then each further value of one sweep with the others at their first. Each
    is validated before anything runs, so one impossible value stops the sweep up front."""
    values = _sweep_values(overrides)
    first = [options[0] for options in values]
    points = [first]
    for i, options in enumerate(values):
        points += [first[:i] + [option] + first[i + 1:] for option in options[1:]]
    return points


def sweep_jobs(overrides: list[str]) -> list[list[str]]:
    """The override list of every run ``mhab run -m OVERRIDES`` starts: the product of the
    suite's sweeps and the command line's, as Hydra's basic sweeper makes it."""
    return [list(job) for job in itertools.product(*_sweep_values([*suite_sweeps(overrides), *overrides]))]


def suite_sweeps(overrides: list[str]) -> list[str]:
    """The sweeps a suite adds to a multirun (its ``hydra.sweeper.params``) as overrides,
    without those the command line sets itself. The suite is read on its own: the command
    line's other keys may only exist once the suite's sweeps have chosen a task."""
    chosen = [o for o in sweep_points(overrides)[0] if o.split("=", 1)[0] in ("suite", "hydra.searchpath")]
    cfg = compose_config("config", chosen, "run", hydra_config=True)
    params = OmegaConf.select(cfg, "hydra.sweeper.params") or {}
    given = {override.key_or_group for override in parse_overrides(overrides)}
    return [f"{key}={value}" for key, value in params.items() if key not in given]


def compose_config(name: str, overrides: list[str], command: str, hydra_config: bool = False) -> DictConfig:
    """Compose ``conf/<name>.yaml`` with ``overrides``; a mistake in them is a one-line error."""
    from hydra import compose, initialize_config_dir

    parse_overrides(overrides)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3", job_name="mhab"):
            cfg = compose(name, overrides=overrides, return_hydra_config=hydra_config)
    except Exception as e:  # noqa: BLE001 - any composition error is the user's override
        raise BenchError(one_line(e) + f" (see 'mhab {command} --help')") from None
    finally:
        GlobalHydra.instance().clear()
    return mirror_model_overrides(cfg, overrides)


# What names a model rather than sizes or shapes it: never carried over to the reference.
IDENTITY_KEYS = ("_target_", "name", "family", "match_params")


def mirror_model_overrides(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """``cfg`` whose reference model (what a matched model is sized against) takes the values
    the overrides give the model, for every key the reference has: in ``model=attention,gru
    model.depth=2`` the GRU is matched to the 2-layer attention model the same sweep trains,
    not to the default one. Called on every composed run config (``mhab run``'s own, through
    Hydra, and ``compose_config``'s)."""
    reference, model = cfg.get("reference"), cfg.get("model")
    if not isinstance(reference, DictConfig) or not isinstance(model, DictConfig) \
            or not model.get("match_params"):
        return cfg
    for override in parse_overrides(overrides):
        group, _, key = override.key_or_group.partition(".")
        if group == "model" and key and "." not in key and key not in IDENTITY_KEYS and key in reference:
            reference[key] = model[key]
    return cfg


def resolved_config(cfg: DictConfig) -> dict[str, Any]:
    """A composed config as plain data, interpolations resolved: what a record holds and hashes
    (``bench.records.record.config_hash``)."""
    return OmegaConf.to_container(cfg, resolve=True)


def experiment_hash(cfg: DictConfig) -> str:
    """The config hash that names a composed config's experiment."""
    return config_hash(resolved_config(cfg))
