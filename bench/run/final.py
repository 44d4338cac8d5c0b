"""What a run measures once training is over, on the chosen checkpoint: the test metric, FLOPs
per sample, each head's attention distance, an attention example, peak memory and inference
speed. The engine's loop (``bench.run.engine.train``) chose the checkpoint; this only reads it."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from bench.records.attention_examples import save_example
from bench.run import measure
from bench.run.attention_distance import mean_attention_distance
from bench.task import Splits, Task

ATTENTION_EXAMPLE = "attention.pt"


def measure_final(task: Task, model: nn.Module, splits: Splits, test_loader: DataLoader,
                  device: torch.device, run_dir: Path, precision: Callable[[], AbstractContextManager],
                  infer_iters: int) -> dict[str, Any]:
    """The record's fields measured on the test split with ``model`` (in eval mode), and the
    seconds each part took (``final_seconds``: where a run's minutes go after training)."""
    clock = _Clock()
    with precision():
        test = task.evaluate(model, test_loader, device, final=True)
        clock.lap("test")
        example = task.model_inputs(task.to_device(next(iter(test_loader)), device))
        flops_per_sample = measure.flops_per_sample(model, example)
        clock.lap("flops")
    results: dict[str, Any] = {
        "test_metric": test["metric"],
        "test_loss": test["loss"],
        "test_details": {k: v for k, v in test.items() if k not in ("metric", "loss")},
        "flops_per_sample": flops_per_sample,
    }
    distance = mean_attention_distance(
        model, (task.model_inputs(task.to_device(batch, device)) for batch in test_loader))
    if distance is not None:
        results["attention_distance"] = distance
    attention = task.attention_example(model, splits, device)
    if attention is not None:
        save_example(run_dir / ATTENTION_EXAMPLE, attention)
        results["attention_example"] = ATTENTION_EXAMPLE
    clock.lap("attention")
    results.update(measure.peak_memory_mb(device))
    with precision():
        results.update(measure.inference_speed(model, example, device, infer_iters, infer=task.infer))
    clock.lap("inference_speed")
    return {**results, "final_seconds": clock.laps}


class _Clock:
    """Seconds between laps, by the name of what each lap did."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = now - self._last
        self._last = now
