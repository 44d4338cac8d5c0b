"""Nothing the project did not write is unpickled: every torch.load is weights_only."""

import os
import pickle
from pathlib import Path

import pytest

from bench.records.atomic import load_state_dict
from bench.report.render import write_report
from tests.conftest import write_record


class _Payload:
    """Unpickling this runs a command: what a tampered checkpoint could carry."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _tampered(path: Path, marker: Path) -> Path:
    path.write_bytes(pickle.dumps({"weight": _Payload(marker)}))
    return path


def test_checkpoint_loading_refuses_pickled_code(tmp_path):
    marker = tmp_path / "pwned"
    with pytest.raises(pickle.UnpicklingError):
        load_state_dict(_tampered(tmp_path / "best.pt", marker))
    assert not marker.exists()


def test_report_does_not_run_a_tampered_attention_example(tmp_path):
    marker = tmp_path / "pwned"
    rec = write_record(tmp_path, "run-a", attention_example="attention.pt")
    _tampered(Path(rec["run_dir"]) / "attention.pt", marker)
    write_report(tmp_path)  # the example is skipped or refused, never executed
    assert not marker.exists()


def test_a_tampered_feature_cache_is_recomputed_not_run(tmp_path):
    from tasks.speech import SpeechTask

    task = SpeechTask("speech", "synth_digits", None, str(tmp_path / "cache"), synth_per_digit=2)
    marker = tmp_path / "pwned"
    path = task.features_path()
    _tampered(path, marker)
    features, cached = task.load_features()
    assert not cached and not marker.exists()
    assert features["features"].shape[0] == 20
