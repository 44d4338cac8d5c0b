"""The one multi-head attention core of mha-bench.

Every attention in the project (ViT, spectrogram transformer, encoder-decoder) is this class.
It is exactly the mechanism of "Attention Is All You Need", section 3.2:

    head_i = softmax(Q W_i^Q (K W_i^K)^T / sqrt(d_k)) V W_i^V
    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O

The per-head projections W_i^Q are stored stacked as one (E, E) matrix per Q/K/V (and the
three stacked again as ``in_proj_weight`` when key and value have the query's width), which
is the layout of ``nn.MultiheadAttention`` and timm's ``Attention``: weights move between the
three without reshuffling.

Masks follow ``nn.MultiheadAttention``: a bool mask is True where attention is NOT allowed;
a float mask is added to the scores.

Between the projections, the scores and weights take one of two paths, the same mathematics
either way: ``sdpa``, torch's fused ``F.scaled_dot_product_attention``, or ``matmul``, the
explicit ``softmax(q k^T / sqrt(d)) v``. Float32 and every CUDA
device take the fused kernel. On a CPU in a low precision, the fused kernel's bfloat16 path can
be several times slower than plain matmuls on matrix units (AMX) in training, and faster in
inference, depending on the head width; so the faster of the two is measured once per process
for each head width, in training (forward + backward) and in inference (forward), and kept
(``attention_path``).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.dropout import dropout


@dataclass
class KVCache:
    """Keys and values kept between decoding steps, shape (B, H, L, head_dim).

    ``static`` caches (cross-attention over an encoder memory) are filled once and reused;
    the others (causal self-attention) grow by the new keys on every call.
    """

    static: bool = False
    key: Tensor | None = None
    value: Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.key is None else self.key.shape[-2]


class MultiHeadAttention(nn.Module):
    """Batch-first multi-head attention with the fused SDPA kernel as its fast path."""

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        kdim: int | None = None,
        vdim: int | None = None,
        rotary: nn.Module | None = None,
    ) -> None:
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim ({embed_dim}) and num_heads ({num_heads}) must be > 0")
        if embed_dim % num_heads:
            raise ValueError(
                f"num_heads ({num_heads}) must divide embed_dim ({embed_dim}); "
                f"pick a width that is a multiple of the head count"
            )
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.kdim = kdim or embed_dim
        self.vdim = vdim or embed_dim
        self.dropout = dropout
        self.same_dims = self.kdim == embed_dim and self.vdim == embed_dim
        if self.same_dims:
            # One (3E, E) matrix: self-attention projects Q, K and V in a single matmul.
            self.in_proj = nn.Linear(embed_dim, 3 * embed_dim, bias=bias)
        else:
            self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
            self.k_proj = nn.Linear(self.kdim, embed_dim, bias=bias)
            self.v_proj = nn.Linear(self.vdim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.rotary = rotary

    # ---------------------------------------------------------------- projections
    def _project(self, query: Tensor, key: Tensor, value: Tensor, self_attention: bool):
        if not self.same_dims:
            return self.q_proj(query), self.k_proj(key), self.v_proj(value)
        if self_attention:
            return self.in_proj(query).chunk(3, dim=-1)
        w_q, w_k, w_v = self.in_proj.weight.chunk(3)
        b_q, b_k, b_v = (None,) * 3 if self.in_proj.bias is None else self.in_proj.bias.chunk(3)
        return F.linear(query, w_q, b_q), F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)

    def _split_heads(self, x: Tensor) -> Tensor:
        B, L, _ = x.shape
        return x.view(B, L, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, L, hd)

    # ---------------------------------------------------------------- forward
    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        *,
        key_padding_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        kv_cache: KVCache | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend ``query`` (B, Lq, E) over ``key``/``value`` (B, Lk, kdim/vdim).

        ``key=None`` means self-attention; a rotary embedding, when the core has one, is meant
        for self-attention only. ``is_causal`` masks future keys, aligned to the end
        of the key sequence, so it stays right when a KV cache holds earlier steps.
        Returns ``(output (B, Lq, E), weights (B, H, Lq, Lk) or None)``.
        """
        self_attention = key is None
        key = query if key is None else key
        value = key if value is None else value
        B, Lq, _ = query.shape

        reuse_static = kv_cache is not None and kv_cache.static and kv_cache.key is not None
        if reuse_static:
            q = self._project_query(query)
            k, v = kv_cache.key, kv_cache.value
        else:
            q, k, v = self._project(query, key, value, self_attention)
            q, k, v = self._split_heads(q), self._split_heads(k), self._split_heads(v)
            if self.rotary is not None:
                offset = 0 if kv_cache is None or kv_cache.static else kv_cache.length
                q, k = self.rotary(q, offset), self.rotary(k, offset)
            if kv_cache is not None:
                if not kv_cache.static and kv_cache.key is not None:
                    k = torch.cat([kv_cache.key, k], dim=2)  # (B, H, past + Lk, hd)
                    v = torch.cat([kv_cache.value, v], dim=2)
                kv_cache.key, kv_cache.value = k, v
        Lk = k.shape[2]

        mask = merge_masks(
            attn_mask, key_padding_mask, B, self.num_heads, Lq, Lk, q.dtype, q.device
        )
        causal_in_kernel = is_causal and mask is None and Lq == Lk
        if is_causal and not causal_in_kernel and Lq > 1:
            mask = _add_masks(mask, causal_mask(Lq, Lk, q.dtype, q.device))

        dropout_p = self.dropout if self.training else 0.0
        if need_weights:
            y, weights = attention_math(q, k, v, mask, causal_in_kernel, dropout_p, self.training)
        elif attention_path(q.device, q.dtype, self.head_dim) == "matmul":
            y = attention_matmul(q, k, v, mask, causal_in_kernel, dropout_p, self.training)
            weights = None
        else:
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=causal_in_kernel
            )  # (B, H, Lq, hd)
            weights = None
        y = y.transpose(1, 2).reshape(B, Lq, self.embed_dim)  # (B, Lq, E): heads concatenated
        return self.out_proj(y), weights

    def _project_query(self, query: Tensor) -> Tensor:
        if self.same_dims:
            w_q = self.in_proj.weight[: self.embed_dim]
            b_q = None if self.in_proj.bias is None else self.in_proj.bias[: self.embed_dim]
            return self._split_heads(F.linear(query, w_q, b_q))
        return self._split_heads(self.q_proj(query))

    # ---------------------------------------------------------------- interop
    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention) -> MultiHeadAttention:
        """Copy an ``nn.MultiheadAttention`` (batch_first or not) into the core."""
        if mha.bias_k is not None or mha.add_zero_attn:
            raise ValueError("add_bias_kv / add_zero_attn have no counterpart in the core")
        bias = mha.in_proj_bias is not None
        core = cls(mha.embed_dim, mha.num_heads, mha.dropout, bias, mha.kdim, mha.vdim)
        with torch.no_grad():
            if core.same_dims:
                _copy(core.in_proj.weight, mha.in_proj_weight)
            else:
                _copy(core.q_proj.weight, mha.q_proj_weight)
                _copy(core.k_proj.weight, mha.k_proj_weight)
                _copy(core.v_proj.weight, mha.v_proj_weight)
            if bias:
                core._set_in_proj_bias(mha.in_proj_bias)
                _copy(core.out_proj.bias, mha.out_proj.bias)
            _copy(core.out_proj.weight, mha.out_proj.weight)
        return core

    def to_torch(self) -> nn.MultiheadAttention:
        """A batch-first ``nn.MultiheadAttention`` with this core's weights."""
        if self.rotary is not None:
            raise ValueError("nn.MultiheadAttention has no rotary embedding; build without it")
        bias = self.out_proj.bias is not None
        mha = nn.MultiheadAttention(
            self.embed_dim, self.num_heads, self.dropout, bias=bias,
            kdim=self.kdim, vdim=self.vdim, batch_first=True,
        )
        with torch.no_grad():
            if self.same_dims:
                _copy(mha.in_proj_weight, self.in_proj.weight)
            else:
                _copy(mha.q_proj_weight, self.q_proj.weight)
                _copy(mha.k_proj_weight, self.k_proj.weight)
                _copy(mha.v_proj_weight, self.v_proj.weight)
            if bias:
                _copy(mha.in_proj_bias, self._in_proj_bias())
                _copy(mha.out_proj.bias, self.out_proj.bias)
            _copy(mha.out_proj.weight, self.out_proj.weight)
        return mha

    @classmethod
    def from_timm(cls, attn: nn.Module) -> MultiHeadAttention:
        """Copy a timm ``Attention`` (fused ``qkv`` + ``proj``, no q/k norm) into the core."""
        if not isinstance(attn.q_norm, nn.Identity) or not isinstance(attn.norm, nn.Identity):
            raise ValueError("timm Attention with qk_norm / scale_norm has no counterpart")
        dim = attn.proj.in_features
        has_bias = attn.qkv.bias is not None
        if (attn.proj.bias is not None) != has_bias:
            raise ValueError("the core uses one bias flag for qkv and proj; timm differs here")
        core = cls(dim, attn.num_heads, attn.attn_drop.p, bias=has_bias)
        with torch.no_grad():
            _copy(core.in_proj.weight, attn.qkv.weight)
            _copy(core.out_proj.weight, attn.proj.weight)
            if has_bias:
                _copy(core.in_proj.bias, attn.qkv.bias)
                _copy(core.out_proj.bias, attn.proj.bias)
        return core

    def _in_proj_bias(self) -> Tensor:
        if self.same_dims:
            return self.in_proj.bias
        return torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias])

    def _set_in_proj_bias(self, bias: Tensor) -> None:
        if self.same_dims:
            _copy(self.in_proj.bias, bias)
            return
        for proj, part in zip((self.q_proj, self.k_proj, self.v_proj), bias.chunk(3), strict=True):
            _copy(proj.bias, part)


