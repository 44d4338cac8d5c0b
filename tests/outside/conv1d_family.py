"""A model family from outside the project, for the test that adding one takes one file and
one yaml: a 1-D convolution encoder, written against ``models.inputs`` only.

Classification inputs become a sequence (image rows, spectrogram frames, tokens), a stack of
same-padded convolutions reads it and the mean over valid steps feeds a linear head. Token
pairs get a convolution encoder and a causal convolution decoder that adds the pooled source
to every target position; decoding recomputes the prefix at every step (its cache is the
prefix), which is all ``models.decoding`` needs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.inputs import (
    Built,
    FrameSequence,
    FrameTranscription,
    ImageGrid,
    InputKind,
    TokenPairs,
    TokenSequence,
    UnsupportedInput,
)


class ConvStack(nn.Module):
    """``depth`` convolutions over (B, L, dim), GELU between them; ``causal`` pads on the left
    only, so step t sees steps up to t."""

    def __init__(self, dim: int, depth: int, kernel_size: int, causal: bool = False) -> None:
        super().__init__()
        self.kernel_size, self.causal = kernel_size, causal
        self.convs = nn.ModuleList(nn.Conv1d(dim, dim, kernel_size) for _ in range(depth))

    def forward(self, x: Tensor) -> Tensor:
        h = x.transpose(1, 2)  # (B, dim, L)
        left = self.kernel_size - 1 if self.causal else (self.kernel_size - 1) // 2
        for conv in self.convs:
            h = h + F.gelu(conv(F.pad(h, (left, self.kernel_size - 1 - left))))
        return h.transpose(1, 2)


def masked_mean(x: Tensor, lengths: Tensor | None) -> Tensor:
    if lengths is None:
        return x.mean(dim=1)
    valid = (torch.arange(x.shape[1], device=x.device)[None, :] < lengths[:, None]).float()
    return (x * valid[..., None]).sum(dim=1) / valid.sum(dim=1, keepdim=True).clamp_min(1)


class ConvClassifier(nn.Module):
    def __init__(self, reader: str, in_features: int, num_classes: int, dim: int, depth: int,
                 kernel_size: int) -> None:
        super().__init__()
        self.reader = reader  # rows | frames | tokens
        self.embed = (nn.Embedding(in_features, dim) if reader == "tokens"
                      else nn.Linear(in_features, dim))
        self.encoder = ConvStack(dim, depth, kernel_size)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: Tensor, lengths: Tensor | None = None) -> Tensor:
        if self.reader == "rows":  # (B, C, H, W) -> (B, H, C * W)
            x = x.permute(0, 2, 1, 3).flatten(2)
        elif self.reader == "frames":  # (B, C, F, T) -> (B, T, C * F)
            x = x.permute(0, 3, 1, 2).flatten(2)
        return self.head(masked_mean(self.encoder(self.embed(x)), lengths))


class ConvTranscriber(nn.Module):
    """Frames stacked ``stride`` to a step (as the RNN transcribers do), the convolutions over
    the steps, per-step token log-probabilities for CTC."""

    def __init__(self, in_features: int, stride: int, vocab_size: int, dim: int, depth: int,
                 kernel_size: int) -> None:
        super().__init__()
        self.stride = stride
        self.embed = nn.Linear(in_features * stride, dim)
        self.encoder = ConvStack(dim, depth, kernel_size)
        self.head = nn.Linear(dim, vocab_size)

    def forward(self, x: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        frames = x.permute(0, 3, 1, 2).flatten(2)  # (B, T, C * F)
        frames = F.pad(frames, (0, 0, 0, -frames.shape[1] % self.stride))
        steps = frames.reshape(frames.shape[0], -1, frames.shape[2] * self.stride)  # (B, T / stride, ...)
        out = self.head(self.encoder(self.embed(steps)))
        valid = torch.div(lengths + self.stride - 1, self.stride, rounding_mode="floor")
        return F.log_softmax(out, dim=-1), valid


class ConvSeq2Seq(nn.Module):
    def __init__(self, vocab_size: int, dim: int, depth: int, kernel_size: int, pad_id: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim, padding_idx=pad_id)
        self.encoder = ConvStack(dim, depth, kernel_size)
        self.decoder = ConvStack(dim, depth, kernel_size, causal=True)
        self.generator = nn.Linear(dim, vocab_size)

    def encode(self, src: Tensor, src_lengths: Tensor) -> Tensor:
        return masked_mean(self.encoder(self.embed(src)), src_lengths)  # (B, dim)

    def _logits(self, summary: Tensor, tgt_in: Tensor) -> Tensor:
        return self.generator(self.decoder(self.embed(tgt_in) + summary[:, None]))

    def forward(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> Tensor:
        return self._logits(self.encode(src, src_lengths), tgt_in)

    def start(self, state: Tensor) -> Tensor:
        return state.new_zeros(state.shape[0], 0, dtype=torch.long)

    def step(self, tokens: Tensor, state: Tensor, cache: Tensor) -> tuple[Tensor, Tensor]:
        prefix = torch.cat([cache, tokens[:, None]], dim=1)
        return F.log_softmax(self._logits(state, prefix)[:, -1], dim=-1), prefix

    def select(self, state: Tensor, cache: Tensor, index: Tensor) -> tuple[Tensor, Tensor]:
        return state.index_select(0, index), cache.index_select(0, index)


def build(inputs: InputKind, *, dim: int, depth: int, kernel_size: int = 3) -> Built:
    if isinstance(inputs, ImageGrid):
        model = ConvClassifier("rows", inputs.channels * inputs.width, inputs.num_classes, dim, depth,
                               kernel_size)
        return Built(model, "1-D convolutions over the image's rows")
    if isinstance(inputs, FrameSequence):
        model = ConvClassifier("frames", inputs.channels * inputs.bins, inputs.num_classes, dim, depth,
                               kernel_size)
        return Built(model, "1-D convolutions over spectrogram frames, mean over valid frames")
    if isinstance(inputs, FrameTranscription):
        model = ConvTranscriber(inputs.channels * inputs.bins, inputs.step_stride, inputs.vocab_size, dim,
                                depth, kernel_size)
        return Built(model, f"1-D convolutions over steps of {inputs.step_stride} stacked frames, CTC head")
    if isinstance(inputs, TokenSequence):
        model = ConvClassifier("tokens", inputs.vocab_size, inputs.num_classes, dim, depth, kernel_size)
        return Built(model, "1-D convolutions over the tokens")
    if isinstance(inputs, TokenPairs):
        return Built(ConvSeq2Seq(inputs.vocab_size, dim, depth, kernel_size, inputs.pad_id),
                     "convolution encoder, causal convolution decoder over the pooled source")
    raise UnsupportedInput(f"the conv1d family has no reader for {type(inputs).__name__}")
