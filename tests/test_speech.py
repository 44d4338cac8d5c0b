"""The speech task: features, caching, the synthetic set, splits and SpecAugment."""

import numpy as np
import pytest
import torch

from bench.data.audio import frame_stats, normalise, pad_or_crop
from bench.data.speech_synth import draw_specs, synthesise
from bench.errors import BenchError
from models.patch import PatchTransformerClassifier, num_patches
from tasks.speech import SpeechTask

PER_DIGIT = 10


@pytest.fixture(scope="module")
def synth_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def _synth_task(cache, **kw):
    return SpeechTask("speech", "synth_digits", None, str(cache), synth_per_digit=PER_DIGIT, **kw)


def test_synthetic_set_is_deterministic_by_seed():
    assert draw_specs(PER_DIGIT, 3) == draw_specs(PER_DIGIT, 3)
    assert draw_specs(PER_DIGIT, 3) != draw_specs(PER_DIGIT, 4)
    specs = draw_specs(2, 5)
    rate_a, a = synthesise(specs, 5)
    rate_b, b = synthesise(specs, 5)
    assert rate_a == rate_b > 8000
    assert len(a) == 20 and all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert all(0.1 < len(x) / rate_a < 3.0 for x in a)  # real speech-length clips
    _, other = synthesise(specs, 6)  # another noise seed changes the clips
    assert not np.array_equal(a[0], other[0])


def test_feature_shapes_and_split(synth_cache):
    task = _synth_task(synth_cache)
    splits = task.load(seed=0)
    frames = 1 + 8000 // 80  # 1 s at 8 kHz, 10 ms hop
    assert splits.info["input_shape"] == [1, 40, frames]
    assert splits.info["sizes"] == {"train": 80, "val": 10, "test": 10}
    x, lengths, y = splits.train.tensors
    assert x.shape == (80, 1, 40, frames) and lengths.max() <= frames
    assert y.bincount().tolist() == [8] * 10


def test_second_load_hits_the_cache(synth_cache, monkeypatch):
    _synth_task(synth_cache).load(0)  # computes (or reuses) the features

    def no_recompute(self):
        raise AssertionError("features were recomputed")

    monkeypatch.setattr(SpeechTask, "compute_features", no_recompute)
    splits = _synth_task(synth_cache).load(0)
    assert splits.info["features"]["cached"] is True
    # Other feature parameters are another cache entry.
    assert _synth_task(synth_cache, n_mels=32).features_path() != _synth_task(synth_cache).features_path()


def test_ast_patch_count(synth_cache):
    task = _synth_task(synth_cache, patch_size=(8, 8), patch_stride=(8, 4))
    splits = task.load(0)
    model = PatchTransformerClassifier(
        input_size=(40, 101), patch_size=(8, 8), stride=(8, 4), in_chans=1, num_classes=10,
        dim=16, depth=1, num_heads=2)
    assert num_patches((40, 101), (8, 8), (8, 4)) == (5, 24)
    assert model.patch_embed.num_patches == 5 * 24
    x, lengths, _ = splits.train.tensors
    assert len(model.attention_maps(x[:2])[0][0, 0]) == 5 * 24 + 1  # patches + cls token


def test_pad_or_crop_policy():
    signal = torch.arange(10.0)
    padded, valid = pad_or_crop(signal, 14)
    assert valid == 10 and padded.tolist() == list(range(10)) + [0.0] * 4
    cropped, valid = pad_or_crop(signal, 4)
    assert valid == 4 and cropped.tolist() == [3.0, 4.0, 5.0, 6.0]  # the centre


def test_normalisation_uses_only_valid_frames():
    x = torch.zeros(2, 1, 3, 6)
    x[..., :3] = 5.0  # valid frames hold 5, padding 0
    lengths = torch.tensor([3, 3])
    mean, std = frame_stats(x, lengths)
    assert torch.allclose(mean, torch.full_like(mean, 5.0))
    out = normalise(x, lengths, mean, std)
    assert torch.all(out == 0)


def test_specaugment_masks_training_batches(synth_cache):
    torch.manual_seed(0)
    task = _synth_task(synth_cache, specaugment=True, freq_mask=10, time_mask=20)
    x, lengths, y = task.load(0).train[:16]
    x = x + 3.0  # so a mask (fills 0) is visible everywhere
    masked, _, _ = task.augment((x, lengths, y))
    assert (masked == 0).any() and masked.shape == x.shape
    plain = _synth_task(synth_cache)
    assert torch.equal(plain.augment((x, lengths, y))[0], x)


def test_bad_settings_are_refused(synth_cache):
    with pytest.raises(BenchError, match="unknown speech dataset"):
        SpeechTask("speech", "timit", None, str(synth_cache))
    with pytest.raises(BenchError, match="holdout_speaker"):
        SpeechTask("speech", "fsdd", None, str(synth_cache), split="speaker")
    with pytest.raises(BenchError, match="BENCH_DATA_DIR"):
        SpeechTask("speech", "fsdd", None, str(synth_cache)).load(0)


@pytest.mark.data
def test_fsdd_official_and_speaker_splits(data_dir, tmp_path):
    official = SpeechTask("speech", "fsdd", str(data_dir), str(tmp_path)).load(0)
    assert official.info["sizes"] == {"train": 2400, "val": 300, "test": 300}
    loso = SpeechTask("speech", "fsdd", str(data_dir), str(tmp_path), split="speaker",
                      holdout_speaker="theo").load(0)
    assert loso.info["sizes"] == {"train": 2250, "val": 250, "test": 500}
    assert loso.info["features"]["cached"] is True  # same features, another split
    with pytest.raises(BenchError, match="unknown speaker 'bob'; choose one of george"):
        SpeechTask("speech", "fsdd", str(data_dir), str(tmp_path), split="speaker",
                   holdout_speaker="bob").load(0)


def test_time_shift_moves_each_clip_whole_within_the_window():
    from bench.data.audio import shift_in_time

    frames = 12
    lengths = torch.tensor([4, 12, 1, 7] * 8)
    x = torch.zeros(len(lengths), 1, 3, frames)
    for i, n in enumerate(lengths):
        x[i, ..., :n] = torch.arange(1, n + 1).float()
    torch.manual_seed(0)
    shifted, new_lengths = shift_in_time(x, lengths)
    shifts = new_lengths - lengths
    assert (shifts >= 0).all() and (new_lengths <= frames).all() and shifts.max() > 0
    for i, (n, s) in enumerate(zip(lengths.tolist(), shifts.tolist(), strict=True)):
        expected = torch.zeros(frames)
        expected[s:s + n] = torch.arange(1, n + 1).float()
        assert torch.equal(shifted[i, 0, 1], expected)


def test_mixup_blends_clips_and_keeps_the_longer_length(synth_cache):
    task = _synth_task(synth_cache, mixup_alpha=0.4)
    x = torch.stack([torch.full((1, 2, 5), float(i)) for i in range(4)])
    mixed, lengths = task.mix_inputs((x, torch.tensor([5, 2, 3, 1])), lam=0.75)
    torch.testing.assert_close(mixed[0], torch.full((1, 2, 5), 0.75 * 0 + 0.25 * 3))
    torch.testing.assert_close(mixed[1], torch.full((1, 2, 5), 0.75 * 1 + 0.25 * 2))
    assert lengths.tolist() == [5, 3, 3, 5]
