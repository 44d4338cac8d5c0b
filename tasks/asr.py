"""Speech recognition: an utterance's log-mel frames in, its word sequence out (CTC).

Datasets:
- ``fsdd_strings`` (data root): connected digit strings built from FSDD recordings, each
  utterance one speaker's recordings joined by random gaps of silence, with a little noise.
  Test utterances use recordings 0-4 only (FSDD's official split), validation utterances
  recordings 5-9 and training utterances 10-49, so validation is as disjoint from training as
  the test is, or with ``split=speaker`` one speaker only. A derived set with no
  published baseline: concatenated clips have no coarticulation between digits.
- ``synth_strings`` (offline): whole digit strings spoken by espeak-ng in many voices, rates
  and pitches, so digits do run into each other.
- ``audiofolder`` (your data, ``task.root``): audio files and a ``metadata.csv`` as Hugging
  Face's ``audiofolder`` reads them (``bench.data.audiofolder``).

Every model trains with the same CTC loss; validation decodes greedily, the test also with a
lexicon-constrained beam search (``tasks.ctc_decoding``), and the record says which gave the metric.
"""

from __future__ import annotations

import abc
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import torch
import torch.nn.functional as F
import torchaudio
from torch import Tensor, nn
from torch.utils.data import DataLoader

from bench.data.audio import LogMel, fsdd_fingerprint, read_fsdd
from bench.data.audiofolder import audiofolder_fingerprint, read_audiofolder
from bench.data.cache import cached
from bench.data.files import cache_path, rule_fingerprint
from bench.data.speech_synth import DIGIT_WORDS
from bench.errors import BenchError
from bench.records.attention_examples import TimeAttentionExample
from bench.task import SPLITS, Batch, BatchDataset, Splits, Task, metric_by_length, split_sizes
from models.constraints import AT_LEAST_1, FRACTION, NON_NEGATIVE, POSITIVE
from models.frontends import CONV2D_STRIDE
from models.inputs import FrameTranscription
from tasks.ctc_decoding import SPACE, BeamDecoder, Vocabulary, error_rates, greedy_ids, normalise_text

FEATURES_VERSION = 1  # bump when the feature code changes, so old caches are not reused
Utterance = tuple[str, str, np.ndarray, int]  # split, transcript, wave, sample rate


class Utterances(BatchDataset):
    """Variable-length utterances, padded per batch: ``(x (B, 1, bins, frames), lengths,
    targets (B, L), target_lengths, index)``."""

    def __init__(self, features: list[Tensor], targets: list[list[int]], references: list[str]) -> None:
        self.features, self.targets, self.references = features, targets, references
        self.lengths = torch.tensor([f.shape[-1] for f in features])

    def __len__(self) -> int:
        return len(self.features)

    def example_lengths(self) -> Tensor:
        return self.lengths

    def __getitem__(self, indices: list[int]) -> Batch:
        indices = [int(i) for i in indices]
        lengths = self.lengths[indices]
        x = torch.zeros(len(indices), 1, self.features[0].shape[0], int(lengths.max()))
        targets = torch.zeros(len(indices), max(len(self.targets[i]) for i in indices), dtype=torch.long)
        for row, i in enumerate(indices):
            x[row, 0, :, : lengths[row]] = self.features[i]
            targets[row, : len(self.targets[i])] = torch.tensor(self.targets[i])
        target_lengths = torch.tensor([len(self.targets[i]) for i in indices])
        return x, lengths, targets, target_lengths, torch.tensor(indices)


