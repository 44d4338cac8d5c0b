"""The engine's schedule, checkpoint selection, failure records and measurements."""

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from timm.utils import ModelEmaV3
from torch import nn
from torch.utils.data import TensorDataset

from bench.errors import RunFailed
from bench.records.atomic import atomic_write_text, load_state_dict
from bench.records.record import config_hash, new_run_dir
from bench.run import measure
from bench.run.engine import CHECKPOINT, TrainerSettings, build_optimizer, fit, warmup_cosine
from bench.task import ClassificationTask, Splits
from models.ctc import TransformerTranscriber
from models.patch import PatchTransformerClassifier
from models.seq2seq import TransformerSeq2Seq
from models.transformer import TokenTransformerClassifier

TRAINER = TrainerSettings(
    epochs=3, max_steps=None, batch_size=16, batching="random", max_tokens=None, eval_batch_size=64,
    lr=0.1, min_lr_ratio=0.0, warmup_epochs=1.0, weight_decay=0.0, betas=(0.9, 0.999), grad_clip=1.0,
    ema_decay=None, num_workers=0, dtype="float32", compile=False, timing_warmup_steps=2, infer_iters=3,
)


class ToyTask(ClassificationTask):
    """Two Gaussian blobs; a linear model separates them."""

    def __init__(self):
        super().__init__("toy", "blobs", None, "unused")

    def load(self, seed):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(256, 4, generator=g)
        y = (x[:, 0] > 0).long()
        part = lambda a, b: TensorDataset(x[a:b], y[a:b])
        return Splits(part(0, 160), part(160, 208), part(208, 256), {})

    def input_kind(self, splits):
        raise NotImplementedError("these tests build their models by hand")


def test_warmup_then_cosine():
    f = warmup_cosine(warmup_steps=10, total_steps=110, min_lr_ratio=0.1)
    assert f(0) == pytest.approx(0.1) and f(9) == pytest.approx(1.0)
    assert f(10) == pytest.approx(1.0)
    assert f(60) == pytest.approx(0.55)  # half way down the cosine: 0.1 + 0.9 * 0.5
    assert f(110) == pytest.approx(0.1) and f(500) == pytest.approx(0.1)


def test_fit_selects_best_validation_checkpoint_and_measures(tmp_path):
    torch.manual_seed(0)
    task = ToyTask()
    splits = task.load(0)
    model = nn.Linear(4, 2)
    out = fit(task, model, splits, TRAINER, torch.device("cpu"), tmp_path, seed=0, progress=False)
    best = max(out["history"], key=lambda h: h["val_metric"])
    assert out["best_epoch"] == best["epoch"] and out["val_metric"] == best["val_metric"]
    assert f"epoch {best['epoch']}" in out["checkpoint_selection"]
    assert out["test_metric"] > 0.8
    assert out["steps"] == 3 * 10 and out["train_timed_steps"] == 28
    assert out["train_samples_per_s"] > 0 and out["infer_samples_per_s"] > 0
    assert out["flops_per_sample"] == 2 * 4 * 2  # one 4->2 matmul per sample
    # each validation is placed in samples seen and wall time since training began
    assert [h["train_samples"] for h in out["history"]] == [160, 320, 480]
    walls = [h["wall_s"] for h in out["history"]]
    assert 0 < walls[0] < walls[1] < walls[2] <= out["train_seconds"]
    # where the minutes go: each validation's own seconds, and each part after training
    assert all(0 < h["val_s"] <= h["wall_s"] for h in out["history"])
    assert set(out["final_seconds"]) == {"test", "flops", "attention", "inference_speed"}
    assert all(seconds >= 0 for seconds in out["final_seconds"].values())
    # The model left in memory is the selected checkpoint.
    saved = load_state_dict(tmp_path / CHECKPOINT)
    torch.testing.assert_close(saved["weight"], model.weight)


def test_max_steps_caps_training(tmp_path):
    cfg = replace(TRAINER, max_steps=4)
    out = fit(ToyTask(), nn.Linear(4, 2), ToyTask().load(0), cfg, torch.device("cpu"), tmp_path,
              seed=0, progress=False)
    assert out["steps"] == 4 and out["epochs_run"] == 1


