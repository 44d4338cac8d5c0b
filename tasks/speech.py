"""Spoken-digit recognition from log-mel spectrograms: FSDD (data root) or synth_digits
(offline, espeak-ng).

The models get a ``FrameSequence``: the spectrogram (mel bins x frames), its valid frame
counts, and the (mel x frame) patches a patch reader such as the AST uses (overlap allowed).

Pad/crop policy: every clip is resampled to ``sample_rate``, then zero-padded at the end or
centre-cropped to ``max_seconds``. RNNs skip the padded frames (packed sequences); the
attention model sees the whole fixed-size spectrogram, whose padded frames are the train mean.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import torch
import torchaudio
from torch import nn
from torch.utils.data import TensorDataset

from bench.data.audio import (
    LogMel,
    frame_stats,
    fsdd_fingerprint,
    normalise,
    pad_or_crop,
    read_fsdd,
    shift_in_time,
)
from bench.data.cache import cached
from bench.data.files import cache_path
from bench.errors import BenchError
from bench.task import Batch, ClassificationTask, Splits
from models.constraints import AT_LEAST_1, FRACTION, NON_NEGATIVE, POSITIVE
from models.inputs import FrameSequence

FEATURES_VERSION = 1  # bump when the feature code changes, so old caches are not reused


class SpeechTask(ClassificationTask):
    def __init__(
        self, name: str, dataset: str, data_dir: str | None, cache_dir: str,
        sample_rate: Annotated[int, AT_LEAST_1] = 8000, max_seconds: Annotated[float, POSITIVE] = 1.0,
        n_mels: Annotated[int, AT_LEAST_1] = 40, n_fft: Annotated[int, AT_LEAST_1] = 256,
        win_ms: Annotated[float, POSITIVE] = 25.0, hop_ms: Annotated[float, POSITIVE] = 10.0,
        split: Literal["official", "speaker"] = "official", holdout_speaker: str | None = None,
        synth_per_digit: Annotated[int, AT_LEAST_1] = 100, synth_seed: Annotated[int, NON_NEGATIVE] = 0,
        patch_size: tuple[Annotated[int, AT_LEAST_1], Annotated[int, AT_LEAST_1]] = (8, 8),
        patch_stride: tuple[Annotated[int, AT_LEAST_1], Annotated[int, AT_LEAST_1]] = (8, 4),
        specaugment: bool = False, freq_mask: Annotated[int, NON_NEGATIVE] = 8,
        time_mask: Annotated[int, NON_NEGATIVE] = 10, time_shift: bool = False,
        label_smoothing: Annotated[float, FRACTION] = 0.0, mixup_alpha: Annotated[float, NON_NEGATIVE] = 0.0,
    ) -> None:
        super().__init__(name, dataset, data_dir, cache_dir, label_smoothing=label_smoothing,
                         mixup_alpha=mixup_alpha)
        readers = {"fsdd": self._read_fsdd, "synth_digits": self._read_synth}
        if dataset not in readers:
            raise BenchError(f"unknown speech dataset '{dataset}'; choose one of {', '.join(readers)}")
        if split not in ("official", "speaker"):
            raise BenchError(f"task.split must be 'official' or 'speaker', got '{split}'")
        if split == "speaker" and not holdout_speaker:
            raise BenchError("task.split=speaker needs task.holdout_speaker=NAME (leave one speaker out)")
        if sample_rate <= 0 or max_seconds <= 0 or n_mels <= 0 or hop_ms <= 0:
            raise BenchError("task.sample_rate, max_seconds, n_mels and hop_ms must all be > 0")
        self._read = readers[dataset]
        self.sample_rate, self.max_seconds = sample_rate, max_seconds
        self.log_mel = LogMel(sample_rate, n_mels, n_fft, win_ms, hop_ms)
        self.split, self.holdout_speaker = split, holdout_speaker
        self.synth_per_digit, self.synth_seed = synth_per_digit, synth_seed
        self.patch_size, self.patch_stride = tuple(patch_size), tuple(patch_stride)
        self.specaugment = specaugment
        self.time_shift = time_shift
        self.masks = nn.Sequential(
            torchaudio.transforms.FrequencyMasking(freq_mask, iid_masks=True),
            torchaudio.transforms.TimeMasking(time_mask, iid_masks=True),
        )

    # ------------------------------------------------------------------ raw audio
    def _read_fsdd(self) -> tuple[dict, list[np.ndarray], list[int]]:
        return read_fsdd(self.data_dir, self.dataset)

    def _read_synth(self) -> tuple[dict, list[np.ndarray], int]:
        from bench.data.speech_synth import draw_specs, synthesise

        specs = draw_specs(self.synth_per_digit, self.synth_seed)
        rate, waves = synthesise(specs, self.synth_seed)
        # Each clip gets an FSDD-like recording index 0-49 from its position among its digit's
        # clips, so the same split rules apply: the first 10% test, the next 10% validation.
        per_digit = self.synth_per_digit
        meta = {"digit": [s.digits[0] for s in specs], "speaker": [s.voice for s in specs],
                "index": [(i % per_digit) * 50 // per_digit for i in range(len(specs))]}
        return meta, waves, rate

    def _fingerprint(self) -> dict:
        if self.dataset == "fsdd":
            source = fsdd_fingerprint(self.data_dir, self.dataset)
        else:
            source = {"per_digit": self.synth_per_digit, "seed": self.synth_seed}
        return {
            "version": FEATURES_VERSION, "dataset": self.dataset, "source": source,
            "max_seconds": self.max_seconds, **self.log_mel.settings(),
        }

    # ------------------------------------------------------------------ features
    def features_path(self) -> Path:
        key = hashlib.sha256(json.dumps(self._fingerprint(), sort_keys=True).encode()).hexdigest()
        return cache_path(self.cache_dir, "speech") / f"{self.dataset}-{key[:16]}.pt"

    def compute_features(self) -> dict:
        meta, waves, rates = self._read()
        rates = rates if isinstance(rates, list) else [rates] * len(waves)
        max_samples = round(self.max_seconds * self.sample_rate)
        batch, lengths = [], []
        for wave, rate in zip(waves, rates, strict=True):
            signal, valid = pad_or_crop(self.log_mel.resample(wave, rate), max_samples)
            batch.append(signal)
            lengths.append(self.log_mel.frames(valid))
        log_mel = self.log_mel.batch(torch.stack(batch))  # (N, n_mels, frames)
        return {
            "features": log_mel,
            "lengths": torch.tensor(lengths).clamp(max=log_mel.shape[-1]),
            "labels": torch.tensor(meta["digit"]),
            "speakers": meta["speaker"],
            "index": torch.tensor(meta["index"]),
        }

    def load_features(self) -> tuple[dict, bool]:
        """Features from the cache while intact, else computed. Returns ``(features, was_cached)``."""
        return cached(self.features_path(), self.compute_features)

    def load(self, seed: int) -> Splits:
        feats, cached = self.load_features()
        speakers = feats["speakers"]
        index = feats["index"]
        if self.split == "speaker":
            known = sorted(set(speakers))
            if self.holdout_speaker not in known:
                raise BenchError(
                    f"unknown speaker '{self.holdout_speaker}'; choose one of {', '.join(known)}"
                )
            held = torch.tensor([s == self.holdout_speaker for s in speakers])
            test = held
            rule = f"test: every clip of speaker {self.holdout_speaker}; "
        else:
            test = index < 5  # FSDD's official split: recordings 0-4 are test
            held = test
            rule = "test: recordings 0-4 of every speaker; "
        val = ~held & (index >= 5) & (index < 10)  # fixed rule: recordings 5-9 of the rest
        train = ~held & ~val
        x, lengths, y = feats["features"].unsqueeze(1), feats["lengths"], feats["labels"]
        mean, std = frame_stats(x[train], lengths[train])
        x = normalise(x, lengths, mean, std)
        part = lambda m: TensorDataset(x[m], lengths[m], y[m])
        info = {
            "input_shape": list(x.shape[1:]),
            "num_classes": 10,
            "sizes": {"train": int(train.sum()), "val": int(val.sum()), "test": int(test.sum())},
            "split": rule + "validation: recordings 5-9 of the others; train: the rest",
            "features": {
                "kind": "log-mel (torchaudio MelSpectrogram)", **self.log_mel.settings(),
                "frames": x.shape[-1],
                "pad_crop": f"zero-pad at the end / centre-crop to {self.max_seconds} s",
                "normalisation": "per mel bin, mean/std of the train split's valid frames",
                "cached": cached, "cache_file": str(self.features_path()),
            },
            "specaugment": self.specaugment,
            "time_shift": self.time_shift,
            "mixup_alpha": self.mixup_alpha,
        }
        return Splits(part(train), part(val), part(test), info)

    def augment(self, batch: Batch) -> Batch:
        x, lengths, y = batch
        if self.time_shift:
            x, lengths = shift_in_time(x, lengths)
        if self.specaugment:
            x = self.masks(x)
        return x, lengths, y

    def mix_inputs(self, inputs: Batch, lam: float) -> Batch:
        """A blend of two clips lasts as long as the longer one (what an RNN reads)."""
        mixed, lengths = super().mix_inputs(inputs, lam)
        return mixed, torch.maximum(lengths, lengths.flip(0))

    # ------------------------------------------------------------------ models
    def input_kind(self, splits: Splits) -> FrameSequence:
        channels, n_mels, frames = splits.info["input_shape"]
        return FrameSequence(channels, n_mels, frames, splits.info["num_classes"], self.patch_size,
                             self.patch_stride)