class UtteranceSource(abc.ABC):
    """One ASR dataset: its utterances, what identifies them for the feature cache, and how
    they are split. It reads its settings from the task."""

    default_sizes: dict[str, int] = {}
    note: str | None = None  # what a reader should know of the data (a derived set, say)

    def __init__(self, task: ASRTask) -> None:
        self.task = task

    @classmethod
    def check(cls, root: str | None) -> None:
        """A one-line error for settings this dataset cannot use (most take any)."""
        return

    @abc.abstractmethod
    def utterances(self) -> Iterator[Utterance]: ...

    @abc.abstractmethod
    def fingerprint(self) -> dict: ...

    @abc.abstractmethod
    def split_rule(self) -> str: ...

    def data_fingerprint(self) -> str | None:
        """See ``Task.data_fingerprint``: None for data the config fixes."""
        return None


class FsddStrings(UtteranceSource):
    default_sizes = {"train": 10000, "val": 1000, "test": 1000}
    note = ("derived from FSDD, no published baseline: recordings of single digits joined by silence, "
            "so there is no coarticulation between digits")

    def utterances(self) -> Iterator[Utterance]:
        t = self.task
        meta, waves, rates = read_fsdd(t.data_dir, t.dataset)
        recordings = [t.log_mel.resample(w, r).numpy() for w, r in zip(waves, rates, strict=True)]
        pools = fsdd_pools(meta, t.split, t.holdout_speaker)
        for split in SPLITS:
            rng = np.random.default_rng([t.synth_seed, SPLITS.index(split), 1])  # gaps and noise
            for digits, chosen in draw_strings(pools[split], t.sizes[split], t.min_words,
                                               t.max_words, [t.synth_seed, SPLITS.index(split)]):
                wave = join_with_silence([recordings[i] for i in chosen], t.gap_ms,
                                         t.log_mel.sample_rate, t.snr_db, rng)
                yield split, " ".join(DIGIT_WORDS[d] for d in digits), wave, t.log_mel.sample_rate

    def data_fingerprint(self) -> str | None:
        """The split rule: runs on the strings of the earlier rule (validation drawn from the
        training recordings) are other experiments, never resumed or averaged with these."""
        return rule_fingerprint(FSDD_STRINGS_RULE)

    def fingerprint(self) -> dict:
        t = self.task
        return {"fsdd": fsdd_fingerprint(t.data_dir, t.dataset), "rule": FSDD_STRINGS_RULE, "sizes": t.sizes,
                "words": [t.min_words, t.max_words], "gap_ms": t.gap_ms, "snr_db": t.snr_db,
                "seed": t.synth_seed, "split": t.split, "holdout_speaker": t.holdout_speaker}

    def split_rule(self) -> str:
        if self.task.split == "speaker":
            return (f"test: strings of speaker {self.task.holdout_speaker}'s recordings; validation: of "
                    f"the other speakers' recordings 5-9; train: of their others")
        return ("test: strings of recordings 0-4 (FSDD's official split); validation: of recordings "
                "5-9; train: of recordings 10-49, so no recording is in two splits")


class SynthStrings(UtteranceSource):
    default_sizes = {"train": 1200, "val": 150, "test": 150}
    note = "synthetic: espeak-ng speaks each whole string, no published baseline"

    def utterances(self) -> Iterator[Utterance]:
        from bench.data.speech_synth import draw_string_specs, spoken_text, synthesise  # espeak-ng: on use

        t = self.task
        counts = [t.sizes[s] for s in SPLITS]
        specs = draw_string_specs(sum(counts), t.min_words, t.max_words, t.synth_seed)
        rate, waves = synthesise(specs, t.synth_seed)
        splits = [s for s, n in zip(SPLITS, counts, strict=True) for _ in range(n)]
        for split, spec, wave in zip(splits, specs, waves, strict=True):
            yield split, spoken_text(spec.digits), wave, rate

    def fingerprint(self) -> dict:
        t = self.task
        return {"sizes": t.sizes, "words": [t.min_words, t.max_words], "seed": t.synth_seed}

    def split_rule(self) -> str:
        return "strings drawn at random from task.synth_seed, split by position"


