"""The bad-input catalogue (docs/errors.md): every entry is a mistake a user can make, run
through the command line as they would. Each must give one line on stderr that says what is
wrong, a non-zero exit, no traceback, and no run recorded as ok."""

from __future__ import annotations

import contextlib
import gzip
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from bench.data.files import SOURCES
from bench.setup.build import check_model_keys
from bench.setup.compose import CONF_DIR, compose_config, resolved_config
from tests.conftest import ROOT, run_cli

DIGITS = ["run", "task=image", "task.dataset=digits", "trainer.max_steps=2", "trainer.infer_iters=1"]
NUMBERS = ["run", "task=translation", "task.dataset=numbers", "task.vocab_size=150",
           "task.numbers_sizes={train:200,val:20,test:20}", "model.dim=32", "model.depth=1",
           "trainer.max_steps=2"]


@dataclass
class Case:
    """One catalogue entry: the command, an optional setup of files under ``tmp``, and the
    words the one-line message must contain."""

    args: list[str]
    message: str
    setup: Callable[[Path], list[str]] | None = None  # returns extra args
    env: dict[str, str] = field(default_factory=dict)


def fake_files(folder: str, names: list[str], content: bytes = b"not the real file"):
    """A data root with ``names`` under ``folder``, holding the wrong bytes."""
    def setup(tmp: Path) -> list[str]:
        for name in names:
            path = tmp / "data" / folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        return [f"data_dir={tmp / 'data'}"]
    return setup


def audiofolder(metadata: str, files: dict[str, bytes | None]):
    """An audiofolder under tmp/mine: ``metadata.csv`` and each named file, a short tone where
    its bytes are None."""
    def setup(tmp: Path) -> list[str]:
        root = tmp / "mine"
        root.mkdir()
        (root / "metadata.csv").write_text(metadata)
        for name, content in files.items():
            if content is None:
                tone = 0.3 * np.sin(np.arange(4000) / 8000 * 2 * np.pi * 440).astype(np.float32)
                soundfile.write(root / name, tone, 8000)
            else:
                (root / name).write_bytes(content)
        return [f"task.root={root}"]
    return setup


def folder_without_metadata(tmp: Path) -> list[str]:
    (tmp / "mine" / "train").mkdir(parents=True)
    return [f"task.root={tmp / 'mine'}"]


def image_folder(files: dict[str, bytes | None]):
    """An imagefolder under tmp/mine: each named file, a small PNG where its bytes are None."""
    def setup(tmp: Path) -> list[str]:
        from PIL import Image

        root = tmp / "mine"
        for name, content in files.items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if content is None:
                Image.new("RGB", (6, 5), (200, 10, 10)).save(path)
            else:
                path.write_bytes(content)
        (root / "train").mkdir(parents=True, exist_ok=True)
        return [f"task.root={root}"]
    return setup


IMAGE_FOLDER = ["run", "task=image", "task.dataset=imagefolder", "trainer.max_steps=2",
                "trainer.infer_iters=1"]
TRAIN_IMAGES = {f"train/{c}/{i}.png": None for c in ("cat", "dog") for i in range(2)}
GOOD_IMAGES = {**TRAIN_IMAGES, **{name.replace("train/", "test/"): None for name in TRAIN_IMAGES}}

ASR_FOLDER = ["run", "task=asr", "task.dataset=audiofolder", "trainer.max_steps=2", "trainer.infer_iters=1"]
TONES = {"a.wav": None, "b.wav": None, "c.wav": None}


def jsonl_folder(files: dict[str, str]):
    def setup(tmp: Path) -> list[str]:
        root = tmp / "pairs"
        root.mkdir()
        for split, text in files.items():
            (root / f"{split}.jsonl").write_text(text)
        return [f"task.root={root}"]
    return setup


TUNE = ["tune", "task=image", "task.dataset=digits", "model=attention,gru"]
OUTSIDE = Path(__file__).parent / "outside"


def search_space(shared: str):
    """A search space for the image task in a folder on hydra.searchpath, with ``shared``."""
    def setup(tmp: Path) -> list[str]:
        (tmp / "my_conf" / "search").mkdir(parents=True)
        (tmp / "my_conf" / "search" / "image.yaml").write_text(f"shared:\n  {shared}\n")
        return [f"hydra.searchpath=[file://{tmp / 'my_conf'}]"]
    return setup


def search_space_text(text: str):
    """A search space for the image task in a folder on hydra.searchpath, holding ``text``."""
    def setup(tmp: Path) -> list[str]:
        (tmp / "my_conf" / "search").mkdir(parents=True)
        (tmp / "my_conf" / "search" / "image.yaml").write_text(text)
        return [f"hydra.searchpath=[file://{tmp / 'my_conf'}]"]
    return setup


def storage_under_a_file(tmp: Path) -> list[str]:
    (tmp / "a-file").write_text("not a folder")
    return [f"tune.storage=sqlite:///{tmp / 'a-file' / 'optuna.db'}"]


JSONL = ["run", "task=summarization", "task.dataset=jsonl", "trainer.max_steps=2", "trainer.infer_iters=1"]
GOOD_LINE = '{"document": "a document", "summary": "its summary"}\n'


def fsdd_speaker_amy(tmp: Path) -> list[str]:
    recordings = tmp / "data" / "fsdd" / "recordings"
    recordings.mkdir(parents=True)
    for digit in range(10):
        for index in range(8):
            soundfile.write(recordings / f"{digit}_amy_{index}.wav",
                            np.random.default_rng(index).normal(0, 0.1, 4000).astype(np.float32), 8000)
    return [f"data_dir={tmp / 'data'}"]


def corrupt_wav(tmp: Path) -> list[str]:
    extra = fsdd_speaker_amy(tmp)
    (tmp / "data" / "fsdd" / "recordings" / "4_amy_9.wav").write_bytes(b"RIFF\x00\x00garbage")
    return extra


def a_file(tmp: Path) -> Path:
    path = tmp / "a-file"
    path.write_text("not a folder")
    return path


