"""``mhab data``: verify the data root against the known sha256 sums, and download datasets
from their canonical sources (or a mirror) into it with verification."""

from __future__ import annotations

import logging
import os
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from bench.data.files import SOURCES, DatasetSource, sha256
from bench.errors import BenchError

DOWNLOAD_WORKERS = 8


@dataclass
class CheckResult:
    """What ``mhab data check`` found for one dataset folder."""

    source: DatasetSource
    root: Path
    ok: int = 0
    missing: list[str] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)

    @property
    def present(self) -> bool:
        return self.ok + len(self.corrupt) > 0

    @property
    def healthy(self) -> bool:
        return not self.missing and not self.corrupt

    def summary(self) -> str:
        name = self.source.folder
        if not self.present:
            return f"{name}: not present in {self.root} (mhab data download {name})"
        if self.healthy:
            return f"{name}: ok, {self.ok} files verified (sha256)"
        parts = []
        if self.corrupt:
            parts.append(f"{len(self.corrupt)} corrupt ({_first(self.corrupt)})")
        if self.missing:
            parts.append(f"{len(self.missing)} missing ({_first(self.missing)})")
        return f"{name}: {', '.join(parts)}; fix with 'mhab data download {name}'"


def _first(names: list[str], n: int = 3) -> str:
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


def resolve_names(names: list[str]) -> list[DatasetSource]:
    """Dataset folders or ``task.dataset`` names (``fashion_mnist``) to sources; ``all`` or
    nothing means every dataset."""
    if not names or names == ["all"]:
        return list(SOURCES.values())
    by_name = {**{s.task_dataset: s for s in SOURCES.values()}, **SOURCES}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise BenchError(f"unknown dataset '{unknown[0]}'; choose from: {', '.join(SOURCES)} or all")
    return [by_name[n] for n in dict.fromkeys(names)]


def require_data_dir(data_dir: str | None, must_exist: bool = True) -> Path:
    """The data root; ``must_exist`` for a check (a download creates it)."""
    if not data_dir:
        raise BenchError("no data root: set BENCH_DATA_DIR or pass --data-dir PATH")
    path = Path(data_dir).expanduser()
    if must_exist and not path.is_dir():
        raise BenchError(f"the data root {path} is not a folder; create it (mhab data download fills it) "
                         f"or pass --data-dir PATH")
    return path


def check(data_dir: Path, source: DatasetSource, progress: bool = False) -> CheckResult:
    root = data_dir / source.folder
    result = CheckResult(source, root)
    if not root.is_dir():
        result.missing = list(source.checksums())
        return result
    for name, digest in tqdm(source.checksums().items(), desc=f"check {source.folder}",
                             unit="file", disable=not progress, leave=False):
        path = root / name
        if not path.is_file():
            result.missing.append(name)
        elif sha256(path) != digest:
            result.corrupt.append(name)
        else:
            result.ok += 1
    return result


MIRROR_SCHEMES = ("http", "https", "ftp")


def mirror_url(base_url: str, source: DatasetSource) -> str:
    """A mirror has the data root's layout: ``BASE/<folder>/<path in the folder>``."""
    scheme = urllib.parse.urlparse(base_url).scheme
    if scheme not in MIRROR_SCHEMES:
        raise BenchError(f"--base-url {base_url} is not an {'/'.join(MIRROR_SCHEMES)} URL (pooch fetches "
                         f"only those); serve a local mirror over HTTP (python -m http.server) or copy "
                         f"its files into the data root")
    return f"{base_url.rstrip('/')}/{source.folder}/"


def download(data_dir: Path, source: DatasetSource, base_url: str | None = None,
             progress: bool = True) -> int:
    """Fetch every file of ``source`` that is missing or fails its sha256 into
    ``data_dir/<folder>``; return how many were fetched. Each file lands under its final name
    only once its sha256 matches (pooch writes a temp file and renames it)."""
    import pooch

    pooch.get_logger().setLevel(logging.WARNING)
    root = data_dir / source.folder
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BenchError(f"cannot create {root} ({e.strerror}); pass a writable --data-dir") from None
    if not os.access(root, os.W_OK):
        raise BenchError(f"{root} is not writable; pass a writable --data-dir PATH")
    url = mirror_url(base_url, source) if base_url else source.url
    sums = source.checksums()
    found = check(data_dir, source)
    todo = found.missing + found.corrupt
    for folder in {(root / n).parent for n in todo}:  # before the threads, which would race
        folder.mkdir(parents=True, exist_ok=True)
    fetcher = pooch.create(path=root, base_url=url,
                           registry={n: f"sha256:{sums[n]}" for n in todo}, retry_if_failed=2)

    def fetch(name: str) -> None:
        try:
            fetcher.fetch(name)
        except ValueError as e:  # pooch's hash mismatch
            raise BenchError(f"{url}{name} does not match its known sha256 ({_one_line(e)}); "
                             f"the source or mirror serves a different file") from None
        except Exception as e:  # noqa: BLE001 - network errors come in many types
            raise BenchError(f"cannot download {url}{name} ({_one_line(e)}); check the network "
                             f"or pass --base-url of a mirror") from None

    with ThreadPoolExecutor(DOWNLOAD_WORKERS) as pool, \
            tqdm(total=len(todo), desc=f"download {source.folder}", unit="file",
                 disable=not progress or not todo) as bar:
        for _ in pool.map(fetch, todo):
            bar.update()
    return len(todo)


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:200]
