import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

if os.environ.get("PYTEST_XDIST_WORKER") and "OMP_NUM_THREADS" not in os.environ:
    # Under pytest-xdist the workers share the cores: each worker's torch, and every command a
    # test starts (which inherits the environment), uses its share instead of all of them.
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))


@pytest.fixture
def data_dir() -> Path:
    """The real data root, or a skip when BENCH_DATA_DIR is unset (the suite runs without it)."""
    value = os.environ.get("BENCH_DATA_DIR")
    if not value or not Path(value).is_dir():
        pytest.skip("BENCH_DATA_DIR is not set to the data root")
    return Path(value)


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None,
            timeout: int = 300) -> subprocess.CompletedProcess:
    """Run ``python -m bench ARGS`` as a user would, capturing its output."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "bench", *args], cwd=cwd or ROOT, env=full_env,
        capture_output=True, text=True, timeout=timeout,
    )


def write_record(root: Path, name: str, **fields) -> dict:
    """A run record as the engine writes it, with test defaults overridden by ``fields``."""
    run = root / "runs" / name
    run.mkdir(parents=True)
    rec = {"task": "image", "dataset": "digits", "model": "attention", "variant": "default",
           "seed": 0, "status": "ok", "metric_name": "accuracy", "test_metric": 0.9, "params": 1000,
           "train_samples_per_s": 100.0, "infer_samples_per_s": 400.0, "flops_per_sample": 2e6,
           "config_hash": "h", "run_dir": str(run), "run_id": name,
           "environment": {"device": "cpu", "device_name": "Test CPU"}}
    rec.update(fields)
    rec.setdefault("model_family", "attention" if rec["model"] == "attention" else "rnn")
    (run / "record.json").write_text(json.dumps(rec))
    return rec


def read_records(results: Path) -> list[dict]:
    """Every run record under ``results/runs``."""
    return [json.loads(p.read_text()) for p in sorted(results.glob("runs/*/record.json"))]