def malformed_record(tmp: Path) -> list[str]:
    run = tmp / "r" / "runs" / "20261202-000000-image-digits-attention-s0-00000000-abcdef"
    run.mkdir(parents=True)
    (run / "record.json").write_text('{"status": "ok", "seed"')  # cut off mid-write by hand
    return [str(tmp / "r")]


def malformed_record_of_this_run(tmp: Path) -> list[str]:
    """A hand-damaged record with the hash of the run about to start, so resume must read it."""
    from hydra import compose, initialize_config_dir

    from bench.records.record import config_hash
    from bench.setup.compose import CONF_DIR

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        digest = config_hash(resolved_config(compose("config", overrides=DIGITS[1:])))
    run = tmp / "r" / "runs" / f"20261202-000000-image-digits-attention-s0-{digest[:8]}-abcdef"
    run.mkdir(parents=True)
    (run / "record.json").write_text("{")
    return []


def nan_wav(tmp: Path) -> list[str]:
    extra = fsdd_speaker_amy(tmp)
    soundfile.write(tmp / "data" / "fsdd" / "recordings" / "3_amy_2.wav",
                    np.full(4000, np.nan, dtype=np.float32), 8000, subtype="FLOAT")
    return extra


def record_file(text: str) -> Callable[[Path], list[str]]:
    """A results dir whose one run record holds ``text``."""
    def setup(tmp: Path) -> list[str]:
        run = tmp / "results" / "runs" / "20261202-000000-image-digits-attention-s0-00000000-abcdef"
        run.mkdir(parents=True)
        (run / "record.json").write_text(text)
        return [str(tmp / "results")]
    return setup


OK_RECORD = {"status": "ok", "task": "image", "dataset": "digits", "model": "gru", "seed": 0,
             "config_hash": "abc", "run_id": "r1", "metric_name": "accuracy", "test_metric": 0.5,
             "params": 10, "run_dir": "runs/r1"}


def output_blocked(name: str) -> Callable[[Path], list[str]]:
    """A results dir with one good record, where a folder sits in the way of output ``name``."""
    def setup(tmp: Path) -> list[str]:
        extra = record_file(json.dumps(OK_RECORD))(tmp)
        (tmp / "results" / name).mkdir()
        return extra
    return setup


HELD_LOCKS: list[int] = []  # descriptors kept open (and locked) until the test process ends


def a_run_in_progress(tmp: Path) -> list[str]:
    """A results dir with one ok record and a run that holds its lock now (this process)."""
    import fcntl
    import os

    extra = record_file(json.dumps(OK_RECORD))(tmp)
    lock = tmp / "results" / "locks" / "abc-s1.lock"
    lock.parent.mkdir()
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    HELD_LOCKS.append(fd)
    return extra


def empty_train_files(tmp: Path) -> list[str]:
    """A Multi30k-style pair the project has no checksums for, whose train files are empty."""
    for split in ("train", "val", "test_2016_flickr"):
        for lang in ("fr", "cs"):
            path = tmp / "data" / "multi30k" / f"{split}.{lang}.gz"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(gzip.compress(b"" if split == "train" else b"une phrase\n" * 5))
    return [f"data_dir={tmp / 'data'}"]


FMNIST = list(SOURCES["fashion-mnist"].checksums())
MULTI30K = list(SOURCES["multi30k"].checksums())