def test_ema_checkpoint_is_the_moving_average_of_the_unchanged_trajectory(tmp_path):
    """With trainer.ema_decay, training follows the same weights as without; validation,
    checkpoint and test use timm's warmed-up moving average of them, updated once per step."""
    task, splits = ToyTask(), ToyTask().load(0)
    torch.manual_seed(0)
    start = nn.Linear(4, 2).state_dict()
    cfg = replace(TRAINER, max_steps=10)  # one epoch: its checkpoint is final

    def train(ema_decay, run_dir):
        model = nn.Linear(4, 2)
        model.load_state_dict(start)
        seen = []  # the weights each training step starts from

        def record(module, _):
            if module.training and torch.is_grad_enabled():
                seen.append(module.weight.detach().clone())

        model.register_forward_pre_hook(record)
        out = fit(task, model, splits, replace(cfg, ema_decay=ema_decay),
                  torch.device("cpu"), run_dir, seed=0, progress=False)
        return out, seen[-10:], load_state_dict(run_dir / CHECKPOINT)["weight"]

    raw, raw_path, raw_final = train(None, tmp_path / "raw")
    ema, ema_path, ema_final = train(0.5, tmp_path / "ema")
    for a, b in zip(raw_path, ema_path, strict=True):
        torch.testing.assert_close(a, b)  # the average never feeds back into training
    path = [*raw_path[1:], raw_final]  # weights after steps 1..10
    average = raw_path[0].clone()
    for step, weights in enumerate(path, start=1):
        decay = ModelEmaV3(nn.Linear(4, 2), decay=0.5, use_warmup=True).get_decay(step)
        average = decay * average + (1 - decay) * weights
    torch.testing.assert_close(ema_final, average)
    assert not torch.allclose(ema_final, raw_final)
    assert "EMA decay 0.5" in ema["checkpoint_selection"] and "EMA" not in raw["checkpoint_selection"]


def test_mixup_loss_blends_inputs_and_targets_in_training_only():
    task, model = ToyTask(), nn.Linear(4, 2)
    task.mixup_alpha = 0.4
    x, y = torch.randn(7, 4), torch.tensor([0, 1, 1, 0, 1, 0, 0])  # odd: the engine keeps partial batches
    np.random.seed(3)
    lam = np.random.beta(0.4, 0.4)
    mixed = model(lam * x + (1 - lam) * x.flip(0))
    expected = lam * F.cross_entropy(mixed, y) + (1 - lam) * F.cross_entropy(mixed, y.flip(0))
    np.random.seed(3)
    torch.testing.assert_close(task.loss(model.train(), (x, y)), expected)
    assert not torch.allclose(task.loss(model.train(), (x, y)), F.cross_entropy(model(x), y))
    torch.testing.assert_close(task.loss(model.eval(), (x, y)), F.cross_entropy(model(x), y))


def test_non_finite_loss_fails_the_run(tmp_path):
    model = nn.Linear(4, 2)
    with torch.no_grad():
        model.weight.fill_(float("nan"))
    with pytest.raises(RunFailed, match="non-finite training loss"):
        fit(ToyTask(), model, ToyTask().load(0), TRAINER, torch.device("cpu"), tmp_path,
            seed=0, progress=False)


def test_rnn_flops_are_counted():
    lstm = nn.LSTM(8, 16, batch_first=True)
    flops = measure.flops_per_sample(FirstOutput(lstm), (torch.randn(3, 5, 8),))
    assert flops == 2 * 5 * (4 * 16 * 8 + 4 * 16 * 16)


