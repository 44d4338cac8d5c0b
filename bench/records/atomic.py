"""Atomic writes: a temp file in the same folder, fsync, then rename over the target, so a
crash leaves either the old file or the new one, never half of one."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import torch

from bench.errors import NotWritable

# Free space under which a failed torch.save is taken for a full disk.
FULL_DISK_BYTES = 1 << 20


def _mode_of_a_new_file() -> int:
    """What ``open(path, "w")`` would give a new file: 0666 less the umask (mkstemp gives 0600,
    which hides records, tables and reports from colleagues sharing a results dir)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


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
                os.fchmod(f.fileno(), _mode_of_a_new_file())  # mkstemp's 0600, as open() would
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
    def save(f: IO[bytes]) -> None:
        try:
            torch.save(obj, f)
        except RuntimeError as e:  # torch's writer reports a full disk so ("enforce fail at ...")
            full = shutil.disk_usage(Path(path).parent).free < FULL_DISK_BYTES
            raise OSError(errno.ENOSPC if full else errno.EIO,
                          os.strerror(errno.ENOSPC) if full else f"torch.save failed: {e}") from e

    return atomic_write(path, save)


def load_state_dict(path: str | Path) -> dict:
    """Load a checkpoint this project wrote; ``weights_only`` so no pickled code runs."""
    return torch.load(path, map_location="cpu", weights_only=True)
