"""Your own transcribed audio, laid out as Hugging Face's ``audiofolder`` loader reads it.

Either one ``metadata.csv`` at the root with columns ``file_name`` and ``transcription`` and
optionally ``split`` (``train``, ``validation``, ``test``), or ``train/``, ``validation/`` and
``test/`` folders, each with its own ``metadata.csv``. Without a validation split, one is
carved from train with a fixed seed. WAV and FLAC (whatever soundfile decodes), any sample
rate, mono or stereo (mixed down). Every problem is a one-line ``BenchError`` naming the file
and the row.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from bench.data.audio import read_audio
from bench.data.files import files_fingerprint
from bench.errors import BenchError

METADATA = "metadata.csv"
FOLDER_SPLITS = {"train": "train", "validation": "val", "test": "test"}  # HF name -> ours
REQUIRED = ("file_name", "transcription")
Row = tuple[str, Path, str]  # split, audio file, transcription


def _metadata_files(root: Path) -> list[tuple[Path, str | None]]:
    """(metadata.csv, the split its folder names or None) for the layout found at ``root``."""
    if not root.is_dir():
        raise BenchError(f"task.root={root} is not a folder; point it at your audiofolder")
    if (root / METADATA).is_file():
        return [(root / METADATA, None)]
    found = [(root / name / METADATA, name) for name in FOLDER_SPLITS if (root / name / METADATA).is_file()]
    if not found:
        raise BenchError(f"{root}: no {METADATA}; an audiofolder holds {METADATA} (columns file_name, "
                         f"transcription, optionally split) or train/, validation/, test/ folders "
                         f"with one each")
    return found


def _rows(path: Path, folder_split: str | None) -> list[Row]:
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:  # Excel writes a byte-order mark
            reader = csv.DictReader(f)
            columns = reader.fieldnames or []
            missing = [c for c in REQUIRED if c not in columns]
            if missing:
                raise BenchError(f"{path}: no {' or '.join(repr(c) for c in missing)} column (it has "
                                 f"{', '.join(columns) or 'none'}); {METADATA} needs file_name and "
                                 f"transcription, optionally split")
            records = list(reader)
    except UnicodeDecodeError as e:
        raise BenchError(f"{path}: not UTF-8 text ({e.reason}); save it as UTF-8 CSV") from None
    except csv.Error as e:
        raise BenchError(f"{path}: not a readable CSV ({e}); check its quotes and commas") from None
    rows = []
    for line, record in enumerate(records, start=2):  # line 1 is the header
        where = f"{path} line {line}"
        name = (record.get("file_name") or "").strip()
        text = (record.get("transcription") or "").strip()
        if not name:
            raise BenchError(f"{where}: empty file_name; name the audio file or remove the row")
        if not text:
            raise BenchError(f"{where} ({name}): empty transcription; give the utterance its words "
                             f"or remove the row")
        split = folder_split or (record.get("split") or "train").strip()
        if split not in FOLDER_SPLITS:
            raise BenchError(f"{where}: split '{split}' is not one of {', '.join(FOLDER_SPLITS)}")
        audio = path.parent / name
        if not audio.is_file():
            raise BenchError(f"{where}: the audio file {audio} does not exist; fix file_name or add the file")
        rows.append((FOLDER_SPLITS[split], audio, text))
    return rows


def audiofolder_rows(root: str | Path, val_fraction: float, seed: int) -> list[Row]:
    """Every utterance as (split, audio file, transcription), the validation split carved
    from train (``val_fraction`` of it, at least one, drawn with ``seed``) when there is none."""
    rows = [row for path, split in _metadata_files(Path(root)) for row in _rows(path, split)]
    for split in ("train", "test"):
        if not any(r[0] == split for r in rows):
            hf = next(k for k, v in FOLDER_SPLITS.items() if v == split)
            raise BenchError(f"audiofolder {root}: the {hf} split has no utterances; add rows with "
                             f"split={hf} or a {hf}/ folder with its {METADATA}")
    if not any(r[0] == "val" for r in rows):
        train = [i for i, r in enumerate(rows) if r[0] == "train"]
        if len(train) < 2:
            raise BenchError(f"audiofolder {root}: one train utterance cannot also give a validation "
                             f"split; add utterances or a validation split")
        count = min(len(train) - 1, max(1, round(val_fraction * len(train))))
        carved = set(np.random.default_rng(seed).choice(train, size=count, replace=False).tolist())
        rows = [("val", *r[1:]) if i in carved else r for i, r in enumerate(rows)]
    return rows


def read_audiofolder(root: str | Path, val_fraction: float,
                     seed: int) -> Iterator[tuple[str, str, np.ndarray, int]]:
    """Each utterance as (split, transcription, mono wave, sample rate)."""
    for split, audio, text in audiofolder_rows(root, val_fraction, seed):
        wave, rate = read_audio(audio, f"audiofolder {root}")
        if wave.size == 0:
            raise BenchError(f"audiofolder {root}: {audio} holds no samples; replace or remove it")
        yield split, text, wave, rate


def audiofolder_fingerprint(root: str | Path) -> str:
    """A digest of the metadata files and of every audio file they name, wherever it lies
    (a ``../`` or absolute file_name too): resolved path, size and mtime."""
    metadata = _metadata_files(Path(root))
    audio = [row[1] for path, split in metadata for row in _rows(path, split)]
    return files_fingerprint([path for path, _ in metadata] + audio)