class AudioFolder(UtteranceSource):
    @classmethod
    def check(cls, root: str | None) -> None:
        if not root:
            raise BenchError("task.dataset=audiofolder needs task.root=PATH, a folder with metadata.csv "
                             "(file_name, transcription[, split]) or train/, validation/, test/ folders")

    def utterances(self) -> Iterator[Utterance]:
        yield from read_audiofolder(self.task.root, self.task.val_fraction, self.task.synth_seed)

    def fingerprint(self) -> dict:
        t = self.task
        return {"audiofolder": audiofolder_fingerprint(t.root), "val_fraction": t.val_fraction,
                "seed": t.synth_seed}

    def split_rule(self) -> str:
        return "the audiofolder's own split column or folders"

    def data_fingerprint(self) -> str | None:
        return audiofolder_fingerprint(self.task.root)


SOURCES: dict[str, type[UtteranceSource]] = {
    "fsdd_strings": FsddStrings, "synth_strings": SynthStrings, "audiofolder": AudioFolder}


class ASRTask(Task):
    metric_name = "wer"
    higher_is_better = False

    def __init__(
        self, name: str, dataset: str, data_dir: str | None, cache_dir: str, root: str | None = None,
        units: Literal["word", "char"] = "word",
        sample_rate: Annotated[int, AT_LEAST_1] = 8000, n_mels: Annotated[int, AT_LEAST_1] = 40,
        n_fft: Annotated[int, AT_LEAST_1] = 256, win_ms: Annotated[float, POSITIVE] = 25.0,
        hop_ms: Annotated[float, POSITIVE] = 10.0,
        sizes: dict[str, Annotated[int, AT_LEAST_1]] | None = None,
        min_words: Annotated[int, AT_LEAST_1] = 1, max_words: Annotated[int, AT_LEAST_1] = 7,
        gap_ms: tuple[Annotated[float, NON_NEGATIVE], Annotated[float, NON_NEGATIVE]] = (50.0, 300.0),
        snr_db: float = 30.0, synth_seed: Annotated[int, NON_NEGATIVE] = 0,
        split: Literal["official", "speaker"] = "official", holdout_speaker: str | None = None,
        val_fraction: Annotated[float, FRACTION] = 0.1,
        patch_frames: Annotated[int, AT_LEAST_1] = 8, patch_stride: Annotated[int, AT_LEAST_1] = 4,
        frontend: Literal["patch", "conv2d"] = "patch", frontend_channels: Annotated[int, AT_LEAST_1] = 16,
        specaugment: bool = True, freq_mask: Annotated[int, NON_NEGATIVE] = 8,
        time_mask: Annotated[int, NON_NEGATIVE] = 10,
        beam_size: Annotated[int, AT_LEAST_1] = 8, num_samples: Annotated[int, NON_NEGATIVE] = 5,
        length_buckets: tuple[Annotated[int, AT_LEAST_1], ...] = (2, 4, 6),
    ) -> None:
        super().__init__(name, dataset, data_dir, cache_dir)
        if dataset not in SOURCES:
            raise BenchError(f"unknown asr dataset '{dataset}'; choose one of {', '.join(SOURCES)}")
        SOURCES[dataset].check(root)
        if min_words > max_words:
            raise BenchError(f"task.min_words={min_words} is more than task.max_words={max_words}")
        if gap_ms[0] > gap_ms[1]:
            raise BenchError(f"task.gap_ms={list(gap_ms)} must be [shortest, longest]")
        if split == "speaker" and not holdout_speaker:
            raise BenchError("task.split=speaker needs task.holdout_speaker=NAME (leave one speaker out)")
        if patch_stride > patch_frames:
            raise BenchError(f"task.patch_stride={patch_stride} skips frames between patches of "
                             f"{patch_frames}; make it at most task.patch_frames")
        self.root, self.units = root, units
        self.log_mel = LogMel(sample_rate, n_mels, n_fft, win_ms, hop_ms)
        self.sizes = split_sizes("task.sizes", sizes, SOURCES[dataset].default_sizes)
        self.min_words, self.max_words, self.gap_ms, self.snr_db = min_words, max_words, tuple(gap_ms), snr_db
        self.synth_seed, self.split, self.holdout_speaker = synth_seed, split, holdout_speaker
        self.val_fraction = val_fraction
        self.patch_frames, self.patch_stride = patch_frames, patch_stride
        self.frontend, self.frontend_channels = frontend, frontend_channels
        self.specaugment = specaugment
        self.masks = nn.Sequential(
            torchaudio.transforms.FrequencyMasking(freq_mask, iid_masks=True),
            torchaudio.transforms.TimeMasking(time_mask, iid_masks=True),
        )
        self.beam_size, self.num_samples = beam_size, num_samples
        self.length_buckets = tuple(length_buckets)
        self.vocab: Vocabulary | None = None
        self.beam: BeamDecoder | None = None
        self.source = SOURCES[dataset](self)

    def data_fingerprint(self) -> str | None:
        return self.source.data_fingerprint()

    def _fingerprint(self) -> dict:
        return {"version": FEATURES_VERSION, "dataset": self.dataset, "source": self.source.fingerprint(),
                **self.log_mel.settings()}

    def features_path(self) -> Path:
        key = hashlib.sha256(json.dumps(self._fingerprint(), sort_keys=True).encode()).hexdigest()
        return cache_path(self.cache_dir, "asr") / f"{self.dataset}-{key[:16]}.pt"

    def compute_features(self) -> dict:
        """Every utterance's log-mel frames, concatenated along time (one tensor to cache)."""
        frames, lengths, splits, transcripts = [], [], [], []
        for split, transcript, wave, rate in self.source.utterances():
            features = self.log_mel.features(wave, rate)
            frames.append(features)
            lengths.append(features.shape[-1])
            splits.append(SPLITS.index(split))
            transcripts.append(normalise_text(transcript))
        return {"frames": torch.cat(frames, dim=-1), "lengths": torch.tensor(lengths),
                "splits": torch.tensor(splits), "transcripts": transcripts}

    # ------------------------------------------------------------------ splits
    def load(self, seed: int) -> Splits:
        feats, was_cached = cached(self.features_path(), self.compute_features)
        utterances = list(torch.split(feats["frames"], feats["lengths"].tolist(), dim=-1))
        members = {s: [i for i, k in enumerate(feats["splits"].tolist()) if k == n]
                   for n, s in enumerate(SPLITS)}
        for split, rows in members.items():
            if not rows:
                raise BenchError(f"dataset '{self.dataset}': the {split} split has no utterances; "
                                 f"give it some (task.sizes, or the audiofolder's split column/folder)")
        transcripts = feats["transcripts"]
        if self.units == "char" and (marked := next((s for s in transcripts if SPACE in s), None)):
            raise BenchError(f"dataset '{self.dataset}': the transcript {marked!r} holds '{SPACE}', the "
                             f"word separator of task.units=char, so it could never be scored right; "
                             f"remove it from the transcripts or use task.units=word")
        train_text = [transcripts[i] for i in members["train"]]
        self.vocab = Vocabulary.from_transcripts(self.units, train_text)
        train_words = sorted({w for text in train_text for w in text.split()})
        self.beam = BeamDecoder(self.vocab, train_words, self.beam_size) if self.beam_size > 1 else None
        train_frames = torch.cat([utterances[i] for i in members["train"]], dim=-1)
        mean, std = train_frames.mean(-1, keepdim=True), train_frames.std(-1, keepdim=True).clamp_min(1e-5)

        def part(split: str) -> Utterances:
            rows = members[split]
            return Utterances([(utterances[i] - mean) / std for i in rows],
                              [self.vocab.encode(transcripts[i]) for i in rows],
                              [transcripts[i] for i in rows])

        datasets = {split: part(split) for split in SPLITS}
        known = set(train_words)
        test_words = [w for text in datasets["test"].references for w in text.split()]
        info = {
            "sizes": {split: len(d) for split, d in datasets.items()},
            "split": self.source.split_rule(),
            "units": self.units,
            "vocab_size": len(self.vocab),
            "test_words_outside_vocabulary": sum(w not in known for w in test_words),
            "words_per_utterance": {split: [min(n), max(n)] for split, d in datasets.items()
                                    for n in [[len(t.split()) for t in d.references]]},
            "max_frames": int(feats["lengths"].max()),
            "features": {"kind": "log-mel (torchaudio MelSpectrogram)", **self.log_mel.settings(),
                         "normalisation": "per mel bin, mean/std of the train split's frames",
                         "cached": was_cached, "cache_file": str(self.features_path())},
            "specaugment": self.specaugment,
        }
        if self.source.note:
            info["dataset_note"] = self.source.note
        return Splits(datasets["train"], datasets["val"], datasets["test"], info)

    # ------------------------------------------------------------------ models
    def input_kind(self, splits: Splits) -> FrameTranscription:
        stride = CONV2D_STRIDE if self.frontend == "conv2d" else self.patch_stride
        return FrameTranscription(1, self.log_mel.n_mels, splits.info["max_frames"],
                                  splits.info["vocab_size"], self.patch_frames, stride,
                                  self.frontend, self.frontend_channels)

    def model_inputs(self, batch: Batch) -> Batch:
        return batch[:2]

    def augment(self, batch: Batch) -> Batch:
        if not self.specaugment:
            return batch
        x, *rest = batch
        return (self.masks(x), *rest)

    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        x, lengths, targets, target_lengths, _ = batch
        log_probs, steps = model(x, lengths)
        return ctc_loss(log_probs, steps, targets, target_lengths, "mean")

    def infer(self, model: nn.Module, inputs: Batch) -> object:
        """Inference is transcription: greedy CTC decoding of the batch."""
        return greedy_ids(*model(*inputs))

    @torch.no_grad()
    def attention_example(self, model: nn.Module, splits: Splits,
                          device: torch.device) -> TimeAttentionExample | None:
        """Each head's last-layer attention between the time steps of the first test utterance."""
        if not hasattr(model, "attention_over_time"):
            return None
        x, lengths, *_ = splits.test[[0]]
        heads = model.attention_over_time(x.to(device), lengths.to(device))[0].cpu()
        return TimeAttentionExample(input=x[0, 0, :, : int(lengths[0])], transcript=splits.test.references[0],
                                    heads=heads)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, loader: DataLoader, device: torch.device,
                 final: bool = False) -> dict:
        dataset: Utterances = loader.dataset
        greedy, beam = [""] * len(dataset), [""] * len(dataset)
        loss_sum = 0.0
        for batch in loader:
            x, lengths, targets, target_lengths, index = self.to_device(batch, device)
            log_probs, steps = model(x, lengths)
            loss_sum += ctc_loss(log_probs, steps, targets, target_lengths, "sum").item()
            for i, ids in zip(index.tolist(), greedy_ids(log_probs, steps), strict=True):
                greedy[i] = self.vocab.decode(ids)
            if final and self.beam is not None:
                for i, text in zip(index.tolist(), self.beam(log_probs, steps), strict=True):
                    beam[i] = text
        refs = dataset.references
        scores = error_rates(refs, greedy)
        result = {"metric": scores["wer"], "loss": loss_sum / max(len(dataset), 1)}
        if not final:
            return result
        hyps = beam if self.beam is not None else greedy
        if self.beam is not None:
            scores = error_rates(refs, hyps)
        result.update({
            "metric": scores["wer"],
            **{k: v for k, v in scores.items() if k != "wer"},
            "wer_greedy": result["metric"],
            "decoding": (f"lexicon-constrained CTC beam search (torchaudio ctc_decoder), beam "
                         f"{self.beam_size}, no language model; validation: greedy"
                         if self.beam is not None else "greedy CTC (best path)"),
            "metric_by_length": metric_by_length(
                [len(r.split()) for r in refs], self.length_buckets, "words", "wer",
                lambda members: error_rates([refs[i] for i in members], [hyps[i] for i in members])["wer"]),
            "samples": [{"reference": r, "hypothesis": h}
                        for r, h in list(zip(refs, hyps, strict=True))[: self.num_samples]],
        })
        return result