# -------------------------------------------------------------------- functions
def attention_math(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool,
    dropout_p: float, training: bool,
) -> tuple[Tensor, Tensor]:
    """Explicit scaled dot-product attention, the float32 reference; used when the weights
    are wanted."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, Lq, Lk)
    if is_causal:
        scores = scores + causal_mask(q.shape[-2], k.shape[-2], scores.dtype, scores.device)
    if mask is not None:
        scores = scores + mask
    weights = scores.softmax(dim=-1)
    y = dropout(weights, dropout_p, training) @ v  # (B, H, Lq, hd)
    return y, weights


def attention_matmul(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool,
                     dropout_p: float, training: bool) -> Tensor:
    """The ``matmul`` path: ``attention_math`` with the scale folded into q (a pass over
    (B, H, L, hd) rather than over the (B, H, L, L) scores) and no weights returned. In a
    low precision every pass over the scores costs as much as the matmuls on matrix units;
    torch's CPU softmax accumulates in float32 whatever its input type."""
    scores = (q * (q.shape[-1] ** -0.5)) @ k.transpose(-2, -1)  # (B, H, Lq, Lk)
    if is_causal:
        scores = scores + causal_mask(q.shape[-2], k.shape[-2], scores.dtype, scores.device)
    if mask is not None:
        scores = scores + mask
    weights = scores.softmax(dim=-1)
    return dropout(weights, dropout_p, training) @ v  # (B, H, Lq, hd)


