"""User-facing errors: one line that says what is wrong and how to fix it; and, for what no
check foresaw, what a command was working on and where its traceback goes."""

from __future__ import annotations

import os
import tempfile
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path


class BenchError(Exception):
    """A mistake in the user's input (config, data, paths). The CLI prints it as one line and
    exits non-zero; it is never shown as a traceback."""


class RunFailed(Exception):
    """A run started and then failed (NaN loss, crash); its record says why."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill`, a scheduler's time limit): stops like Ctrl-C, so the run that was cut
    short gets an ``interrupted`` record and finished runs stay as they are."""


class NotWritable(BenchError):
    """A file cannot be written where it belongs (a read-only or missing folder, a full disk)."""


# What a command is working on, and where its last-resort handler writes a traceback: set by
# the commands (``working_on``, ``log_errors_to``), read by ``bench.cli``'s last resort.
_WORK: ContextVar[tuple[str, ...]] = ContextVar("mhab_work", default=())
_LOG_DIR: ContextVar[Path | None] = ContextVar("mhab_log_dir", default=None)


@contextmanager
def working_on(what: str) -> Iterator[None]:
    """Name the input being processed (``reading results/x/runs/y/record.json``) for as long as
    the block runs, so an unexpected error can say where it happened."""
    token = _WORK.set((*_WORK.get(), what))
    try:
        yield
    except Exception as e:
        if not hasattr(e, "mhab_work"):  # the innermost work, kept for the last resort
            e.mhab_work = what
        raise
    finally:
        _WORK.reset(token)


def current_work(exc: BaseException | None = None) -> str | None:
    """What was being worked on when ``exc`` was raised (else now)."""
    if exc is not None and getattr(exc, "mhab_work", None):
        return exc.mhab_work
    work = _WORK.get()
    return work[-1] if work else None


def log_errors_to(folder: str | Path) -> None:
    """Where an unexpected error's traceback goes (a command's results dir)."""
    _LOG_DIR.set(Path(folder))


def write_traceback(command: str, exc: BaseException | None = None) -> Path:
    """The current exception's traceback, in the command's results dir (else the temp dir)."""
    folder = _LOG_DIR.get()
    candidates = [folder / "errors"] if folder else []
    candidates.append(Path(tempfile.gettempdir()) / "mhab-errors")
    text = f"mhab {command}, while {current_work(exc) or 'starting'}\n\n{traceback.format_exc()}"
    for target in candidates:
        try:
            target.mkdir(parents=True, exist_ok=True)
            path = target / f"{time.strftime('%Y%m%d-%H%M%S')}-{command}-{os.getpid()}.log"
            path.write_text(text)
            return path
        except OSError:
            continue
    return Path("(nowhere: no writable folder)")
