import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


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
