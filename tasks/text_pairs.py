"""Text in, text out through an encoder-decoder: the plumbing translation and summarisation
share. A task subclasses ``TextPairTask`` and says only where its pairs come from
(``read_pairs``) and how hypotheses are scored (``score``, ``score_subset``).

Shared here: a joint SentencePiece model trained on the train split only and cached; pair
datasets padded once up front; teacher-forced cross-entropy (label smoothing) for training
and the validation loss; greedy or beam-search decoding with the model's cache; the metric by
source length; sample outputs; the decoder's cross-attention as the attention example.
"""

from __future__ import annotations

import abc
import hashlib
import io
import json
import math
from dataclasses import dataclass

import numpy as np
import sentencepiece as spm
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader

from bench.data.cache import discard, is_intact, store
from bench.data.files import cache_path, rule_fingerprint
from bench.errors import BenchError
from bench.records.attention_examples import CrossAttentionExample
from bench.task import Batch, BatchDataset, Splits, Task, metric_by_length
from models.decoding import beam_search, greedy_decode
from models.inputs import TokenPairs

PAD, UNK, BOS, EOS = 0, 1, 2, 3


@dataclass
class TextPairs:
    """One split's pairs: the sources, the targets trained on, and every example's references
    (one or more texts its output is scored against; by default its target)."""

    sources: list[str]
    targets: list[str]
    references: list[list[str]] | None = None

    def __post_init__(self) -> None:
        if self.references is None:
            self.references = [[t] for t in self.targets]


# Official splits can share sources (AESLC's validation and test share 109 emails): the test
# split stays as published; validation loses the pairs whose source is in the test, and
# training those whose source is in the test or validation. Records of datasets read from
# files carry this rule in their data fingerprint.
DISJOINT_RULE = "sources disjoint: validation without the test's, train without either's"


def disjoint_sources(raw: dict[str, TextPairs]) -> tuple[dict[str, TextPairs], dict[str, int]]:
    """``raw`` with no source in two splits (``DISJOINT_RULE``), and how many pairs each split lost."""
    seen = {s for s in raw["test"].sources if s}
    out, dropped = {"test": raw["test"]}, {}
    for split in ("val", "train"):
        pairs = raw[split]
        keep = [i for i, s in enumerate(pairs.sources) if s not in seen]
        dropped[split] = len(pairs.sources) - len(keep)
        out[split] = TextPairs([pairs.sources[i] for i in keep], [pairs.targets[i] for i in keep],
                               [pairs.references[i] for i in keep])
        seen |= {s for s in out[split].sources if s}
    return out, dropped


class PairDataset(BatchDataset):
    """Token-id pairs plus the raw text, indexed so evaluation finds the references.

    Every pair is padded once, up front (``collate_pairs`` over the whole split); a batch is
    then a few indexing ops cut back to its own longest pair, the same tensors a per-batch
    collate would make, without a Python loop over its sentences on every training step."""

    def __init__(self, src_ids: list[list[int]], tgt_ids: list[list[int]], src_text: list[str],
                 tgt_text: list[str], references: list[list[str]] | None = None) -> None:
        self.src_ids, self.tgt_ids = src_ids, tgt_ids
        self.src_text, self.tgt_text = src_text, tgt_text
        self.references = references if references is not None else [[t] for t in tgt_text]
        # An empty split stays empty (and is reported by Splits.check_not_empty).
        items = list(zip(src_ids, tgt_ids, range(len(src_ids)), strict=True)) or [([], [], 0)]
        self.src, self.src_lengths, self.tgt_in, self.tgt_out, _ = collate_pairs(items)
        self.tgt_lengths = torch.tensor([len(t) for t in tgt_ids], dtype=torch.long)

    def __len__(self) -> int:
        return len(self.src_ids)

    def example_lengths(self) -> Tensor:
        return self.src_lengths[: len(self)]

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


