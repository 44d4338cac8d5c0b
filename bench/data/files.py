"""Finding and verifying dataset files under the data root (read-only) and the cache dir."""

from __future__ import annotations

import gzip
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from bench.errors import BenchError


def data_root(data_dir: str | None, dataset: str, subdir: str) -> Path:
    """``data_dir/subdir``, or a one-line error saying how to point at it."""
    if not data_dir:
        raise BenchError(
            f"dataset '{dataset}' needs the data root: set BENCH_DATA_DIR or pass data_dir=PATH "
            f"(a folder holding {subdir}/)"
        )
    root = Path(data_dir).expanduser() / subdir
    if not root.is_dir():
        raise BenchError(f"dataset '{dataset}': folder {root} not found; check data_dir / BENCH_DATA_DIR")
    return root


def require_files(root: Path, names: list[str], dataset: str) -> list[Path]:
    paths = [root / n for n in names]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise BenchError(f"dataset '{dataset}': missing {', '.join(missing)} in {root}")
    return paths


@dataclass(frozen=True)
class DatasetSource:
    """A dataset the project knows: its folder under the data root, where it is published,
    and the sha256 of every file (``bench/data/checksums/<folder>.sha256.gz``: ``sha256sum`` lines,
    gzipped, since AESLC's 18,303 lines are 2.1 MB as text)."""

    folder: str
    task_dataset: str   # the name ``task.dataset`` uses
    url: str            # canonical base; a file's URL is url + its path in the folder
    description: str

    def checksums(self) -> dict[str, str]:
        text = gzip.decompress((CHECKSUMS_DIR / f"{self.folder}.sha256.gz").read_bytes()).decode()
        return {name: digest for digest, name in (line.split() for line in text.splitlines() if line)}


CHECKSUMS_DIR = Path(__file__).resolve().parent / "checksums"
SOURCES = {
    s.folder: s for s in (
        DatasetSource(
            "fashion-mnist", "fashion_mnist",
            "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
            "Fashion-MNIST train and test sets, IDX (gzip), as Zalando publishes them"),
        DatasetSource(
            "fsdd", "fsdd",
            "https://raw.githubusercontent.com/Jakobovski/free-spoken-digit-dataset/"
            "26eb9aaf76e81b692f806f9140c2d2777410d7a1/",
            "Free Spoken Digit Dataset v1.0.10, 3,000 wav files at 8 kHz"),
        DatasetSource(
            "multi30k", "multi30k",
            "https://raw.githubusercontent.com/multi30k/dataset/"
            "a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1/raw/",
            "Multi30k task 1 en-de raw text (gzip): train, val, test_2016_flickr"),
        DatasetSource(
            "aeslc", "aeslc",
            # The data root's copy names the commit by its short hash, which GitHub resolves.
            "https://raw.githubusercontent.com/ryanzhumich/AESLC/7afc087a/",
            "AESLC (Zhang & Tetreault 2019): 18,302 Enron emails with subject lines, annotated dev and test"),
    )
}


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_files(root: Path, names: list[str], dataset: str) -> None:
    """Check the files the project knows (by their path under ``root``) against their sha256;
    files it does not know, such as another Multi30k language, are used as they are."""
    known = SOURCES[root.name].checksums() if root.name in SOURCES else {}
    for name in names:
        if name in known and sha256(root / name) != known[name]:
            raise BenchError(
                f"dataset '{dataset}': {root / name} is corrupt (sha256 mismatch); fetch it again "
                f"with 'mhab data download {root.name}' or check all files with 'mhab data check'"
            )


def cache_path(cache_dir: str, *parts: str) -> Path:
    path = Path(cache_dir).expanduser().joinpath(*parts)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BenchError(f"cannot create cache dir {path} ({e.strerror}); pass cache_dir=PATH") from None
    return path


def files_fingerprint(paths: list[Path]) -> str:
    """A digest of files by resolved path, size and modification time: what changes when a
    user's data changes, at the cost of one stat per file (no reading)."""
    entries = []
    for path in sorted(Path(p).resolve() for p in paths):
        stat = path.stat()
        entries.append([str(path), stat.st_size, stat.st_mtime_ns])
    return hashlib.sha256(json.dumps(entries).encode()).hexdigest()[:16]


def rule_fingerprint(*parts: str) -> str:
    """A digest of the words that say how a dataset is read or split (and of a files
    fingerprint, when there is one): a changed rule makes other experiments."""
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