CATALOGUE: dict[str, Case] = {
    "unknown-command": Case(["train"], "unknown command 'train'"),
    "unknown-task": Case(["run", "task=video"],
                         "unknown task 'video'; choose one of: asr, image, recall, speech, summarization, "
                         "translation"),
    "unknown-model": Case(["run", "model=transformer"],
                          "unknown model 'transformer'; choose one of: attention, gru, lstm"),
    "unknown-dataset": Case(["run", "task.dataset=cifar"], "unknown image dataset 'cifar'"),
    "unknown-key": Case([*DIGITS, "model.foo=1"], "unknown config key 'model.foo'"),
    "unknown-pos-encoding": Case([*DIGITS, "model.pos_encoding=fourier"],
                                 "model.pos_encoding must be one of sinusoidal, learned, rotary, none"),
    "scale-unknown": Case([*DIGITS, "model=lstm", "scale=xxl"],
                          "scale=xxl is not a size of attention on task=image; choose one of s, xs, m, l"),
    "task-model-setting-unread": Case([*DIGITS, "model=lstm", "+task.models.rnn.depht=3"],
                                      "task.models.rnn.depht is not a setting of model=lstm"),
    "reference-sized-by-matching": Case([*DIGITS, "model=gru", "model@reference=lstm"],
                                        "the reference model (lstm) is itself sized by matching"),
    "train-fraction-below-a-batch": Case([*DIGITS, "task.train_fraction=1e-9"],
                                         "less than one batch (trainer.batch_size=128)"),
    "train-fraction-impossible": Case([*DIGITS, "task.train_fraction=0"],
                                      "task.train_fraction must be > 0 and <= 1, got 0"),
    "data-root-unset": Case(["run", "task.dataset=fashion_mnist"],
                            "set BENCH_DATA_DIR or pass data_dir=PATH", env={"BENCH_DATA_DIR": ""}),
    "data-root-missing": Case(["run", "task.dataset=fashion_mnist", "data_dir=/nonexistent/data"],
                              "folder /nonexistent/data/fashion-mnist not found"),
    "dataset-file-missing": Case(["run", "task.dataset=fashion_mnist"], "missing train-labels-idx1-ubyte.gz",
                                 setup=fake_files("fashion-mnist", FMNIST[:-1])),
    "corrupt-idx": Case(["run", "task.dataset=fashion_mnist"], "is corrupt (sha256 mismatch)",
                        setup=fake_files("fashion-mnist", FMNIST)),
    "corrupt-gz": Case(["run", "task=translation", "task.dataset=multi30k"],
                       ".gz is corrupt (sha256 mismatch)",
                       setup=fake_files("multi30k", MULTI30K, b"\x1f\x8b\x08truncated")),
    "truncated-gz": Case(["run", "task=translation", "task.dataset=multi30k", "task.src=fr", "task.tgt=cs"],
                         "train.fr.gz (Compressed file ended before the end-of-stream marker was "
                         "reached); the file is corrupt",
                         setup=fake_files("multi30k", [f"{split}.{lang}.gz" for split in
                                                       ("train", "val", "test_2016_flickr")
                                                       for lang in ("fr", "cs")],
                                          gzip.compress(b"a sentence\n" * 50)[:-10])),
    "corrupt-wav": Case(["run", "task=speech", "task.dataset=fsdd"], "4_amy_9.wav", setup=corrupt_wav),
    "empty-split": Case([*DIGITS, "task.val_size=0"], "the val split is empty"),
    "heads-do-not-divide-width": Case([*DIGITS, "model.num_heads=3"],
                                      "model.num_heads=3 does not divide model.dim=64"),
    "patch-larger-than-input": Case([*DIGITS, "task.patch_size=16"], "larger than the input"),
    "unread-model-key": Case([*DIGITS, "+model.patch_embed=shifted"],
                             "model.patch_embed is not a model setting"),
    "unknown-patch-embedding": Case([*DIGITS, "task.patch_embed=conv"],
                                    "unknown task.patch_embed 'conv'; choose one of linear, shifted"),
    "batch-size-zero": Case([*DIGITS, "trainer.batch_size=0"], "trainer.batch_size must be >= 1"),
    "epochs-negative": Case([*DIGITS, "trainer.epochs=-2"], "trainer.epochs must be >= 1"),
    "max-steps-zero": Case([*DIGITS, "trainer.max_steps=0"], "trainer.max_steps must be >= 1"),
    "lr-not-positive": Case([*DIGITS, "trainer.lr=0"], "trainer.lr must be > 0"),
    "ema-decay-out-of-range": Case([*DIGITS, "trainer.ema_decay=1"],
                                   "trainer.ema_decay must be > 0 and < 1"),
    "unknown-dtype": Case([*DIGITS, "trainer.dtype=fp16"], "trainer.dtype must be float32 or bf16"),
    "unknown-compile-backend": Case([*DIGITS, "trainer.compile=turbo"],
                                    "trainer.compile must be true, false or a torch.compile backend"),
    "dropout-out-of-range": Case([*DIGITS, "model.dropout=1.5"], "model.dropout must be >= 0 and < 1"),
    "mixup-negative": Case([*DIGITS, "task.mixup_alpha=-1"], "task.mixup_alpha must be >= 0"),
    "not-a-number": Case([*DIGITS, "model.dim=wide"], "model.dim must be an integer"),
    "negative-seed": Case([*DIGITS, "seed=-1"], "seed must be >= 0"),
    "bad-progress": Case([*DIGITS, "progress=maybe"], "progress must be auto, true or false"),
    "impossible-value-in-sweep": Case([*DIGITS[:1], "-m", *DIGITS[1:], "model.num_heads=4,3"],
                                      "model.num_heads=3 does not divide"),
    "language-pair-absent": Case(["run", "task=translation", "task.dataset=multi30k", "task.tgt=fr"],
                                 "no de-fr pair", setup=fake_files("multi30k", MULTI30K)),
    "src-equals-tgt": Case(["run", "task=translation", "task.src=en", "task.tgt=en"],
                           "task.src and task.tgt are both 'en'"),
    "beam-size-zero": Case([*NUMBERS, "task.beam_size=0"], "task.beam_size must be >= 1"),
    "unknown-speaker": Case(["run", "task=speech", "task.dataset=fsdd", "task.split=speaker",
                             "task.holdout_speaker=bob"], "unknown speaker 'bob'; choose one of amy",
                            setup=fsdd_speaker_amy),
    "results-dir-not-writable": Case(DIGITS, "cannot create results_dir",
                                     setup=lambda tmp: [f"results_dir={a_file(tmp) / 'r'}"]),
    "cache-dir-not-writable": Case(NUMBERS, "cannot create cache dir",
                                   setup=lambda tmp: [f"cache_dir={a_file(tmp) / 'c'}"]),
    "malformed-record-in-table": Case(["table"], "malformed run record", setup=malformed_record),
    "malformed-record-in-report": Case(["report"], "malformed run record", setup=malformed_record),
    "malformed-record-on-resume": Case(DIGITS, "malformed run record",
                                       setup=malformed_record_of_this_run),
    "no-records-to-report": Case(["report", "/nonexistent/results"], "no run records under"),
    "publish-no-runs": Case(["publish", "/nonexistent/results"], "no runs under"),
    "publish-while-running": Case(["publish"], "a run is in progress", setup=a_run_in_progress),
    "publish-nothing-complete": Case(["publish"], "no complete record",
                                     setup=record_file(json.dumps({**OK_RECORD, "status": "interrupted"}))),
    "unknown-data-name": Case(["data", "download", "cifar10"], "unknown dataset 'cifar10'"),
    "cuda-absent": Case([*DIGITS, "device=cuda"], "no CUDA device is visible"),
    # Settings checked against their declared types and ranges (bench/setup/schema.py).
    "negative-grad-clip": Case([*DIGITS, "trainer.grad_clip=-1"], "trainer.grad_clip must be >= 0, got -1"),
    "not-a-bool": Case([*DIGITS, "task.hflip=maybe"], "task.hflip must be true or false, got 'maybe'"),
    "trainer-key-typo": Case([*DIGITS, "+trainer.max_step=5"],
                             "trainer.max_step is not a trainer setting, so it would be ignored; "
                             "did you mean trainer.max_steps?"),
    "task-key-typo": Case([*DIGITS, "+task.patchsize=2"], "did you mean task.patch_size?"),
    "top-level-key-typo": Case([*DIGITS, "+sede=1"], "sede is not a top-level setting"),
    "betas-out-of-range": Case([*DIGITS, "trainer.betas=[2,0.5]"],
                               "trainer.betas[0] must be >= 0 and < 1, got 2"),
    "betas-wrong-length": Case([*DIGITS, "trainer.betas=[0.9]"], "trainer.betas must be a list of 2"),
    "lr-nan": Case([*DIGITS, "trainer.lr=nan"], "trainer.lr must be a finite number, got nan"),
    "warmup-infinite": Case([*DIGITS, "trainer.warmup_epochs=inf"], "trainer.warmup_epochs must be a finite"),
    "eval-batch-size-zero": Case([*DIGITS, "trainer.eval_batch_size=0"],
                                 "trainer.eval_batch_size must be >= 1"),
    "min-lr-ratio-above-one": Case([*DIGITS, "trainer.min_lr_ratio=2"],
                                   "trainer.min_lr_ratio must be >= 0 and <= 1, got 2"),
    "num-workers-negative": Case([*DIGITS, "trainer.num_workers=-1"], "trainer.num_workers must be >= 0"),
    "unknown-logger": Case([*DIGITS, "logger=wandb"], "logger must be one of tensorboard, mlflow, csv, none"),
    "unknown-batching": Case([*DIGITS, "trainer.batching=sorted"],
                             "trainer.batching must be one of random, bucketed"),
    "bucketed-fixed-length-data": Case([*DIGITS, "trainer.batching=bucketed"],
                                       "trainer.batching=bucketed needs examples of varying length"),
    "max-tokens-zero": Case([*NUMBERS, "trainer.batching=bucketed", "trainer.max_tokens=0"],
                            "trainer.max_tokens must be >= 1, got 0"),
    "max-tokens-without-bucketing": Case([*NUMBERS, "trainer.max_tokens=512"],
                                         "trainer.max_tokens=512 sizes bucketed batches: add "
                                         "trainer.batching=bucketed"),
    "max-tokens-below-longest-example": Case([*NUMBERS, "trainer.batching=bucketed", "trainer.max_tokens=2"],
                                             "trainer.max_tokens=2 is less than the longest training "
                                             "example"),
    "seed-not-whole": Case([*DIGITS, "seed=1.5"], "seed must be an integer, got 1.5"),
    "force-not-bool": Case([*DIGITS, "force=maybe"], "force must be true or false"),
    "impossible-value-in-suite-sweep": Case(["run", "-m", "suite=claims_heads", "model.dim=12"],
                                            "model.num_heads=8 does not divide model.dim=12"),
    "mlp-ratio-negative-in-sweep": Case([*DIGITS[:1], "-m", *DIGITS[1:], "model.mlp_ratio=2,-1"],
                                        "model.mlp_ratio must be > 0, got -1"),
    "unknown-pool": Case([*DIGITS, "+model.pool=max"], "model.pool must be one of token, avg"),
    "unknown-rnn-cell": Case([*DIGITS, "model=lstm", "model.cell=rnn"],
                             "model.cell must be one of lstm, gru"),
    "model-builder-not-importable": Case([*DIGITS, "model._target_=nowhere.build"],
                                         "model._target_ 'nowhere.build' cannot be imported"),
    "patch-size-zero": Case([*DIGITS, "task.patch_size=0"], "task.patch_size must be >= 1, got 0"),
    "label-smoothing-one": Case([*DIGITS, "task.label_smoothing=1"],
                                "task.label_smoothing must be >= 0 and < 1"),
    "window-zero": Case(["run", "task=speech", "task.dataset=synth_digits", "task.win_ms=0"],
                        "task.win_ms must be > 0, got 0"),
    "unknown-speech-split": Case(["run", "task=speech", "task.split=random"],
                                 "task.split must be one of official, speaker, got 'random'"),
    "patch-not-a-pair": Case(["run", "task=speech", "task.patch_size=[8]"],
                             "task.patch_size must be a list of 2"),
    "length-buckets-zero": Case([*NUMBERS, "task.length_buckets=[0,5]"],
                                "task.length_buckets[0] must be >= 1, got 0"),
    "split-sizes-misnamed": Case(["run", "task=recall", "+task.sizes.tset=5"],
                                 "task.sizes must name exactly train, val and test, got train, val, "
                                 "test, tset"),
    "split-size-zero": Case(["run", "task=recall", "task.sizes={train:10,val:0,test:5}"],
                            "task.sizes.val must be >= 1, got 0"),
    "sequence-too-short": Case(["run", "task=recall", "task.seq_len=1"], "task.seq_len must be >= 2, got 1"),
    "tokenizer-refuses": Case([*NUMBERS, "task.vocab_size=9", "task.sp_model_type=bpe"],
                              "SentencePiece cannot train a tokenizer with task.vocab_size=9"),
    "model-beyond-memory": Case([*DIGITS, "model.dim=100000"], "whose training state needs"),
    "malformed-override": Case([*DIGITS, "model.dim=[1,2"], "cannot read the override 'model.dim=[1,2'"),
    "unquoted-non-ascii-path": Case([*DIGITS, "cache_dir=/tmp/ü r"], "cannot read the override"),
    "empty-train-files": Case(["run", "task=translation", "task.dataset=multi30k", "task.src=fr",
                               "task.tgt=cs"], "the train split has no pair of non-empty sentences",
                              setup=empty_train_files),
    "non-finite-audio": Case(["run", "task=speech", "task.dataset=fsdd"],
                             "3_amy_2.wav holds non-finite samples", setup=nan_wav),
    # Your own images for task=image (task.dataset=imagefolder).
    "imagefolder-without-root": Case(IMAGE_FOLDER, "task.dataset=imagefolder needs task.root=PATH"),
    "imagefolder-without-test": Case(IMAGE_FOLDER, "has no test/ folder",
                                     setup=image_folder({"train/cat/0.png": None})),
    "imagefolder-no-class-folders": Case(IMAGE_FOLDER, "put the images in one folder per class",
                                         setup=image_folder({"train/0.png": None, "test/cat/0.png": None})),
    "imagefolder-undecodable-image": Case(IMAGE_FOLDER, "cannot decode the image",
                                          setup=image_folder({**GOOD_IMAGES, "train/cat/bad.png": b"nope"})),
    "imagefolder-classes-differ": Case(IMAGE_FOLDER, "differ from train's (cat, dog)",
                                       setup=image_folder({**GOOD_IMAGES, "test/bird/0.png": None})),
    "imagefolder-empty-split": Case(IMAGE_FOLDER, "test: Found no valid file for the classes cat, dog",
                                    setup=image_folder({**TRAIN_IMAGES, "test/cat/notes.txt": b"x",
                                                        "test/dog/notes.txt": b"x"})),
    # Your own audio for task=asr (task.dataset=audiofolder).
    "audiofolder-without-root": Case(ASR_FOLDER, "task.dataset=audiofolder needs task.root=PATH"),
    "audiofolder-without-metadata": Case(ASR_FOLDER, "no metadata.csv; an audiofolder holds",
                                         setup=folder_without_metadata),
    "audiofolder-missing-column": Case(ASR_FOLDER, "no 'transcription' column (it has file_name, text)",
                                       setup=audiofolder("file_name,text\na.wav,one\n", TONES)),
    "audiofolder-audio-missing": Case(ASR_FOLDER, "line 3: the audio file",
                                      setup=audiofolder("file_name,transcription,split\na.wav,one,train\n"
                                                        "gone.wav,two,test\n", TONES)),
    "audiofolder-audio-undecodable": Case(ASR_FOLDER, "cannot read",
                                          setup=audiofolder("file_name,transcription,split\na.wav,one,train\n"
                                                            "b.wav,two,train\nbad.wav,one,test\n",
                                                            {**TONES, "bad.wav": b"RIFF\x00garbage"})),
    "audiofolder-empty-transcription": Case(ASR_FOLDER, "(b.wav): empty transcription",
                                            setup=audiofolder("file_name,transcription,split\na.wav,one,train\n"
                                                              "b.wav,,test\n", TONES)),
    "audiofolder-split-without-utterances": Case(ASR_FOLDER, "the test split has no utterances",
                                                 setup=audiofolder("file_name,transcription\na.wav,one\n"
                                                                   "b.wav,two\n", TONES)),
    "audiofolder-unknown-split": Case(ASR_FOLDER, "split 'dev' is not one of train, validation, test",
                                      setup=audiofolder("file_name,transcription,split\na.wav,one,dev\n",
                                                        TONES)),
    "asr-unknown-dataset": Case(["run", "task=asr", "task.dataset=librispeech"],
                                "unknown asr dataset 'librispeech'; choose one of"),
    "asr-fewer-words-than-minimum": Case(["run", "task=asr", "task.min_words=5", "task.max_words=2"],
                                         "task.min_words=5 is more than task.max_words=2"),
    # Your own pairs for task=summarization (task.dataset=jsonl).
    "jsonl-without-root": Case(JSONL, "task.dataset=jsonl needs task.root=PATH"),
    "jsonl-file-missing": Case(JSONL, "validation.jsonl not found; task.root holds train.jsonl",
                               setup=jsonl_folder({"train": GOOD_LINE, "test": GOOD_LINE})),
    "jsonl-field-missing": Case(JSONL, "test.jsonl line 1 has no 'summary' field (it has document, title)",
                                setup=jsonl_folder({"train": GOOD_LINE, "validation": GOOD_LINE,
                                                    "test": '{"document": "d", "title": "t"}\n'})),
    "jsonl-line-not-json": Case(JSONL, "train.jsonl line 2 is not JSON",
                                setup=jsonl_folder({"train": GOOD_LINE + "{document: d}\n",
                                                    "validation": GOOD_LINE, "test": GOOD_LINE})),
    "jsonl-empty-split": Case(JSONL, "test.jsonl holds no examples",
                              setup=jsonl_folder({"train": GOOD_LINE, "validation": GOOD_LINE,
                                                  "test": "\n"})),
    "jsonl-validation-all-in-test": Case(
        JSONL, "every source of the val split is also in a later split",
        setup=jsonl_folder({"train": '{"document": "another", "summary": "s"}\n', "validation": GOOD_LINE,
                            "test": GOOD_LINE})),
    "summarization-unknown-dataset": Case(["run", "task=summarization", "task.dataset=cnn_dailymail"],
                                          "unknown summarization dataset 'cnn_dailymail'; choose one of"),
    # Records are checked when read; outputs that cannot be written are one line.
    "record-not-an-object": Case(["table"], "a record is a JSON object, this is a list",
                                 setup=record_file("[1, 2, 3]")),
    "record-seed-not-a-number": Case(["report"], "'seed' must be an integer, got 'zero'",
                                     setup=record_file(json.dumps({**OK_RECORD, "seed": "zero"}))),
    "ok-record-without-metric": Case(["report"], "no 'test_metric'", setup=record_file(
        json.dumps({k: v for k, v in OK_RECORD.items() if k != "test_metric"}))),
    "ok-record-with-nan-metric": Case(["table"], "an ok run without a finite test_metric", setup=record_file(
        json.dumps({**OK_RECORD, "test_metric": float("nan")}))),
    "table-output-blocked": Case(["table"], "cannot write", setup=output_blocked("results.csv")),
    "report-output-blocked": Case(["report"], "cannot write", setup=output_blocked("report.md")),
    "unknown-data-name-in-check": Case(["data", "check", "cifar10"], "unknown dataset 'cifar10'"),
    # mhab estimate reads records of the sweep's experiments.
    "estimate-records-missing": Case(["estimate", "suite=standard", "--records", "/nonexistent/results"],
                                     "results dir '/nonexistent/results' not found; pass --records DIR"),
    "estimate-no-record-of-the-sweep": Case(["estimate", "task=image", "model=gru,lstm"],
                                            "is of an experiment this sweep runs; pass --records DIR",
                                            setup=lambda tmp: ["--records",
                                                               *record_file(json.dumps(OK_RECORD))(tmp)]),
    "estimate-jobs-zero": Case(["estimate", "suite=standard", "--jobs", "0"], "--jobs must be >= 1, got 0"),
    # found by trying bad inputs beyond the catalogue (reliability, third round)
    "sweep-without-values": Case(["run", "-m", "task=image", "task.dataset=digits", "seed=range(0,0)"],
                                 "has no values, so there is nothing to run"),
    "results-dir-empty": Case(DIGITS, "results_dir is empty", setup=lambda tmp: ["results_dir="]),
    "hydra-dir-not-creatable": Case([*DIGITS, "hydra.run.dir=/proc/nope"], "cannot be created"),
    "required-setting-removed": Case([*DIGITS, "~trainer.lr"], "trainer.lr is missing"),
    "data-check-root-missing": Case(["data", "check", "--data-dir", "/nonexistent/data"], "is not a folder"),
    "download-base-url-not-http": Case(["data", "download", "fsdd", "--base-url", "file:///tmp"],
                                       "is not an http/https/ftp URL",
                                       setup=lambda tmp: ["--data-dir", str(tmp / "d")]),
    "record-field-wrong-type": Case(["table"], "'wall_time_s' must be an integer or a number",
                                    setup=record_file(json.dumps({**OK_RECORD, "wall_time_s": "fast"}))),
    "record-config-not-a-mapping": Case(["table"], "'config' must be an object", setup=record_file(
        json.dumps({**OK_RECORD, "config": [1, 2]}))),
    "record-environment-not-a-mapping": Case(["report"], "'environment' must be an object", setup=record_file(
        json.dumps({**OK_RECORD, "environment": "cpu"}))),
    "record-without-run-dir": Case(["table"], "no 'run_dir'", setup=record_file(
        json.dumps({k: v for k, v in OK_RECORD.items() if k != "run_dir"}))),
    # mhab speed's own settings.
    "estimate-sweep-without-values": Case(["estimate", "-m", "task=image", "task.dataset=digits",
                                           "seed=range(0,0)"], "has no values, so there is nothing to run"),
    "char-transcript-holds-separator": Case(
        [*ASR_FOLDER, "task.units=char"], "holds '|', the word separator of task.units=char",
        setup=audiofolder("file_name,transcription,split\na.wav,one,train\nb.wav,a|b,train\n"
                          "c.wav,one,test\n", TONES)),
    "tune-trials-zero": Case([*TUNE, "tune.trials=0"], "tune.trials must be >= 1, got 0"),
    "tune-unknown-sampler": Case([*TUNE, "tune.sampler=grid"], "tune.sampler must be one of random, tpe"),
    "tune-sweep-other-than-model": Case([*TUNE, "seed=0,1"], "mhab tune sweeps only model="),
    "tune-model-named-twice": Case([*TUNE, "model=gru,gru"], "names a model twice"),
    "tune-storage-not-a-url": Case([*TUNE, "tune.storage=mydb"], "is neither a database URL"),
    "tune-no-search-space": Case(["tune", "task=majority", "model=gru", f"hydra.searchpath=[file://{OUTSIDE}/conf]"],
                                 "no search space for task 'majority'", env={"PYTHONPATH": str(OUTSIDE)}),
    "tune-space-unknown-key": Case(TUNE, "unknown config key 'trainer.learning_rate'",
                                   setup=search_space("trainer.learning_rate: {low: 1.0e-4, high: 1.0e-3}")),
    "tune-space-empty-range": Case(TUNE, "the range 0.01..0.001 is empty",
                                   setup=search_space("trainer.lr: {low: 0.01, high: 0.001}")),
    "tune-space-outside-a-settings-range": Case(TUNE, "model.dropout must be",
                                                setup=search_space("model.dropout: {low: 0.0, high: 1.5}")),
    "tune-space-log-from-zero": Case(TUNE, "a log range needs low > 0", setup=search_space(
        "trainer.weight_decay: {low: 0, high: 1, log: true}")),
    "tune-space-malformed": Case(TUNE, "must be {low: A, high: B} or {choices: [...]}",
                                 setup=search_space("trainer.lr: 0.001")),
    "tune-space-empty": Case(TUNE, "gives attention nothing to search",
                             setup=search_space_text("shared: {}\nfamilies: {}\n")),
    "tune-space-family-overrides-shared": Case(
        TUNE, "families.rnn.trainer.lr overrides the shared range",
        setup=search_space_text("shared:\n  trainer.lr: {low: 1.0e-4, high: 1.0e-3}\nfamilies:\n"
                                "  rnn:\n    trainer.lr: {low: 1.0e-3, high: 1.0e-2}\n")),
    "tune-space-value-inside-range-fails": Case(
        [*TUNE[:3], "model=attention"], "model.num_heads=3 does not divide",
        setup=search_space("model.num_heads: {low: 2, high: 4}")),
    "tune-max-failed-zero": Case([*TUNE, "tune.max_failed=0"], "tune.max_failed must be >= 1, got 0"),
    "tune-jobs-zero": Case([*TUNE, "tune.jobs=0"], "tune.jobs must be >= 1, got 0"),
    "tune-seeds-zero": Case([*TUNE, "tune.seeds=0"], "tune.seeds must be >= 1, got 0"),
    "tune-seed-negative": Case([*TUNE, "tune.seed=-1"], "tune.seed must be >= 0, got -1"),
    "on-code-change-unknown": Case([*DIGITS, "on_code_change=ask"], "on_code_change must be one of"),
    "publish-a-file": Case(["publish"], "no runs under", setup=lambda tmp: [str(a_file(tmp))]),
    "publish-malformed-record": Case(["publish"], "malformed run record", setup=malformed_record),
    "table-markdown-no-records": Case(["table", "/nonexistent/results", "--markdown"],
                                      "no run records under"),
    "tune-storage-under-a-file": Case(TUNE, "cannot create the folder of tune.storage",
                                      setup=storage_under_a_file),
    "speed-threads-negative": Case(["speed", "threads=-1"], "threads must be >= 1, got -1"),
    "speed-nothing-to-time": Case(["speed", "attention.enabled=false", "tasks.names=[]"],
                                  "tasks.names is empty, so tasks would measure nothing"),
    "speed-key-typo": Case(["speed", "+tasks.repeat=3"], "did you mean tasks.repeats?"),
    "speed-run-override-malformed": Case(["speed", "attention.enabled=false",
                                          "tasks.run_overrides=['model.dim=[1']"],
                                         "cannot read the override 'model.dim=[1'"),
    "speed-run-override-contradicts": Case(["speed", "attention.enabled=false", "dtypes=[float32]",
                                            "tasks.run_overrides=['trainer.dtype=bf16']"],
                                           "but mhab speed measures under dtypes=[float32]"),
    "speed-dtype-twice": Case(["speed", "dtypes=[bf16,bf16]"], "names a precision twice"),
}


