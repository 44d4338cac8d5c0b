"""Greedy and beam-search decoding for any model with the seq2seq decoding interface
(``encode``, ``start``, ``step``, ``select``; see ``models.seq2seq``)."""

from __future__ import annotations

import torch
from torch import Tensor, nn


def length_penalty(length: Tensor, alpha: float) -> Tensor:
    """GNMT's length normalisation, ((5 + |Y|) / 6) ** alpha (Wu et al., 2016)."""
    return ((5.0 + length.float()) / 6.0) ** alpha


def max_target_length(src_lengths: Tensor, ratio: float = 1.5, extra: int = 10) -> int:
    return int(src_lengths.max().item() * ratio + extra)


@torch.no_grad()
def greedy_decode(
    model: nn.Module, src: Tensor, src_lengths: Tensor, bos: int, eos: int, max_len: int | None = None,
) -> list[list[int]]:
    """Most likely next token at each step, with the model's cache (KV cache or RNN state)."""
    state = model.encode(src, src_lengths)
    cache = model.start(state)
    B = src.shape[0]
    max_len = max_len or max_target_length(src_lengths)
    tokens = torch.full((B,), bos, dtype=torch.long, device=src.device)
    out = torch.empty(B, 0, dtype=torch.long, device=src.device)
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        log_probs, cache = model.step(tokens, state, cache)
        tokens = log_probs.argmax(-1).masked_fill(done, eos)
        out = torch.cat([out, tokens[:, None]], dim=1)
        done |= tokens == eos
        if done.all():
            break
    return [_strip(row, eos) for row in out.tolist()]


@torch.no_grad()
def greedy_decode_without_cache(
    model: nn.Module, src: Tensor, src_lengths: Tensor, bos: int, eos: int, max_len: int | None = None,
) -> list[list[int]]:
    """Greedy decoding that recomputes the whole prefix each step (Transformer only): the
    reference the cached path must match."""
    state = model.encode(src, src_lengths)
    B = src.shape[0]
    max_len = max_len or max_target_length(src_lengths)
    prefix = torch.full((B, 1), bos, dtype=torch.long, device=src.device)
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        tokens = model.step_without_cache(prefix, state).argmax(-1).masked_fill(done, eos)
        prefix = torch.cat([prefix, tokens[:, None]], dim=1)
        done |= tokens == eos
        if done.all():
            break
    return [_strip(row, eos) for row in prefix[:, 1:].tolist()]


@torch.no_grad()
def beam_search(
    model: nn.Module, src: Tensor, src_lengths: Tensor, bos: int, eos: int, beam_size: int = 4,
    alpha: float = 0.6, max_len: int | None = None,
) -> list[list[int]]:
    """Batched beam search; finished hypotheses are ranked by log-prob / length_penalty."""
    B, K = src.shape[0], beam_size
    device = src.device
    state = model.encode(src, src_lengths)
    expand = torch.arange(B, device=device).repeat_interleave(K)  # (B*K,) source of each beam
    cache = model.start(state)
    state, cache = model.select(state, cache, expand)
    max_len = max_len or max_target_length(src_lengths)

    scores = torch.zeros(B, K, device=device)
    scores[:, 1:] = float("-inf")  # all beams start identical: keep one
    tokens = torch.full((B * K,), bos, dtype=torch.long, device=device)
    history = torch.empty(B * K, 0, dtype=torch.long, device=device)
    finished = torch.zeros(B * K, dtype=torch.bool, device=device)
    lengths = torch.zeros(B * K, dtype=torch.long, device=device)
    for _ in range(max_len):
        log_probs, cache = model.step(tokens, state, cache)  # (B*K, V)
        V = log_probs.shape[-1]
        # A finished beam may only extend with eos, at no cost: its score stays fixed.
        frozen = torch.full_like(log_probs, float("-inf"))
        frozen[:, eos] = 0.0
        log_probs = torch.where(finished[:, None], frozen, log_probs)
        total = (scores.view(-1, 1) + log_probs).view(B, K * V)
        scores, flat = total.topk(K, dim=-1)  # (B, K)
        beam, token = flat // V, flat % V
        origin = (torch.arange(B, device=device)[:, None] * K + beam).view(-1)  # (B*K,)
        state, cache = model.select(state, cache, origin)
        tokens = token.view(-1)
        history = torch.cat([history.index_select(0, origin), tokens[:, None]], dim=1)
        was_finished = finished.index_select(0, origin)
        lengths = lengths.index_select(0, origin) + (~was_finished).long()
        finished = was_finished | (tokens == eos)
        if finished.all():
            break
    normalised = scores.view(-1) / length_penalty(lengths, alpha)
    best = normalised.view(B, K).argmax(-1) + torch.arange(B, device=device) * K
    return [_strip(row, eos) for row in history.index_select(0, best).tolist()]


def _strip(ids: list[int], eos: int) -> list[int]:
    return ids[: ids.index(eos)] if eos in ids else ids
