"""The one train/eval loop every task and model goes through.

AdamW, linear warm-up then cosine decay, gradient clipping, an optional moving average of
the weights, validation after each epoch, the best-validation checkpoint kept and evaluated on
the test split at the end; optionally bf16 autocast and torch.compile (``bench.run.acceleration``).
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import torch
from timm.optim import param_groups_weight_decay
from timm.utils import ModelEmaV3
from torch import nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from bench.errors import RunFailed
from bench.records.atomic import atomic_torch_save, load_state_dict
from bench.run import measure
from bench.run.acceleration import autocast, compile_model, model_attention_path, warn_if_emulated
from bench.run.final import measure_final
from bench.run.loggers import RunLogger
from bench.task import Batch, Splits, Task
from models.constraints import AT_LEAST_1, FRACTION, NON_NEGATIVE, POSITIVE, Range

CHECKPOINT = "best.pt"
MIN_STEPS = 100  # fewer optimizer steps than this is warned about (the quick suite's digits run 165)
LOG_EVERY_STEPS = 10  # how often a run logger gets the training loss, learning rate and samples/s
log = logging.getLogger(__name__)



@dataclass
class TrainerSettings:
    """The engine's recipe, ``conf/trainer/*.yaml``: the type and range of every key, checked
    before a run (``bench.setup.schema``), then handed to the engine as this object. Every model
    of a task trains under the same one."""

    epochs: Annotated[int, AT_LEAST_1]
    max_steps: Annotated[int, AT_LEAST_1] | None
    batch_size: Annotated[int, AT_LEAST_1]
    batching: Literal["random", "bucketed"]  # bench.data.batching.BATCHINGS
    max_tokens: Annotated[int, AT_LEAST_1] | None
    eval_batch_size: Annotated[int, AT_LEAST_1]
    lr: Annotated[float, POSITIVE]
    min_lr_ratio: Annotated[float, Range(ge=0, le=1)]
    warmup_epochs: Annotated[float, NON_NEGATIVE]
    weight_decay: Annotated[float, NON_NEGATIVE]
    betas: tuple[Annotated[float, FRACTION], Annotated[float, FRACTION]]
    grad_clip: Annotated[float, NON_NEGATIVE] | None  # 0 or null: no clipping
    ema_decay: Annotated[float, Range(gt=0, lt=1)] | None
    num_workers: Annotated[int, NON_NEGATIVE]
    dtype: str  # float32 | bf16, checked by bench.run.acceleration.check_dtype
    compile: bool | str  # checked by bench.run.acceleration.check_compile
    timing_warmup_steps: Annotated[int, NON_NEGATIVE]
    infer_iters: Annotated[int, AT_LEAST_1]

def build_optimizer(model: nn.Module, cfg: TrainerSettings) -> torch.optim.Optimizer:
    """AdamW with timm's weight-decay groups: biases, norms and whatever the model's
    ``no_weight_decay()`` names (cls tokens, learned position tables) are not decayed."""
    skip = model.no_weight_decay() if hasattr(model, "no_weight_decay") else set()
    groups = param_groups_weight_decay(model, cfg.weight_decay, no_weight_decay_list=skip)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas))


def build_ema(model: nn.Module, cfg: TrainerSettings) -> ModelEmaV3 | None:
    """timm's moving average of the weights when ``cfg.ema_decay`` is set. Its warm-up averages
    over few updates early on, so short runs benefit too."""
    return ModelEmaV3(model, decay=cfg.ema_decay, use_warmup=True) if cfg.ema_decay else None


def warmup_cosine(warmup_steps: int, total_steps: int, min_lr_ratio: float):
    """LR multiplier: linear from ~0 to 1 over warm-up, then cosine down to ``min_lr_ratio``."""

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return factor


def train_step(task: Task, model: nn.Module, batch: Batch, optimizer: torch.optim.Optimizer,
               scheduler: torch.optim.lr_scheduler.LRScheduler | None, ema: ModelEmaV3 | None,
               grad_clip: float | None, precision: Callable[[], AbstractContextManager],
               step: int) -> float:
    """Optimizer step ``step + 1`` on a batch already on the device: augmentation, loss,
    backward, clipping, AdamW, the LR schedule and the weight average. The engine and the
    speed benchmark's bare loop both train through it. Returns the loss, read once (the
    step's one sync); a non-finite loss stops the run."""
    batch = task.augment(batch)
    with precision():
        loss = task.loss(model, batch)
    loss_value = loss.item()
    if not math.isfinite(loss_value):
        raise RunFailed(f"non-finite training loss ({loss_value}) at step {step}")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if grad_clip:
        nn.utils.clip_grad_norm_(model.parameters(), grad_clip, foreach=True)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    if ema is not None:
        ema.update(model, step=step + 1)
    return loss_value


