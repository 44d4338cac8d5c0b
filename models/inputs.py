"""The contracts between tasks and models.

A task hands a model family one of the input kinds below (it says what a batch holds and
what the task needs back); the family's ``build`` returns a ``Built``: the module and, in its
own words, how it reads that input. A family that cannot read a kind raises
``UnsupportedInput``, which ``mhab run`` turns into a one-line error.

A family is a function ``build(inputs: InputKind, **settings) -> Built`` named by the
``_target_`` of its ``conf/model/<name>.yaml``; the yaml's other keys (besides ``name`` and
``family``, which label the run) are its keyword arguments, so the settings a model takes are
exactly its builder's parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from torch import Tensor, nn


@dataclass(frozen=True)
class ImageGrid:
    """Images ``x (B, C, H, W)`` -> class logits ``(B, num_classes)``; ``forward(x)``.

    ``patch_size``, ``patch_stride`` and ``patch_embed`` are the task's patching, for models
    that read patches (the ViT); a model that reads rows or pixels may ignore them."""

    channels: int
    height: int
    width: int
    num_classes: int
    patch_size: int | tuple[int, int]
    patch_stride: int | tuple[int, int] | None = None
    patch_embed: str = "linear"


@dataclass(frozen=True)
class FrameSequence:
    """Spectrograms ``x (B, C, bins, frames)`` in time order with their valid frame counts
    ``lengths (B,)`` (frames past them are padding) -> class logits; ``forward(x, lengths)``.

    ``patch_size`` and ``patch_stride`` are (bins, frames) patches for models that read a
    spectrogram as a patch grid (the AST)."""

    channels: int
    bins: int
    frames: int
    num_classes: int
    patch_size: tuple[int, int]
    patch_stride: tuple[int, int] | None = None


@dataclass(frozen=True)
class TokenSequence:
    """Token ids ``(B, seq_len)`` -> class logits ``(B, num_classes)``; ``forward(tokens)``."""

    vocab_size: int
    seq_len: int
    num_classes: int


@dataclass(frozen=True)
class TokenPairs:
    """Source ids ``(B, S)``, source lengths ``(B,)`` and the shifted target ids ``(B, T)``
    -> next-token logits ``(B, T, vocab_size)``; ``forward(src, src_lengths, tgt_in)``. The
    model is a ``Seq2SeqModel``: decoding drives it step by step. Ids ``pad_id`` are padding;
    no sequence is longer than ``max_len`` tokens."""

    vocab_size: int
    max_len: int
    pad_id: int


@dataclass(frozen=True)
class FrameTranscription:
    """Spectrograms ``x (B, C, bins, frames)`` in time order with their valid frame counts
    ``lengths (B,)`` -> per-step token log-probabilities ``(B, steps, vocab_size)`` and each
    utterance's valid ``steps (B,)``, for a CTC loss (token 0 is the blank);
    ``forward(x, lengths)``.

    A step covers ``step_stride`` frames (a model subsamples time by that factor); a model
    that reads patches spans ``patch_frames`` frames (every bin) per patch. ``frontend``:
    ``patch`` (each family its own reading of the frames: patches, stacked frames) or
    ``conv2d`` (every family reads the steps of ``models.frontends.Conv2dSubsampling`` with
    ``frontend_channels`` channels; 4 frames a step). No utterance has more than
    ``max_frames`` frames."""

    channels: int
    bins: int
    max_frames: int
    vocab_size: int
    patch_frames: int
    step_stride: int
    frontend: str = "patch"
    frontend_channels: int = 16


InputKind = ImageGrid | FrameSequence | FrameTranscription | TokenSequence | TokenPairs


@runtime_checkable
class Seq2SeqModel(Protocol):
    """What ``models.decoding`` (greedy and beam search) needs from an encoder-decoder."""

    def encode(self, src: Tensor, src_lengths: Tensor) -> Any:
        """The encoder's state for the batch (memory, padding, whatever the decoder reads)."""

    def start(self, state: Any) -> Any:
        """A fresh decoding cache (KV cache, RNN state) for ``state``."""

    def step(self, tokens: Tensor, state: Any, cache: Any) -> tuple[Tensor, Any]:
        """Log-probabilities ``(B, V)`` of the next token after ``tokens (B,)``, and the cache."""

    def select(self, state: Any, cache: Any, index: Tensor) -> tuple[Any, Any]:
        """State and cache reordered or expanded along the batch by ``index`` (beam search)."""


@dataclass
class Built:
    """A model built for one input kind.

    ``notes`` says how the model reads its input (kept in the run record); ``label_suffix``
    sets a variant apart in the model's label (``gru+additive_attn``)."""

    module: nn.Module
    notes: str
    label_suffix: str = ""


class UnsupportedInput(ValueError):
    """A model family asked to read an input kind it has no reader for."""

    def __init__(self, family: str, inputs: InputKind) -> None:
        super().__init__(f"the {family} model family has no reader for {type(inputs).__name__} "
                         f"inputs; pick another model for this task")