def ctc_loss(log_probs: Tensor, steps: Tensor, targets: Tensor, target_lengths: Tensor,
             reduction: str) -> Tensor:
    """CTC (blank 0) on (B, T, V) log-probs; an utterance with fewer steps than its transcript
    needs contributes zero rather than infinity."""
    return F.ctc_loss(log_probs.float().transpose(0, 1), targets, steps, target_lengths, blank=0,
                      reduction=reduction, zero_infinity=True)


# How fsdd_strings splits its recordings; part of its records' data fingerprint.
FSDD_STRINGS_RULE = "test 0-4, validation 5-9, train 10-49"


def fsdd_pools(meta: dict[str, list], split: str, holdout_speaker: str | None) -> dict[str, dict]:
    """The recordings each split may draw from, as ``{speaker: {digit: [recording number]}}``:
    test from recordings 0-4 (or, by speaker, the held-out speaker's), validation from 5-9 of
    the rest and train from the others, as the isolated-digit task splits them. Validation that
    shared recordings with training would reward remembering recordings, which the test cannot."""
    speakers = sorted(set(meta["speaker"]))
    if split == "speaker" and holdout_speaker not in speakers:
        raise BenchError(f"unknown speaker '{holdout_speaker}'; choose one of {', '.join(speakers)}")
    pools: dict[str, dict] = {s: {} for s in SPLITS}
    recordings = zip(meta["digit"], meta["speaker"], meta["index"], strict=True)
    for n, (digit, speaker, index) in enumerate(recordings):
        held = speaker == holdout_speaker if split == "speaker" else index < 5
        name = "test" if held else "val" if 5 <= index < 10 else "train"
        pools[name].setdefault(speaker, {}).setdefault(digit, []).append(n)
    return pools


