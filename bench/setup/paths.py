"""Checks of the places a config names, before anything is written there."""

from __future__ import annotations

import os
from pathlib import Path

from bench.errors import BenchError


def check_results_dir(path: str) -> None:
    """Hydra writes its logs under results_dir before a run starts; say plainly when it cannot."""
    if not str(path).strip():
        raise BenchError("results_dir is empty; pass results_dir=PATH (runs, tables and Hydra's logs "
                         "go there)")
    target = Path(path).expanduser()
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BenchError(f"cannot create results_dir '{path}' ({e.strerror}); "
                         f"pass a writable results_dir=PATH") from None
    if not os.access(target, os.W_OK | os.X_OK):
        raise BenchError(f"results_dir '{path}' is not writable; pass results_dir=PATH")


def check_output_dir(path: str | Path, key: str) -> None:
    """Whether the folder a later step creates (Hydra's ``hydra.run.dir``) can be made: it is
    made and the folders this made removed again, so a refusal comes before anything runs."""
    target = Path(path).expanduser()
    made = []
    for folder in reversed([target, *target.parents]):
        if folder.exists():
            continue
        try:
            folder.mkdir()
        except OSError as e:
            raise BenchError(f"{key}={path} cannot be created ({e.strerror}); pass a writable "
                             f"results_dir=PATH, or {key}=PATH") from None
        made.append(folder)
    if not target.is_dir() or not os.access(target, os.W_OK | os.X_OK):
        raise BenchError(f"{key}={path} is not a writable folder; pass a writable results_dir=PATH, "
                         f"or {key}=PATH")
    for folder in reversed(made):
        folder.rmdir()