# Entries run as a user runs them, one interpreter each: what an import path set in the
# environment changes, and one entry of each command, so the real command line stays tested.
# The rest run through the same entry point (bench.cli.main) one after another in a single
# second interpreter (``tests/catalogue_runner.py``), which keeps the catalogue within minutes
# and keeps what a command does to its process (Hydra's logging, signal handlers) out of pytest's.
SUBPROCESS = {"tune-no-search-space", "unknown-task", "data-root-unset", "table-output-blocked",
              "no-records-to-report", "speed-key-typo", "tune-trials-zero", "unknown-data-name"}


def case_args(name: str, tmp: Path) -> tuple[list[str], dict[str, str]]:
    """An entry's command line and environment, its files made under ``tmp``."""
    case = CATALOGUE[name]
    extra = case.setup(tmp) if case.setup else []
    args = list(case.args)
    if args[0] == "run":
        args += [f"results_dir={tmp / 'r'}", f"cache_dir={tmp / 'c'}", *extra]
    elif args[0] == "speed":
        args += [f"results_dir={tmp / 's'}", *extra]
    else:
        args += extra
    return args, {"BENCH_CACHE_DIR": str(tmp / "c"), **case.env}


@pytest.fixture(scope="session")
def in_process(tmp_path_factory) -> dict[str, dict]:
    """Every entry not in ``SUBPROCESS`` (and its ``mhab speed`` twin), run in one second
    interpreter by ``tests/catalogue_runner.py``: name -> exit code, output, the folder it ran in."""
    import json
    import subprocess
    import sys

    root = tmp_path_factory.mktemp("catalogue")
    names = [n for n in CATALOGUE if n not in SUBPROCESS]
    out = subprocess.run([sys.executable, "-m", "tests.catalogue_runner", str(root), *names], cwd=ROOT,
                         capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads((root / "results.json").read_text())


def test_each_command_keeps_a_subprocess_entry():
    assert set(CATALOGUE) >= SUBPROCESS
    assert {CATALOGUE[name].args[0] for name in SUBPROCESS} >= {"run", "table", "report", "speed", "tune",
                                                                "data"}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CATALOGUE))
