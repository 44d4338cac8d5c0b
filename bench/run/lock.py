"""One process at a time per experiment and seed: a run holds an exclusive ``fcntl`` lock on
``results_dir/locks/<config hash>-s<seed>.lock`` while it runs, so two sweeps over the same
results dir never run one job twice. The lock file names its holder (pid, host, start time).
The kernel releases the lock when its holder exits, however it exits, so a lock left by a
killed run is never stale: the next run takes it. (``flock`` needs a local or lock-aware
file system; on NFS without lockd two hosts may both take it.)
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from bench.errors import NotWritable


def lock_path(results_dir: str | Path, config_hash: str, seed: int) -> Path:
    return Path(results_dir) / "locks" / f"{config_hash}-s{seed}.lock"


def holder(path: Path) -> str:
    """Who holds (or last held) the lock at ``path``, in words."""
    try:
        info = json.loads(path.read_text())
        return f"pid {info['pid']} on {info['host']} since {info['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


def run_lock(results_dir: str | Path, config_hash: str, seed: int) -> contextlib.AbstractContextManager:
    """Hold the lock of this experiment and seed for the ``with`` block. Yields None when held
    by this process, or who holds it when another process does (the block must then skip)."""
    return file_lock(lock_path(results_dir, config_hash, seed))


@contextlib.contextmanager
def file_lock(path: Path, wait: bool = False) -> Iterator[str | None]:
    """Hold the exclusive lock of ``path`` for the ``with`` block: yields None when this process
    holds it, or who holds it when another process does; with ``wait``, waits its turn."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise NotWritable(f"cannot create the lock {path} ({e.strerror}); pass a writable "
                          f"results_dir=PATH") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield holder(path)
            return
        stamp = {"pid": os.getpid(), "host": socket.gethostname(),
                 "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(stamp).encode(), 0)
        yield None
    finally:
        os.close(fd)  # closing the descriptor releases the lock
