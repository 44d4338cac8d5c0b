"""CTC transcribers: spectrogram frames in, per-step token log-probabilities out.

Both read a (B, C, bins, frames) spectrogram with its valid frame counts and return
``(log_probs (B, steps, vocab), step_lengths (B,))``, one step per ``stride`` frames, so a
CTC loss and decoder treat them alike. Token 0 is the CTC blank.

- ``TransformerTranscriber``: time-ordered spectrogram patches (each spans every mel bin of
  ``patch_frames`` frames, overlapping in time when ``stride < patch_frames``, as the AST's
  patches do), the transformer encoder with padding masked, a linear CTC head per token.
- ``RNNTranscriber``: ``stride`` consecutive frames stacked into one step (the same
  subsampling), an LSTM or GRU encoder (padding skipped), a linear CTC head per step.

With ``frontend="conv2d"`` both read the steps of the same ``Conv2dSubsampling`` instead
(the transformer through a linear embedding to its width, the RNN directly).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.dropout import Dropout
from models.frontends import Conv2dSubsampling, subsampled
from models.patch import PatchEmbed2d
from models.rnn import RNNEncoder
from models.transformer import (
    SelfAttentionMaps,
    TransformerEncoder,
    learned_position_names,
    sequence_coordinates,
)


def steps_after_patching(lengths: Tensor, patch_frames: int, stride: int) -> Tensor:
    """Patches that fit in each valid length (a clip shorter than one patch is padded to one)."""
    return (lengths.clamp(min=patch_frames) - patch_frames) // stride + 1


def padding_mask(lengths: Tensor, steps: int) -> Tensor:
    """True at padded steps, (B, steps)."""
    return torch.arange(steps, device=lengths.device)[None, :] >= lengths[:, None]


class TransformerTranscriber(nn.Module):
    def __init__(self, bins: int, channels: int, max_frames: int, vocab_size: int, patch_frames: int,
                 stride: int, dim: int, depth: int, num_heads: int, mlp_ratio: float = 4.0,
                 dropout: float = 0.0, attn_dropout: float = 0.0, pos_encoding: str = "learned",
                 frontend: str = "patch", frontend_channels: int = 16) -> None:
        super().__init__()
        self.patch_frames, self.stride = patch_frames, stride
        if frontend == "conv2d":
            self.frontend = Conv2dSubsampling(channels, bins, frontend_channels)
            self.embed = nn.Linear(self.frontend.output_dim, dim)
            max_steps = max(1, subsampled(max_frames))
        else:
            max_frames = max(max_frames, patch_frames)
            self.patch_embed = PatchEmbed2d((bins, max_frames), (bins, patch_frames), channels, dim,
                                            stride=(bins, stride))
            max_steps = self.patch_embed.num_patches
        self.encoder = TransformerEncoder(dim, depth, num_heads, mlp_ratio, dropout, attn_dropout,
                                          pos_encoding, max_len=max_steps)
        self.head = nn.Linear(dim, vocab_size)

    def no_weight_decay(self) -> set[str]:
        return learned_position_names(self)

    def tokens(self, x: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        if hasattr(self, "frontend"):
            steps, step_lengths = self.frontend(x, lengths)
            return self.embed(steps), step_lengths
        if x.shape[-1] < self.patch_frames:
            x = F.pad(x, (0, self.patch_frames - x.shape[-1]))
        tokens = self.patch_embed(x)  # (B, steps, dim), in time order: the grid is 1 x steps
        return tokens, steps_after_patching(lengths, self.patch_frames, self.stride)

    def forward(self, x: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        tokens, steps = self.tokens(x, lengths)
        features = self.encoder(tokens, key_padding_mask=padding_mask(steps, tokens.shape[1]))
        # float32 log-probabilities whatever the autocast: CTC's loss and decoding sum them over
        # hundreds of frames, and a bfloat16 log-softmax keeps three digits
        return self.head(features).float().log_softmax(-1), steps

    @torch.no_grad()
    def self_attention_maps(self, x: Tensor, lengths: Tensor) -> SelfAttentionMaps:
        """Every layer's attention between time steps, each step placed at its first frame."""
        tokens, steps = self.tokens(x, lengths)
        _, maps = self.encoder(tokens, key_padding_mask=padding_mask(steps, tokens.shape[1]),
                               return_attention=True)
        return SelfAttentionMaps(maps, sequence_coordinates(steps, tokens.shape[1], self.stride), "frame")

    @torch.no_grad()
    def attention_over_time(self, x: Tensor, lengths: Tensor) -> Tensor:
        """The last layer's attention between the valid steps, per head: (B, H, steps, steps)."""
        tokens, steps = self.tokens(x, lengths)
        _, maps = self.encoder(tokens, key_padding_mask=padding_mask(steps, tokens.shape[1]),
                               return_attention=True)
        return maps[-1][..., : int(steps.max()), : int(steps.max())]


class RNNTranscriber(nn.Module):
    def __init__(self, bins: int, channels: int, vocab_size: int, stride: int, hidden_dim: int,
                 num_layers: int, cell: str, bidirectional: bool = True, dropout: float = 0.0,
                 frontend: str = "patch", frontend_channels: int = 16) -> None:
        super().__init__()
        self.stride = stride
        input_dim = channels * bins * stride
        if frontend == "conv2d":
            self.frontend = Conv2dSubsampling(channels, bins, frontend_channels)
            input_dim = self.frontend.output_dim
        self.encoder = RNNEncoder(input_dim, hidden_dim, num_layers, cell, bidirectional, dropout)
        self.drop = Dropout(dropout)
        self.head = nn.Linear(self.encoder.output_dim, vocab_size)

    def forward(self, x: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        if hasattr(self, "frontend"):
            seq, step_lengths = self.frontend(x, lengths)
            outputs, _ = self.encoder(seq, step_lengths)
            return self.head(self.drop(outputs)).float().log_softmax(-1), step_lengths
        B, C, bins, frames = x.shape
        x = F.pad(x, (0, -frames % self.stride))  # whole groups of `stride` frames
        steps = x.shape[-1] // self.stride
        # (B, C, bins, steps, stride) -> (B, steps, stride * C * bins): one step, `stride` frames
        seq = x.reshape(B, C, bins, steps, self.stride).permute(0, 3, 4, 1, 2).reshape(B, steps, -1)
        step_lengths = (lengths + self.stride - 1) // self.stride
        outputs, _ = self.encoder(seq, step_lengths)
        return self.head(self.drop(outputs)).float().log_softmax(-1), step_lengths
