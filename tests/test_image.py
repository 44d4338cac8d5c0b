"""The image task: ViT/timm parity, patches, augmentation, row RNNs, datasets."""

import hashlib
import shutil

import pytest
import torch
from omegaconf import OmegaConf
from timm.models.vision_transformer import VisionTransformer

from bench.errors import BenchError
from bench.run.measure import count_parameters
from bench.setup.build import build_model
from bench.task import Splits
from models.patch import PatchEmbed2d, ShiftedPatchEmbed2d, num_patches
from models.patch import PatchTransformerClassifier as ViT
from models.rnn import GridRNNClassifier
from tasks.image import ImageTask, random_shift_flip


def _timm_vit(**kw):
    torch.manual_seed(0)
    args = dict(img_size=28, patch_size=7, in_chans=1, num_classes=10, embed_dim=32, depth=2,
                num_heads=4, mlp_ratio=2.0)
    args.update(kw)
    model = VisionTransformer(**args).eval()
    with torch.no_grad():  # timm zero-inits some tensors; randomise so every copy is tested
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def test_from_timm_gives_the_same_logits_and_gradients():
    timm_model = _timm_vit()
    ours = ViT.from_timm(timm_model).eval()
    x = torch.randn(4, 1, 28, 28)
    torch.testing.assert_close(ours(x), timm_model(x), atol=1e-5, rtol=1e-5)
    ours(x).square().sum().backward()
    timm_model(x).square().sum().backward()
    torch.testing.assert_close(
        ours.encoder.layers[0].attn.in_proj.weight.grad, timm_model.blocks[0].attn.qkv.weight.grad,
        atol=1e-5, rtol=1e-4,
    )
    assert count_parameters(ours) == count_parameters(timm_model)


def test_from_timm_refuses_what_it_cannot_copy():
    with pytest.raises(ValueError, match="global_pool"):
        ViT.from_timm(_timm_vit(global_pool="avg"))
    with pytest.raises(ValueError, match="layer scale"):
        ViT.from_timm(_timm_vit(init_values=1e-5))


def test_avg_pool_head_reads_the_mean_of_the_patch_tokens():
    torch.manual_seed(0)
    x = torch.randn(2, 1, 8, 8)
    token = ViT(input_size=8, patch_size=4, in_chans=1, num_classes=3, dim=16, depth=1, num_heads=2).eval()
    avg = ViT(input_size=8, patch_size=4, in_chans=1, num_classes=3, dim=16, depth=1, num_heads=2,
              pool="avg").eval()
    avg.load_state_dict(token.state_dict())  # pooling adds no weights
    features = token.forward_features(x)  # (B, 1 + 4 patches, dim)
    torch.testing.assert_close(token(x), token.head(features[:, 0]))
    torch.testing.assert_close(avg(x), token.head(features[:, 1:].mean(dim=1)))
    with pytest.raises(ValueError, match="unknown pool 'max'"):
        ViT(input_size=8, patch_size=4, in_chans=1, num_classes=3, dim=16, depth=1, num_heads=2, pool="max")


def test_shifted_patch_tokens_see_the_input_and_its_four_diagonal_shifts():
    x = torch.arange(1.0, 37.0).view(1, 1, 6, 6)
    embed = ShiftedPatchEmbed2d(6, 2, 1, 8)
    copies = embed.shifted_copies(x)[0]  # (5, 6, 6), shifted by half a patch = 1 pixel
    torch.testing.assert_close(copies[0], x[0, 0])
    padded = torch.nn.functional.pad(x[0, 0], (1, 1, 1, 1))
    shifted = {(dy, dx): padded[1 - dy: 7 - dy, 1 - dx: 7 - dx] for dy in (-1, 1) for dx in (-1, 1)}
    # The four copies are the four diagonal moves of the input, zeros let in, each once.
    matches = [[torch.equal(copy, s) for s in shifted.values()] for copy in copies[1:]]
    assert torch.tensor(matches).int().sum(0).tolist() == [1, 1, 1, 1]
    assert torch.tensor(matches).int().sum(1).tolist() == [1, 1, 1, 1]
    assert embed(x).shape == (1, 9, 8)  # a 3x3 grid of tokens
    # Each token reads its own patch in all five copies: 5 x (2 x 2) features.
    assert embed.norm.normalized_shape == (20,)
    vit = ViT(input_size=28, patch_size=4, in_chans=1, num_classes=10, dim=16, depth=1,
              num_heads=2, patch_embed="shifted")
    assert vit(torch.randn(2, 1, 28, 28)).shape == (2, 10)
    with pytest.raises(ValueError, match="unknown patch_embed 'conv'"):
        ViT(input_size=8, patch_size=4, in_chans=1, num_classes=3, dim=16, depth=1, num_heads=2,
            patch_embed="conv")


@pytest.mark.parametrize(
    "size, patch, stride, expected",
    [((28, 28), (4, 4), (4, 4), (7, 7)), ((28, 28), (7, 7), (3, 3), (8, 8)),
     ((128, 40), (16, 16), (10, 8), (12, 4)), ((8, 8), (2, 2), (2, 2), (4, 4))],
)
def test_patch_count_formula(size, patch, stride, expected):
    assert num_patches(size, patch, stride) == expected
    embed = PatchEmbed2d(size, patch, 1, 8, stride)
    assert embed(torch.zeros(2, 1, *size)).shape == (2, expected[0] * expected[1], 8)


