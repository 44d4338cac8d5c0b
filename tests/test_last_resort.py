"""What no check foresaw ends in one line and a traceback on disk; writes follow the umask; a
full disk and an unreadable record are named as what they are; a logger's server that does
not answer cannot hold a run up."""

import errno
import os
import stat

import pytest
import torch

from bench.cli import main
from bench.errors import BenchError, NotWritable
from bench.records import atomic
from bench.records.atomic import atomic_torch_save, atomic_write_text
from bench.records.record import read_record
from tests.conftest import read_records, run_cli, write_record


def test_an_unexpected_error_is_one_line_with_its_traceback_on_disk(tmp_path, monkeypatch, capsys):
    write_record(tmp_path, "r1")

    def broken(*args, **kwargs):
        raise KeyError("a case nobody tried")

    monkeypatch.setattr("bench.records.table.load", broken)
    assert main(["table", str(tmp_path)]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("mhab: error: 'mhab table' stopped on an unexpected error")
    assert "KeyError" in line and "a case nobody tried" in line
    (log,) = (tmp_path / "errors").glob("*-table-*.log")
    assert str(log) in line and "Traceback" in log.read_text()


def test_the_last_resort_names_what_it_was_working_on(tmp_path, monkeypatch, capsys):
    from bench.errors import working_on

    def broken(*args, **kwargs):
        with working_on("reading results/x/runs/y/record.json"):
            raise ValueError("odd")

    monkeypatch.setattr("bench.records.table.load", broken)
    write_record(tmp_path, "r1")
    assert main(["table", str(tmp_path)]) == 1
    assert "while reading results/x/runs/y/record.json (ValueError: odd)" in capsys.readouterr().err


def test_written_files_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        path = atomic_write_text(tmp_path / "a.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_a_full_disk_while_saving_a_checkpoint_says_so(tmp_path, monkeypatch):
    def full(obj, f):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")

    monkeypatch.setattr(torch, "save", full)
    monkeypatch.setattr(atomic.shutil, "disk_usage", lambda path: type("Usage", (), {"free": 0})())
    with pytest.raises(NotWritable, match=os.strerror(errno.ENOSPC)):
        atomic_torch_save(tmp_path / "best.pt", {"w": torch.zeros(1)})
    assert list(tmp_path.iterdir()) == []  # no half-written file left behind


def test_an_unreadable_record_is_not_called_malformed(tmp_path, monkeypatch):
    path = tmp_path / "runs" / "r1" / "record.json"
    write_record(tmp_path, "r1")

    def denied(self, *args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))

    monkeypatch.setattr(type(path), "read_text", denied)
    with pytest.raises(BenchError, match="cannot read the run record") as caught:
        read_record(path)
    assert "malformed" not in str(caught.value)


@pytest.mark.slow
def test_an_unreachable_mlflow_server_gives_up_at_once_and_stays_out_of_the_time(tmp_path):
    out = run_cli("run", "task=image", "task.dataset=digits", "trainer.max_steps=2", "trainer.infer_iters=1",
                  "logger=mlflow", f"results_dir={tmp_path}", cwd=tmp_path,
                  env={"MLFLOW_TRACKING_URI": "http://127.0.0.1:9"})
    assert out.returncode == 0, out.stderr
    (rec,) = read_records(tmp_path)
    assert rec["status"] == "ok" and rec["wall_time_s"] < 60
    warnings = [line for line in (out.stdout + out.stderr).splitlines() if "logger=mlflow failed" in line]
    assert len(warnings) == 1 and len(warnings[0]) < 600


@pytest.mark.slow
def test_mlflow_stores_in_a_results_dir_with_percent_and_hash(tmp_path):
    results = tmp_path / "r%25x#y"
    out = run_cli("run", "task=image", "task.dataset=digits", "trainer.max_steps=2", "trainer.infer_iters=1",
                  "logger=mlflow", f'results_dir="{results}"', cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (results / "mlflow.db").is_file() and "retried" not in out.stderr
    assert list(results.glob("mlartifacts/*/artifacts/record.json"))
