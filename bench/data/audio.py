"""Audio shared by the speech tasks: reading files, log-mel features, their cache, and
per-bin normalisation over valid frames.

Audio is read with soundfile (``torchaudio.load`` needs FFmpeg/TorchCodec); torchaudio does
the resampling and the mel filterbank.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import torch
import torchaudio
from torch import Tensor

from bench.data.files import data_root, verify_files
from bench.errors import BenchError

FSDD_NAME = re.compile(r"^(\d)_([a-z]+)_(\d+)\.wav$")  # digit_speaker_recording.wav


def read_audio(path: Path, what: str) -> tuple[np.ndarray, int]:
    """A file's samples, mixed down to mono float32, and its sample rate; a one-line error
    naming the file when it cannot be decoded or holds non-finite samples."""
    import soundfile

    try:
        wave, rate = soundfile.read(path, dtype="float32", always_2d=True)
    except Exception as e:  # noqa: BLE001 - libsndfile raises several types
        raise BenchError(f"{what}: cannot read {path} ({e}); the file is corrupt or not audio "
                         f"soundfile can decode (WAV, FLAC, OGG), replace or remove it") from None
    if not np.isfinite(wave).all():
        raise BenchError(f"{what}: {path} holds non-finite samples (NaN or infinity); the file is "
                         f"damaged, fetch it again or remove it")
    return wave.mean(axis=1), int(rate)


def fsdd_recordings(data_dir: str | None, dataset: str) -> Path:
    return data_root(data_dir, dataset, "fsdd") / "recordings"


def fsdd_fingerprint(data_dir: str | None, dataset: str) -> str:
    """A digest of the recordings' names and sizes: a changed set of files is not reused."""
    listing = sorted((p.name, p.stat().st_size) for p in fsdd_recordings(data_dir, dataset).glob("*.wav"))
    return hashlib.sha256(json.dumps(listing).encode()).hexdigest()


def read_fsdd(data_dir: str | None, dataset: str) -> tuple[dict[str, list], list[np.ndarray], list[int]]:
    """Every FSDD recording, checksummed first: ``meta`` (digit, speaker and recording index
    lists), the waves and their sample rates."""
    root = fsdd_recordings(data_dir, dataset)
    names = sorted(p.name for p in root.glob("*.wav")) if root.is_dir() else []
    if not names:
        raise BenchError(f"dataset '{dataset}': no .wav files in {root}; check data_dir / BENCH_DATA_DIR")
    verify_files(root.parent, [f"recordings/{name}" for name in names], dataset)
    meta: dict[str, list] = {"digit": [], "speaker": [], "index": []}
    waves, rates = [], []
    for name in names:
        match = FSDD_NAME.match(name)
        if not match:
            continue
        wave, rate = read_audio(root / name, f"dataset '{dataset}'")
        waves.append(wave)
        rates.append(rate)
        meta["digit"].append(int(match[1]))
        meta["speaker"].append(match[2])
        meta["index"].append(int(match[3]))
    return meta, waves, rates


class LogMel:
    """Log-mel spectrogram at one sample rate: ``features(wave, rate)`` resamples and returns
    (n_mels, frames); ``batch`` does the same for equal-length signals at the sample rate."""

    def __init__(self, sample_rate: int, n_mels: int, n_fft: int, win_ms: float, hop_ms: float) -> None:
        self.sample_rate, self.n_mels, self.n_fft = sample_rate, n_mels, n_fft
        self.win_length = round(sample_rate * win_ms / 1000)
        self.hop_length = round(sample_rate * hop_ms / 1000)
        if self.win_length > n_fft:
            raise BenchError(f"task.win_ms gives {self.win_length} samples, more than n_fft={n_fft}")
        if self.hop_length < 1:
            raise BenchError(f"task.hop_ms={hop_ms} is under one sample at {sample_rate} Hz; raise it")
        self.mel = torchaudio.transforms.MelSpectrogram(
            sample_rate=sample_rate, n_fft=n_fft, win_length=self.win_length,
            hop_length=self.hop_length, n_mels=n_mels,
        )

    def settings(self) -> dict:
        return {"sample_rate": self.sample_rate, "n_mels": self.n_mels, "n_fft": self.n_fft,
                "win_length": self.win_length, "hop_length": self.hop_length}

    def resample(self, wave: np.ndarray, rate: int) -> Tensor:
        signal = torch.from_numpy(np.ascontiguousarray(wave, dtype=np.float32))
        return signal if rate == self.sample_rate else torchaudio.functional.resample(
            signal, rate, self.sample_rate)

    def batch(self, signals: Tensor) -> Tensor:
        """(N, samples) at the sample rate -> (N, n_mels, frames)."""
        return torch.log(self.mel(signals) + 1e-6)

    def features(self, wave: np.ndarray, rate: int) -> Tensor:
        return self.batch(self.resample(wave, rate)[None])[0]

    def frames(self, samples: int) -> int:
        return 1 + samples // self.hop_length


def pad_or_crop(signal: Tensor, length: int) -> tuple[Tensor, int]:
    """Zero-pad at the end, or keep the centre; returns the signal and its valid length."""
    n = signal.shape[-1]
    if n >= length:
        start = (n - length) // 2
        return signal[start : start + length], length
    return torch.nn.functional.pad(signal, (0, length - n)), n


def _valid_frames(x: Tensor, lengths: Tensor) -> Tensor:
    frames = torch.arange(x.shape[-1], device=x.device)
    return (frames[None, :] < lengths[:, None])[:, None, None, :]  # (N, 1, 1, T)


def frame_stats(x: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """Per-bin mean and std over the valid (unpadded) frames of (N, 1, F, T) features."""
    mask = _valid_frames(x, lengths).float()
    count = mask.sum()
    mean = (x * mask).sum(dim=(0, 3), keepdim=True) / count  # (1, 1, F, 1)
    var = (((x - mean) * mask) ** 2).sum(dim=(0, 3), keepdim=True) / count
    return mean, var.sqrt().clamp_min(1e-5)


def normalise(x: Tensor, lengths: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    """Standardise, and set padded frames to 0 (the train mean)."""
    return ((x - mean) / std) * _valid_frames(x, lengths)


def shift_in_time(x: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """Move each clip's valid frames later by a random 0..(frames - length) frames, so the word
    may start anywhere in the window; the padding (zeros) it skips comes first. ``lengths``
    grows by the shift, so an RNN reads the leading silence too."""
    frames = x.shape[-1]
    shift = (torch.rand(lengths.shape, device=x.device) * (frames - lengths + 1)).long()
    source = (torch.arange(frames, device=x.device) - shift[:, None]) % frames  # (B, T)
    index = source.view(-1, *([1] * (x.dim() - 2)), frames).expand_as(x)
    return x.gather(-1, index), lengths + shift