def test_bad_input_gives_one_line_and_nonzero_exit(name, tmp_path, request):
    case = CATALOGUE[name]
    if name == "cuda-absent" and torch.cuda.is_available():
        pytest.skip("a CUDA device is visible here")
    if name in SUBPROCESS:
        args, env = case_args(name, tmp_path)
        out = run_cli(*args, cwd=tmp_path, env=env)
        result = {"code": out.returncode, "stdout": out.stdout, "stderr": out.stderr, "dir": str(tmp_path)}
    else:
        result = request.getfixturevalue("in_process")[name]
    assert result["code"] != 0
    lines = result["stderr"].strip().splitlines()
    assert len(lines) == 1, result["stderr"]
    assert lines[0].startswith("mhab: error:") and case.message in lines[0], lines[0]
    assert "Traceback" not in result["stdout"] + result["stderr"]
    folder = Path(result["dir"])
    assert not [r for r in _readable(folder / "r") if r.get("status") == "ok"]  # (a run's results dir)
    if "speed" in result:
        # mhab speed builds its task models through run's own path: the same line, no table.
        assert result["speed"]["code"] == 2
        assert result["speed"]["stderr"].strip().splitlines() == [
            lines[0].replace("'mhab run --help'", "'mhab speed --help'")]
        assert not (folder / "s" / "speed.csv").exists()


