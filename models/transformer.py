"""Pre-norm transformer blocks built on the one attention core.

Read top to bottom: position encodings, MLP, encoder layer, decoder layer, encoder, decoder.
Every attention here is ``models.attention.MultiHeadAttention``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from models.attention import KVCache, MultiHeadAttention
from models.dropout import Dropout

POS_ENCODINGS = ("sinusoidal", "learned", "rotary", "none")


# -------------------------------------------------------------------- position encodings
class SinusoidalPositionalEncoding(nn.Module):
    """Fixed sin/cos table added to the input (Vaswani et al., section 3.5)."""

    def __init__(self, dim: int, max_len: int) -> None:
        super().__init__()
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, dim, 2) * (-math.log(10000.0) / dim))
        table = torch.zeros(max_len, dim)
        table[:, 0::2] = torch.sin(position * div_term)
        table[:, 1::2] = torch.cos(position * div_term[: dim // 2])
        self.register_buffer("table", table, persistent=False)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        return x + self.table[offset : offset + x.shape[1]]


class LearnedPositionalEmbedding(nn.Module):
    """One trained vector per position, added to the input (ViT / BERT style)."""

    def __init__(self, dim: int, max_len: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(1, max_len, dim) * 0.02)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        return x + self.weight[:, offset : offset + x.shape[1]]


class RotaryEmbedding(nn.Module):
    """Rotary position embedding (Su et al., RoFormer): rotates q and k by their position.

    Applied inside self-attention to tensors of shape (B, H, L, head_dim).
    """

    def __init__(self, head_dim: int, max_len: int, base: float = 10000.0) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary embedding needs an even head_dim, got {head_dim}")
        inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2).float() / head_dim)
        angles = torch.outer(torch.arange(max_len).float(), inv_freq)  # (max_len, hd/2)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        L = x.shape[-2]
        cos = self.cos[offset : offset + L].to(x.dtype)  # (L, hd/2)
        sin = self.sin[offset : offset + L].to(x.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]  # (B, H, L, hd/2) each
        rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
        return rotated.flatten(-2)  # (B, H, L, hd)


def build_position_encoding(
    kind: str, dim: int, num_heads: int, max_len: int
) -> tuple[nn.Module | None, nn.Module | None]:
    """Return ``(added_to_input, rotary_for_attention)``; at most one is not None."""
    if kind not in POS_ENCODINGS:
        raise ValueError(f"unknown pos_encoding '{kind}'; choose one of {', '.join(POS_ENCODINGS)}")
    if kind == "rotary":
        return None, RotaryEmbedding(dim // num_heads, max_len)
    additive = {"sinusoidal": SinusoidalPositionalEncoding, "learned": LearnedPositionalEmbedding}
    return (additive[kind](dim, max_len) if kind in additive else None), None


# -------------------------------------------------------------------- blocks
class MLP(nn.Module):
    def __init__(self, dim: int, hidden_dim: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_dim, dim)
        self.drop = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


class EncoderLayer(nn.Module):
    """Pre-norm block: ``x + attn(norm(x))`` then ``x + mlp(norm(x))``."""

    def __init__(
        self, dim: int, num_heads: int, mlp_ratio: float = 4.0, dropout: float = 0.0,
        attn_dropout: float = 0.0, norm_eps: float = 1e-6, rotary: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.attn = MultiHeadAttention(dim, num_heads, dropout=attn_dropout, rotary=rotary)
        self.drop = Dropout(dropout)
        self.norm2 = nn.LayerNorm(dim, eps=norm_eps)
        self.mlp = MLP(dim, int(dim * mlp_ratio), dropout)

    def forward(
        self, x: Tensor, key_padding_mask: Tensor | None = None, attn_mask: Tensor | None = None,
        is_causal: bool = False, need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        h, weights = self.attn(
            self.norm1(x), key_padding_mask=key_padding_mask, attn_mask=attn_mask,
            is_causal=is_causal, need_weights=need_weights,
        )
        x = x + self.drop(h)
        x = x + self.mlp(self.norm2(x))
        return x, weights


class DecoderLayer(nn.Module):
    """Pre-norm block: causal self-attention, cross-attention over the memory, MLP."""

    def __init__(
        self, dim: int, num_heads: int, mlp_ratio: float = 4.0, dropout: float = 0.0,
        attn_dropout: float = 0.0, norm_eps: float = 1e-6, rotary: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.self_attn = MultiHeadAttention(dim, num_heads, dropout=attn_dropout, rotary=rotary)
        self.norm2 = nn.LayerNorm(dim, eps=norm_eps)
        self.cross_attn = MultiHeadAttention(dim, num_heads, dropout=attn_dropout)
        self.norm3 = nn.LayerNorm(dim, eps=norm_eps)
        self.mlp = MLP(dim, int(dim * mlp_ratio), dropout)
        self.drop = Dropout(dropout)

    def forward(
        self, x: Tensor, memory: Tensor, tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        cache: tuple[KVCache, KVCache] | None = None, need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Returns the new states and, with ``need_weights``, the cross-attention weights."""
        self_cache, cross_cache = cache if cache is not None else (None, None)
        h, _ = self.self_attn(
            self.norm1(x), key_padding_mask=tgt_key_padding_mask, is_causal=True,
            kv_cache=self_cache,
        )
        x = x + self.drop(h)
        h, cross_weights = self.cross_attn(
            self.norm2(x), memory, memory, key_padding_mask=memory_key_padding_mask,
            kv_cache=cross_cache, need_weights=need_weights,
        )
        x = x + self.drop(h)
        return x + self.mlp(self.norm3(x)), cross_weights


