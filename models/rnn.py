"""LSTM / GRU baselines shared by every task: an encoder over (B, L, F) sequences and a
sequence classifier on top of it."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.func import functional_call
from torch.nn.utils.rnn import PackedSequence

from models.dropout import Dropout, dropout


class GRU(nn.GRU):
    """``nn.GRU`` whose recurrence runs in float32 under CPU autocast. torch's CPU autocast
    runs the LSTM in bfloat16 through oneDNN, but has no bfloat16 GRU kernel: its GRU casts
    each step's matmul inputs to bfloat16 and back, slower than float32 (``docs/speed.md``).
    In float32 it is as fast as without autocast and as exact; everywhere else it is
    ``nn.GRU``, weights and state-dict keys included."""

    def forward(self, input: Tensor | PackedSequence, hx: Tensor | None = None):  # noqa: A002 (nn.GRU's name)
        data = input.data if isinstance(input, PackedSequence) else input
        if data.device.type == "cpu" and torch.is_autocast_enabled("cpu"):
            with torch.autocast("cpu", enabled=False):
                return super().forward(input.float(), None if hx is None else hx.float())
        return super().forward(input, hx)


RNN_CELLS: dict[str, type[nn.RNNBase]] = {"lstm": nn.LSTM, "gru": GRU}


class RNNEncoder(nn.Module):
    """Multi-layer (optionally bidirectional) LSTM or GRU, batch first.

    ``forward`` returns every step's output (B, L, hidden * directions) and a summary
    (B, hidden * directions): the last layer's final state, both directions concatenated.
    With ``lengths``, padded steps never reach a valid output, and padded outputs are zero.
    """

    def __init__(
        self, input_dim: int, hidden_dim: int, num_layers: int = 1, cell: str = "lstm",
        bidirectional: bool = False, dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if cell not in RNN_CELLS:
            raise ValueError(f"unknown RNN cell '{cell}'; choose one of {', '.join(RNN_CELLS)}")
        if hidden_dim <= 0 or num_layers <= 0:
            raise ValueError(f"hidden_dim ({hidden_dim}) and num_layers ({num_layers}) must be > 0")
        self.cell = cell
        self.directions = 2 if bidirectional else 1
        self.output_dim = hidden_dim * self.directions
        self.rnn = RNN_CELLS[cell](
            input_dim, hidden_dim, num_layers=num_layers, batch_first=True,
            bidirectional=bidirectional, dropout=dropout if num_layers > 1 else 0.0,
        )
        # One-layer, one-direction cells that run self.rnn's weights, layer by layer, for
        # padded batches (kept out of the module tree: they hold no parameters of their own).
        self._layer_cells = [
            RNN_CELLS[cell](input_dim if layer == 0 else self.output_dim, hidden_dim, batch_first=True)
            for layer in range(num_layers)
        ]

    def forward(self, x: Tensor, lengths: Tensor | None = None) -> tuple[Tensor, Tensor]:
        if lengths is None:
            outputs, state = self.rnn(x)
            hidden = state[0] if self.cell == "lstm" else state  # (layers * dirs, B, hidden)
            return outputs, torch.cat(list(hidden[-self.directions :]), dim=-1)
        return self._padded(x, lengths.to(x.device))

    def _padded(self, x: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """The packed-sequence result, computed on the padded batch: the backward direction
        reads each sequence reversed within its own length, so padding comes after the
        valid steps in both directions. On CPU a packed sequence runs torch's native RNN
        loop, about 3x slower than the oneDNN kernel this path keeps (GRU seq2seq on AESLC
        batches, 1 thread), and gives the same outputs to float rounding."""
        steps = torch.arange(x.shape[1], device=x.device)
        valid = steps[None] < lengths[:, None]  # (B, L)
        reverse = torch.where(valid, lengths[:, None] - 1 - steps[None], steps[None])
        flip = lambda t: t.gather(1, reverse[..., None].expand_as(t))  # noqa: E731
        last = (lengths - 1).clamp(min=0)
        rows = torch.arange(x.shape[0], device=x.device)
        for layer, layer_cell in enumerate(self._layer_cells):
            if layer > 0:
                x = dropout(x, self.rnn.dropout, self.training)
            outputs, finals = [], []
            for direction in range(self.directions):
                suffix = "_reverse" if direction else ""
                weights = {f"{name}_l0": getattr(self.rnn, f"{name}_l{layer}{suffix}")
                           for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}
                out, _ = functional_call(layer_cell, weights, (flip(x) if direction else x,))
                finals.append(out[rows, last])  # each direction's state after its last valid step
                outputs.append(flip(out) if direction else out)
            x = torch.cat(outputs, dim=-1) * valid[..., None]
        return x, torch.cat(finals, dim=-1)


class RNNClassifier(nn.Module):
    """Sequence classifier: optional input projection, RNN encoder, dropout, linear head."""

    def __init__(
        self, input_dim: int, num_classes: int, hidden_dim: int, num_layers: int = 1,
        cell: str = "lstm", bidirectional: bool = False, dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.encoder = RNNEncoder(input_dim, hidden_dim, num_layers, cell, bidirectional, dropout)
        self.drop = Dropout(dropout)
        self.head = nn.Linear(self.encoder.output_dim, num_classes)

    def forward(self, x: Tensor, lengths: Tensor | None = None) -> Tensor:
        _, summary = self.encoder(x, lengths)
        return self.head(self.drop(summary))


class TokenRNNClassifier(RNNClassifier):
    """Token embedding, then the RNN classifier."""

    def __init__(self, vocab_size: int, embed_dim: int, *args, **kwargs) -> None:
        super().__init__(embed_dim, *args, **kwargs)
        self.embed = nn.Embedding(vocab_size, embed_dim)

    def forward(self, tokens: Tensor) -> Tensor:
        return super().forward(self.embed(tokens))


class GridRNNClassifier(RNNClassifier):
    """Reads a (B, C, H, W) grid as a sequence: one row per step (``step_axis="rows"``, an
    image read top to bottom) or one column per step (``"cols"``, a spectrogram read in time).
    Each step's features are all channels of that row or column."""

    def __init__(self, *args, step_axis: str = "rows", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if step_axis not in ("rows", "cols"):
            raise ValueError(f"step_axis must be 'rows' or 'cols', got '{step_axis}'")
        self.step_axis = step_axis

    def forward(self, x: Tensor, lengths: Tensor | None = None) -> Tensor:
        if self.step_axis == "cols":
            x = x.transpose(-1, -2)  # (B, C, W, H): columns become rows
        B, C, steps, width = x.shape
        seq = x.permute(0, 2, 1, 3).reshape(B, steps, C * width)  # (B, steps, C * width)
        return super().forward(seq, lengths)