# Run cases with no speed counterpart: speed neither writes run records nor resumes, and
# sweeps are run's alone.
NOT_FOR_SPEED = {"results-dir-not-writable", "sweep-without-values", "results-dir-empty",
                 "hydra-dir-not-creatable", "required-setting-removed", "malformed-record-on-resume",
                 "impossible-value-in-sweep", "mlp-ratio-negative-in-sweep",
                 "impossible-value-in-suite-sweep"}
# Keys speed has itself and hands to the run config it builds the task models from.
SPEED_KEYS = ("data_dir", "cache_dir", "seed", "device")


def as_speed_args(run_args: list[str], tmp: Path) -> list[str]:
    """``mhab run ARGS`` as ``mhab speed`` measuring that one task model."""
    task, model, overrides, own = "image", "attention", [], []
    for arg in run_args[1:]:
        key, _, value = arg.partition("=")
        if key == "task":
            task = value
        elif key == "model":
            model = value
        elif key in SPEED_KEYS:
            own.append(arg)
        elif key != "results_dir":
            overrides.append(arg)
    quoted = ",".join(f"'{o}'" for o in overrides)
    return ["speed", f"results_dir={tmp / 's'}", "attention.enabled=false", f"tasks.names=[{task}]",
            f"tasks.models=[{model}]", f"tasks.run_overrides=[{quoted}]", *own]


