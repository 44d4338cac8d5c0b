"""Speech front ends that every family reads alike (``FrameTranscription.frontend``).

``Conv2dSubsampling``: two 3x3 convolutions of stride 2 over (mel bins, frames), each with a
ReLU, as ESPnet's ``Conv2dSubsampling`` (Karita et al. 2019): 4x fewer steps than frames, each
step the flattened channels x remaining bins. ESPnet's own class also projects to the model
width and adds positions; here a family does that itself, so the transformer and the RNNs
read the very same convolution stack.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

FRONTENDS = ("patch", "conv2d")
CONV2D_STRIDE = 4  # frames per step after two stride-2 convolutions
CONV2D_MIN_FRAMES = 7  # the fewest frames that leave one step


def subsampled(n: int | Tensor) -> int | Tensor:
    """Steps left from ``n`` frames (or bins) by the two convolutions (kernel 3, stride 2)."""
    return ((n - 1) // 2 - 1) // 2


class Conv2dSubsampling(nn.Module):
    """(B, C, bins, frames) with valid frame counts -> (B, steps, channels * bins') and valid
    step counts."""

    def __init__(self, in_channels: int, bins: int, channels: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(in_channels, channels, 3, stride=2), nn.ReLU(),
                                  nn.Conv2d(channels, channels, 3, stride=2), nn.ReLU())
        self.output_dim = channels * subsampled(bins)

    def forward(self, x: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        if x.shape[-1] < CONV2D_MIN_FRAMES:
            x = F.pad(x, (0, CONV2D_MIN_FRAMES - x.shape[-1]))
        y = self.conv(x)  # (B, channels, bins', steps)
        B, C, bins, steps = y.shape
        return y.permute(0, 3, 1, 2).reshape(B, steps, C * bins), subsampled(
            lengths.clamp(min=CONV2D_MIN_FRAMES))
