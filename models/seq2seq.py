"""Sequence-to-sequence models over token ids: a Transformer encoder-decoder (the attention
core) and an RNN encoder-decoder, optionally with additive (Bahdanau) attention.

Both expose the same decoding interface, which ``models.decoding`` drives:
``encode(src, src_lengths) -> state``, ``start(state) -> cache``,
``step(tokens (B,), state, cache) -> (log_probs (B, V), cache)`` and
``select(state, cache, index)`` to reorder or expand the batch (beam search).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.attention import KVCache
from models.dropout import Dropout
from models.rnn import RNN_CELLS, RNNEncoder
from models.transformer import (
    SelfAttentionMaps,
    TransformerDecoder,
    TransformerEncoder,
    learned_position_names,
    sequence_coordinates,
)


@dataclass
class EncoderState:
    memory: Tensor  # (B, S, D)
    pad_mask: Tensor  # (B, S), True at padding
    summary: Tensor | None = None  # (B, D) for RNN decoders' initial state

    def select(self, index: Tensor) -> EncoderState:
        pick = lambda t: None if t is None else t.index_select(0, index)
        return EncoderState(pick(self.memory), pick(self.pad_mask), pick(self.summary))


def padding_mask(lengths: Tensor, max_len: int) -> Tensor:
    """(B, max_len) bool, True where a position is past the sequence's length."""
    return torch.arange(max_len, device=lengths.device)[None, :] >= lengths[:, None]


