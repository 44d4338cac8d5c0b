"""Measurements every run records: parameters, FLOPs, inference speed, peak memory."""

from __future__ import annotations

import resource
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

aten = torch.ops.aten


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _rnn_flops(input_shape, *args, out_shape=None, **kwargs) -> int:
    """2 FLOPs per multiply-add of every gate matmul, over every step and layer.

    The fused ``aten.lstm`` / ``aten.gru`` kernels are opaque to torch's FLOP counter, which
    would otherwise report 0 for an RNN. Every 2-D entry of ``params`` is a gate weight
    (input-hidden or hidden-hidden), applied once per token. A packed sequence arrives as
    2-D data (tokens, features); a padded batch as 3-D.
    """
    if len(input_shape) == 2:  # lstm.data / gru.data: (data, batch_sizes, hx, params, ...)
        tokens, params = input_shape[0], args[2]
    else:  # lstm.input / gru.input: (input, hx, params, ..., batch_first)
        tokens, params = input_shape[0] * input_shape[1], args[1]
    weights = sum(shape[0] * shape[1] for shape in params if len(shape) == 2)
    return 2 * tokens * weights


def _mkldnn_rnn_layer_flops(input_shape, w_ih, w_hh, *args, out_shape=None, **kwargs) -> int:
    """One layer and direction of the oneDNN LSTM kernel that CPU builds dispatch to."""
    tokens = input_shape[0] * input_shape[1]
    return 2 * tokens * (w_ih[0] * w_ih[1] + w_hh[0] * w_hh[1])


def _cpu_sdpa_flops(q_shape, k_shape, v_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(q_shape, k_shape, v_shape)


# Kernels torch's counter does not know; its formulas get tensor shapes in place of tensors.
_CUSTOM_FLOPS = {
    aten._scaled_dot_product_flash_attention_for_cpu: _cpu_sdpa_flops,
    aten.lstm: _rnn_flops,
    aten.gru: _rnn_flops,
    aten.mkldnn_rnn_layer: _mkldnn_rnn_layer_flops,
}


def flops_per_sample(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> float:
    """Forward FLOPs per sample (inference mode), from ``torch.utils.flop_counter``."""
    batch = inputs[0].shape[0]
    was_training = model.training
    model.eval()
    counter = FlopCounterMode(display=False, custom_mapping=_CUSTOM_FLOPS)
    with torch.no_grad(), counter:
        model(*inputs)
    model.train(was_training)
    return counter.get_total_flops() / batch


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_calls(fn: Callable[[], Any], device: torch.device, warmup: int, iters: int) -> list[float]:
    """Seconds per call of ``fn`` over ``iters`` timed calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return times


@torch.no_grad()
def inference_speed(
    model: nn.Module, inputs: tuple[torch.Tensor, ...], device: torch.device,
    iters: int = 20, warmup: int = 3, infer: Callable | None = None,
) -> dict[str, float]:
    """Time ``infer(model, inputs)`` (default ``model(*inputs)``) in eval mode; warm-up calls
    are excluded."""
    infer = infer or (lambda m, x: m(*x))
    was_training = model.training
    model.eval()
    times = time_calls(lambda: infer(model, inputs), device, warmup, iters)
    model.train(was_training)
    batch = inputs[0].shape[0]
    return {
        "infer_batch_size": batch,
        "infer_samples_per_s": batch * len(times) / sum(times),
        "infer_latency_ms_median": 1000 * statistics.median(times),
        "infer_latency_ms_p90": 1000 * sorted(times)[int(0.9 * (len(times) - 1))],
    }


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_mb(device: torch.device) -> dict[str, float | str]:
    """Max allocated on CUDA; on CPU the process' peak resident set (ru_maxrss)."""
    if device.type == "cuda":
        return {"peak_memory_mb": torch.cuda.max_memory_allocated(device) / 2**20,
                "peak_memory_kind": "cuda_max_allocated"}
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rss_bytes = rss if sys.platform == "darwin" else rss * 1024
    return {"peak_memory_mb": rss_bytes / 2**20, "peak_memory_kind": "process_peak_rss"}


def activation_memory_mb(loss_fn: Callable[[], torch.Tensor]) -> float:
    """MiB of tensors autograd saves for backward during one training forward pass.

    Unlike the process' peak RSS, this is the model's own memory cost per batch: the same on
    every machine and independent of earlier runs in the process. Storage shared by several
    saved tensors is counted once.
    """
    seen: dict[int, int] = {}

    # Autograd calls the hook from inside a compiled model too; left to dynamo, it would trace
    # (and recompile for) every storage size it sees.
    @torch.compiler.disable
    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn()
    del loss
    return sum(seen.values()) / 2**20