# -------------------------------------------------------------------- stacks
class _Stack(nn.Module):
    """What encoder and decoder share: position encoding, input dropout, layers, final norm."""

    layer_cls: type[nn.Module]

    def __init__(
        self, dim: int, depth: int, num_heads: int, mlp_ratio: float = 4.0,
        dropout: float = 0.0, attn_dropout: float = 0.0, pos_encoding: str = "learned",
        max_len: int = 512, norm_eps: float = 1e-6,
    ) -> None:
        super().__init__()
        if depth <= 0:
            raise ValueError(f"depth must be >= 1, got {depth}")
        if dim <= 0 or num_heads <= 0 or dim % num_heads:
            raise ValueError(
                f"num_heads ({num_heads}) must divide dim ({dim}); both must be positive"
            )
        self.dim = dim
        self.pos, rotary = build_position_encoding(pos_encoding, dim, num_heads, max_len)
        self.drop = Dropout(dropout)
        self.layers = nn.ModuleList(
            self.layer_cls(dim, num_heads, mlp_ratio, dropout, attn_dropout, norm_eps, rotary)
            for _ in range(depth)
        )
        self.norm = nn.LayerNorm(dim, eps=norm_eps)

    def _embed(self, x: Tensor, offset: int = 0) -> Tensor:
        return self.drop(x if self.pos is None else self.pos(x, offset))


class TransformerEncoder(_Stack):
    """A stack of pre-norm encoder layers over (B, L, dim) tokens."""

    layer_cls = EncoderLayer

    def forward(
        self, x: Tensor, key_padding_mask: Tensor | None = None, attn_mask: Tensor | None = None,
        is_causal: bool = False, return_attention: bool = False,
    ) -> Tensor | tuple[Tensor, list[Tensor]]:
        x = self._embed(x)
        maps = []
        for layer in self.layers:
            x, weights = layer(x, key_padding_mask, attn_mask, is_causal, return_attention)
            maps.append(weights)
        x = self.norm(x)
        return (x, maps) if return_attention else x


class TransformerDecoder(_Stack):
    """A stack of pre-norm decoder layers; ``cache`` enables step-by-step decoding."""

    layer_cls = DecoderLayer

    def new_cache(self) -> list[tuple[KVCache, KVCache]]:
        return [(KVCache(static=False), KVCache(static=True)) for _ in self.layers]

    def forward(
        self, x: Tensor, memory: Tensor, tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        cache: list[tuple[KVCache, KVCache]] | None = None, return_attention: bool = False,
    ) -> Tensor | tuple[Tensor, list[Tensor]]:
        offset = 0 if cache is None else cache[0][0].length
        x = self._embed(x, offset)
        maps = []
        for i, layer in enumerate(self.layers):
            x, weights = layer(
                x, memory, tgt_key_padding_mask, memory_key_padding_mask,
                None if cache is None else cache[i], return_attention,
            )
            maps.append(weights)
        x = self.norm(x)
        return (x, maps) if return_attention else x


