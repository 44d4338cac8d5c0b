"""Translation: Multi30k (data root) or a generated corpus of number phrases (offline).

Tokens: one joint SentencePiece model trained on the train split only, cached. Scores:
sacreBLEU corpus BLEU and chrF on detokenised output, with their signatures; teacher-forced
loss and perplexity the same way for every model; BLEU by source-length bucket.
Attention model: Transformer encoder-decoder on the core. Baselines: GRU/LSTM seq2seq,
with or without additive (Bahdanau) attention, a different mechanism from the core.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import math
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import sacrebleu
import sentencepiece as spm
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader

from bench.attention_examples import CrossAttentionExample
from bench.cache import discard, is_intact, store
from bench.data import cache_path, data_root, verify_files
from bench.errors import BenchError
from bench.task import Batch, BatchDataset, Splits, Task, metric_by_length, split_sizes
from models.decoding import beam_search, greedy_decode
from models.inputs import TokenPairs
from models.settings import AT_LEAST_1, FRACTION, NON_NEGATIVE, Range

PAD, UNK, BOS, EOS = 0, 1, 2, 3
NUMBER_LANGUAGES = ("en", "de", "fr", "es", "it", "nl", "pt")


class PairDataset(BatchDataset):
    """Token-id pairs plus the raw text, indexed so evaluation finds the references.

    Every pair is padded once, up front (``collate_pairs`` over the whole split); a batch is
    then a few indexing ops cut back to its own longest pair, the same tensors a per-batch
    collate would make, without a Python loop over its sentences on every training step."""

    def __init__(self, src_ids: list[list[int]], tgt_ids: list[list[int]], src_text: list[str],
                 tgt_text: list[str]) -> None:
        self.src_ids, self.tgt_ids = src_ids, tgt_ids
        self.src_text, self.tgt_text = src_text, tgt_text
        # An empty split stays empty (and is reported by Splits.check_not_empty).
        items = list(zip(src_ids, tgt_ids, range(len(src_ids)), strict=True)) or [([], [], 0)]
        self.src, self.src_lengths, self.tgt_in, self.tgt_out, _ = collate_pairs(items)
        self.tgt_lengths = torch.tensor([len(t) for t in tgt_ids], dtype=torch.long)

    def __len__(self) -> int:
        return len(self.src_ids)

    def __getitem__(self, indices: list[int]) -> Batch:
        """The batch of these pairs: (src, src_lengths, tgt_in, tgt_out, index), as
        ``collate_pairs`` pads it."""
        index = torch.as_tensor(indices, dtype=torch.long)
        src_lengths = self.src_lengths[index]
        src_width, tgt_width = int(src_lengths.max()), int(self.tgt_lengths[index].max()) + 1
        return (self.src[index, :src_width], src_lengths, self.tgt_in[index, :tgt_width],
                self.tgt_out[index, :tgt_width], index)


def collate_pairs(items: list[tuple[list[int], list[int], int]]) -> Batch:
    """Pad to the batch maximum: (src, src_lengths, tgt_in = BOS + y, tgt_out = y + EOS, index)."""
    src = [torch.as_tensor(s, dtype=torch.long) for s, _, _ in items]
    tgt = [torch.as_tensor(t, dtype=torch.long) for _, t, _ in items]
    rows = torch.arange(len(items))
    tgt_lengths = torch.tensor([len(t) for t in tgt])
    tgt_padded = pad_sequence(tgt, batch_first=True, padding_value=PAD)
    tgt_in = F.pad(tgt_padded, (1, 0), value=BOS)
    tgt_out = F.pad(tgt_padded, (0, 1), value=PAD)
    tgt_out[rows, tgt_lengths] = EOS
    return (pad_sequence(src, batch_first=True, padding_value=PAD), torch.tensor([len(s) for s in src]),
            tgt_in, tgt_out, torch.tensor([i for _, _, i in items]))


def number_phrases(src: str, tgt: str, sizes: dict[str, int], seed: int) -> dict[str, tuple[list, list]]:
    """Numbers written out in two languages with num2words. Magnitudes are drawn log-uniformly
    from 0 to 10^9, so phrases run from one word to dozens; no number is in two splits."""
    from num2words import num2words

    rng = np.random.default_rng(seed)
    total = sum(sizes.values())
    numbers: list[int] = []
    seen: set[int] = set()
    while len(numbers) < total:
        n = int(10 ** rng.uniform(0, 9)) - 1 + int(rng.integers(0, 2))
        if n not in seen:
            seen.add(n)
            numbers.append(n)
    out, start = {}, 0
    for split, size in sizes.items():
        chunk = numbers[start : start + size]
        start += size
        out[split] = ([num2words(n, lang=src) for n in chunk], [num2words(n, lang=tgt) for n in chunk])
    return out


class TranslationTask(Task):
    metric_name = "bleu"

    def __init__(
        self, name: str, dataset: str, data_dir: str | None, cache_dir: str, src: str = "de",
        tgt: str = "en", test_set: str = "test_2016_flickr", vocab_size: Annotated[int, Range(ge=8)] = 8000,
        sp_model_type: Literal["unigram", "bpe"] = "unigram", lowercase: bool = False,
        max_tokens: Annotated[int, AT_LEAST_1] = 128,
        numbers_sizes: dict[str, Annotated[int, AT_LEAST_1]] | None = None,
        numbers_seed: Annotated[int, NON_NEGATIVE] = 0, label_smoothing: Annotated[float, FRACTION] = 0.1,
        beam_size: Annotated[int, AT_LEAST_1] = 4, length_penalty: Annotated[float, NON_NEGATIVE] = 0.6,
        val_decoding: Literal["greedy", "beam"] = "greedy",
        length_buckets: tuple[Annotated[int, AT_LEAST_1], ...] = (12, 18, 25),
        num_samples: Annotated[int, NON_NEGATIVE] = 5,
    ) -> None:
        super().__init__(name, dataset, data_dir, cache_dir)
        readers = {"multi30k": self._read_multi30k, "numbers": self._read_numbers}
        if dataset not in readers:
            raise BenchError(f"unknown translation dataset '{dataset}'; choose one of {', '.join(readers)}")
        if src == tgt:
            raise BenchError(f"task.src and task.tgt are both '{src}'; pick two different languages")
        if beam_size < 1:
            raise BenchError(f"task.beam_size must be >= 1, got {beam_size}")
        if val_decoding not in ("greedy", "beam"):
            raise BenchError(f"task.val_decoding must be 'greedy' or 'beam', got '{val_decoding}'")
        self._read = readers[dataset]
        self.src, self.tgt, self.test_set = src, tgt, test_set
        self.vocab_size, self.sp_model_type, self.lowercase = vocab_size, sp_model_type, lowercase
        self.max_tokens = max_tokens
        self.numbers_sizes = split_sizes("task.numbers_sizes", numbers_sizes,
                                         {"train": 20000, "val": 500, "test": 1000})
        self.numbers_seed = numbers_seed
        self.label_smoothing = label_smoothing
        self.beam_size, self.length_penalty, self.val_decoding = beam_size, length_penalty, val_decoding
        self.length_buckets = tuple(length_buckets)
        self.num_samples = num_samples
        self.sp: spm.SentencePieceProcessor | None = None

    # ------------------------------------------------------------------ data
    def available_pairs(self, root: Path) -> list[str]:
        langs = sorted({p.name.split(".")[1] for p in root.glob("train.*.gz")})
        return [f"{a}-{b}" for a in langs for b in langs if a != b]

    def _read_multi30k(self) -> dict[str, tuple[list[str], list[str]]]:
        root = data_root(self.data_dir, self.dataset, "multi30k")
        pairs = self.available_pairs(root)
        if f"{self.src}-{self.tgt}" not in pairs:
            raise BenchError(
                f"multi30k has no {self.src}-{self.tgt} pair in {root}; available: "
                f"{', '.join(pairs) or 'none'} (set task.src / task.tgt)"
            )
        splits = {"train": "train", "val": "val", "test": self.test_set}
        names = [f"{f}.{lang}.gz" for f in splits.values() for lang in (self.src, self.tgt)]
        missing = [n for n in names if not (root / n).is_file()]
        if missing:
            raise BenchError(f"multi30k: missing {', '.join(missing)} in {root} "
                             f"(test set name: task.test_set)")
        verify_files(root, names, self.dataset)
        out = {}
        for split, stem in splits.items():
            src, tgt = (self._read_lines(root / f"{stem}.{lang}.gz") for lang in (self.src, self.tgt))
            if len(src) != len(tgt):
                raise BenchError(f"multi30k: {stem}.{self.src}.gz has {len(src)} lines but "
                                 f"{stem}.{self.tgt}.gz has {len(tgt)}; the files must be line-aligned")
            out[split] = (src, tgt)
        return out

    @staticmethod
    def _read_lines(path: Path) -> list[str]:
        try:
            with gzip.open(path, "rt", encoding="utf-8") as f:
                return [line.rstrip("\n") for line in f]
        except (OSError, EOFError, UnicodeDecodeError) as e:
            raise BenchError(f"cannot read {path} ({e}); the file is corrupt, fetch it again") from None

    def _read_numbers(self) -> dict[str, tuple[list[str], list[str]]]:
        for lang in (self.src, self.tgt):
            if lang not in NUMBER_LANGUAGES:
                raise BenchError(f"numbers: language '{lang}' not offered; choose from "
                                 f"{', '.join(NUMBER_LANGUAGES)}")
        return number_phrases(self.src, self.tgt, self.numbers_sizes, self.numbers_seed)

    def _normalise(self, text: str) -> str:
        return text.strip().lower() if self.lowercase else text.strip()

    # ------------------------------------------------------------------ tokenizer
    def tokenizer(self, train_src: list[str], train_tgt: list[str]) -> spm.SentencePieceProcessor:
        """A joint SentencePiece model over the train split, cached by data and parameters."""
        params = {"vocab_size": self.vocab_size, "model_type": self.sp_model_type,
                  "lowercase": self.lowercase}
        digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode())
        for line in train_src + train_tgt:
            digest.update(line.encode() + b"\n")
        name = f"{self.dataset}-{self.src}{self.tgt}-{digest.hexdigest()[:16]}.model"
        path = cache_path(self.cache_dir, "tokenizers") / name
        sp = spm.SentencePieceProcessor()
        if is_intact(path):
            try:
                sp.Load(str(path))
                return sp
            except (OSError, RuntimeError):
                pass
        discard(path)
        model = io.BytesIO()
        try:
            spm.SentencePieceTrainer.Train(
                sentence_iterator=iter(train_src + train_tgt), model_writer=model,
                vocab_size=self.vocab_size, model_type=self.sp_model_type, character_coverage=1.0,
                pad_id=PAD, unk_id=UNK, bos_id=BOS, eos_id=EOS, hard_vocab_limit=False,
                minloglevel=2, num_threads=1,
            )
        except RuntimeError as e:  # SentencePiece refuses settings it cannot train with
            reason = str(e).strip().splitlines()[-1]
            raise BenchError(f"SentencePiece cannot train a tokenizer with task.vocab_size="
                             f"{self.vocab_size}, task.sp_model_type={self.sp_model_type} on this "
                             f"train split ({reason}); change them") from None
        store(path, lambda f: f.write(model.getvalue()))
        sp.LoadFromSerializedProto(model.getvalue())
        return sp

    def load(self, seed: int) -> Splits:
        raw = self._read()
        raw = {split: ([self._normalise(s) for s in src], [self._normalise(t) for t in tgt])
               for split, (src, tgt) in raw.items()}
        for split, (src, tgt) in raw.items():
            if not any(s and t for s, t in zip(src, tgt, strict=True)):
                raise BenchError(f"{self.dataset}: the {split} split has no pair of non-empty "
                                 f"sentences; check its files")
        self.sp = self.tokenizer(*raw["train"])
        encode = lambda lines: [ids[: self.max_tokens] for ids in self.sp.EncodeAsIds(lines)]
        datasets = {}
        for split, (src, tgt) in raw.items():
            keep = [i for i, (s, t) in enumerate(zip(src, tgt, strict=True)) if s and t]
            src, tgt = [src[i] for i in keep], [tgt[i] for i in keep]
            datasets[split] = PairDataset(encode(src), encode(tgt), src, tgt)
        train = datasets["train"]
        info = {
            "pair": f"{self.src}-{self.tgt}",
            "sizes": {k: len(v) for k, v in datasets.items()},
            "test_set": self.test_set if self.dataset == "multi30k" else "generated",
            "vocab_size": self.sp.GetPieceSize(),
            "tokenizer": f"joint SentencePiece {self.sp_model_type}, trained on the train split",
            "mean_tokens": {"src": float(np.mean([len(s) for s in train.src_ids])),
                            "tgt": float(np.mean([len(t) for t in train.tgt_ids]))},
            "lowercase": self.lowercase,
        }
        return Splits(datasets["train"], datasets["val"], datasets["test"], info)

    def model_inputs(self, batch: Batch) -> Batch:
        src, lengths, tgt_in, _, _ = batch
        return src, lengths, tgt_in

    # ------------------------------------------------------------------ models
    def input_kind(self, splits: Splits) -> TokenPairs:
        # Decoding stops at 1.5x the source plus 10 (models.decoding), under this bound.
        return TokenPairs(splits.info["vocab_size"], max_len=2 * self.max_tokens + 16, pad_id=PAD)

    @torch.no_grad()
    def attention_example(self, model: nn.Module, splits: Splits,
                          device: torch.device) -> CrossAttentionExample | None:
        """Last-layer cross-attention, per head, for the first test pair (Transformer only)."""
        if not hasattr(model, "cross_attention"):
            return None
        test: PairDataset = splits.test
        src, lengths, tgt_in, _, _ = self.to_device(test[[0]], device)
        weights = model.cross_attention(src, lengths, tgt_in)[-1][0].cpu()  # (H, T, S)
        return CrossAttentionExample(heads=weights, source_tokens=self.sp.IdToPiece(test.src_ids[0]),
                                     target_tokens=["<s>", *self.sp.IdToPiece(test.tgt_ids[0])])

    # ------------------------------------------------------------------ training and scoring
    def loss(self, model: nn.Module, batch: Batch) -> Tensor:
        src, lengths, tgt_in, tgt_out, _ = batch
        logits = model(src, lengths, tgt_in)
        return F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD,
                               label_smoothing=self.label_smoothing)

    def decode(self, model: nn.Module, src: Tensor, lengths: Tensor, beam: bool) -> list[list[int]]:
        if beam and self.beam_size > 1:
            return beam_search(model, src, lengths, BOS, EOS, self.beam_size, self.length_penalty)
        return greedy_decode(model, src, lengths, BOS, EOS)

    def infer(self, model: nn.Module, inputs: Batch) -> object:
        """Inference is translation: greedy decoding of the batch, KV cache / RNN state on."""
        src, lengths, _ = inputs
        return greedy_decode(model, src, lengths, BOS, EOS)

    @torch.no_grad()
    def evaluate(self, model: nn.Module, loader: DataLoader, device: torch.device,
                 final: bool = False) -> dict:
        dataset: PairDataset = loader.dataset
        nll, tokens = 0.0, 0
        hyps: list[str] = [""] * len(dataset)
        beam = final or self.val_decoding == "beam"
        for batch in loader:
            src, lengths, tgt_in, tgt_out, index = self.to_device(batch, device)
            logits = model(src, lengths, tgt_in)
            nll += F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=PAD,
                                   reduction="sum").item()
            tokens += (tgt_out != PAD).sum().item()
            for i, ids in zip(index.tolist(), self.decode(model, src, lengths, beam), strict=True):
                hyps[i] = self.sp.DecodeIds(ids)
        refs = dataset.tgt_text
        bleu, chrf = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
        result = {
            "metric": bleu.corpus_score(hyps, [refs]).score,
            "loss": nll / max(tokens, 1),
            "perplexity": math.exp(min(nll / max(tokens, 1), 50)),
        }
        if final:
            result.update({
                "chrf": chrf.corpus_score(hyps, [refs]).score,
                "bleu_signature": str(bleu.get_signature()),
                "chrf_signature": str(chrf.get_signature()),
                "decoding": (f"beam search, beam {self.beam_size}, length penalty {self.length_penalty}"
                             if self.beam_size > 1 else "greedy"),
                "metric_by_length": self.bleu_by_length(dataset.src_ids, hyps, refs),
                "samples": [
                    {"source": s, "reference": r, "hypothesis": h}
                    for s, r, h in list(zip(dataset.src_text, refs, hyps, strict=True))[: self.num_samples]
                ],
            })
        return result

    def bleu_by_length(self, sources: list[list[int]], hyps: list[str], refs: list[str]) -> dict:
        """Corpus BLEU per bucket of source length in subword tokens (language-neutral: a
        German number is one word but many tokens)."""
        return metric_by_length(
            [len(s) for s in sources], self.length_buckets, "source subword tokens", "bleu",
            lambda members: sacrebleu.corpus_bleu([hyps[i] for i in members],
                                                  [[refs[i] for i in members]]).score)
