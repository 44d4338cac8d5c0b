"""The recurrent baselines: an LSTM or GRU reads every input one step at a time.

Images one row per step, spectrograms one frame per step (padding skipped), utterances a few
stacked frames per step with a CTC head, token sequences
one token per step, token pairs with an RNN encoder-decoder (optionally with additive
attention, a different mechanism from the multi-head core).
"""

from __future__ import annotations

from typing import Annotated, Literal

from models.constraints import AT_LEAST_1, FRACTION
from models.ctc import RNNTranscriber
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
from models.rnn import GridRNNClassifier, TokenRNNClassifier
from models.seq2seq import RNNSeq2Seq


def build(
    inputs: InputKind, *, cell: Literal["lstm", "gru"], dim: Annotated[int, AT_LEAST_1],
    depth: Annotated[int, AT_LEAST_1], bidirectional: bool = False,
    dropout: Annotated[float, FRACTION] = 0.0, embed_dim: Annotated[int, AT_LEAST_1] | None = None,
    additive_attention: bool = False, tie_embeddings: bool = True,
) -> Built:
    """``depth`` stacked ``cell`` layers (lstm or gru) of ``dim`` units per direction.
    ``embed_dim``: the token embedding's width (default ``dim``); ``additive_attention`` and
    ``tie_embeddings``: the encoder-decoder's Bahdanau attention and shared word matrix."""
    rnn = dict(hidden_dim=dim, num_layers=depth, cell=cell, bidirectional=bidirectional, dropout=dropout)
    if isinstance(inputs, ImageGrid):
        return Built(
            GridRNNClassifier(input_dim=inputs.channels * inputs.width, num_classes=inputs.num_classes,
                              **rnn, step_axis="rows"),
            "RNN reads the image one row per step (rows as the sequence, pixels as features)",
        )
    if isinstance(inputs, FrameSequence):
        return Built(
            GridRNNClassifier(input_dim=inputs.channels * inputs.bins, num_classes=inputs.num_classes,
                              **rnn, step_axis="cols"),
            "RNN reads one spectrogram frame per step, padded frames skipped",
        )
    if isinstance(inputs, FrameTranscription):
        directions = "bidirectional " if bidirectional else ""
        return Built(
            RNNTranscriber(inputs.bins, inputs.channels, inputs.vocab_size, inputs.step_stride, **rnn,
                           frontend=inputs.frontend, frontend_channels=inputs.frontend_channels),
            f"{directions}RNN over the steps of a conv2d front end ({inputs.frontend_channels} channels, "
            f"4x subsampling), a CTC head per step" if inputs.frontend == "conv2d" else
            f"{directions}RNN over the frames, {inputs.step_stride} frames stacked per step "
            f"(padding skipped), a CTC head per step",
        )
    if isinstance(inputs, TokenSequence):
        return Built(
            TokenRNNClassifier(inputs.vocab_size, embed_dim or dim, inputs.num_classes, **rnn),
            f"recall the first of {inputs.seq_len} tokens (dependency distance {inputs.seq_len - 1})",
        )
    if isinstance(inputs, TokenPairs):
        model = RNNSeq2Seq(inputs.vocab_size, dim, depth, cell, bidirectional, dropout,
                           additive_attention=additive_attention, embed_dim=embed_dim,
                           tie_embeddings=tie_embeddings, pad_id=inputs.pad_id)
        if additive_attention:
            return Built(model, "RNN seq2seq with additive (Bahdanau) attention: a single-head "
                                "learned scoring network, not the multi-head dot-product core",
                         label_suffix="+additive_attn")
        return Built(model, "RNN seq2seq without attention: the decoder sees the source only "
                            "through its initial state")
    raise UnsupportedInput("rnn", inputs)