def warn_if_too_few_steps(total_steps: int, epochs: int, steps_per_epoch: int) -> None:
    """One line before training when the epoch budget comes to too few optimizer steps to
    train a model (a small dataset under a recipe made for a larger one). A cap the user set
    (``trainer.max_steps``) is taken as meant."""
    if total_steps < MIN_STEPS:
        log.warning("this run's budget is %d optimizer steps (%d epochs of %d batches), fewer than the "
                    "%d a model needs to train; raise trainer.epochs (or lower trainer.batch_size)",
                    total_steps, epochs, steps_per_epoch, MIN_STEPS)


def fit(
    task: Task, model: nn.Module, splits: Splits, cfg: TrainerSettings, device: torch.device,
    run_dir: Path, seed: int, progress: bool = True, log_every_s: float | None = None,
    logger: RunLogger | None = None, test: bool = True,
) -> dict[str, Any]:
    """Train, select the best-validation checkpoint, evaluate it on test; return measurements
    (the record's fields from training and from ``bench.run.final``). With ``test`` false (a
    tuning trial) the test split is never read: training's fields and peak memory only.

    ``progress`` draws a bar; ``log_every_s`` logs a progress line that often instead, for
    output that is not a terminal (a log file, CI, a parallel sweep's worker), where a long
    epoch would otherwise say nothing until it ends."""
    train_loader = task.loader(splits.train, cfg.batch_size, True, seed, cfg.num_workers, cfg.batching,
                               cfg.max_tokens)
    val_loader = task.loader(splits.val, cfg.eval_batch_size, False, seed, batching=cfg.batching)
    precision = functools.partial(autocast, device, cfg.dtype)
    warn_if_emulated(device, cfg.dtype)
    path = {"attention_path": model_attention_path(model, device, cfg.dtype)}
    trained = train(task, model, train_loader, val_loader, cfg, device, run_dir, precision,
                    Progress(task.metric_name, progress, log_every_s, logger))
    if not test:
        return {**trained, **path, "test_metric": None, **measure.peak_memory_mb(device)}
    test_loader = task.loader(splits.test, cfg.eval_batch_size, False, seed, batching=cfg.batching)
    model.load_state_dict(load_state_dict(run_dir / CHECKPOINT))
    final = measure_final(task, model.eval(), splits, test_loader, device, run_dir, precision,
                          cfg.infer_iters)
    return {**trained, **path, **final}


def _selection(task: Task, epoch: int, ema_decay: float | None) -> str:
    """The record's words for which weights were kept (``build_ema`` averages when a decay is set)."""
    rule = "max" if task.higher_is_better else "min"
    average = f", of the weights' moving average (EMA decay {ema_decay})" if ema_decay else ""
    return f"best validation {task.metric_name} ({rule}) after each epoch: epoch {epoch}{average}"


class Throughput:
    """Steady-state training samples/s: the steps after the first ``warmup_steps`` count, each
    timed from fetching its batch to its optimizer step's end (data loading included)."""

    def __init__(self, warmup_steps: int) -> None:
        self.warmup_steps, self.samples, self.seconds = warmup_steps, 0, 0.0
        self.seen = 0  # every training sample so far, timed or not

    def add(self, step: int, samples: int, seconds: float) -> None:
        self.seen += samples
        if step > self.warmup_steps:
            self.samples, self.seconds = self.samples + samples, self.seconds + seconds

    @property
    def samples_per_s(self) -> float | None:
        return self.samples / self.seconds if self.seconds else None


