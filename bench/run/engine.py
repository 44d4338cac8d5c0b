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
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig
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

CHECKPOINT = "best.pt"
MIN_STEPS = 100  # fewer optimizer steps than this is warned about (the quick suite's digits run 165)
LOG_EVERY_STEPS = 10  # how often a run logger gets the training loss, learning rate and samples/s
log = logging.getLogger(__name__)


def build_optimizer(model: nn.Module, cfg: DictConfig) -> torch.optim.Optimizer:
    """AdamW with timm's weight-decay groups: biases, norms and whatever the model's
    ``no_weight_decay()`` names (cls tokens, learned position tables) are not decayed."""
    skip = model.no_weight_decay() if hasattr(model, "no_weight_decay") else set()
    groups = param_groups_weight_decay(model, cfg.weight_decay, no_weight_decay_list=skip)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas))


def build_ema(model: nn.Module, cfg: DictConfig) -> ModelEmaV3 | None:
    """timm's moving average of the weights when ``cfg.ema_decay`` is set. Its warm-up averages
    over few updates early on, so short runs benefit too."""
    return ModelEmaV3(model, decay=cfg.ema_decay, use_warmup=True) if cfg.get("ema_decay") else None


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


def _improved(value: float, best: float | None, higher_is_better: bool) -> bool:
    if best is None:
        return True
    return value > best if higher_is_better else value < best


def _log_progress(epoch: int, epochs: int, done: int, total: int, mean_loss: float,
                  samples_per_s: float | None, seconds: float) -> None:
    left = seconds / done * (total - done)
    log.info(
        "epoch %d/%d: step %d/%d, train_loss %.4f, %s samples/s, epoch ends in %dm%02ds",
        epoch, epochs, done, total, mean_loss,
        "-" if samples_per_s is None else f"{samples_per_s:.0f}", left // 60, left % 60,
    )


def fit(
    task: Task, model: nn.Module, splits: Splits, cfg: DictConfig, device: torch.device,
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
                               cfg.get("max_tokens"))
    val_loader = task.loader(splits.val, cfg.eval_batch_size, False, seed, batching=cfg.batching)
    precision = functools.partial(autocast, device, cfg.dtype)
    warn_if_emulated(device, cfg.dtype)
    path = {"attention_path": model_attention_path(model, device, cfg.dtype)}
    trained = train(task, model, train_loader, val_loader, cfg, device, run_dir, precision, progress,
                    log_every_s, logger)
    if not test:
        return {**trained, **path, "test_metric": None, **measure.peak_memory_mb(device)}
    test_loader = task.loader(splits.test, cfg.eval_batch_size, False, seed, batching=cfg.batching)
    model.load_state_dict(load_state_dict(run_dir / CHECKPOINT))
    final = measure_final(task, model.eval(), splits, test_loader, device, run_dir, precision,
                          cfg.infer_iters)
    return {**trained, **path, **final}


