"""CTC transcription: the token vocabulary, greedy and beam-search decoding, and error rates.

The beam search is torchaudio's ``ctc_decoder`` (flashlight-text) with a lexicon of the
training words, so it only ever writes words it has seen; error rates are jiwer's.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import jiwer
import torch
from torch import Tensor

BLANK, UNKNOWN, SPACE = "<blank>", "<unk>", "|"  # SPACE: the word boundary of char units
Units = Literal["word", "char"]


def normalise_text(text: str) -> str:
    """Lower case, single spaces: the form transcripts are trained and scored in."""
    return " ".join(text.lower().split())


@dataclass
class Vocabulary:
    """CTC tokens: 0 the blank, 1 unknown, then the train transcripts' words (``word`` units)
    or characters with ``|`` ending each word (``char`` units)."""

    units: Units
    tokens: list[str]

    def __post_init__(self) -> None:
        self.index = {token: i for i, token in enumerate(self.tokens)}

    @classmethod
    def from_transcripts(cls, units: Units, transcripts: list[str]) -> Vocabulary:
        pieces = {piece for text in transcripts for piece in cls._split(units, text)}
        if units == "char":
            pieces.add(SPACE)
        return cls(units, [BLANK, UNKNOWN, *sorted(pieces)])

    @staticmethod
    def _split(units: Units, text: str) -> list[str]:
        # Char units end every word with "|", the last one too (torchaudio's and wav2vec 2.0's
        # convention): the lexicon search completes a word on its "|", so a word's repeated
        # last character is not read as the start of another word.
        return text.split() if units == "word" else list(text.replace(" ", SPACE) + SPACE)

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, text: str) -> list[int]:
        """Token ids of a transcript; a word (or character) outside the vocabulary is unknown."""
        return [self.index.get(piece, 1) for piece in self._split(self.units, text)]

    def decode(self, ids: list[int]) -> str:
        pieces = [self.tokens[i] for i in ids if i != 0]
        if self.units == "word":
            return " ".join(pieces)
        return normalise_text("".join(pieces).replace(SPACE, " "))


def greedy_ids(log_probs: Tensor, lengths: Tensor) -> list[list[int]]:
    """Best path: the most likely token per step, repeats merged, blanks dropped."""
    best = log_probs.argmax(-1).cpu()
    out = []
    for row, n in zip(best.tolist(), lengths.tolist(), strict=True):
        ids, previous = [], None
        for token in row[:n]:
            if token != previous and token != 0:
                ids.append(token)
            previous = token
        out.append(ids)
    return out


class BeamDecoder:
    """CTC beam search that only writes training words (torchaudio ``ctc_decoder``, no
    language model).

    Char units: a lexicon spells each training word by its characters and the ``|`` that
    ends it. Word units: every token already is a training word, so
    the search runs without a lexicon. (A lexicon whose words are single tokens would turn
    a word's repeated frames into more words: flashlight's lexicon search returns to the
    trie's root after a one-token word and can then only absorb those frames as silence.)"""

    def __init__(self, vocab: Vocabulary, train_words: list[str], beam_size: int) -> None:
        from torchaudio.models.decoder import ctc_decoder

        self.vocab = vocab
        # The decoder needs a word-boundary token; word units have none, so one is appended
        # that the model never emits (its column of log-probs is far below any other).
        self.extra_boundary = SPACE not in vocab.tokens
        tokens = vocab.tokens + ([SPACE] if self.extra_boundary else [])
        settings = dict(tokens=tokens, lm=None, beam_size=beam_size, blank_token=BLANK, sil_token=SPACE)
        if vocab.units == "word":
            self.decoder = ctc_decoder(lexicon=None, **settings)
            return
        with tempfile.TemporaryDirectory() as tmp:
            lexicon = Path(tmp) / "lexicon.txt"
            lexicon.write_text("".join(f"{w} {' '.join(w)} {SPACE}\n" for w in sorted(set(train_words))))
            self.decoder = ctc_decoder(lexicon=str(lexicon), unk_word=UNKNOWN, **settings)

    def __call__(self, log_probs: Tensor, lengths: Tensor) -> list[str]:
        emissions = log_probs.detach().float().cpu().contiguous()
        if self.extra_boundary:
            emissions = torch.cat([emissions, torch.full_like(emissions[..., :1], -1e4)], dim=-1)
        results = self.decoder(emissions, lengths.cpu().to(torch.int32))
        if self.vocab.units == "char":
            return [" ".join(hyps[0].words) if hyps else "" for hyps in results]
        return [self.vocab.decode([t for t in hyps[0].tokens.tolist() if t < len(self.vocab)])
                if hyps else "" for hyps in results]


def error_rates(references: list[str], hypotheses: list[str]) -> dict:
    """Corpus word and character error rates with the word-level substitutions, deletions,
    insertions and hits (jiwer). An empty hypothesis is all deletions."""
    words = jiwer.process_words(references, hypotheses)
    chars = jiwer.process_characters(references, hypotheses)
    return {"wer": words.wer, "cer": chars.cer, "substitutions": words.substitutions,
            "deletions": words.deletions, "insertions": words.insertions, "hits": words.hits,
            "reference_words": words.substitutions + words.deletions + words.hits}