# -------------------------------------------------------------------- the path per device/dtype
ATTENTION_PATHS = ("sdpa", "matmul")
_chosen: dict[tuple, str] = {}
_pinned: dict[tuple[str, torch.dtype], str] = {}


def attention_path(device: torch.device, dtype: torch.dtype, head_dim: int = 32,
                   training: bool | None = None) -> str:
    """``sdpa`` or ``matmul``: the path the core takes for inputs of ``dtype`` on ``device``
    with heads ``head_dim`` wide, in training (autograd on; default: whether it is now) or in
    inference. Float32 (and float64) and CUDA take the fused kernel (its float32 path is the
    reference the parity tests hold to 1e-5; on CUDA it is the flash/efficient kernels); a low
    precision on a CPU takes whichever ``measure_paths`` finds faster, measured on first use
    and kept for the process, so every step of a run takes the same path."""
    training = torch.is_grad_enabled() if training is None else training
    if (device.type, dtype) in _pinned:
        return _pinned[device.type, dtype]
    key = (device.type, dtype, head_dim, training)
    if key not in _chosen:
        if device.type != "cpu" or not dtype.is_floating_point or dtype.itemsize >= 4:
            _chosen[key] = "sdpa"
        else:
            timings = measure_paths(device, dtype, head_dim=head_dim, training=training)
            _chosen[key] = min(timings, key=timings.get)
    return _chosen[key]