def train(
    task: Task, model: nn.Module, train_loader: DataLoader, val_loader: DataLoader, cfg: DictConfig,
    device: torch.device, run_dir: Path, precision: Callable[[], AbstractContextManager],
    progress: bool = True, log_every_s: float | None = None, logger: RunLogger | None = None,
) -> dict[str, Any]:
    """The training loop: AdamW under the warm-up/cosine schedule, validation after each epoch
    and the best-validation weights (of the moving average, with one) saved as ``CHECKPOINT``.
    Returns the record's training fields: history, checkpoint choice, throughput, activations."""
    steps_per_epoch = len(train_loader)
    total_steps = cfg.epochs * steps_per_epoch
    if cfg.max_steps is not None:
        total_steps = min(total_steps, cfg.max_steps)
    else:
        warn_if_too_few_steps(total_steps, cfg.epochs, steps_per_epoch)
    warmup_steps = max(1, min(total_steps // 2, round(cfg.warmup_epochs * steps_per_epoch)))
    optimizer = build_optimizer(model, cfg)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, warmup_cosine(warmup_steps, total_steps, cfg.min_lr_ratio)
    )

    ema = build_ema(model, cfg)  # before compiling: the average is a plain copy of the weights
    evaluated = model if ema is None else ema.module  # what validation, checkpoint and test see
    compile_model(model, cfg.compile)

    first = task.to_device(next(iter(train_loader)), device)
    with precision():  # the first compile happens here, before any step is timed
        activation_mb = measure.activation_memory_mb(lambda: task.loss(model, first))
    measure.reset_peak_memory(device)
    history: list[dict[str, float]] = []
    best_val, best_epoch, step, samples_seen = None, 0, 0, 0
    timed_samples, timed_seconds = 0, 0.0
    train_start = time.perf_counter()
    epochs = math.ceil(total_steps / steps_per_epoch)
    for epoch in range(1, epochs + 1):
        model.train()
        epoch_steps = min(steps_per_epoch, total_steps - step)
        bar = tqdm(
            total=epoch_steps, desc=f"epoch {epoch}/{epochs}",
            disable=not progress, leave=False, dynamic_ncols=True,
        )
        loss_sum, loss_count = 0.0, 0
        epoch_start = time.perf_counter()
        next_log = epoch_start + log_every_s if log_every_s is not None else math.inf
        batch_iter = iter(train_loader)
        while step < total_steps:
            measure.synchronize(device)
            t0 = time.perf_counter()
            try:
                batch = next(batch_iter)
            except StopIteration:
                break
            batch = task.to_device(batch, device)
            loss_value = train_step(task, model, batch, optimizer, scheduler, ema, cfg.grad_clip,
                                    precision, step)
            step += 1
            measure.synchronize(device)  # so the step time is real on CUDA
            elapsed = time.perf_counter() - t0
            if step > cfg.timing_warmup_steps:  # steady state only
                timed_samples += batch[-1].shape[0]
                timed_seconds += elapsed
            loss_sum, loss_count = loss_sum + loss_value, loss_count + 1
            samples_seen += batch[-1].shape[0]
            if logger is not None and (step % LOG_EVERY_STEPS == 0 or step == 1):
                speed = {"samples_per_s": timed_samples / timed_seconds} if timed_seconds else {}
                logger.step(step, {"loss": loss_value, "lr": scheduler.get_last_lr()[0], **speed})
            if progress:  # formatting the postfix costs a little on every step
                bar.update()
                bar.set_postfix(
                    loss=f"{loss_value:.3f}",
                    **{f"val_{task.metric_name}": "-" if best_val is None else f"{best_val:.4f}"},
                    samples_s=f"{timed_samples / timed_seconds:.0f}" if timed_seconds else "-",
                )
            if time.perf_counter() >= next_log:
                _log_progress(epoch, epochs, loss_count, epoch_steps, loss_sum / loss_count,
                              timed_samples / timed_seconds if timed_seconds else None,
                              time.perf_counter() - epoch_start)
                next_log = time.perf_counter() + log_every_s
        bar.close()
        if loss_count == 0:
            break
        val_start = time.perf_counter()
        with precision():
            val = task.evaluate(evaluated.eval(), val_loader, device)
        # wall_s: since training began, validations included (what time to quality counts);
        # val_s: this validation's own share of it (where a run's minutes go)
        history.append({"epoch": epoch, "step": step, "train_samples": samples_seen,
                        "wall_s": time.perf_counter() - train_start,
                        "val_s": time.perf_counter() - val_start, "train_loss": loss_sum / loss_count,
                        "val_loss": val["loss"], "val_metric": val["metric"],
                        "lr": scheduler.get_last_lr()[0]})
        if logger is not None:
            logger.epoch(step, {task.metric_name: val["metric"], "loss": val["loss"],
                                "train_loss": loss_sum / loss_count})
        log.info(
            "epoch %d/%d: train_loss %.4f  val_%s %.4f  val_loss %.4f",
            epoch, epochs, loss_sum / loss_count, task.metric_name, val["metric"], val["loss"],
        )
        if _improved(val["metric"], best_val, task.higher_is_better):
            best_val, best_epoch = val["metric"], epoch
            atomic_torch_save(run_dir / CHECKPOINT, evaluated.state_dict())
    train_seconds = time.perf_counter() - train_start
    return {
        "val_metric": best_val,
        "best_epoch": best_epoch,
        "epochs_run": len(history),
        "steps": step,
        "checkpoint_selection": (
            f"best validation {task.metric_name} "
            f"({'max' if task.higher_is_better else 'min'}) after each epoch: epoch {best_epoch}"
            + ("" if ema is None else f", of the weights' moving average (EMA decay {cfg.ema_decay})")
        ),
        "history": history,
        "train_seconds": train_seconds,
        "train_samples_per_s": timed_samples / timed_seconds if timed_seconds else None,
        "train_timed_steps": max(0, step - cfg.timing_warmup_steps),
        "train_activation_mb": activation_mb,
        "train_activation_batch": first[-1].shape[0],
    }