class FirstOutput(nn.Module):
    """A module that returns only the first output of a module returning a tuple."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)[0]


def test_attention_flops_include_the_score_matmuls():
    from models.attention import MultiHeadAttention

    core = MultiHeadAttention(32, 4)
    L = 10
    flops = measure.flops_per_sample(FirstOutput(core), (torch.randn(2, L, 32),))
    projections = 2 * L * 32 * (3 * 32) + 2 * L * 32 * 32
    scores_and_values = 2 * 2 * L * L * 32
    assert flops == projections + scores_and_values


def test_config_hash_ignores_paths_and_seed_only():
    base = {"seed": 0, "results_dir": "a", "model": {"dim": 8}, "trainer": {"lr": 1}}
    same = {**base, "seed": 3, "results_dir": "b", "data_dir": "/x"}
    other = {**base, "model": {"dim": 16}}
    assert config_hash(base) == config_hash(same)
    assert config_hash(base) != config_hash(other)


def test_run_dirs_never_collide(tmp_path):
    dirs = {new_run_dir(tmp_path, "same-stem") for _ in range(50)}
    assert len(dirs) == 50


def test_atomic_write_keeps_old_content_on_failure(tmp_path):
    target = tmp_path / "record.json"
    atomic_write_text(target, json.dumps({"ok": 1}))

    class Boom(Exception):
        pass

    from bench.records.atomic import atomic_write

    def failing(f):
        f.write(b"{half")
        raise Boom

    with pytest.raises(Boom):
        atomic_write(target, failing)
    assert json.loads(target.read_text()) == {"ok": 1}
    assert list(tmp_path.iterdir()) == [target]  # no temp file left behind


def test_activation_memory_counts_saved_tensors_and_grows_with_length():
    from models.attention import MultiHeadAttention

    core = MultiHeadAttention(32, 4)

    def mb(length):
        x = torch.randn(8, length, 32, requires_grad=True)
        return measure.activation_memory_mb(lambda: core(x, need_weights=True)[0].sum())

    short, long = mb(16), mb(64)
    assert short > 0
    # The explicit path keeps (B, H, L, L) weights: 4x the length, far more than 4x the memory.
    assert long > 4 * short
    linear = nn.Linear(1000, 10)
    x = torch.randn(256, 1000)
    assert measure.activation_memory_mb(lambda: linear(x).sum()) == pytest.approx(256 * 1000 * 4 / 2**20)


@pytest.mark.parametrize("shuffle", [True, False])
def test_in_memory_loader_gives_the_default_loaders_batches_and_rng(shuffle, tmp_path):
    from torch.utils.data import DataLoader, TensorDataset

    from tasks.image import ImageTask

    data = TensorDataset(torch.arange(100.0).view(100, 1), torch.arange(100))
    task = ImageTask("image", "digits", None, str(tmp_path))
    default = DataLoader(data, batch_size=16, shuffle=shuffle, generator=torch.Generator().manual_seed(3))
    fast = task.loader(data, 16, shuffle, 3)
    assert fast.batch_size is None  # the batched-indexing path
    torch.manual_seed(0)
    expected = [[y.tolist() for _, y in default] for _epoch in range(2)], torch.rand(1)
    torch.manual_seed(0)
    got = [[y.tolist() for _, y in fast] for _epoch in range(2)], torch.rand(1)
    assert got[0] == expected[0] and torch.equal(got[1], expected[1])  # augmentation RNG untouched
    assert len(fast) == len(default) == 7


def test_progress_lines_are_logged_when_no_bar_is_drawn(tmp_path, caplog):
    caplog.set_level("INFO", logger="bench.run.engine")
    fit(ToyTask(), nn.Linear(4, 2), ToyTask().load(0), TRAINER, torch.device("cpu"), tmp_path,
        seed=0, progress=False, log_every_s=0.0)
    lines = [r.getMessage() for r in caplog.records if "epoch ends in" in r.getMessage()]
    # 160 training samples in batches of 16: a line after each of the 10 steps of 3 epochs
    assert len(lines) == 30
    assert lines[0].startswith("epoch 1/3: step 1/10, train_loss ") and ", - samples/s," in lines[0]
    assert lines[-1].startswith("epoch 3/3: step 10/10,") and lines[-1].endswith("epoch ends in 0m00s")
    caplog.clear()
    fit(ToyTask(), nn.Linear(4, 2), ToyTask().load(0), TRAINER, torch.device("cpu"), tmp_path,
        seed=0, progress=False)
    assert not [r for r in caplog.records if "epoch ends in" in r.getMessage()]


@pytest.mark.parametrize(("progress", "logged"), [("auto", True), (False, False)])
def test_a_run_without_a_terminal_logs_progress_unless_told_not_to(progress, logged, tmp_path, caplog,
                                                                   monkeypatch):
    from hydra import compose, initialize_config_dir

    from bench import experiment
    from bench.setup.compose import CONF_DIR

    monkeypatch.setattr(experiment, "PROGRESS_LOG_S", 0.0)
    monkeypatch.setattr("sys.stderr.isatty", lambda: False)
    caplog.set_level("INFO", logger="bench.run.engine")
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=[
            "task=image", "task.dataset=digits", "model=gru", "trainer.max_steps=2", "trainer.infer_iters=1",
            f"results_dir={tmp_path}", f"cache_dir={tmp_path / 'cache'}", f"progress={progress}"])
    experiment.run_experiment(cfg)
    lines = [r.getMessage() for r in caplog.records if "epoch ends in" in r.getMessage()]
    assert [line.split(",")[0] for line in lines] == (["epoch 1/1: step 1/2", "epoch 1/1: step 2/2"]
                                                      if logged else [])


def test_runs_flush_subnormal_floats_to_zero():
    from bench.setup.compose import compose_config
    from bench.setup.spec import build, prepare

    torch.set_flush_denormal(False)
    assert torch.tensor([1e-39]).item() != 0  # a subnormal, kept
    build(prepare(compose_config("config", ["task=image", "task.dataset=digits", "model.dim=16",
                                            "model.depth=1"], "run")))
    try:
        assert torch.tensor([1e-39]).item() == 0  # flushed: RNN gradients no longer crawl
    finally:
        torch.set_flush_denormal(False)


def _undecayed(model: nn.Module) -> set[str]:
    optimizer = build_optimizer(model, replace(TRAINER, weight_decay=0.05, lr=1e-3))
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)] for g in optimizer.param_groups if g["weight_decay"] == 0 for p in g["params"]}


@pytest.mark.parametrize("build", [
    lambda: PatchTransformerClassifier((8, 8), 4, 1, 3, dim=16, depth=2, num_heads=2),
    lambda: TokenTransformerClassifier(10, 3, 6, 16, 1, 2, 2.0, 0.0, 0.0, "learned"),
    lambda: TransformerSeq2Seq(20, dim=16, depth=1, num_heads=2, pos_encoding="learned", max_len=12),
    lambda: TransformerTranscriber(8, 1, 40, 6, 4, 2, dim=16, depth=1, num_heads=2),
])
def test_weight_decay_skips_cls_token_and_positions_as_timm(build):
    """timm's rule: no decay for biases, norms, and what no_weight_decay() names (the cls
    token, the learned position tables); every weight matrix is decayed."""
    model = build()
    undecayed = _undecayed(model)
    positions = {n for n in dict(model.named_parameters()) if n.endswith("pos.weight")}
    assert positions and positions <= undecayed
    assert ("cls_token" in undecayed) == hasattr(model, "cls_token")
    for name, param in model.named_parameters():
        if name not in model.no_weight_decay() and param.ndim >= 2:
            assert name not in undecayed, name
        if param.ndim == 1:
            assert name in undecayed, name


def test_weight_decay_matches_timm_vit():
    """Our ViT loaded from timm's leaves out of decay what timm's own optimizer factory does."""
    timm = pytest.importorskip("timm")
    from timm.optim import create_optimizer_v2

    theirs = timm.models.VisionTransformer(img_size=8, patch_size=4, in_chans=1, num_classes=3,
                                           embed_dim=16, depth=1, num_heads=2)
    ours = PatchTransformerClassifier.from_timm(theirs)
    timm_optimizer = create_optimizer_v2(theirs, "adamw", lr=1e-3, weight_decay=0.05)
    names = {id(p): n for n, p in theirs.named_parameters()}
    timm_undecayed = {names[id(p)] for g in timm_optimizer.param_groups
                      if g["weight_decay"] == 0 for p in g["params"]}
    assert {"cls_token", "pos_embed"} <= timm_undecayed
    renamed = {"cls_token": "cls_token", "pos_embed": "encoder.pos.weight"}
    ours_undecayed = _undecayed(ours)
    assert {renamed[n] for n in renamed if n in timm_undecayed} <= ours_undecayed
    matrices = sum(p.ndim >= 2 for p in theirs.parameters())
    assert sum(p.ndim >= 2 for p in ours.parameters()) == matrices
    assert len(ours_undecayed) == len(timm_undecayed)


def test_a_budget_of_too_few_steps_warns_once_before_training(caplog):
    from bench.run.engine import MIN_STEPS, warn_if_too_few_steps

    caplog.set_level("WARNING", logger="bench.run.engine")
    warn_if_too_few_steps(5, 5, 1)  # the 30-utterance audiofolder under the asr recipe
    warn_if_too_few_steps(MIN_STEPS, 2, MIN_STEPS // 2)
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "budget is 5 optimizer steps (5 epochs of 1 batches)" in warning
    assert "raise trainer.epochs" in warning


def test_bf16_on_a_cpu_without_bf16_hardware_warns_once(monkeypatch, caplog):
    from bench.run.acceleration import warn_if_emulated

    monkeypatch.setattr("bench.run.acceleration.cpu_bf16_flags", lambda: [])
    with caplog.at_level("WARNING"):
        warn_if_emulated(torch.device("cpu"), "bf16")
        warn_if_emulated(torch.device("cpu"), "float32")
    assert len(caplog.records) == 1
    assert "without bfloat16 hardware" in caplog.text and "use dtype float32" in caplog.text
    monkeypatch.setattr("bench.run.acceleration.cpu_bf16_flags", lambda: ["amx_bf16"])
    caplog.clear()
    warn_if_emulated(torch.device("cpu"), "bf16")
    assert not caplog.records
