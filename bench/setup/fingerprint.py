"""A run's code beyond its config: the source of the model family's module and the task's
module (the project's own or a user's, wherever they are imported from), each as a short
sha256 of the file. The config hash says *what* was asked; this says *which code* answered:
a rerun whose code differs from the record it would resume is not skipped silently
(``bench.experiment``), and tables and reports say where one comparison mixes codes. The
project's engine is covered by the git revision each record carries."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Mapping

from bench.setup.build import locate

# The config sections whose ``_target_`` names the code a run's numbers depend on, beside the engine.
ROLES = ("model", "task")


def source_fingerprint(config: Mapping) -> dict[str, dict[str, str]]:
    """``{role: {"module": name, "sha256": 12 hex}}`` for the model's and the task's code."""
    found = {}
    for role in ROLES:
        target = (config.get(role) or {}).get("_target_")
        if not target:
            continue
        module = inspect.getmodule(locate(target, f"{role}._target_"))  # where it is defined
        try:
            source = inspect.getsource(module).encode()
        except (OSError, TypeError):  # no source to read (a compiled module): nothing to compare
            continue
        found[role] = {"module": module.__name__, "sha256": hashlib.sha256(source).hexdigest()[:12]}
    return found


def changed(recorded: dict | None, current: dict) -> list[str]:
    """The modules whose source differs between a record's fingerprint and the current one
    (none when the record has no fingerprint: it was made before they were kept, and its git
    revision stands for its code)."""
    if not recorded:
        return []
    return [current[role]["module"] for role in current
            if (recorded.get(role) or {}).get("sha256") != current[role]["sha256"]]
