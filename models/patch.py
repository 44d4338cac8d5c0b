"""A patch transformer classifier (ViT): 2-D patches, cls token, encoder, head.

It knows nothing of images or spectrograms: any (B, C, H, W) input is cut into patches.
``forward_features`` (backbone) is separate from ``forward_head`` (task head), as in timm.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from models.attention import MultiHeadAttention
from models.dropout import Dropout
from models.transformer import (
    SelfAttentionMaps,
    TransformerEncoder,
    init_cls_token,
    learned_position_names,
    new_cls_token,
    prepend_cls_token,
    unplaced_first,
)


def _pair(x: int | tuple[int, int]) -> tuple[int, int]:
    return (x, x) if isinstance(x, int) else tuple(x)


def num_patches(
    input_size: tuple[int, int], patch_size: tuple[int, int], stride: tuple[int, int]
) -> tuple[int, int]:
    """Patches along each axis: floor((size - patch) / stride) + 1."""
    return tuple((s - p) // st + 1 for s, p, st in zip(input_size, patch_size, stride, strict=True))


class PatchEmbed2d(nn.Module):
    """Linear embedding of (possibly overlapping) patches, as a strided convolution."""

    def __init__(
        self, input_size: int | tuple[int, int], patch_size: int | tuple[int, int],
        in_chans: int, dim: int, stride: int | tuple[int, int] | None = None,
    ) -> None:
        super().__init__()
        self.input_size, self.patch_size = _pair(input_size), _pair(patch_size)
        self.stride = self.patch_size if stride is None else _pair(stride)
        if any(p > s for p, s in zip(self.patch_size, self.input_size, strict=True)):
            raise ValueError(
                f"patch size {self.patch_size} is larger than the input {self.input_size}; "
                f"use a smaller patch_size"
            )
        if any(st <= 0 for st in self.stride):
            raise ValueError(f"patch stride must be positive, got {self.stride}")
        self.grid = num_patches(self.input_size, self.patch_size, self.stride)
        self.num_patches = self.grid[0] * self.grid[1]
        self.proj = nn.Conv2d(in_chans, dim, self.patch_size, self.stride)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)  # (B, num_patches, dim)


class ShiftedPatchEmbed2d(nn.Module):
    """Shifted Patch Tokenization (Lee et al., 2021, "Vision Transformer for Small-Size
    Datasets"): the input and four copies shifted diagonally by half a patch (zero-filled) are
    stacked on channels, cut into patches, layer-normed and projected. Each token then also sees
    the pixels around its patch, which a ViT trained on little data otherwise has to learn."""

    def __init__(
        self, input_size: int | tuple[int, int], patch_size: int | tuple[int, int],
        in_chans: int, dim: int, stride: int | tuple[int, int] | None = None,
    ) -> None:
        super().__init__()
        # The plain embedding checks the geometry and gives the grid; only its shape is used.
        plain = PatchEmbed2d(input_size, patch_size, in_chans, dim, stride)
        self.input_size, self.patch_size, self.stride = plain.input_size, plain.patch_size, plain.stride
        self.grid, self.num_patches = plain.grid, plain.num_patches
        self.shift = tuple(p // 2 for p in self.patch_size)
        patch_features = 5 * in_chans * self.patch_size[0] * self.patch_size[1]
        self.norm = nn.LayerNorm(patch_features)
        self.proj = nn.Linear(patch_features, dim)

    def shifted_copies(self, x: Tensor) -> Tensor:
        """(B, C, H, W) -> (B, 5C, H, W): the input, then its four diagonal shifts by half a
        patch (zero-filled where the shift uncovers the border)."""
        sy, sx = self.shift
        H, W = x.shape[-2:]
        padded = F.pad(x, (sx, sx, sy, sy))
        copies = [x] + [
            padded[..., sy + dy: sy + dy + H, sx + dx: sx + dx + W]
            for dy in (-sy, sy) for dx in (-sx, sx)
        ]
        return torch.cat(copies, dim=1)

    def forward(self, x: Tensor) -> Tensor:
        patches = F.unfold(self.shifted_copies(x), self.patch_size, stride=self.stride)
        return self.proj(self.norm(patches.transpose(1, 2)))  # (B, num_patches, dim)


PATCH_EMBEDDINGS = {"linear": PatchEmbed2d, "shifted": ShiftedPatchEmbed2d}


class PatchTransformerClassifier(nn.Module):
    """ViT: patch embedding, cls token, transformer encoder, head. ``pool`` picks what the head
    reads, as timm's ``global_pool`` does: ``token`` the cls token, ``avg`` the mean of the
    patch tokens. ``patch_embed`` is ``linear`` (the ViT's) or ``shifted`` (shifted patch
    tokenization)."""

    def __init__(
        self, input_size: int | tuple[int, int], patch_size: int | tuple[int, int],
        in_chans: int, num_classes: int, dim: int, depth: int, num_heads: int,
        mlp_ratio: float = 4.0, dropout: float = 0.0, attn_dropout: float = 0.0,
        pos_encoding: str = "learned", stride: int | tuple[int, int] | None = None,
        norm_eps: float = 1e-6, pool: str = "token", patch_embed: str = "linear",
    ) -> None:
        super().__init__()
        if pool not in ("token", "avg"):
            raise ValueError(f"unknown pool '{pool}'; choose token or avg")
        if patch_embed not in PATCH_EMBEDDINGS:
            raise ValueError(
                f"unknown patch_embed '{patch_embed}'; choose one of {', '.join(PATCH_EMBEDDINGS)}"
            )
        self.pool = pool
        self.patch_embed = PATCH_EMBEDDINGS[patch_embed](input_size, patch_size, in_chans, dim, stride)
        self.cls_token = new_cls_token(dim)
        self.encoder = TransformerEncoder(
            dim, depth, num_heads, mlp_ratio, dropout, attn_dropout, pos_encoding,
            max_len=self.patch_embed.num_patches + 1, norm_eps=norm_eps,
        )
        self.head_drop = Dropout(dropout)
        self.head = nn.Linear(dim, num_classes)
        init_cls_token(self.cls_token)

    @classmethod
    def from_timm(cls, model: nn.Module) -> PatchTransformerClassifier:
        """Copy a timm ``VisionTransformer`` (cls token, learned position embedding, token
        pooling, no layer scale) into a ViT that gives the same logits."""
        blocks = model.blocks
        checks = {
            "class token": model.cls_token is not None,
            "no register tokens": getattr(model, "num_reg_tokens", 0) == 0,
            "global_pool='token'": model.global_pool == "token",
            "position embedding over the cls token": not model.no_embed_class,
            "no pre-norm": isinstance(model.norm_pre, nn.Identity),
            "no fc_norm": isinstance(model.fc_norm, nn.Identity),
            "no layer scale": isinstance(blocks[0].ls1, nn.Identity),
        }
        unmet = [name for name, ok in checks.items() if not ok]
        if unmet:
            raise ValueError(f"timm model has no ViT counterpart here: needs {', '.join(unmet)}")
        embed = model.patch_embed
        dim = model.embed_dim
        vit = cls(
            input_size=tuple(embed.img_size), patch_size=tuple(embed.patch_size),
            in_chans=embed.proj.in_channels, num_classes=model.num_classes, dim=dim,
            depth=len(blocks), num_heads=blocks[0].attn.num_heads,
            mlp_ratio=blocks[0].mlp.fc1.out_features / dim, norm_eps=model.norm.eps,
        )
        with torch.no_grad():
            vit.patch_embed.proj.load_state_dict(embed.proj.state_dict())
            vit.cls_token.copy_(model.cls_token)
            _assert_same_shape(vit.encoder.pos.weight, model.pos_embed, "pos_embed")
            vit.encoder.pos.weight.copy_(model.pos_embed)
            for ours, theirs in zip(vit.encoder.layers, blocks, strict=True):
                ours.norm1.load_state_dict(theirs.norm1.state_dict())
                ours.attn.load_state_dict(MultiHeadAttention.from_timm(theirs.attn).state_dict())
                ours.norm2.load_state_dict(theirs.norm2.state_dict())
                ours.mlp.fc1.load_state_dict(theirs.mlp.fc1.state_dict())
                ours.mlp.fc2.load_state_dict(theirs.mlp.fc2.state_dict())
            vit.encoder.norm.load_state_dict(model.norm.state_dict())
            vit.head.load_state_dict(model.head.state_dict())
        return vit

    def no_weight_decay(self) -> set[str]:
        """What timm's ``VisionTransformer.no_weight_decay()`` names: the cls token and the
        position table."""
        return {"cls_token"} | learned_position_names(self)

    def tokens(self, x: Tensor) -> Tensor:
        return prepend_cls_token(self.cls_token, self.patch_embed(x))  # (B, N + 1, dim)

    def forward_features(self, x: Tensor) -> Tensor:
        return self.encoder(self.tokens(x))

    def forward_head(self, features: Tensor) -> Tensor:
        pooled = features[:, 0] if self.pool == "token" else features[:, 1:].mean(dim=1)
        return self.head(self.head_drop(pooled))

    def forward(self, x: Tensor, lengths: Tensor | None = None) -> Tensor:
        """Class logits. ``lengths`` (valid frames of a spectrogram) is taken so the model is
        called as the RNNs are, and not used: the model reads the whole grid, padding too."""
        return self.forward_head(self.forward_features(x))

    def attention_maps(self, x: Tensor) -> list[Tensor]:
        """Per-layer, per-head attention weights (B, H, N + 1, N + 1) for one forward pass."""
        _, maps = self.encoder(self.tokens(x), return_attention=True)
        return maps

    @torch.no_grad()
    def self_attention_maps(self, x: Tensor, lengths: Tensor | None = None) -> SelfAttentionMaps:
        """Every layer's attention, each patch placed at its (row, column) on the grid."""
        rows, cols = self.patch_embed.grid
        grid = torch.cartesian_prod(torch.arange(rows), torch.arange(cols)).float().to(x.device)
        coordinates = unplaced_first(grid.expand(x.shape[0], -1, -1))
        return SelfAttentionMaps(self.attention_maps(x), coordinates, "patch")

    @torch.no_grad()
    def cls_attention_grid(self, x: Tensor) -> Tensor:
        """How much the cls token attends to each patch in the last layer, per head, laid out
        on the patch grid: (B, H, grid_h, grid_w)."""
        last = self.attention_maps(x)[-1]  # (B, H, N + 1, N + 1)
        B, H = last.shape[:2]
        return last[:, :, 0, 1:].reshape(B, H, *self.patch_embed.grid)


def _assert_same_shape(ours: Tensor, theirs: Tensor, name: str) -> None:
    if ours.shape != theirs.shape:
        raise ValueError(f"{name}: expected {tuple(ours.shape)}, got {tuple(theirs.shape)}")
