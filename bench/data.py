"""Finding and verifying dataset files under the data root (read-only) and the cache dir."""

from __future__ import annotations

import hashlib
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


def md5(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_md5sums(root: Path, names: list[str], dataset: str) -> None:
    """Check files against the ``MD5SUMS`` that ships beside them, when there is one."""
    sums_file = root / "MD5SUMS"
    if not sums_file.is_file():
        return
    expected = {}
    for line in sums_file.read_text().splitlines():
        if line.strip():
            digest, name = line.split(maxsplit=1)
            expected[name.lstrip("*").removeprefix("./")] = digest
    for name in names:
        if name in expected and md5(root / name) != expected[name]:
            raise BenchError(
                f"dataset '{dataset}': {root / name} is corrupt (MD5 mismatch with MD5SUMS); "
                f"fetch that file again"
            )


def cache_path(cache_dir: str, *parts: str) -> Path:
    path = Path(cache_dir).expanduser().joinpath(*parts)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BenchError(f"cannot create cache dir {path} ({e.strerror}); pass cache_dir=PATH") from None
    return path