def _readable(path: Path) -> list[dict]:
    out = []
    for p in path.glob("runs/*/record.json"):
        with contextlib.suppress(json.JSONDecodeError):
            out.append(json.loads(p.read_text()))
    return out


# Entries whose outcome is not a one-line exit: warnings where the run goes on, what a library
# would do silently and the project now does right, and faults no command line can cause.
# Each is its own test, named here.
CHECKED_ELSEWHERE = {
    "tune-space-sizes-the-models":
        "test_tune.py::test_finals_are_refused_when_the_best_trials_differ_in_size",
    "tune-worker-killed-beside-another":
        "test_tune.py::test_two_workers_one_killed_then_the_command_again_completes_each_study_exactly",
    "tune-final-held-by-another-worker":
        "test_tune.py::test_a_final_another_worker_is_running_is_awaited_not_a_crash",
    "code-changed-since-record":
        "test_extensions.py::test_editing_a_familys_source_does_not_reuse_its_old_record_silently",
    "data-changed-under-the-same-config":
        "test_imagefolder.py::test_changed_data_is_another_experiment_never_a_resumed_one",
    "audio-outside-the-folder-changed":
        "test_imagefolder.py::test_every_file_an_audiofolder_names_is_in_its_fingerprint",
    "png-16-bit": "test_imagefolder.py::test_16_bit_grey_images_are_scaled_not_clipped",
    "metadata-csv-with-byte-order-mark":
        "test_asr.py::test_a_metadata_csv_with_a_byte_order_mark_reads_as_without",
    "api-sweep-without-values": "test_api.py::test_a_sweep_without_values_is_an_error_in_the_api",
    "unexpected-exception":
        "test_last_resort.py::test_an_unexpected_error_is_one_line_with_its_traceback_on_disk",
    "unexpected-exception-names-its-input":
        "test_last_resort.py::test_the_last_resort_names_what_it_was_working_on",
    "written-files-follow-umask": "test_last_resort.py::test_written_files_follow_the_umask",
    "disk-full-while-saving": "test_last_resort.py::test_a_full_disk_while_saving_a_checkpoint_says_so",
    "record-unreadable": "test_last_resort.py::test_an_unreadable_record_is_not_called_malformed",
    "mlflow-server-unreachable":
        "test_last_resort.py::test_an_unreachable_mlflow_server_gives_up_at_once_and_stays_out_of_the_time",
    "mlflow-results-dir-with-percent":
        "test_last_resort.py::test_mlflow_stores_in_a_results_dir_with_percent_and_hash",
    "budget-too-few-steps": "test_engine.py::test_a_budget_of_too_few_steps_warns_once_before_training",
    "params-unmatched-run-line":
        "test_extensions.py::test_a_family_run_at_a_width_of_its_own_is_said_to_be_unmatched",
    "match-not-within-2-percent":
        "test_param_matching.py::test_a_tiny_model_that_cannot_be_matched_within_2_percent_warns",
    "params-unmatched-table-and-report":
        "test_results.py::test_params_vs_attention_names_an_unmatched_comparison",
    "family-cannot-read-input-kind":
        "test_extensions.py::test_an_input_kind_a_family_cannot_read_is_a_user_error",
    "outside-family-in-speed": "test_extensions.py::test_speed_times_a_family_and_task_from_the_search_path",
    "outside-choices-in-run-help":
        "test_extensions.py::test_run_help_lists_the_models_and_tasks_on_the_search_path",
    "outside-family-beats-the-rnns": "test_report.py::test_time_to_quality_and_learning_curves",
    "one-seed-verdict": "test_stats.py::test_one_seed_or_no_spread_gives_no_test_and_no_verdict",
    "bf16-without-bf16-hardware": "test_engine.py::test_bf16_on_a_cpu_without_bf16_hardware_warns_once",
    "mixed-precisions-in-a-table":
        "test_results.py::test_the_report_shows_the_dtype_only_where_a_run_is_not_float32",
    "lower-is-better-plot":
        "test_report.py::test_a_lower_is_better_metric_is_drawn_upside_down_in_the_tradeoff",
}