def test_patch_larger_than_input_is_refused():
    with pytest.raises(ValueError, match="larger than the input"):
        PatchEmbed2d(8, 10, 1, 16)


def test_random_shift_flip_moves_pixels_and_keeps_mass():
    torch.manual_seed(0)
    x = torch.zeros(64, 1, 8, 8)
    x[:, :, 3:5, 3:5] = 1.0  # a centred square survives any shift of up to 2 pixels
    y = random_shift_flip(x, max_shift=2, hflip=True)
    assert y.shape == x.shape
    torch.testing.assert_close(y.sum(dim=(1, 2, 3)), x.sum(dim=(1, 2, 3)))
    assert (y != x).any(dim=(1, 2, 3)).float().mean() > 0.5
    assert torch.equal(random_shift_flip(x, 0, False), x)


def test_grid_rnn_reads_rows_or_columns_as_steps():
    torch.manual_seed(0)
    x = torch.randn(2, 1, 5, 8)
    rows = GridRNNClassifier(8, 3, 16, cell="gru", step_axis="rows").eval()
    torch.testing.assert_close(rows(x), rows.head(rows.encoder(x[:, 0])[1]))  # 5 steps of 8
    cols = GridRNNClassifier(5, 3, 16, cell="gru", step_axis="cols").eval()
    steps = x[:, 0].transpose(1, 2)  # 8 steps of 5
    torch.testing.assert_close(cols(x), cols.head(cols.encoder(steps)[1]))


def test_digits_splits_are_fixed_and_disjoint():
    task = ImageTask("image", "digits", None, "unused")
    a, b = task.load(seed=0), task.load(seed=1)
    assert torch.equal(a.val.tensors[0], b.val.tensors[0])  # same split whatever the seed
    sizes = a.info["sizes"]
    assert sizes["train"] + sizes["val"] + sizes["test"] == 1797
    assert a.info["input_shape"] == [1, 8, 8]


def test_unknown_dataset_is_refused():
    with pytest.raises(BenchError, match="choose one of fashion_mnist, digits"):
        ImageTask("image", "cifar", None, "unused")


def test_null_settings_take_each_datasets_recipe_and_overrides_win(tmp_path):
    fashion = ImageTask("image", "fashion_mnist", None, str(tmp_path))
    assert (fashion.patch_size, fashion.patch_embed, fashion.max_shift, fashion.hflip,
            fashion.mixup_alpha) == (4, "shifted", 0, True, 0.2)
    digits = ImageTask("image", "digits", None, str(tmp_path))
    assert (digits.patch_size, digits.patch_embed, digits.max_shift, digits.hflip,
            digits.mixup_alpha) == (2, "linear", 1, False, 0.0)
    plain = ImageTask("image", "fashion_mnist", None, str(tmp_path), patch_embed="linear",
                      hflip=False, mixup_alpha=0.0)
    assert (plain.patch_embed, plain.hflip, plain.mixup_alpha) == ("linear", False, 0.0)
    splits = Splits([], [], [], {"input_shape": [1, 28, 28], "num_classes": 10})
    model_cfg = OmegaConf.create({"_target_": "models.attention_family.build", "dim": 16, "depth": 1,
                                  "num_heads": 2, "family": "attention", "name": "attention"})
    shifted = build_model(model_cfg, fashion.input_kind(splits))
    linear = build_model(model_cfg, plain.input_kind(splits))
    assert isinstance(shifted.module.patch_embed, ShiftedPatchEmbed2d)
    assert isinstance(linear.module.patch_embed, PatchEmbed2d)
    assert "shifted patch tokenization" in shifted.notes
    assert "shifted" not in linear.notes


def test_fashion_mnist_needs_a_data_root(tmp_path):
    with pytest.raises(BenchError, match="BENCH_DATA_DIR"):
        ImageTask("image", "fashion_mnist", None, str(tmp_path)).load(0)


@pytest.mark.data
def test_fashion_mnist_from_the_data_root(data_dir, tmp_path):
    before = sorted(p.name for p in (data_dir / "fashion-mnist").iterdir())
    splits = ImageTask("image", "fashion_mnist", str(data_dir), str(tmp_path)).load(0)
    assert splits.info["sizes"] == {"train": 55000, "val": 5000, "test": 10000}
    x, y = splits.test.tensors
    assert x.shape == (10000, 1, 28, 28) and y.bincount().tolist() == [1000] * 10
    assert abs(splits.train.tensors[0].mean().item()) < 1e-3  # normalised with train stats
    assert sorted(p.name for p in (data_dir / "fashion-mnist").iterdir()) == before
    assert any((tmp_path / "torchvision").rglob("train-images-idx3-ubyte"))


@pytest.mark.data
def test_corrupt_fashion_mnist_file_is_named(data_dir, tmp_path):
    root = tmp_path / "data" / "fashion-mnist"
    shutil.copytree(data_dir / "fashion-mnist", root)
    target = root / "t10k-labels-idx1-ubyte.gz"
    target.chmod(0o644)
    target.write_bytes(target.read_bytes()[:100])
    assert hashlib.md5(target.read_bytes()).hexdigest() not in (root / "MD5SUMS").read_text()
    with pytest.raises(BenchError, match="t10k-labels-idx1-ubyte.gz is corrupt"):
        ImageTask("image", "fashion_mnist", str(tmp_path / "data"), str(tmp_path / "c")).load(0)
