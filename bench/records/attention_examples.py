"""Attention examples: one test input's per-head attention weights, as a task records them and
the report draws them. Each kind is a dataclass that owns its figure; it is saved as a plain
dict of tensors, strings and numbers (``torch.load(weights_only=True)`` reads it back, nothing
is unpickled) with its ``kind`` beside the fields.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import ClassVar

from torch import Tensor

from bench.records.atomic import atomic_torch_save, load_state_dict


def subplots(*args, **kwargs):
    """``plt.subplots`` on the Agg backend; matplotlib is imported only when a figure is drawn,
    since every run imports this module and most never draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(*args, **kwargs)


@dataclass
class PatchGridExample:
    """The cls token's attention over a patch grid, per head (ViT, AST)."""

    kind: ClassVar[str] = "patch_grid"
    input: Tensor  # (C, H, W), the image or spectrogram
    label: int
    heads: Tensor  # (heads, grid_h, grid_w)

    def figure(self):
        image, heads = self.input[0].numpy(), self.heads.numpy()
        H = heads.shape[0]
        fig, axes = subplots(1, H + 1, figsize=(2.2 * (H + 1), 2.4))
        axes[0].imshow(image, cmap="gray", aspect="auto",
                       origin="lower" if image.shape[0] < image.shape[1] else "upper")
        axes[0].set_title(f"input (label {self.label})", fontsize=8)
        for h in range(H):
            axes[h + 1].imshow(heads[h], cmap="viridis", aspect="auto")
            axes[h + 1].set_title(f"head {h + 1}: cls -> patches", fontsize=8)
        for ax in axes:
            ax.set_xticks([])
            ax.set_yticks([])
        return fig


@dataclass
class CrossAttentionExample:
    """A decoder's attention from each target token to the source tokens, per head."""

    kind: ClassVar[str] = "cross"
    heads: Tensor  # (heads, target tokens, source tokens)
    source_tokens: list[str]
    target_tokens: list[str]

    def figure(self):
        heads = self.heads.numpy()
        H = heads.shape[0]
        fig, axes = subplots(1, H, figsize=(3.2 * H, 3.2), squeeze=False)
        for h, ax in enumerate(axes[0]):
            ax.imshow(heads[h], cmap="viridis", aspect="auto")
            ax.set_xticks(range(len(self.source_tokens)), self.source_tokens, rotation=90, fontsize=6)
            ax.set_yticks(range(len(self.target_tokens)), self.target_tokens, fontsize=6)
            ax.set_title(f"head {h + 1}: target -> source", fontsize=8)
        return fig


@dataclass
class TimeAttentionExample:
    """Self-attention between the time steps of one utterance, per head (a CTC encoder)."""

    kind: ClassVar[str] = "time"
    input: Tensor  # (bins, frames), the utterance's spectrogram
    transcript: str
    heads: Tensor  # (heads, steps, steps): query step -> key step

    def figure(self):
        heads = self.heads.numpy()
        H = heads.shape[0]
        fig, axes = subplots(1, H + 1, figsize=(2.6 * (H + 1), 2.8), squeeze=False)
        axes[0][0].imshow(self.input.numpy(), cmap="gray", aspect="auto", origin="lower")
        axes[0][0].set_title(f"input: '{self.transcript}'", fontsize=7)
        axes[0][0].set_xlabel("frame", fontsize=7)
        for h in range(H):
            axes[0][h + 1].imshow(heads[h], cmap="viridis", aspect="auto")
            axes[0][h + 1].set_title(f"head {h + 1}: step -> step", fontsize=8)
            axes[0][h + 1].set_xlabel("attended time step", fontsize=7)
        for ax in axes[0]:
            ax.tick_params(labelsize=6)
        return fig


AttentionExample = PatchGridExample | CrossAttentionExample | TimeAttentionExample
KINDS: dict[str, type] = {cls.kind: cls for cls in (PatchGridExample, CrossAttentionExample,
                                                     TimeAttentionExample)}


def save_example(path: Path, example: AttentionExample) -> Path:
    """Each tensor saved as a copy of its own: ``torch.save`` of a view (one test input sliced
    out of the split's features) writes the whole storage it views, megabytes for kilobytes."""
    fields_ = {k: v.clone() if isinstance(v, Tensor) else v for k, v in asdict(example).items()}
    return atomic_torch_save(path, {"kind": example.kind, **fields_})


def load_example(path: Path) -> AttentionExample:
    """The example saved at ``path``; ``ValueError`` for an unknown kind or missing fields (the
    unpickler itself refuses anything but tensors and plain values)."""
    data = load_state_dict(path)
    cls = KINDS.get(data.get("kind")) if isinstance(data, dict) else None
    if cls is None:
        raise ValueError("not an attention example of a known kind")
    missing = [f.name for f in fields(cls) if f.name not in data]
    if missing:
        raise ValueError(f"a {cls.kind} example without {', '.join(missing)}")
    return cls(**{f.name: data[f.name] for f in fields(cls)})