class TextPairTask(Task):
    """The shared text-to-text adapter; subclasses read pairs and score hypotheses."""

    length_unit = "source subword tokens"
    text_noun = "texts"  # what the "empty split" message calls a pair's sides

    def __init__(self, name: str, dataset: str, data_dir: str | None, cache_dir: str, *,
                 vocab_size: int, sp_model_type: str, lowercase: bool, max_source_tokens: int,
                 max_target_tokens: int, label_smoothing: float, beam_size: int, length_penalty: float,
                 val_decoding: str, length_buckets: tuple[int, ...], num_samples: int) -> None:
        super().__init__(name, dataset, data_dir, cache_dir)
        self.vocab_size, self.sp_model_type, self.lowercase = vocab_size, sp_model_type, lowercase
        self.max_source_tokens, self.max_target_tokens = max_source_tokens, max_target_tokens
        self.label_smoothing = label_smoothing
        self.beam_size, self.length_penalty, self.val_decoding = beam_size, length_penalty, val_decoding
        self.length_buckets = tuple(length_buckets)
        self.num_samples = num_samples
        self.sp: spm.SentencePieceProcessor | None = None

    # ------------------------------------------------------------------ what a task says
    @abc.abstractmethod
    def read_pairs(self) -> dict[str, TextPairs]:
        """The train, val and test pairs, as read (normalised here)."""

    def reads_files(self) -> bool:
        """Whether the pairs come from files (which may share sources across splits) rather
        than from a generator that draws each split apart."""
        return True

    def data_fingerprint(self) -> str | None:
        """See ``Task.data_fingerprint``: the split rule for data read from files."""
        return rule_fingerprint(DISJOINT_RULE) if self.reads_files() else None

    @abc.abstractmethod
    def tokenizer_stem(self) -> str:
        """What names this task's tokenizer in the cache (the digest of the data follows)."""

    @abc.abstractmethod
    def score(self, hyps: list[str], refs: list[list[str]], final: bool) -> dict:
        """``{"metric": ...}`` and, when ``final``, whatever else the record keeps."""

    @abc.abstractmethod
    def score_subset(self, hyps: list[str], refs: list[list[str]]) -> float:
        """The metric on a subset (one length bucket)."""

    def data_info(self, datasets: dict[str, PairDataset]) -> dict:
        """What the task adds to the record's ``data``."""
        return {}

    def max_decode_length(self, src_lengths: Tensor) -> int | None:
        """How many tokens decoding may write; None: the decoders' default (1.5x the source + 10)."""
        return None

    # ------------------------------------------------------------------ data
    def _normalise(self, text: str) -> str:
        return text.strip().lower() if self.lowercase else text.strip()

    def tokenizer(self, train_src: list[str], train_tgt: list[str]) -> spm.SentencePieceProcessor:
        """A joint SentencePiece model over the train split, cached by data and parameters."""
        params = {"vocab_size": self.vocab_size, "model_type": self.sp_model_type,
                  "lowercase": self.lowercase}
        digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode())
        for line in train_src + train_tgt:
            digest.update(line.encode() + b"\n")
        name = f"{self.tokenizer_stem()}-{digest.hexdigest()[:16]}.model"
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
        norm = self._normalise
        raw = {split: TextPairs([norm(s) for s in p.sources], [norm(t) for t in p.targets],
                                [[norm(r) for r in refs] for refs in p.references])
               for split, p in self.read_pairs().items()}
        for split, pairs in raw.items():
            if not any(s and t for s, t in zip(pairs.sources, pairs.targets, strict=True)):
                raise BenchError(f"{self.dataset}: the {split} split has no pair of non-empty "
                                 f"{self.text_noun}; check its files")
        raw, overlap_removed = disjoint_sources(raw)
        for split, pairs in raw.items():
            if not any(s and t for s, t in zip(pairs.sources, pairs.targets, strict=True)):
                raise BenchError(f"{self.dataset}: every source of the {split} split is also in a later "
                                 f"split (validation, test), so none is left to {split} on; give the "
                                 f"splits different {self.text_noun}")
        self.sp = self.tokenizer(raw["train"].sources, raw["train"].targets)
        datasets, cut = {}, {}
        for split, pairs in raw.items():
            keep = [i for i, (s, t) in enumerate(zip(pairs.sources, pairs.targets, strict=True)) if s and t]
            src, tgt = [pairs.sources[i] for i in keep], [pairs.targets[i] for i in keep]
            src_ids, tgt_ids = self.sp.EncodeAsIds(src), self.sp.EncodeAsIds(tgt)
            cut[split] = sum(len(ids) > self.max_source_tokens for ids in src_ids)
            datasets[split] = PairDataset([ids[: self.max_source_tokens] for ids in src_ids],
                                          [ids[: self.max_target_tokens] for ids in tgt_ids], src, tgt,
                                          [pairs.references[i] for i in keep])
        train = datasets["train"]
        info = {
            "sizes": {k: len(v) for k, v in datasets.items()},
            "vocab_size": self.sp.GetPieceSize(),
            "tokenizer": f"joint SentencePiece {self.sp_model_type}, trained on the train split",
            "mean_tokens": {"src": float(np.mean([len(s) for s in train.src_ids])),
                            "tgt": float(np.mean([len(t) for t in train.tgt_ids]))},
            "sources_cut": {"max_tokens": self.max_source_tokens, **cut},
            "lowercase": self.lowercase,
            "overlap_removed": {**overlap_removed, "rule": DISJOINT_RULE},
            **self.data_info(datasets),
        }
        return Splits(datasets["train"], datasets["val"], datasets["test"], info)

    def model_inputs(self, batch: Batch) -> Batch:
        src, lengths, tgt_in, _, _ = batch
        return src, lengths, tgt_in

    # ------------------------------------------------------------------ models
    def input_kind(self, splits: Splits) -> TokenPairs:
        # Decoding stops at 1.5x the source plus 10 (models.decoding), under this bound.
        longest = max(self.max_source_tokens, self.max_target_tokens)
        return TokenPairs(splits.info["vocab_size"], max_len=2 * longest + 16, pad_id=PAD)

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
        max_len = self.max_decode_length(lengths)
        if beam and self.beam_size > 1:
            return beam_search(model, src, lengths, BOS, EOS, self.beam_size, self.length_penalty, max_len)
        return greedy_decode(model, src, lengths, BOS, EOS, max_len)

    def infer(self, model: nn.Module, inputs: Batch) -> object:
        """Inference is generation: greedy decoding of the batch, KV cache / RNN state on."""
        src, lengths, _ = inputs
        return greedy_decode(model, src, lengths, BOS, EOS, self.max_decode_length(lengths))

    def by_length(self, sources: list[list[int]], hyps: list[str], refs: list[list[str]]) -> dict:
        """The metric per bucket of source length in subword tokens."""
        subset = lambda members: self.score_subset([hyps[i] for i in members], [refs[i] for i in members])
        return metric_by_length([len(s) for s in sources], self.length_buckets, self.length_unit,
                                self.metric_name, subset)

    def decoding(self) -> str:
        return (f"beam search, beam {self.beam_size}, length penalty {self.length_penalty}"
                if self.beam_size > 1 else "greedy")

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
        refs = dataset.references
        result = {**self.score(hyps, refs, final), "loss": nll / max(tokens, 1),
                  "perplexity": math.exp(min(nll / max(tokens, 1), 50))}
        if final:
            result.update({
                "decoding": self.decoding(),
                "metric_by_length": self.by_length(dataset.src_ids, hyps, refs),
                "samples": [
                    {"source": s, "reference": r, "hypothesis": h}
                    for s, r, h in list(zip(dataset.src_text, dataset.tgt_text, hyps, strict=True))[
                        : self.num_samples]
                ],
            })
        return result