def test_catalogue_is_documented_in_docs_errors():
    catalogue = (ROOT / "docs" / "errors.md").read_text()
    exits, elsewhere = catalogue.split(ELSEWHERE_HEADING)
    row = r"^\| `([a-z0-9-]+)` \|"
    assert set(re.findall(row, exits, flags=re.M)) == set(CATALOGUE)
    assert set(re.findall(row, elsewhere, flags=re.M)) == set(CHECKED_ELSEWHERE)
    for name, test in CHECKED_ELSEWHERE.items():
        assert f"`tests/{test.split('::')[0]}`" in elsewhere.split(f"`{name}`")[1].splitlines()[0], name
    assert len(CATALOGUE) + len(CHECKED_ELSEWHERE) >= 190


ELSEWHERE_HEADING = "## Warnings, silent library behaviour and faults"


@pytest.mark.parametrize("name", list(CHECKED_ELSEWHERE))
def test_each_entry_checked_elsewhere_names_a_test_that_exists(name):
    import importlib

    file, function = CHECKED_ELSEWHERE[name].split("::")
    module = importlib.import_module(f"tests.{file.removesuffix('.py')}")
    assert callable(getattr(module, function, None)), CHECKED_ELSEWHERE[name]


CONF = Path(CONF_DIR)
COMBINATIONS = [
    [f"task={t.stem}", f"model={m.stem}", f"suite={suite}"]
    for t in sorted((CONF / "task").glob("*.yaml")) for m in sorted((CONF / "model").glob("*.yaml"))
    for suite in ("none", "quick", "standard")
] + [[f"claim={c.stem}"] for c in sorted((CONF / "claim").glob("*.yaml"))]


@pytest.mark.slow
@pytest.mark.parametrize("overrides", COMBINATIONS, ids=" ".join)
def test_every_model_key_the_configs_set_is_an_argument_of_its_builder(overrides):
    """The "unread-model-key" check must refuse only keys no builder reads: every key a
    config file gives a model, in every task, suite and claim, is an argument of the builder
    its model config names."""
    cfg = compose_config("config", overrides, "run")
    check_model_keys(cfg.model)
