"""Atomic writes: a temp file in the same folder, fsync, then rename over the target, so a
crash leaves either the old file or the new one, never half of one."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import torch

from bench.errors import NotWritable


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], None]) -> Path:
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise NotWritable(f"cannot write {path} ({e.strerror}); make {path.parent} writable or "
                          f"choose another folder") from None
    try:
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as e:  # a full disk, or a folder where the file goes
            raise NotWritable(f"cannot write {path} ({e.strerror}); remove what is in the way or "
                              f"choose another folder") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def atomic_write_json(path: str | Path, data: Any) -> Path:
    return atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def atomic_torch_save(path: str | Path, obj: Any) -> Path:
    return atomic_write(path, lambda f: torch.save(obj, f))


def load_state_dict(path: str | Path) -> dict:
    """Load a checkpoint this project wrote; ``weights_only`` so no pickled code runs."""
    return torch.load(path, map_location="cpu", weights_only=True)