# -------------------------------------------------------------------- attention geometry
@dataclass
class SelfAttentionMaps:
    """Every encoder layer's self-attention over one batch, and where each token sits.

    ``coordinates`` (B, L, D) places token i of example b in the input, in ``unit`` steps
    (a patch's row and column on the grid, a token's index, a frame); a token without a
    place (a cls token, padding) has NaN coordinates.
    """

    maps: list[Tensor]  # per layer (B, H, L, L): query -> key weights
    coordinates: Tensor
    unit: str


def sequence_coordinates(lengths: Tensor, steps: int, spacing: float = 1.0) -> Tensor:
    """(B, steps, 1): the index of each step times ``spacing``, NaN from each length on."""
    index = torch.arange(steps, device=lengths.device, dtype=torch.float32)
    place = (index * spacing).expand(lengths.shape[0], steps).clone()
    place[index[None, :] >= lengths[:, None]] = math.nan
    return place.unsqueeze(-1)


def unplaced_first(coordinates: Tensor) -> Tensor:
    """(B, L, D) -> (B, L + 1, D): a NaN row first, for a cls token, which has no place."""
    return torch.cat([coordinates.new_full((coordinates.shape[0], 1, coordinates.shape[2]), math.nan),
                      coordinates], dim=1)


# -------------------------------------------------------------------- weight decay
def learned_position_names(module: nn.Module) -> set[str]:
    """Full parameter names of every learned position table under ``module``: timm's models
    list theirs in ``no_weight_decay()``, since a position is not a weight to shrink."""
    return {
        f"{name}.weight" for name, sub in module.named_modules()
        if isinstance(sub, LearnedPositionalEmbedding)
    }


# -------------------------------------------------------------------- cls token
def new_cls_token(dim: int) -> nn.Parameter:
    """A learned summary token, zero here; ``init_cls_token`` draws it once the rest of the
    model is built (so the order of the random draws is the ViT's)."""
    return nn.Parameter(torch.zeros(1, 1, dim))


def init_cls_token(token: nn.Parameter) -> None:
    nn.init.trunc_normal_(token, std=0.02)


def prepend_cls_token(token: nn.Parameter, x: Tensor) -> Tensor:
    """(B, L, dim) -> (B, L + 1, dim), the cls token first."""
    return torch.cat([token.expand(x.shape[0], -1, -1), x], dim=1)


class TokenTransformerClassifier(nn.Module):
    """Token embedding, cls token, the encoder, cls-token head."""

    def __init__(self, vocab_size: int, num_classes: int, max_len: int, dim: int, depth: int,
                 num_heads: int, mlp_ratio: float, dropout: float, attn_dropout: float,
                 pos_encoding: str) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.cls_token = new_cls_token(dim)
        self.encoder = TransformerEncoder(dim, depth, num_heads, mlp_ratio, dropout, attn_dropout,
                                          pos_encoding, max_len + 1)
        self.head = nn.Linear(dim, num_classes)
        init_cls_token(self.cls_token)

    def no_weight_decay(self) -> set[str]:
        return {"cls_token"} | learned_position_names(self)

    @torch.no_grad()
    def self_attention_maps(self, tokens: Tensor) -> SelfAttentionMaps:
        x = prepend_cls_token(self.cls_token, self.embed(tokens))
        _, maps = self.encoder(x, return_attention=True)
        full = torch.full((tokens.shape[0],), tokens.shape[1], device=tokens.device)
        return SelfAttentionMaps(maps, unplaced_first(sequence_coordinates(full, tokens.shape[1])), "token")

    def forward(self, tokens: Tensor) -> Tensor:
        x = prepend_cls_token(self.cls_token, self.embed(tokens))  # (B, L + 1, dim)
        return self.head(self.encoder(x)[:, 0])
