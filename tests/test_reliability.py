"""Reliability beyond the bad-input catalogue: caches that are verified or rebuilt, a cache
that cannot be written, locked sweeps, failures while a run is built, reports of failed runs."""

import json
import os
import subprocess
import sys
import time

import pytest
import torch

from bench.data.cache import digest_path, is_intact
from bench.run.lock import run_lock
from tasks.speech import SpeechTask
from tests.conftest import ROOT, read_records, run_cli, write_record

TINY = ["task=image", "task.dataset=digits", "model=gru", "trainer.infer_iters=1",
        "trainer.timing_warmup_steps=1"]


def _speech(cache) -> SpeechTask:
    return SpeechTask("speech", "synth_digits", None, str(cache), synth_per_digit=10)


def test_a_damaged_feature_cache_is_rebuilt_not_read(tmp_path):
    task = _speech(tmp_path)
    first, cached = task.load_features()
    path = task.features_path()
    assert not cached and is_intact(path) and digest_path(path).is_file()
    assert task.load_features()[1] is True  # intact: read back
    damaged = dict(first, labels=torch.zeros_like(first["labels"]))
    torch.save(damaged, path)  # readable, but not what was cached: its digest no longer matches
    again, cached = task.load_features()
    assert not cached and torch.equal(again["labels"], first["labels"]) and is_intact(path)


def test_a_cache_that_cannot_be_written_is_rebuilt_in_memory(tmp_path, caplog):
    task = _speech(tmp_path)
    task.features_path().mkdir(parents=True)  # a folder where the entry goes (root ignores modes)
    feats, cached = task.load_features()
    assert not cached and len(feats["labels"]) == 100
    assert "not cached" in caplog.text and "recomputed on every run" in caplog.text


def test_the_lock_of_a_job_is_held_once(tmp_path):
    with run_lock(tmp_path, "abc", 0) as first:
        assert first is None
        with run_lock(tmp_path, "abc", 0) as second:
            assert second is not None and f"pid {os.getpid()}" in second
        with run_lock(tmp_path, "abc", 1) as other_seed:
            assert other_seed is None
    with run_lock(tmp_path, "abc", 0) as after:  # released when its holder let go
        assert after is None


@pytest.mark.slow
def test_two_identical_sweeps_at_once_record_each_job_once(tmp_path):
    args = [sys.executable, "-m", "bench", "run", "-m", *TINY, "seed=0,1,2", "trainer.max_steps=30",
            "trainer.batch_size=16", f"results_dir={tmp_path}"]
    procs = [subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    records = read_records(tmp_path)
    assert sorted(r["seed"] for r in records) == [0, 1, 2]  # no job ran twice
    said = "".join(outputs)
    assert "is being run by pid" in said or "already recorded ok" in said  # the second says why


def test_a_crash_while_a_run_is_built_is_recorded_failed(tmp_path, monkeypatch):
    from bench.errors import RunFailed
    from bench.experiment import run_experiment
    from bench.setup import spec as spec_module
    from bench.setup.compose import compose_config

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug in an adapter")

    # a bug met while the data is loaded or the model built (after the run's config is known)
    monkeypatch.setattr(spec_module, "build_model", broken)
    cfg = compose_config("config", [*TINY, f"results_dir={tmp_path}"], "run")
    with pytest.raises(RunFailed, match="failed while building: ZeroDivisionError"):
        run_experiment(cfg)
    (rec,) = read_records(tmp_path)
    assert rec["status"] == "failed" and "a bug in an adapter" in rec["error"]
    assert "ZeroDivisionError" in rec["traceback"] and rec["model"] == "gru"


def test_the_report_of_failed_runs_only_lists_them(tmp_path):
    write_record(tmp_path, "broken", status="failed", test_metric=None, error="non-finite loss")
    out = run_cli("report", str(tmp_path))
    assert out.returncode == 0, out.stderr
    markdown = (tmp_path / "report.md").read_text()
    assert "No successful runs yet" in markdown
    assert "1 run(s) did not finish ok and are left out: image/digits attention seed 0 (failed): " \
           "non-finite loss" in markdown


@pytest.mark.slow
@pytest.mark.data
def test_a_damaged_unpacked_fashion_mnist_is_unpacked_again(tmp_path, data_dir):
    args = ["run", "task=image", "model=gru", "trainer.max_steps=2", "trainer.infer_iters=1",
            "model.dim=8", "model.depth=1", f"data_dir={data_dir}", f"cache_dir={tmp_path / 'c'}"]
    first = run_cli(*args, f"results_dir={tmp_path / 'a'}")
    assert first.returncode == 0, first.stderr
    labels = tmp_path / "c" / "torchvision" / "FashionMNIST" / "raw" / "t10k-labels-idx1-ubyte"
    with open(labels, "r+b") as f:  # test labels no longer what was unpacked
        f.seek(100)
        f.write(bytes([9, 9, 9, 9]))
    time.sleep(0.01)
    second = run_cli(*args, f"results_dir={tmp_path / 'b'}")
    assert second.returncode == 0, second.stderr
    (a,), (b,) = read_records(tmp_path / "a"), read_records(tmp_path / "b")
    assert a["config_hash"] == b["config_hash"] and a["test_metric"] == b["test_metric"]
    assert is_intact(labels)
    assert json.loads(json.dumps(b["status"])) == "ok"


@pytest.mark.slow
@pytest.mark.data
def test_something_in_the_way_of_the_unpacked_fashion_mnist_is_one_line(tmp_path, data_dir):
    raw = tmp_path / "c" / "torchvision" / "FashionMNIST" / "raw"
    (raw / "t10k-labels-idx1-ubyte").mkdir(parents=True)  # a folder where a file gets unpacked
    out = run_cli("run", "task=image", "model=gru", "trainer.max_steps=1", f"data_dir={data_dir}",
                  f"cache_dir={tmp_path / 'c'}", f"results_dir={tmp_path / 'r'}")
    assert out.returncode == 2
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("mhab: error: cannot unpack Fashion-MNIST into the cache") and "cache_dir=" in line
