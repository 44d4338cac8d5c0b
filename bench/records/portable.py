"""Records that can leave the machine that made them: no host name, and every path that
names this machine's folders (the results dir, the data root, the cache, the checkout, the
home folder) written as a placeholder. The config hash leaves these keys out, so a portable
record is the same experiment as before: it resumes, groups and estimates as it did.

``mhab publish`` writes the records of a results dir this way before they are committed
(``results/reference``); readers never need the paths, since a record's own folder is where
it was read from (``read_record``).
"""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.records.record import RunRecord, config_hash

# The config keys that hold where things are (``UNHASHED_KEYS`` leaves them out of the hash),
# each with the placeholder a portable record holds instead.
PLACEHOLDERS = {"results_dir": "<results_dir>", "data_dir": "<data_dir>", "cache_dir": "<cache_dir>"}
PROJECT = "<project>"
HOME = "<home>"
PYTHON = "<python>"
# The environment's key that names the machine; a portable record has none.
HOST_KEY = "hostname"
# An absolute path of two or more parts, at the start of a string or after a space, quote or
# bracket (a traceback's 'File "/usr/lib/..."'); "km/h" or "a / b" in a text sample is none.
ABSOLUTE_PATH = re.compile(r"""(?:^|[\s"'(=])/[\w.+~-]+/[\w.+~-]""")


def _spellings(path: str | None, base: Path) -> list[str]:
    """How ``path`` may appear in a record: as given, and as an absolute path (seen from
    ``base``, where a run's relative paths were relative to), longest first."""
    if not path or path.startswith("<"):
        return []
    absolute = os.path.normpath(Path(base, path).expanduser())
    return sorted({path.rstrip("/"), absolute}, key=len, reverse=True)


def _replacements(rec: dict[str, Any], base: Path, project: Path) -> list[tuple[str, str]]:
    config = rec.get("config") or {}
    pairs = [(spelling, placeholder) for key, placeholder in PLACEHOLDERS.items()
             for spelling in _spellings(config.get(key), base)]
    pairs += [(str(project), PROJECT), (str(Path.home()), HOME)]
    # the interpreter's and the environment's folders, as a traceback of a failed run names them
    pairs += [(folder, PYTHON) for folder in {sys.prefix, sys.base_prefix, os.path.realpath(sys.base_prefix)}]
    # longest first, so a results dir inside the checkout is named as the results dir
    return sorted((p for p in pairs if len(p[0]) > 1), key=lambda p: len(p[0]), reverse=True)


def _rewrite(value: Any, replacements: list[tuple[str, str]]) -> Any:
    if isinstance(value, dict):
        return {k: _rewrite(v, replacements) for k, v in value.items()}
    if isinstance(value, list):
        return [_rewrite(v, replacements) for v in value]
    if isinstance(value, str):
        for old, new in replacements:
            if old in value:
                value = value.replace(old, new)
    return value


def portable(rec: RunRecord, run_name: str, base: str | Path, project: str | Path) -> RunRecord:
    """``rec`` with no host name and no path of this machine (but in config keys the hash
    reads): the config's results dir, data root and cache as placeholders (``PLACEHOLDERS``),
    ``run_dir`` as
    ``<results_dir>/runs/<run_name>``, and wherever those paths, the checkout (``project``),
    the home folder or Python's folders appear in its text (a traceback, a data path), their
    placeholders.
    ``base`` is the folder the run's relative paths were relative to. The config hash is
    unchanged (checked: a change would be a bug)."""
    # The config is left as it is but for the keys the hash leaves out: a path in a key the
    # hash reads (a user folder's task.root) names the experiment, and stays for the caller
    # to refuse (machine_traces finds it).
    out = _rewrite({k: v for k, v in rec.items() if k != "config"},
                   _replacements(rec, Path(base), Path(project)))
    if isinstance(rec.get("config"), dict):
        config = dict(rec["config"])
        for key, placeholder in PLACEHOLDERS.items():
            if config.get(key) is not None:
                config[key] = placeholder
        if config_hash(config) != rec.get("config_hash"):
            raise ValueError(f"making {run_name} portable changed its config hash "
                             f"({rec.get('config_hash')} -> {config_hash(config)})")
        out["config"] = config
    if isinstance(out.get("environment"), dict):
        out["environment"].pop(HOST_KEY, None)
    out["run_dir"] = f"{PLACEHOLDERS['results_dir']}/runs/{run_name}"
    return RunRecord(**out)


# Where a record holds the dataset's own text (sample outputs): a path there is the data's.
DATASET_TEXT = ("test_details.samples.",)


def machine_traces(rec: Any, host: str | None = None, path: str = "") -> Iterator[str]:
    """Where ``rec`` still names a machine: a host-name field, a value that is the host name,
    or an absolute path (``ABSOLUTE_PATH``) outside the dataset's own text, each as
    ``dotted.key: value``. (A host name is looked for as a whole value only: a short one,
    such as "vm", is also part of words.)"""
    host = socket.gethostname() if host is None else host
    if path.startswith(DATASET_TEXT):
        return
    if isinstance(rec, dict):
        for key, value in rec.items():
            if key == HOST_KEY:
                yield f"{path}{key}: {value}"
            else:
                yield from machine_traces(value, host, f"{path}{key}.")
    elif isinstance(rec, list):
        for i, value in enumerate(rec):
            yield from machine_traces(value, host, f"{path}{i}.")
    elif isinstance(rec, str) and ((host and rec == host) or ABSOLUTE_PATH.search(rec)):
        yield f"{path.rstrip('.')}: {rec[:120]}"