@torch.compiler.disable  # timing, not something to trace: reached once, before any graph
def measure_paths(device: torch.device, dtype: torch.dtype, batch: int = 16, heads: int = 8,
                  seq_len: int = 128, head_dim: int = 32, training: bool = True,
                  rounds: int = 3) -> dict[str, float]:
    """Seconds of one step through each path at a typical shape, forward + backward in
    ``training``, forward alone in inference; the best of ``rounds`` alternating rounds (a
    burst of load rarely hits both twice)."""
    with torch.set_grad_enabled(training):
        q, k, v = (torch.randn(batch, heads, seq_len, head_dim, device=device, dtype=dtype,
                               requires_grad=training) for _ in range(3))
        paths = {
            "sdpa": lambda: F.scaled_dot_product_attention(q, k, v),
            "matmul": lambda: attention_matmul(q, k, v, None, False, 0.0, False),
        }
        best = dict.fromkeys(paths, math.inf)
        for _ in range(rounds + 1):  # the first round warms up
            for path, forward in paths.items():
                started = time.perf_counter()
                out = forward()
                if training:
                    out.sum().backward()
                best[path] = min(best[path], time.perf_counter() - started)
    return best


@contextlib.contextmanager
def use_attention_path(path: str, device: torch.device, dtype: torch.dtype) -> Iterator[None]:
    """Pin the core's path for ``device`` and ``dtype`` inside the block, in training and
    inference alike (tests, and timing one path)."""
    if path not in ATTENTION_PATHS:
        raise ValueError(f"unknown attention path {path!r}; choose from {', '.join(ATTENTION_PATHS)}")
    key = (device.type, dtype)
    before = _pinned.get(key)
    _pinned[key] = path
    try:
        yield
    finally:
        if before is None:
            _pinned.pop(key, None)
        else:
            _pinned[key] = before


def causal_mask(Lq: int, Lk: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """Additive (Lq, Lk) mask: query i sees keys up to Lk - Lq + i (bottom-right aligned)."""
    allowed = torch.ones(Lq, Lk, dtype=torch.bool, device=device).tril(diagonal=Lk - Lq)
    return torch.zeros(Lq, Lk, dtype=dtype, device=device).masked_fill(~allowed, float("-inf"))


def merge_masks(
    attn_mask: Tensor | None, key_padding_mask: Tensor | None,
    B: int, H: int, Lq: int, Lk: int, dtype: torch.dtype, device: torch.device,
) -> Tensor | None:
    """Fold torch-convention masks into one additive mask broadcastable to (B, H, Lq, Lk)."""
    mask = None
    if attn_mask is not None:
        m = _as_additive(attn_mask, dtype)
        if m.dim() == 3:  # (B*H, Lq, Lk), as nn.MultiheadAttention takes it
            m = m.view(B, H, Lq, Lk)
        mask = m
    if key_padding_mask is not None:
        if key_padding_mask.shape != (B, Lk):
            raise ValueError(
                f"key_padding_mask must be (batch, key_len) = ({B}, {Lk}), "
                f"got {tuple(key_padding_mask.shape)}"
            )
        mask = _add_masks(mask, _as_additive(key_padding_mask, dtype).view(B, 1, 1, Lk))
    return None if mask is None else mask.to(device)


def _as_additive(mask: Tensor, dtype: torch.dtype) -> Tensor:
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
            mask, float("-inf")
        )
    return mask.to(dtype)


def _add_masks(a: Tensor | None, b: Tensor) -> Tensor:
    return b if a is None else a + b


def _copy(dst: Tensor, src: Tensor) -> None:
    """Copy weights, failing loudly on a shape mismatch (as nanoGPT's from_pretrained)."""
    if dst.shape != src.shape:
        raise ValueError(f"shape mismatch: expected {tuple(dst.shape)}, got {tuple(src.shape)}")
    dst.copy_(src)
