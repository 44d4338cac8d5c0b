"""Derived files under the cache dir (features, tokenizers, unpacked archives), each with the
sha256 it had when it was made written beside it (``<name>.sha256``). A cached file is used
only while it still has that digest; otherwise it is rebuilt, so a damaged or edited cache
never feeds a run. A cache that cannot be written is rebuilt in memory on every run instead.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import IO

import torch

from bench.data.files import sha256
from bench.errors import NotWritable
from bench.records.atomic import atomic_write, atomic_write_text, load_state_dict

log = logging.getLogger(__name__)


def digest_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def is_intact(path: Path) -> bool:
    """Whether ``path`` exists and still has the digest recorded when it was cached."""
    recorded = digest_path(path)
    if not (path.is_file() and recorded.is_file()):
        return False
    return recorded.read_text().strip() == sha256(path)


def discard(path: Path) -> None:
    """Remove a cache entry and its digest, as far as possible (what cannot be removed, such as
    a folder in the way, makes the next ``store`` fall back to memory)."""
    for stale in (path, digest_path(path)):
        with contextlib.suppress(OSError):
            stale.unlink(missing_ok=True)


def record_digest(path: Path) -> None:
    """Note the digest of a file just made (by this project or a library it called)."""
    atomic_write_text(digest_path(path), sha256(path) + "\n")


def store(path: Path, write: Callable[[IO[bytes]], None]) -> bool:
    """Write a cache entry atomically, then its digest. False (and a warning) when the cache
    cannot be written: the caller keeps what it computed in memory."""
    try:
        atomic_write(path, write)
        record_digest(path)
    except NotWritable as e:
        log.warning("not cached: %s; it is recomputed on every run", e)
        return False
    return True


def cached(path: Path, compute: Callable[[], dict]) -> tuple[dict, bool]:
    """The tensors cached at ``path`` while they keep the digest they were cached with, else
    computed (and cached when the cache can be written). Returns ``(tensors, was_cached)``."""
    if is_intact(path):
        try:
            return load_state_dict(path), True
        except Exception:  # noqa: BLE001 - an unreadable cache entry is recomputed
            pass
    discard(path)
    value = compute()
    store(path, lambda f: torch.save(value, f))
    return value, False
