"""LSTM / GRU baselines shared by every task: an encoder over (B, L, F) sequences and a
sequence classifier on top of it."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

RNN_CELLS: dict[str, type[nn.RNNBase]] = {"lstm": nn.LSTM, "gru": nn.GRU}


class RNNEncoder(nn.Module):
    """Multi-layer (optionally bidirectional) LSTM or GRU, batch first.

    ``forward`` returns every step's output (B, L, hidden * directions) and a summary
    (B, hidden * directions): the last layer's final state, both directions concatenated.
    Padded steps are skipped when ``lengths`` is given.
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

    def forward(self, x: Tensor, lengths: Tensor | None = None) -> tuple[Tensor, Tensor]:
        total_len = x.shape[1]
        if lengths is not None:
            x = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        outputs, state = self.rnn(x)
        if lengths is not None:
            outputs, _ = pad_packed_sequence(outputs, batch_first=True, total_length=total_len)
        hidden = state[0] if self.cell == "lstm" else state  # (layers * dirs, B, hidden)
        last_layer = hidden[-self.directions :]  # (dirs, B, hidden)
        summary = torch.cat(list(last_layer), dim=-1)  # (B, hidden * dirs)
        return outputs, summary


class RNNClassifier(nn.Module):
    """Sequence classifier: optional input projection, RNN encoder, dropout, linear head."""

    def __init__(
        self, input_dim: int, num_classes: int, hidden_dim: int, num_layers: int = 1,
        cell: str = "lstm", bidirectional: bool = False, dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.encoder = RNNEncoder(input_dim, hidden_dim, num_layers, cell, bidirectional, dropout)
        self.drop = nn.Dropout(dropout)
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
