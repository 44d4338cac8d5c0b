"""What a run ran on: library versions, processor, accelerator, threads, git revision."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path

import torch

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# What /proc/cpuinfo lists for bfloat16 in hardware: AMX's matrix tiles, and AVX512's dot
# products. Without either, torch emulates bfloat16 arithmetic in float32, slower than float32.
BF16_CPU_FLAGS = ("amx_bf16", "amx_tile", "avx512_bf16")


def cpu_bf16_flags() -> list[str]:
    """Which of ``BF16_CPU_FLAGS`` this processor has (empty where /proc/cpuinfo is not)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    for line in text.splitlines():
        if line.startswith("flags"):
            present = set(line.split(":", 1)[1].split())
            return [flag for flag in BF16_CPU_FLAGS if flag in present]
    return []


def git_revision() -> str | None:
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True,
            timeout=5, check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=PROJECT_ROOT,
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return rev + ("-dirty" if dirty else "")


# The distributions whose behaviour a run's numbers depend on: the model and training stack,
# data reading and tokenising, metrics, config composition.
PACKAGES = ("torch", "torchaudio", "torchvision", "timm", "numpy", "pandas", "hydra-core",
            "omegaconf", "sentencepiece", "sacrebleu", "rouge-score", "jiwer", "flashlight-text",
            "soundfile", "num2words", "scipy", "mha-bench")


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed version of each distribution; None for one that is not installed."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def gpu_driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0] if out.strip() else None


def resolve_device(name: str) -> torch.device:
    from bench.errors import BenchError

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise BenchError("device=cuda but no CUDA device is visible; use device=cpu or device=auto")
    if name not in ("cpu", "cuda"):
        raise BenchError(f"unknown device '{name}'; choose auto, cpu or cuda")
    return torch.device(name)


def machine_load() -> list[float] | None:
    """The machine's load average over 1, 5 and 15 minutes (None where the system has none):
    a run timed beside other work (a test suite, a third run) shows it here."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def environment(device: torch.device) -> dict:
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "gpu_driver": gpu_driver() if device.type == "cuda" else None,
        "device": str(device),
        "device_name": gpu or cpu_model(),
        "cpu": cpu_model(),
        "cpu_bf16_flags": cpu_bf16_flags(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "git_revision": git_revision(),
        "packages": package_versions(),
    }
