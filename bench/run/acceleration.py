"""The two speed options that both `mhab run` (``trainer.dtype``, ``trainer.compile``) and
`mhab speed` (``dtype``, ``compile``) take, so a model is timed the way it trains.

- ``dtype``: ``float32``, or ``bf16`` to autocast the forward pass to bfloat16. Weights, their
  gradients and the optimizer state stay float32, so no loss scaling is needed.
- ``compile``: ``false``, ``true`` (torch.compile's default backend, inductor), or the name of
  a torch.compile backend, as timm's ``--torchcompile [backend]`` takes it. ``aot_eager``
  traces and runs the same graphs without generating code: a cheap check that a model compiles.
"""

from __future__ import annotations

import contextlib
import logging
import shutil

import torch
from torch import nn

from bench.errors import BenchError
from bench.run.environment import cpu_bf16_flags
from models.attention import MultiHeadAttention, attention_path

log = logging.getLogger(__name__)

DTYPES = ("float32", "bf16")
CXX_COMPILERS = ("c++", "g++", "clang++")


def check_dtype(dtype: object, key: str = "dtype") -> None:
    if dtype not in DTYPES:
        raise BenchError(f"{key} must be float32 or bf16 (autocast to bfloat16), got {dtype!r}")


def compile_backend(setting: object, key: str = "compile") -> str | None:
    """The torch.compile backend a ``compile`` setting asks for, or None for eager."""
    if setting is False or setting is None:
        return None
    if setting is True:
        return "inductor"
    backends = torch.compiler.list_backends(exclude_tags=())
    if not isinstance(setting, str) or setting not in backends:
        raise BenchError(f"{key} must be true, false or a torch.compile backend such as inductor "
                         f"or aot_eager (torch.compiler.list_backends() names them), got {setting!r}")
    return setting


def check_compile(setting: object, device: torch.device, key: str = "compile") -> None:
    """Fail before any work when the backend cannot run here: on CPU, inductor writes C++."""
    if compile_backend(setting, key) == "inductor" and device.type == "cpu" and not any(
            shutil.which(cxx) for cxx in CXX_COMPILERS):
        raise BenchError(f"{key}: inductor needs a C++ compiler on CPU and none of "
                         f"{', '.join(CXX_COMPILERS)} is on PATH; install one, or pass "
                         f"{key}=aot_eager or {key}=false")


def autocast(device: torch.device, dtype: str) -> contextlib.AbstractContextManager:
    """The context a forward pass runs under for ``dtype``."""
    if dtype == "float32":
        return contextlib.nullcontext()
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise BenchError(f"{torch.cuda.get_device_name(device)} has no bfloat16 support; "
                         f"use dtype float32")
    return torch.autocast(device.type, dtype=compute_dtype(dtype))


def compute_dtype(dtype: str) -> torch.dtype:
    """The dtype the matmuls run in under ``dtype``."""
    return torch.bfloat16 if dtype == "bf16" else torch.float32


def warn_if_emulated(device: torch.device, dtype: str) -> None:
    """One line when bfloat16 would run on a CPU without bfloat16 hardware: torch then emulates
    it, slower than float32. A warning, not a refusal: the numbers stay right, only slower."""
    if dtype == "bf16" and device.type == "cpu" and not cpu_bf16_flags():
        log.warning("dtype bf16 on a CPU without bfloat16 hardware (/proc/cpuinfo lists none of "
                    "amx_bf16, avx512_bf16): torch emulates it, slower than float32; use dtype float32 here")


def model_attention_path(model: nn.Module, device: torch.device, dtype: str) -> str | None:
    """The paths the attention core takes in ``model`` under ``dtype``, chosen now, before any
    step is timed or compiled: ``sdpa`` or ``matmul`` where training and inference agree, else
    ``<path> (train), <path> (infer)``, per head width where the model has several; None for a
    model without the core. A description to read, never parsed."""
    widths = sorted({m.head_dim for m in model.modules() if isinstance(m, MultiHeadAttention)})
    if not widths:
        return None
    described = []
    for width in widths:
        train, infer = (attention_path(device, compute_dtype(dtype), width, training)
                        for training in (True, False))
        path = train if train == infer else f"{train} (train), {infer} (infer)"
        described.append(path if len(widths) == 1 else f"{path} at head width {width}")
    return "; ".join(described)


def compile_model(model: nn.Module, setting: object) -> nn.Module:
    """Compile ``model``'s forward in place, so its ``state_dict`` keys (and checkpoints) stay
    those of the eager model. Compiling an already compiled model again reuses the cached
    graphs."""
    backend = compile_backend(setting)
    if backend is not None:
        model.compile(backend=backend)
    return model
