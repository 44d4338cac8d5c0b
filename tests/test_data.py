"""``mhab data``: sha256 verification of the data root and downloads from a mirror, served
from 127.0.0.1 so nothing leaves the machine."""

import functools
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from bench.data.files import SOURCES, sha256
from tests.conftest import run_cli


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@contextmanager
def serve(directory: Path) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 serving ``directory``; yields its base URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_every_dataset_has_a_sha256_for_every_file():
    counts = {name: len(source.checksums()) for name, source in SOURCES.items()}
    assert counts == {"fashion-mnist": 4, "fsdd": 3000, "multi30k": 6, "aeslc": 18303}
    for source in SOURCES.values():
        assert all(len(d) == 64 and int(d, 16) >= 0 for d in source.checksums().values())


@pytest.mark.data
def test_check_passes_on_the_real_data_root(data_dir):
    out = run_cli("data", "check", "--data-dir", str(data_dir))
    assert out.returncode == 0, out.stderr
    assert "fsdd: ok, 3000 files verified" in out.stdout
    assert "fashion-mnist: ok, 4 files" in out.stdout and "multi30k: ok, 6 files" in out.stdout
    assert "aeslc: ok, 18303 files verified" in out.stdout


@pytest.mark.data
def test_check_names_corrupt_and_missing_files(data_dir, tmp_path):
    root = tmp_path / "data" / "multi30k"
    shutil.copytree(data_dir / "multi30k", root)
    (root / "val.de.gz").chmod(0o644)
    (root / "val.de.gz").write_bytes(b"\x1f\x8b truncated")
    (root / "test_2016_flickr.en.gz").unlink()
    out = run_cli("data", "check", "multi30k", "--data-dir", str(tmp_path / "data"))
    assert out.returncode == 1
    assert "1 corrupt (val.de.gz)" in out.stdout and "1 missing (test_2016_flickr.en.gz)" in out.stdout
    assert "mhab data download multi30k" in out.stderr


@pytest.mark.data
def test_download_from_a_mirror_gives_identical_verified_files(data_dir, tmp_path):
    target = tmp_path / "fresh"
    with serve(data_dir) as url:
        out = run_cli("data", "download", "fashion_mnist", "multi30k", "--data-dir", str(target),
                      "--base-url", url)
    assert out.returncode == 0, out.stderr
    assert "fashion-mnist: 4 file(s) downloaded" in out.stdout
    assert "multi30k: ok, 6 files verified" in out.stdout
    for name in ("train-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        assert sha256(target / "fashion-mnist" / name) == sha256(data_dir / "fashion-mnist" / name)
    assert not [p for p in target.rglob("*") if p.is_file() and "tmp" in p.name]


@pytest.mark.data
def test_download_fetches_only_missing_or_corrupt_files(data_dir, tmp_path):
    root = tmp_path / "data" / "fsdd"
    shutil.copytree(data_dir / "fsdd", root)
    for name in ("0_george_0.wav", "9_theo_49.wav"):
        (root / "recordings" / name).unlink()
    damaged = root / "recordings" / "5_lucas_7.wav"
    damaged.chmod(0o644)
    damaged.write_bytes(damaged.read_bytes()[:1000])
    with serve(data_dir) as url:
        out = run_cli("data", "download", "fsdd", "--data-dir", str(tmp_path / "data"),
                      env={"BENCH_DATA_URL": url})
    assert out.returncode == 0, out.stderr
    assert "fsdd: 3 file(s) downloaded" in out.stdout and "fsdd: ok, 3000 files" in out.stdout


def test_mirror_with_a_wrong_file_is_refused_and_nothing_lands(tmp_path):
    mirror = tmp_path / "mirror" / "multi30k"
    mirror.mkdir(parents=True)
    for name in SOURCES["multi30k"].checksums():
        (mirror / name).write_bytes(b"not the real file")
    target = tmp_path / "data"
    with serve(tmp_path / "mirror") as url:
        out = run_cli("data", "download", "multi30k", "--data-dir", str(target), "--base-url", url)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "does not match its known sha256" in lines[0] and ".gz" in lines[0]
    assert not [p for p in (target / "multi30k").iterdir()]


def test_unreachable_source_is_one_line(tmp_path):
    out = run_cli("data", "download", "multi30k", "--data-dir", str(tmp_path),
                  "--base-url", "http://127.0.0.1:9")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mhab: error: cannot download http://127.0.0.1:9/")


@pytest.mark.parametrize("args, message", [
    (["data", "download", "cifar10"], "unknown dataset 'cifar10'"),
    (["data", "check"], "no data root: set BENCH_DATA_DIR or pass --data-dir"),
])
def test_data_command_bad_input(args, message):
    out = run_cli(*args, env={"BENCH_DATA_DIR": ""})
    assert out.returncode == 2 and message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
