"""Translation: Multi30k (data root) or a generated corpus of number phrases (offline).

Tokens, pairs, decoding and the loss are ``tasks.text_pairs``'s, shared with summarisation.
Scores: sacreBLEU corpus BLEU and chrF on detokenised output, with their signatures;
teacher-forced loss and perplexity the same way for every model; BLEU by source-length bucket.
Attention model: Transformer encoder-decoder on the core. Baselines: GRU/LSTM seq2seq,
with or without additive (Bahdanau) attention, a different mechanism from the core.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import sacrebleu

from bench.data.files import data_root, verify_files
from bench.errors import BenchError
from bench.task import split_sizes
from models.constraints import AT_LEAST_1, FRACTION, NON_NEGATIVE, Range
from tasks.text_pairs import TextPairs, TextPairTask

NUMBER_LANGUAGES = ("en", "de", "fr", "es", "it", "nl", "pt")


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


class TranslationTask(TextPairTask):
    metric_name = "bleu"
    text_noun = "sentences"

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
        super().__init__(name, dataset, data_dir, cache_dir, vocab_size=vocab_size,
                         sp_model_type=sp_model_type, lowercase=lowercase, max_source_tokens=max_tokens,
                         max_target_tokens=max_tokens, label_smoothing=label_smoothing,
                         beam_size=beam_size, length_penalty=length_penalty, val_decoding=val_decoding,
                         length_buckets=length_buckets, num_samples=num_samples)
        readers = {"multi30k": self._read_multi30k, "numbers": self._read_numbers}
        if dataset not in readers:
            raise BenchError(f"unknown translation dataset '{dataset}'; choose one of {', '.join(readers)}")
        if src == tgt:
            raise BenchError(f"task.src and task.tgt are both '{src}'; pick two different languages")
        self._read = readers[dataset]
        self.src, self.tgt, self.test_set = src, tgt, test_set
        self.numbers_sizes = split_sizes("task.numbers_sizes", numbers_sizes,
                                         {"train": 20000, "val": 500, "test": 1000})
        self.numbers_seed = numbers_seed

    # ------------------------------------------------------------------ data
    def available_pairs(self, root: Path) -> list[str]:
        langs = sorted({p.name.split(".")[1] for p in root.glob("train.*.gz")})
        return [f"{a}-{b}" for a in langs for b in langs if a != b]

    def read_pairs(self) -> dict[str, TextPairs]:
        return {split: TextPairs(src, tgt) for split, (src, tgt) in self._read().items()}

    def tokenizer_stem(self) -> str:
        return f"{self.dataset}-{self.src}{self.tgt}"

    def reads_files(self) -> bool:
        return self.dataset == "multi30k"  # numbers are generated, each split apart

    def data_info(self, datasets: dict) -> dict:
        return {"pair": f"{self.src}-{self.tgt}",
                "test_set": self.test_set if self.dataset == "multi30k" else "generated"}
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

    # ------------------------------------------------------------------ scoring
    def score(self, hyps: list[str], refs: list[list[str]], final: bool) -> dict:
        """sacreBLEU corpus BLEU; on the test split chrF too, with both signatures."""
        references = [[r[0] for r in refs]]
        bleu = sacrebleu.metrics.BLEU()
        result = {"metric": bleu.corpus_score(hyps, references).score}
        if final:
            chrf = sacrebleu.metrics.CHRF()
            result.update({"chrf": chrf.corpus_score(hyps, references).score,
                           "bleu_signature": str(bleu.get_signature()),
                           "chrf_signature": str(chrf.get_signature())})
        return result

    def score_subset(self, hyps: list[str], refs: list[list[str]]) -> float:
        """Corpus BLEU of a bucket of source length in subword tokens (language-neutral: a
        German number is one word but many tokens)."""
        return sacrebleu.corpus_bleu(hyps, [[r[0] for r in refs]]).score