class Progress:
    """Where a run's progress goes: a bar on a terminal, else a log line every ``log_every_s``;
    the run logger every ``LOG_EVERY_STEPS`` steps and after each validation; one log line per
    epoch either way."""

    def __init__(self, metric_name: str, bar: bool, log_every_s: float | None,
                 logger: RunLogger | None) -> None:
        self.metric_name, self.show_bar, self.log_every_s, self.logger = metric_name, bar, log_every_s, logger
        self.best: float | None = None

    def start_epoch(self, epoch: int, epochs: int, steps: int) -> None:
        self.epoch, self.epochs, self.epoch_steps = epoch, epochs, steps
        self.bar = tqdm(total=steps, desc=f"epoch {epoch}/{epochs}", disable=not self.show_bar,
                        leave=False, dynamic_ncols=True)
        self.epoch_start = time.perf_counter()
        self.next_log = self.epoch_start + self.log_every_s if self.log_every_s is not None else math.inf

    def step(self, step: int, loss: float, lr: float, done: int, mean_loss: float,
             samples_per_s: float | None) -> None:
        if self.logger is not None and (step % LOG_EVERY_STEPS == 0 or step == 1):
            speed = {} if samples_per_s is None else {"samples_per_s": samples_per_s}
            self.logger.step(step, {"loss": loss, "lr": lr, **speed})
        if self.show_bar:  # formatting the postfix costs a little on every step
            self.bar.update()
            self.bar.set_postfix({"loss": f"{loss:.3f}",
                                  f"val_{self.metric_name}": "-" if self.best is None else f"{self.best:.4f}",
                                  "samples_s": "-" if samples_per_s is None else f"{samples_per_s:.0f}"})
        if time.perf_counter() >= self.next_log:
            seconds = time.perf_counter() - self.epoch_start
            left = seconds / done * (self.epoch_steps - done)
            log.info("epoch %d/%d: step %d/%d, train_loss %.4f, %s samples/s, epoch ends in %dm%02ds",
                     self.epoch, self.epochs, done, self.epoch_steps, mean_loss,
                     "-" if samples_per_s is None else f"{samples_per_s:.0f}", left // 60, left % 60)
            self.next_log = time.perf_counter() + self.log_every_s

    def end_steps(self) -> None:
        self.bar.close()

    def end_epoch(self, step: int, train_loss: float, val: dict[str, float], best: float | None) -> None:
        self.best = best
        if self.logger is not None:
            self.logger.epoch(step, {self.metric_name: val["metric"], "loss": val["loss"],
                                     "train_loss": train_loss})
        log.info("epoch %d/%d: train_loss %.4f  val_%s %.4f  val_loss %.4f", self.epoch, self.epochs,
                 train_loss, self.metric_name, val["metric"], val["loss"])


@dataclass
class Optimization:
    """What an optimizer step needs besides its batch: ``step`` trains on one."""

    task: Task
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    ema: ModelEmaV3 | None
    grad_clip: float | None
    precision: Callable[[], AbstractContextManager]

    def step(self, batch: Batch, step: int) -> float:
        return train_step(self.task, self.model, batch, self.optimizer, self.scheduler, self.ema,
                          self.grad_clip, self.precision, step)

    @property
    def evaluated(self) -> nn.Module:
        """What validation, the checkpoint and the test see: the weights' average, with one."""
        return self.model if self.ema is None else self.ema.module


class BestCheckpoint:
    """The best validation metric so far, its epoch, and its weights saved atomically."""

    def __init__(self, path: Path, higher_is_better: bool) -> None:
        self.path, self.higher_is_better = path, higher_is_better
        self.value: float | None = None
        self.epoch = 0

    def offer(self, value: float, epoch: int, model: nn.Module) -> None:
        better = self.value is None or (value > self.value if self.higher_is_better else value < self.value)
        if better:
            self.value, self.epoch = value, epoch
            atomic_torch_save(self.path, model.state_dict())


def schedule(cfg: TrainerSettings, steps_per_epoch: int) -> tuple[int, int]:
    """(total optimizer steps, warm-up steps) of the recipe on an epoch of ``steps_per_epoch``."""
    total_steps = cfg.epochs * steps_per_epoch
    if cfg.max_steps is not None:
        total_steps = min(total_steps, cfg.max_steps)
    else:
        warn_if_too_few_steps(total_steps, cfg.epochs, steps_per_epoch)
    return total_steps, max(1, min(total_steps // 2, round(cfg.warmup_epochs * steps_per_epoch)))


def run_epoch(opt: Optimization, loader: DataLoader, device: torch.device, step: int, total_steps: int,
              throughput: Throughput, progress: Progress) -> tuple[int, float, int]:
    """One pass over ``loader``, stopping at ``total_steps``: (step reached, loss sum, steps)."""
    opt.model.train()
    loss_sum, loss_count = 0.0, 0
    batches = iter(loader)
    while step < total_steps:
        measure.synchronize(device)
        start = time.perf_counter()
        try:
            batch = opt.task.to_device(next(batches), device)
        except StopIteration:
            break
        loss = opt.step(batch, step)
        step += 1
        measure.synchronize(device)  # so the step time is real on CUDA
        throughput.add(step, batch[-1].shape[0], time.perf_counter() - start)
        loss_sum, loss_count = loss_sum + loss, loss_count + 1
        progress.step(step, loss, opt.scheduler.get_last_lr()[0], loss_count, loss_sum / loss_count,
                      throughput.samples_per_s)
    progress.end_steps()
    return step, loss_sum, loss_count


def train(
    task: Task, model: nn.Module, train_loader: DataLoader, val_loader: DataLoader, cfg: TrainerSettings,
    device: torch.device, run_dir: Path, precision: Callable[[], AbstractContextManager],
    progress: Progress,
) -> dict[str, Any]:
    """The training loop: AdamW under the warm-up/cosine schedule, validation after each epoch
    and the best-validation weights (of the moving average, with one) saved as ``CHECKPOINT``.
    Returns the record's training fields: history, checkpoint choice, throughput, activations."""
    total_steps, warmup_steps = schedule(cfg, len(train_loader))
    optimizer = build_optimizer(model, cfg)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(warmup_steps, total_steps,
                                                                           cfg.min_lr_ratio))
    # the weight average is made before compiling: a plain copy of the weights
    opt = Optimization(task, model, optimizer, scheduler, build_ema(model, cfg), cfg.grad_clip, precision)
    compile_model(model, cfg.compile)
    first = task.to_device(next(iter(train_loader)), device)
    with precision():  # the first compile happens here, before any step is timed
        activation_mb = measure.activation_memory_mb(lambda: task.loss(model, first))
    measure.reset_peak_memory(device)
    throughput = Throughput(cfg.timing_warmup_steps)
    best = BestCheckpoint(run_dir / CHECKPOINT, task.higher_is_better)
    history: list[dict[str, float]] = []
    step, start, epochs = 0, time.perf_counter(), math.ceil(total_steps / len(train_loader))
    for epoch in range(1, epochs + 1):
        progress.start_epoch(epoch, epochs, min(len(train_loader), total_steps - step))
        step, loss_sum, loss_count = run_epoch(opt, train_loader, device, step, total_steps, throughput,
                                               progress)
        if loss_count == 0:
            break
        val_start = time.perf_counter()
        with precision():
            val = task.evaluate(opt.evaluated.eval(), val_loader, device)
        # wall_s: since training began, validations included (what time to quality counts);
        # val_s: this validation's own share of it (where a run's minutes go)
        history.append({"epoch": epoch, "step": step, "train_samples": throughput.seen,
                        "wall_s": time.perf_counter() - start, "val_s": time.perf_counter() - val_start,
                        "train_loss": loss_sum / loss_count, "val_loss": val["loss"],
                        "val_metric": val["metric"], "lr": opt.scheduler.get_last_lr()[0]})
        best.offer(val["metric"], epoch, opt.evaluated)
        progress.end_epoch(step, loss_sum / loss_count, val, best.value)
    return {"val_metric": best.value, "best_epoch": best.epoch, "epochs_run": len(history), "steps": step,
            "checkpoint_selection": _selection(task, best.epoch, cfg.ema_decay), "history": history,
            "train_seconds": time.perf_counter() - start, "train_samples_per_s": throughput.samples_per_s,
            "train_timed_steps": max(0, step - cfg.timing_warmup_steps),
            "train_activation_mb": activation_mb, "train_activation_batch": first[-1].shape[0]}
