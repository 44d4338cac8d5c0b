"""Your own images: the ImageFolder layout read, resized, converted, cached and trained on."""

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from bench.data.imagefolder import read_imagefolder
from tests.conftest import read_records, run_cli


def make_folder(root: Path, val: bool = False) -> Path:
    """Red 'cat' and blue 'dog' pictures of assorted sizes, PNG and JPEG, one grey."""
    rng = np.random.default_rng(0)
    colours = {"cat": (220, 20, 20), "dog": (20, 20, 220)}
    for split, count in (("train", 12), ("test", 4)) + ((("val", 4),) if val else ()):
        for name, colour in colours.items():
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(count):
                size = (int(rng.integers(5, 40)), int(rng.integers(5, 40)))
                image = Image.new("RGB", size, colour)
                if i == 0:
                    image.convert("L").save(folder / f"{i}.png")
                elif i % 2:
                    image.save(folder / f"{i}.jpg", quality=95)
                else:
                    image.save(folder / f"{i}.PNG")
    return root


def test_images_are_resized_converted_and_cached(tmp_path):
    root = make_folder(tmp_path / "mine")
    splits, classes, cached = read_imagefolder(str(root), 3, (8, 8), str(tmp_path / "cache"))
    assert classes == ["cat", "dog"] and not cached and "val" not in splits
    x, y = splits["train"]
    assert x.shape == (24, 3, 8, 8) and x.dtype == torch.uint8 and y.tolist().count(1) == 12
    red = x[y == 0][1:].float().mean(dim=(0, 2, 3))  # the colour JPEG/PNG cats, not the grey one
    assert red[0] > 150 and red[2] < 60
    grey, _, again = read_imagefolder(str(root), 1, (8, 8), str(tmp_path / "cache"))
    assert grey["test"][0].shape == (8, 1, 8, 8) and not again  # other settings: decoded anew
    _, _, cached = read_imagefolder(str(root), 3, (8, 8), str(tmp_path / "cache"))
    assert cached
    (root / "train" / "cat" / "new.png").write_bytes((root / "train" / "cat" / "2.PNG").read_bytes())
    splits, _, cached = read_imagefolder(str(root), 3, (8, 8), str(tmp_path / "cache"))
    assert not cached and len(splits["train"][1]) == 25  # a changed folder is read again


@pytest.mark.slow
@pytest.mark.parametrize("val", [False, True])
def test_a_run_on_your_images(tmp_path, val):
    root = make_folder(tmp_path / "mine", val=val)
    out = run_cli("run", "task=image", "task.dataset=imagefolder", f"task.root={root}",
                  "task.image_size=8", "task.channels=1", "trainer.epochs=2", "trainer.batch_size=8",
                  "model.dim=16", "model.depth=1", "trainer.infer_iters=1", "logger=none",
                  f"results_dir={tmp_path / 'r'}", f"cache_dir={tmp_path / 'c'}")
    assert out.returncode == 0, out.stderr
    rec = read_records(tmp_path / "r")[0]
    data = rec["data"]
    assert data["classes"] == ["cat", "dog"] and data["input_shape"] == [1, 8, 8]
    assert data["imagefolder"]["image_size"] == 8 and data["imagefolder"]["cached"] is False
    if val:
        assert data["sizes"] == {"train": 24, "val": 8, "test": 8}
        assert data["validation_split"] == "the dataset's own val/ split"
    else:  # a fifth of train carved out with the split seed
        assert data["sizes"] == {"train": 20, "val": 4, "test": 8}
    assert rec["status"] == "ok" and 0 <= rec["test_metric"] <= 1


def test_16_bit_grey_images_are_scaled_not_clipped(tmp_path):
    from PIL import Image

    from bench.data.imagefolder import _decode

    dark, bright = tmp_path / "dark.png", tmp_path / "bright.png"
    Image.fromarray(np.full((8, 8), 1000, dtype=np.uint16)).save(dark)  # PIL reads these as mode I
    Image.fromarray(np.full((8, 8), 60000, dtype=np.uint16)).save(bright)
    low, high = _decode(str(dark), 1, (8, 8)), _decode(str(bright), 1, (8, 8))
    assert low.unique().tolist() == [round(1000 / 257)] and high.unique().tolist() == [round(60000 / 257)]


@pytest.mark.slow
def test_changed_data_is_another_experiment_never_a_resumed_one(tmp_path):
    """An experiment is its config and its data: after the test class folders are swapped, the
    same seed is trained again, and the table never averages runs on the two as seeds of one."""
    from bench import api

    root = make_folder(tmp_path / "mine")
    run = ["task=image", "task.dataset=imagefolder", f"task.root={root}", "task.image_size=8",
           "task.channels=1", "trainer.max_steps=2", "trainer.batch_size=8", "model.dim=16",
           "model.depth=1", "trainer.infer_iters=1", "logger=none", "progress=false",
           f"results_dir={tmp_path / 'r'}", f"cache_dir={tmp_path / 'c'}"]
    first = api.run(run)
    assert api.run(run).get("skipped")  # the same data: resumed, as before
    (root / "test" / "cat").rename(root / "test" / "tmp")
    (root / "test" / "dog").rename(root / "test" / "cat")
    (root / "test" / "tmp").rename(root / "test" / "dog")
    again = api.run(run)
    assert not again.get("skipped") and again["data_fingerprint"] != first["data_fingerprint"]
    frame = api.table(tmp_path / "r")
    assert frame["setting"].nunique() == 2 and all(s.startswith("data=") for s in frame["setting"])


def test_every_file_an_audiofolder_names_is_in_its_fingerprint(tmp_path):
    from bench.data.audiofolder import audiofolder_fingerprint

    outside = tmp_path / "elsewhere.wav"
    outside.write_bytes(b"RIFF0")
    root = tmp_path / "mine"
    root.mkdir()
    (root / "metadata.csv").write_text(f"file_name,transcription\n../elsewhere.wav,one\n{outside},two\n")
    before = audiofolder_fingerprint(root)
    outside.write_bytes(b"RIFF0 and more")  # overwritten, as the issue did
    assert audiofolder_fingerprint(root) != before
