"""The attention family: every input read through the one multi-head attention core.

Images and spectrograms as a patch grid with a cls token (ViT, AST), utterances as
time-ordered patches with a CTC head, token sequences with a cls token, token pairs with a
Transformer encoder-decoder.
"""

from __future__ import annotations

from typing import Annotated, Literal

from models.constraints import AT_LEAST_1, FRACTION, POSITIVE
from models.ctc import TransformerTranscriber
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
from models.patch import PatchTransformerClassifier
from models.seq2seq import TransformerSeq2Seq
from models.transformer import TokenTransformerClassifier


def build(
    inputs: InputKind, *, dim: Annotated[int, AT_LEAST_1], depth: Annotated[int, AT_LEAST_1],
    num_heads: Annotated[int, AT_LEAST_1], mlp_ratio: Annotated[float, POSITIVE] = 2.0,
    dropout: Annotated[float, FRACTION] = 0.0, attn_dropout: Annotated[float, FRACTION] = 0.0,
    pos_encoding: Literal["sinusoidal", "learned", "rotary", "none"] = "learned",
    pool: Literal["token", "avg"] = "token", tie_embeddings: bool = True,
) -> Built:
    """A pre-norm transformer of ``depth`` layers of width ``dim`` with ``num_heads`` heads.
    ``pool``: what a classifier head reads (``token``: the cls token, ``avg``: the mean of
    the patch tokens); ``tie_embeddings``: one matrix for source, target and output words."""
    block = dict(dim=dim, depth=depth, num_heads=num_heads, mlp_ratio=mlp_ratio, dropout=dropout,
                 attn_dropout=attn_dropout, pos_encoding=pos_encoding)
    if isinstance(inputs, ImageGrid | FrameSequence):
        return _patch_classifier(inputs, pool, block)
    if isinstance(inputs, FrameTranscription):
        return Built(
            TransformerTranscriber(inputs.bins, inputs.channels, inputs.max_frames, inputs.vocab_size,
                                   inputs.patch_frames, inputs.step_stride, **block,
                                   frontend=inputs.frontend, frontend_channels=inputs.frontend_channels),
            f"transformer encoder over the steps of a conv2d front end ({inputs.frontend_channels} "
            f"channels, 4x subsampling), a CTC head per step" if inputs.frontend == "conv2d" else
            f"transformer encoder over time-ordered patches ({inputs.bins} mel bins x "
            f"{inputs.patch_frames} frames, stride {inputs.step_stride} frames), a CTC head per token",
        )
    if isinstance(inputs, TokenSequence):
        return Built(
            TokenTransformerClassifier(inputs.vocab_size, inputs.num_classes, inputs.seq_len, **block),
            f"recall the first of {inputs.seq_len} tokens (dependency distance {inputs.seq_len - 1})",
        )
    if isinstance(inputs, TokenPairs):
        return Built(
            TransformerSeq2Seq(inputs.vocab_size, **block, max_len=inputs.max_len,
                               tie_embeddings=tie_embeddings, pad_id=inputs.pad_id),
            "Transformer encoder-decoder: causal self-attention and cross-attention through the core",
        )
    raise UnsupportedInput("attention", inputs)


def _patch_classifier(inputs: ImageGrid | FrameSequence, pool: str, block: dict) -> Built:
    if isinstance(inputs, ImageGrid):
        size, patch_embed = (inputs.height, inputs.width), inputs.patch_embed
    else:
        size, patch_embed = (inputs.bins, inputs.frames), "linear"
    model = PatchTransformerClassifier(
        input_size=size, patch_size=inputs.patch_size, stride=inputs.patch_stride,
        in_chans=inputs.channels, num_classes=inputs.num_classes, **block, pool=pool,
        patch_embed=patch_embed,
    )
    if isinstance(inputs, FrameSequence):
        (p_bins, p_frames), (s_bins, s_frames) = inputs.patch_size, inputs.patch_stride or inputs.patch_size
        return Built(model, f"AST-style: {p_bins}x{p_frames} (mel x frame) patches, "
                            f"stride {s_bins}x{s_frames}, cls-token head")
    stride = inputs.patch_stride or inputs.patch_size
    tokens = " (shifted patch tokenization)" if patch_embed == "shifted" else ""
    return Built(model, f"ViT over {inputs.patch_size}x{inputs.patch_size} patches{tokens}, "
                        f"stride {stride}, cls-token head")