class TransformerSeq2Seq(nn.Module):
    """Pre-norm Transformer encoder-decoder over one shared (joint) vocabulary."""

    def __init__(
        self, vocab_size: int, dim: int, depth: int, num_heads: int, mlp_ratio: float = 4.0,
        dropout: float = 0.1, attn_dropout: float = 0.0, pos_encoding: str = "sinusoidal",
        max_len: int = 256, tie_embeddings: bool = True, pad_id: int = 0,
    ) -> None:
        super().__init__()
        self.pad_id, self.dim = pad_id, dim
        self.src_embed = nn.Embedding(vocab_size, dim, padding_idx=pad_id)
        self.tgt_embed = (self.src_embed if tie_embeddings
                          else nn.Embedding(vocab_size, dim, padding_idx=pad_id))
        self.encoder = TransformerEncoder(dim, depth, num_heads, mlp_ratio, dropout, attn_dropout,
                                          pos_encoding, max_len)
        self.decoder = TransformerDecoder(dim, depth, num_heads, mlp_ratio, dropout, attn_dropout,
                                          pos_encoding, max_len)
        self.generator = nn.Linear(dim, vocab_size, bias=False)
        if tie_embeddings:  # one matrix for source, target and output (Press & Wolf, 2017)
            self.generator.weight = self.tgt_embed.weight
        nn.init.normal_(self.src_embed.weight, std=dim**-0.5)

    def no_weight_decay(self) -> set[str]:
        return learned_position_names(self)

    def _embed(self, table: nn.Embedding, tokens: Tensor) -> Tensor:
        return table(tokens) * math.sqrt(self.dim)  # section 3.4: embeddings scaled by sqrt(d)

    def encode(self, src: Tensor, src_lengths: Tensor) -> EncoderState:
        pad = padding_mask(src_lengths, src.shape[1])
        return EncoderState(self.encoder(self._embed(self.src_embed, src), key_padding_mask=pad), pad)

    @torch.no_grad()
    def self_attention_maps(self, src: Tensor, src_lengths: Tensor,
                            tgt_in: Tensor | None = None) -> SelfAttentionMaps:
        """The encoder's self-attention over the source tokens (``tgt_in`` is taken so the
        model is called with its training inputs, and not used)."""
        pad = padding_mask(src_lengths, src.shape[1])
        _, maps = self.encoder(self._embed(self.src_embed, src), key_padding_mask=pad,
                               return_attention=True)
        return SelfAttentionMaps(maps, sequence_coordinates(src_lengths, src.shape[1]), "token")

    def forward(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher-forced logits (B, T, V)."""
        state = self.encode(src, src_lengths)
        tgt_pad = tgt_in == self.pad_id
        h = self.decoder(self._embed(self.tgt_embed, tgt_in), state.memory, tgt_pad, state.pad_mask)
        return self.generator(h)

    def cross_attention(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> list[Tensor]:
        """Per-layer cross-attention weights (B, H, T, S) of a teacher-forced pass."""
        state = self.encode(src, src_lengths)
        _, maps = self.decoder(self._embed(self.tgt_embed, tgt_in), state.memory, tgt_in == self.pad_id,
                               state.pad_mask, return_attention=True)
        return maps

    # ---------------------------------------------------------- step-by-step decoding
    def start(self, state: EncoderState) -> list[tuple[KVCache, KVCache]]:
        return self.decoder.new_cache()

    def step(self, tokens: Tensor, state: EncoderState, cache) -> tuple[Tensor, Any]:
        x = self._embed(self.tgt_embed, tokens[:, None])  # (B, 1, D)
        h = self.decoder(x, state.memory, None, state.pad_mask, cache=cache)
        return F.log_softmax(self.generator(h[:, -1]).float(), dim=-1), cache

    def step_without_cache(self, prefix: Tensor, state: EncoderState) -> Tensor:
        """The next-token log-probs from the whole prefix (B, t), recomputed: the reference
        that cached decoding must equal."""
        h = self.decoder(self._embed(self.tgt_embed, prefix), state.memory, None, state.pad_mask)
        return F.log_softmax(self.generator(h[:, -1]).float(), dim=-1)

    @staticmethod
    def select(state: EncoderState, cache, index: Tensor):
        for self_cache, cross_cache in cache:
            for kv in (self_cache, cross_cache):
                if kv.key is not None:
                    kv.key, kv.value = kv.key.index_select(0, index), kv.value.index_select(0, index)
        return state.select(index), cache


class AdditiveAttention(nn.Module):
    """Bahdanau et al. (2015) additive attention: score(s, h) = v^T tanh(W s + U h).

    A different mechanism from the multi-head dot-product core: one head, a learned scoring
    network, used only by the RNN seq2seq baseline (reported as "additive attention").
    """

    def __init__(self, query_dim: int, key_dim: int, attn_dim: int) -> None:
        super().__init__()
        self.query = nn.Linear(query_dim, attn_dim, bias=False)
        self.key = nn.Linear(key_dim, attn_dim)
        self.v = nn.Linear(attn_dim, 1, bias=False)

    def forward(self, query: Tensor, keys: Tensor, projected_keys: Tensor, pad_mask: Tensor) -> Tensor:
        scores = self.v(torch.tanh(self.query(query)[:, None] + projected_keys)).squeeze(-1)  # (B, S)
        weights = scores.masked_fill(pad_mask, float("-inf")).softmax(dim=-1)
        return torch.bmm(weights[:, None], keys).squeeze(1)  # (B, key_dim)


@dataclass
class RNNDecoderCache:
    hidden: Any  # (layers, B, H) or a (h, c) pair for LSTM
    context: Tensor  # (B, key_dim), last attention context (zeros without attention)
    projected_keys: Tensor | None  # encoder memory through the attention's key layer


class RNNSeq2Seq(nn.Module):
    """RNN encoder (bidirectional optional) and RNN decoder, with or without additive attention.

    Without attention the decoder sees the source only through its initial state (Sutskever
    et al., 2014); with it, every step reads a context vector over all encoder outputs
    (Bahdanau et al., 2015), fed back as input at the next step.
    """

    def __init__(
        self, vocab_size: int, dim: int, depth: int, cell: str = "gru", bidirectional: bool = True,
        dropout: float = 0.1, additive_attention: bool = False, embed_dim: int | None = None,
        tie_embeddings: bool = True, pad_id: int = 0,
    ) -> None:
        super().__init__()
        embed_dim = embed_dim or dim
        self.pad_id, self.cell, self.depth = pad_id, cell, depth
        self.embed = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        self.encoder = RNNEncoder(embed_dim, dim, depth, cell, bidirectional, dropout)
        key_dim = self.encoder.output_dim
        self.bridge = nn.Linear(key_dim, dim * depth)  # encoder summary -> decoder initial state
        self.attention = AdditiveAttention(dim, key_dim, dim) if additive_attention else None
        context_dim = key_dim if additive_attention else 0
        self.decoder = RNN_CELLS[cell](embed_dim + context_dim, dim, num_layers=depth, batch_first=True,
                                       dropout=dropout if depth > 1 else 0.0)
        self.out = nn.Linear(dim + context_dim, embed_dim)
        self.drop = Dropout(dropout)
        self.generator = nn.Linear(embed_dim, vocab_size, bias=False)
        if tie_embeddings:
            self.generator.weight = self.embed.weight
        self.context_dim, self.dim = context_dim, dim

    def encode(self, src: Tensor, src_lengths: Tensor) -> EncoderState:
        outputs, summary = self.encoder(self.drop(self.embed(src)), src_lengths)
        return EncoderState(outputs, padding_mask(src_lengths, src.shape[1]), summary)

    def start(self, state: EncoderState) -> RNNDecoderCache:
        B = state.memory.shape[0]
        h0 = torch.tanh(self.bridge(state.summary)).view(B, self.depth, self.dim).transpose(0, 1)
        hidden = (h0.contiguous(), torch.zeros_like(h0)) if self.cell == "lstm" else h0.contiguous()
        context = state.memory.new_zeros(B, self.context_dim)
        keys = None if self.attention is None else self.attention.key(state.memory)
        return RNNDecoderCache(hidden, context, keys)

    def _top(self, hidden) -> Tensor:
        return (hidden[0] if self.cell == "lstm" else hidden)[-1]  # (B, H) of the last layer

    def _decode_one(self, emb: Tensor, state: EncoderState, cache: RNNDecoderCache):
        """One step: input = previous token (+ previous context); returns output features."""
        x = emb if self.attention is None else torch.cat([emb, cache.context], dim=-1)
        out, hidden = self.decoder(x[:, None], cache.hidden)
        h = out[:, 0]
        if self.attention is not None:
            context = self.attention(h, state.memory, cache.projected_keys, state.pad_mask)
            features = torch.cat([h, context], dim=-1)
        else:
            context, features = cache.context, h
        features = torch.tanh(self.out(self.drop(features)))
        return features, RNNDecoderCache(hidden, context, cache.projected_keys)

    def forward(self, src: Tensor, src_lengths: Tensor, tgt_in: Tensor) -> Tensor:
        state = self.encode(src, src_lengths)
        cache = self.start(state)
        emb = self.drop(self.embed(tgt_in))
        if self.attention is None:  # the whole target in one cuDNN/oneDNN call
            out, _ = self.decoder(emb, cache.hidden)
            return self.generator(self.drop(torch.tanh(self.out(self.drop(out)))))
        steps = []
        for t in range(tgt_in.shape[1]):  # attention needs each step's state: a loop
            features, cache = self._decode_one(emb[:, t], state, cache)
            steps.append(features)
        return self.generator(self.drop(torch.stack(steps, dim=1)))

    def step(self, tokens: Tensor, state: EncoderState, cache: RNNDecoderCache):
        features, cache = self._decode_one(self.embed(tokens), state, cache)
        return F.log_softmax(self.generator(features).float(), dim=-1), cache

    def select(self, state: EncoderState, cache: RNNDecoderCache, index: Tensor):
        pick_h = lambda h: h.index_select(1, index)
        hidden = tuple(pick_h(h) for h in cache.hidden) if self.cell == "lstm" else pick_h(cache.hidden)
        keys = None if cache.projected_keys is None else cache.projected_keys.index_select(0, index)
        return state.select(index), RNNDecoderCache(hidden, cache.context.index_select(0, index), keys)
