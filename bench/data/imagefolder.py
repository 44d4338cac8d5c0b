"""Your own images in torchvision's ``ImageFolder`` layout: ``train/<class>/*``,
``test/<class>/*`` and optionally ``val/<class>/*``, PNG or JPEG of any size, grey or colour.

Every image is decoded once, resized to one size and converted to the asked channels, and
the tensors are cached (keyed by the files' names, sizes and times and the settings), so a
second run reads one file. torchvision's ``ImageFolder`` finds the classes and files; its
loader is replaced by one that names the file it cannot decode.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from bench.data.cache import cached
from bench.data.files import cache_path, files_fingerprint
from bench.errors import BenchError

EXTENSIONS = (".png", ".jpg", ".jpeg")
SPLIT_FOLDERS = {"train": "train", "val": "val", "test": "test"}


def _folder(root: Path, split: str):
    from torchvision.datasets import ImageFolder

    path = root / SPLIT_FOLDERS[split]
    if not path.is_dir():
        return None
    try:
        return ImageFolder(str(path), loader=lambda p: p,
                           is_valid_file=lambda p: p.lower().endswith(EXTENSIONS))
    except FileNotFoundError as e:  # no class folder, or class folders without images
        raise BenchError(f"imagefolder: {path}: {e}; put the images in one folder per class, "
                         f"{path}/<class>/*.png or *.jpg") from None


def _decode(path: str, channels: int, size: tuple[int, int]) -> Tensor:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            if image.mode.startswith("I"):  # 16-bit grey: PIL's convert would clip it at 255
                wide = np.asarray(image, dtype=np.float64)
                image = Image.fromarray(np.round(wide / 257).clip(0, 255).astype(np.uint8), mode="L")
            image = image.convert("L" if channels == 1 else "RGB").resize((size[1], size[0]),
                                                                          Image.Resampling.BILINEAR)
            pixels = np.asarray(image, dtype=np.uint8)
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise BenchError(f"imagefolder: cannot decode the image {path} ({e}); fix or remove it") from None
    return torch.from_numpy(pixels.copy()).reshape(size[0], size[1], channels).permute(2, 0, 1)


def _fingerprint(folders: dict, channels: int, size: tuple[int, int]) -> str:
    entries = []
    for split, folder in folders.items():
        for path, label in folder.samples:
            stat = Path(path).stat()
            entries.append([split, path, label, stat.st_size, stat.st_mtime_ns])
    blob = json.dumps({"files": entries, "channels": channels, "size": size, "version": 2})
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def read_imagefolder(root: str | None, channels: int, size: tuple[int, int],
                     cache_dir: str) -> tuple[dict[str, tuple[Tensor, Tensor]], list[str], bool]:
    """The splits as (uint8 images (N, C, H, W), labels), the class names, and whether the
    tensors came from the cache. ``val`` is absent when the folder has none."""
    if root is None:
        raise BenchError("task.dataset=imagefolder needs task.root=PATH, a folder with train/ and test/ "
                         "(and optionally val/), each holding one folder of images per class")
    base = Path(root).expanduser()
    folders = {split: _folder(base, split) for split in SPLIT_FOLDERS}
    for split in ("train", "test"):
        if folders[split] is None:
            raise BenchError(f"imagefolder: {base} has no {SPLIT_FOLDERS[split]}/ folder; the layout is "
                             f"train/<class>/*, test/<class>/*, optionally val/<class>/*")
    folders = {split: folder for split, folder in folders.items() if folder is not None}
    classes = folders["train"].classes
    for split, folder in folders.items():
        if folder.classes != classes:
            raise BenchError(f"imagefolder: the classes of {split} ({', '.join(folder.classes)}) differ from "
                             f"train's ({', '.join(classes)}); every split needs the same class folders")
        if not folder.samples:
            raise BenchError(f"imagefolder: the {split} split has no images; add PNG or JPEG files")

    def decode_all() -> dict[str, Tensor]:
        out = {}
        for split, folder in folders.items():
            out[f"{split}_x"] = torch.stack([_decode(p, channels, size) for p, _ in folder.samples])
            out[f"{split}_y"] = torch.tensor([label for _, label in folder.samples])
        return out

    key = _fingerprint(folders, channels, size)
    tensors, was_cached = cached(cache_path(cache_dir, "imagefolder") / f"{key}.pt", decode_all)
    return {split: (tensors[f"{split}_x"], tensors[f"{split}_y"]) for split in folders}, classes, was_cached


def imagefolder_fingerprint(root: str) -> str:
    """A digest of every image the folder's splits hold (path, size, mtime), read without
    decoding: a run's record of which data it trained on."""
    base = Path(root).expanduser()
    folders = [f for f in (_folder(base, split) for split in SPLIT_FOLDERS) if f is not None]
    return files_fingerprint([Path(path) for folder in folders for path, _ in folder.samples])
