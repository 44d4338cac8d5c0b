"""Checks of the places a config names, before anything is written there."""

from __future__ import annotations

import os
from pathlib import Path

from bench.errors import BenchError


def check_results_dir(path: str) -> None:
    """Hydra writes its logs under results_dir before a run starts; say plainly when it cannot."""
    target = Path(path).expanduser()
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BenchError(f"cannot create results_dir '{path}' ({e.strerror}); "
                         f"pass a writable results_dir=PATH") from None
    if not os.access(target, os.W_OK | os.X_OK):
        raise BenchError(f"results_dir '{path}' is not writable; pass results_dir=PATH")