def draw_strings(pool: dict[str, dict], count: int, min_words: int, max_words: int,
                 seed: list[int]) -> list[tuple[list[int], list[int]]]:
    """``count`` digit strings, each spoken by one speaker of ``pool``: (digits, recordings)."""
    rng = np.random.default_rng(seed)
    speakers = sorted(s for s, digits in pool.items() if len(digits) == 10)
    if not speakers:
        raise BenchError("dataset 'fsdd_strings': no speaker has recordings of all ten digits in this "
                         "split; check the FSDD files under fsdd/recordings")
    strings = []
    for _ in range(count):
        speaker = speakers[rng.integers(len(speakers))]
        digits = rng.integers(0, 10, size=int(rng.integers(min_words, max_words + 1))).tolist()
        strings.append((digits, [pool[speaker][d][rng.integers(len(pool[speaker][d]))] for d in digits]))
    return strings


def join_with_silence(clips: list[np.ndarray], gap_ms: tuple[float, float], rate: int, snr_db: float,
                      rng: np.random.Generator) -> np.ndarray:
    """The clips in order, a random gap of silence before, between and after them, then white
    noise at ``snr_db`` below the speech's power over the whole utterance."""
    parts = []
    for clip in clips:
        parts += [np.zeros(round(rng.uniform(*gap_ms) * rate / 1000), np.float32), clip.astype(np.float32)]
    parts.append(np.zeros(round(rng.uniform(*gap_ms) * rate / 1000), np.float32))
    wave = np.concatenate(parts)
    power = float(np.mean(np.concatenate(clips) ** 2)) if sum(c.size for c in clips) else 0.0
    noise = np.sqrt(power / 10 ** (snr_db / 10)) * rng.standard_normal(wave.shape)
    return (wave + noise).astype(np.float32)
