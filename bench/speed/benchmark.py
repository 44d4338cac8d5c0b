"""``mhab speed``: how fast the core and the task models run, timm-benchmark style.

(a) The core against ``nn.MultiheadAttention`` and timm's ``Attention``, forward and
forward+backward, over a grid of batch sizes and sequence lengths. (b) Each task's attention
and RNN models: a bare training loop, inference, the engine's own loop on the same model and
the data pipeline alone. Each in every precision of ``dtypes``. Every row carries the share of
the matmul peak of its precision measured in the same run, so a number can be read against
what the machine can do.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import math
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import pandas as pd
import torch
from omegaconf import DictConfig
from torch import Tensor, nn
from tqdm import tqdm

from bench.errors import BenchError
from bench.run import measure
from bench.run.acceleration import (
    autocast,
    check_compile,
    check_dtype,
    compile_backend,
    compile_model,
    compute_dtype,
    model_attention_path,
    warn_if_emulated,
)
from bench.run.engine import TrainerSettings, build_ema, build_optimizer, fit, train_step
from bench.run.environment import cpu_bf16_flags, cpu_model, resolve_device
from bench.setup.build import check_progress
from bench.setup.build import validate as validate_run
from bench.setup.compose import compose_config, parse_overrides
from bench.setup.schema import check_section, dataclass_hints
from bench.setup.spec import Setup, build, prepare
from bench.speed.targets import TARGET, median_ci, paired_overhead
from models.attention import MultiHeadAttention, attention_path
from models.constraints import AT_LEAST_1, NON_NEGATIVE

ATTENTION_IMPLS = ("core", "torch", "torch_no_weights", "timm", "projections")
CALLS_SDPA = ("core", "torch_no_weights", "timm")  # torch's default call computes its weights
MODES = ("forward", "train")


# ---------------------------------------------------------------- arithmetic
def attention_flops(batch: int, seq_len: int, dim: int) -> float:
    """Forward FLOPs of self-attention (a multiply-add is 2): Q, K, V and output projections,
    8 B L D^2, plus the score and value matmuls, 4 B L^2 D. Softmax and bias are left out."""
    return 8.0 * batch * seq_len * dim**2 + 4.0 * batch * seq_len**2 * dim


def impl_flops(impl: str, batch: int, seq_len: int, dim: int) -> float:
    """Forward FLOPs of one measured module: the projections floor has no score/value matmuls."""
    if impl == "projections":
        return 8.0 * batch * seq_len * dim**2
    return attention_flops(batch, seq_len, dim)


def step_flops(forward_flops: float, mode: str) -> float:
    """Training counts forward + backward as 3x the forward, as is conventional."""
    return forward_flops * (3.0 if mode == "train" else 1.0)


def rates(step_seconds: float, samples: int, tokens: int, flops: float) -> dict:
    """Throughput from one step's median time."""
    return {
        "step_ms": 1000 * step_seconds,
        "samples_per_s": samples / step_seconds,
        "tokens_per_s": tokens / step_seconds,
        "gflop_per_step": flops / 1e9,
        "achieved_gflop_s": flops / step_seconds / 1e9,
    }


def with_peak_share(frame: pd.DataFrame, peak_gflops: float) -> pd.DataFrame:
    """Each row's achieved FLOP rate as a share of the run's matmul peak."""
    return frame.assign(peak_share=frame["achieved_gflop_s"] / peak_gflops,
                        matmul_peak_gflop_s=peak_gflops)


def grid(batch_sizes: list[int], seq_lens: list[int], max_tokens: int) -> list[tuple[int, int]]:
    """(batch, length) pairs with batch x length <= max_tokens, the target point always in."""
    points = [(b, n) for n in seq_lens for b in batch_sizes if b * n <= max_tokens]
    return points or [(min(batch_sizes), min(seq_lens))]


# ---------------------------------------------------------------- timing
def matmul_peak_gflops(device: torch.device, size: int = 1024, repeats: int = 5,
                       dtype: str = "float32") -> float:
    """Best of ``repeats`` timed runs of a size^3 matmul in ``dtype``'s precision, in GFLOP/s."""
    a = torch.randn(size, size, device=device, dtype=compute_dtype(dtype))
    b = torch.randn(size, size, device=device, dtype=compute_dtype(dtype))
    best = min(measure.time_calls(lambda: a @ b, device, warmup=2, iters=repeats))
    return 2.0 * size**3 / best / 1e9


SDPA_BACKENDS = ("auto", "math", "flash", "efficient", "cudnn")
# What SDPA raises when the pinned kernel cannot run an input (the wording depends on torch's
# version and device).
NO_KERNEL_MESSAGES = ("No available kernel", "No viable backend")


def sdpa_backend(name: str) -> contextlib.AbstractContextManager:
    """Pin ``F.scaled_dot_product_attention`` to one kernel; ``auto`` lets torch choose."""
    if name == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    kernel = {"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION,
              "efficient": SDPBackend.EFFICIENT_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[name]
    return sdpa_kernel([kernel])


# ---------------------------------------------------------------- (a) attention
Call = Callable[[nn.Module, Tensor], Tensor]


class Projections(nn.Module):
    """The Q/K/V and output projections of attention without the attention between them:
    the floor no attention kernel can go below."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.qkv(x)[..., : x.shape[-1]])


def build_attention(impl: str, dim: int, num_heads: int) -> tuple[nn.Module, Call]:
    """The module and how users call it on self-attention input ``x``."""
    if impl == "core":
        return MultiHeadAttention(dim, num_heads), lambda m, x: m(x)[0]
    if impl == "torch":
        return nn.MultiheadAttention(dim, num_heads, batch_first=True), lambda m, x: m(x, x, x)[0]
    if impl == "torch_no_weights":
        return (nn.MultiheadAttention(dim, num_heads, batch_first=True),
                lambda m, x: m(x, x, x, need_weights=False)[0])
    if impl == "timm":
        from timm.layers import Attention

        return Attention(dim, num_heads, qkv_bias=True), lambda m, x: m(x)
    if impl == "projections":
        return Projections(dim), lambda m, x: m(x)
    raise BenchError(f"unknown attention impl '{impl}'; choose from {', '.join(ATTENTION_IMPLS)}")


def _memory(device: torch.device, run: Callable[[], Any], mode: str) -> tuple[float | None, str]:
    if device.type == "cuda":
        measure.reset_peak_memory(device)
        run()
        peak = measure.peak_memory_mb(device)
        return peak["peak_memory_mb"], peak["peak_memory_kind"]
    if mode == "train":  # what autograd keeps for backward: the cost that grows with length
        return measure.activation_memory_mb(run), "saved_activations"
    return None, "not_measured_on_cpu_forward"


def measure_attention(impl: str, mode: str, batch: int, seq_len: int, dim: int, heads: int,
                      cfg: DictConfig, device: torch.device, backend: str = "auto",
                      dtype: str = "float32") -> dict:
    """One row: ``impl`` timed at one grid point in ``dtype``, SDPA pinned to ``backend``."""
    module, call = build_attention(impl, dim, heads)
    module = module.to(device).train(mode == "train")
    runner = compile_model(module, cfg.compile)
    x = torch.randn(batch, seq_len, dim, device=device, requires_grad=mode == "train")

    def forward() -> Tensor:
        with autocast(device, dtype), sdpa_backend(backend):
            return call(runner, x)

    def step() -> None:
        if mode == "train":
            forward().float().sum().backward()
        else:
            with torch.no_grad():
                forward()

    row = {"section": "attention", "model": impl, "mode": mode, "batch_size": batch,
           "seq_len": seq_len, "dim": dim, "num_heads": heads, "sdpa_backend": backend, "dtype": dtype,
           "attention_path": attention_path(device, compute_dtype(dtype), dim // heads, mode == "train")
           if impl == "core" else None}
    try:
        times = measure.time_calls(step, device, cfg.warmup, cfg.iters)
        memory, kind = _memory(device, forward if mode == "train" else step, mode)
    except torch.OutOfMemoryError:
        return {**row, "status": "out of memory"}
    except RuntimeError as e:  # a pinned SDPA kernel that cannot run this input or device
        if not any(words in str(e) for words in NO_KERNEL_MESSAGES):
            raise
        return {**row, "status": f"no {backend} kernel"}
    flops = step_flops(impl_flops(impl, batch, seq_len, dim), mode)
    return {**row, "status": "ok", **rates(statistics.median(times), batch, batch * seq_len, flops),
            "peak_memory_mb": memory, "memory_kind": kind}


def attention_rows(cfg: DictConfig, device: torch.device, progress: bool, peaks: list[float],
                   dtype: str) -> list[dict]:
    """The grid in ``dtype``, measured ``attention.repeats`` times in rounds, keeping each
    point's fastest round: a burst of load on a shared machine rarely hits the same point twice.
    Each round also measures ``dtype``'s matmul peak into ``peaks``."""
    a = cfg.attention
    points = grid(list(a.batch_sizes), list(a.seq_lens), a.max_tokens)
    # Past the first backend only the impls that call SDPA: the others would time the same code.
    jobs = [(impl, mode, b, n, backend) for b, n in points
            for i, backend in enumerate(a.sdpa_backends) for impl in a.impls for mode in a.modes
            if i == 0 or impl in CALLS_SDPA]
    best: dict[tuple, dict] = {}
    for round_ in range(a.repeats):
        peaks.append(matmul_peak_gflops(device, cfg.matmul_size, cfg.matmul_repeats, dtype))
        for job in tqdm(jobs, desc=f"attention {dtype}, round {round_ + 1}/{a.repeats}",
                        disable=not progress):
            torch.manual_seed(cfg.seed)
            impl, mode, b, n, backend = job
            row = measure_attention(impl, mode, b, n, a.dim, a.num_heads, cfg, device, backend, dtype)
            kept = best.get(job)
            if kept is None or (row["status"] == "ok" and (kept["status"] != "ok"
                                                           or row["step_ms"] < kept["step_ms"])):
                best[job] = row
    return list(best.values())


def reference_rows(cfg: DictConfig, device: torch.device, progress: bool,
                   peaks: dict[str, list[float]]) -> list[dict]:
    """The issue's reference point (``TARGET``, forward+backward), measured in
    ``attention.reference_rounds`` rounds. Each round measures, in each precision of ``dtypes``,
    its matmul peak first and then every impl, starting one impl later than the round before,
    so each of the round's ratios (between impls, and between precisions) is taken between
    measurements seconds apart. ``targets`` takes the median over the rounds: on a machine
    whose speed drifts, a ratio of bests from different minutes is not."""
    impls = list(cfg.attention.impls)
    rows = []
    for round_ in tqdm(range(cfg.attention.reference_rounds), desc="reference point",
                       disable=not progress):
        shift = round_ % len(impls)
        for dtype in cfg.dtypes:
            peak = matmul_peak_gflops(device, cfg.matmul_size, cfg.matmul_repeats, dtype)
            peaks[dtype].append(peak)
            for impl in impls[shift:] + impls[:shift]:
                torch.manual_seed(cfg.seed)
                row = measure_attention(impl, "train", TARGET["batch_size"], TARGET["seq_len"],
                                        TARGET["dim"], TARGET["num_heads"], cfg, device,
                                        cfg.attention.sdpa_backends[0], dtype)
                row.update(section="reference", round=round_, round_peak_gflop_s=peak)
                if row["status"] == "ok":
                    row["round_peak_share"] = row["achieved_gflop_s"] / peak
                rows.append(row)
    return rows


# ---------------------------------------------------------------- (b) task models
def _run_config(cfg: DictConfig, task: str, model: str) -> DictConfig:
    run_cfg = compose_config("config", [*cfg.tasks.run_overrides, f"task={task}", f"model={model}"],
                             "speed")
    run_cfg.data_dir, run_cfg.cache_dir, run_cfg.seed = cfg.data_dir, cfg.cache_dir, cfg.seed
    run_cfg.device = cfg.device
    validate_run(run_cfg)  # the same one-line errors as 'mhab run' for impossible recipes
    # The bare loop and the engine both train as the recipe would under speed's own options,
    # which a run override must not contradict unseen. trainer.dtype is set per measured dtype.
    parsed = parse_overrides(list(cfg.tasks.run_overrides))
    overridden = {override.key_or_group for override in parsed}
    dtypes = list(cfg.dtypes)
    for key, speed_key, value, measured in (("dtype", "dtypes", f"[{','.join(dtypes)}]", dtypes),
                                            ("compile", "compile", cfg.compile, [cfg.compile])):
        if f"trainer.{key}" in overridden and run_cfg.trainer[key] not in measured:
            raise BenchError(f"tasks.run_overrides sets trainer.{key}={run_cfg.trainer[key]} but mhab "
                             f"speed measures under {speed_key}={value}; set {speed_key}= instead (it "
                             f"applies to the attention grid and every task model)")
    run_cfg.trainer.compile = cfg.compile
    return run_cfg


def _bare_loop(task, model: nn.Module, batches: list, trainer: TrainerSettings, device: torch.device,
               warmup: int) -> float:
    """Samples/s of the plainest loop that does the recipe's work (augmentation, loss, backward,
    clipping, the recipe's AdamW step and weight average) over batches already in memory,
    counted as the engine counts: timed samples / timed seconds. What the engine adds on top
    (its data loader, schedule, checks, bookkeeping and progress bar) is its overhead."""
    optimizer = build_optimizer(model, trainer)
    ema = build_ema(model, trainer)
    precision = functools.partial(autocast, device, trainer.dtype)
    model.train()
    samples, seconds = 0, 0.0
    for i, batch in enumerate(batches):
        measure.synchronize(device)
        start = time.perf_counter()
        train_step(task, model, batch, optimizer, None, ema, trainer.grad_clip, precision, i)
        if i >= warmup:
            samples += batch[-1].shape[0]
            seconds += time.perf_counter() - start
    return samples / seconds


def _engine_samples_per_s(task, model: nn.Module, splits, trainer: TrainerSettings, seed: int,
                          device: torch.device, steps: int, warmup: int) -> float:
    """The engine's own steady-state samples/s on the same model and data. Its validation and
    test passes run too, outside the timed steps."""
    trainer = dataclasses.replace(trainer, max_steps=steps, timing_warmup_steps=warmup)
    with tempfile.TemporaryDirectory() as run_dir:
        out = fit(task, model, splits, trainer, device, Path(run_dir), seed, progress=False)
    return out["train_samples_per_s"]


def _data_seconds_per_batch(loader, batches: int) -> float:
    start = time.perf_counter()
    for _ in zip(range(batches), loader, strict=False):
        pass
    return (time.perf_counter() - start) / min(batches, len(loader))


def _in_memory_batches(task, loader, count: int, device: torch.device) -> list:
    """``count`` batches from the loader, passing over it again when it is shorter."""
    batches: list = []
    while len(batches) < count:
        batches += [task.to_device(b, device) for b, _ in zip(loader, range(count - len(batches)),
                                                               strict=False)]
    return batches


def measure_task_model(setup: Setup, dtype: str, cfg: DictConfig, device: torch.device) -> list[dict]:
    """Train and inference rows for one task model. The bare loop and the engine each run
    ``tasks.repeats`` times, alternating, from the same initial weights, which the model holds
    again when this returns. The median of each gives the throughput columns (the bare loop's
    with its 95% CI); the overhead is the median over the pairs (``paired_overhead``)."""
    task, splits, model = setup.task, setup.splits, setup.model
    initial = copy.deepcopy(model.state_dict())
    t = dataclasses.replace(setup.trainer, dtype=dtype)
    compile_model(model, t.compile)  # the engine's own compile reuses these graphs
    loader = task.loader(splits.train, t.batch_size, True, cfg.seed, t.num_workers, t.batching, t.max_tokens)
    batches = _in_memory_batches(task, loader, cfg.warmup + cfg.tasks.timed_steps, device)
    batch_size = batches[0][-1].shape[0]
    # Time enough steps for tasks.min_seconds, so fast models are not timed over a few ms.
    calibration = _bare_loop(task, model, batches, t, device, cfg.warmup)
    timed = max(cfg.tasks.timed_steps, math.ceil(cfg.tasks.min_seconds * calibration / batch_size))
    steps = cfg.warmup + timed
    batches = _in_memory_batches(task, loader, steps, device)
    example = task.model_inputs(batches[0])
    forward_flops = measure.flops_per_sample(model, example) * batch_size
    base = {"section": "task", "model": f"{task.name}/{task.dataset}:{setup.model_label}",
            "batch_size": batch_size, "params": measure.count_parameters(model), "status": "ok",
            "sdpa_backend": "auto",  # task models run under torch's own choice of kernel
            "dtype": dtype, "attention_path": model_attention_path(model, device, dtype)}

    bare, engine = [], []
    for _ in range(cfg.tasks.repeats):
        model.load_state_dict(initial)
        bare.append(_bare_loop(task, model, batches, t, device, cfg.warmup))
        model.load_state_dict(initial)
        engine.append(_engine_samples_per_s(task, model, splits, t, cfg.seed, device, steps, cfg.warmup))
    # The median pass with its 95% CI, not the best: a run record's samples/s is a mean over a
    # whole run, and on a shared or virtual machine passes spread widely (docs/speed.md).
    bare_median, bare_low, bare_high = median_ci(bare)
    step_s = batch_size / bare_median
    overhead, ci_low, ci_high = paired_overhead(bare, engine)
    data_s = _data_seconds_per_batch(loader, timed)
    train = {**base, "mode": "train",
             **rates(step_s, batch_size, 0, step_flops(forward_flops, "train")),
             "samples_per_s_ci_low": bare_low, "samples_per_s_ci_high": bare_high, "repeats": len(bare),
             "timed_steps": timed, "engine_samples_per_s": statistics.median(engine),
             "engine_overhead": overhead, "engine_overhead_ci_low": ci_low,
             "engine_overhead_ci_high": ci_high,
             "data_ms_per_batch": 1000 * data_s, "data_share": data_s / step_s}
    model.train()
    with autocast(device, dtype):
        train["peak_memory_mb"] = measure.activation_memory_mb(lambda: task.loss(model, batches[0]))
    train["memory_kind"] = "saved_activations"
    model.eval()
    with torch.no_grad(), autocast(device, dtype):
        infer_times = measure.time_calls(lambda: task.infer(model, example), device, cfg.warmup, cfg.iters)
    infer = {**base, "mode": "infer",
             **rates(statistics.median(infer_times), batch_size, 0, forward_flops)}
    for row in (train, infer):
        row.pop("tokens_per_s")
    model.load_state_dict(initial)  # as built: the next precision's measurement starts from there
    return [train, infer]


def task_rows(cfg: DictConfig, models: list[Setup], device: torch.device,
              progress: bool, dtype: str) -> Iterator[dict]:
    """Each task model in ``dtype``, from the weights it was built with."""
    for setup in tqdm(models, desc=f"task models {dtype}", disable=not progress):
        yield from measure_task_model(setup, dtype, cfg, device)


# ---------------------------------------------------------------- the whole benchmark
@dataclass
class AttentionSpeedSettings:
    enabled: bool
    dim: Annotated[int, AT_LEAST_1]
    num_heads: Annotated[int, AT_LEAST_1]
    impls: list[Literal[ATTENTION_IMPLS]]
    modes: list[Literal[MODES]]
    sdpa_backends: list[Literal[SDPA_BACKENDS]]
    batch_sizes: list[Annotated[int, AT_LEAST_1]]
    seq_lens: list[Annotated[int, AT_LEAST_1]]
    repeats: Annotated[int, AT_LEAST_1]
    reference_rounds: Annotated[int, NON_NEGATIVE]
    max_tokens: Annotated[int, AT_LEAST_1]


@dataclass
class TaskSpeedSettings:
    enabled: bool
    names: list[str]
    models: list[str]
    run_overrides: list[str]
    timed_steps: Annotated[int, AT_LEAST_1]
    min_seconds: Annotated[float, NON_NEGATIVE]
    repeats: Annotated[int, AT_LEAST_1]


@dataclass
class SpeedSettings:
    """``conf/speed.yaml``: the type and range of every key, checked before anything runs."""

    device: str  # checked by bench.run.environment.resolve_device
    results_dir: str
    data_dir: str | None
    cache_dir: str
    seed: Annotated[int, NON_NEGATIVE]
    threads: Annotated[int, AT_LEAST_1] | None
    warmup: Annotated[int, NON_NEGATIVE]
    iters: Annotated[int, AT_LEAST_1]
    matmul_size: Annotated[int, AT_LEAST_1]
    matmul_repeats: Annotated[int, AT_LEAST_1]
    dtypes: list[str]  # each checked by bench.run.acceleration.check_dtype
    compile: bool | str  # checked by bench.run.acceleration.check_compile
    progress: Any  # auto | true | false
    attention: AttentionSpeedSettings
    tasks: TaskSpeedSettings


def validate(cfg: DictConfig) -> None:
    check_section("", cfg, dataclass_hints(SpeedSettings), "speed")
    check_progress(cfg.get("progress", "auto"))
    if cfg.attention.dim % cfg.attention.num_heads:
        raise BenchError(f"attention.num_heads={cfg.attention.num_heads} does not divide "
                         f"attention.dim={cfg.attention.dim}")
    parts = {"attention": ("impls", "modes", "sdpa_backends", "batch_sizes", "seq_lens"),
             "tasks": ("names", "models")}
    for part, keys in parts.items():
        empty = [key for key in keys if cfg[part].enabled and not cfg[part][key]]
        if empty:
            raise BenchError(f"{part}.{empty[0]} is empty, so {part} would measure nothing; give it "
                             f"at least one value, or set {part}.enabled=false")
    if not (cfg.attention.enabled or cfg.tasks.enabled):
        raise BenchError("nothing to measure: attention.enabled and tasks.enabled are both false")
    if not cfg.dtypes:
        raise BenchError("dtypes is empty, so nothing would be measured; give it float32, bf16 or both")
    for dtype in cfg.dtypes:
        check_dtype(dtype, "dtypes")
    if len(set(cfg.dtypes)) < len(cfg.dtypes):
        raise BenchError(f"dtypes={list(cfg.dtypes)} names a precision twice; name each once")
    check_compile(cfg.compile, resolve_device(cfg.device))


def run_speed(cfg: DictConfig, progress: bool = False) -> pd.DataFrame:
    validate(cfg)
    device = resolve_device(cfg.device)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    # Composed, validated and built up front, through 'mhab run's own build path: an
    # impossible recipe or model stops here, with run's one-line error, before minutes of timing.
    run_cfgs = ([_run_config(cfg, t, m) for t in cfg.tasks.names for m in cfg.tasks.models]
                if cfg.tasks.enabled else [])
    models = [build(prepare(run_cfg)) for run_cfg in run_cfgs]
    for dtype in cfg.dtypes:
        warn_if_emulated(device, dtype)
    torch.manual_seed(cfg.seed)
    peaks: dict[str, list[float]] = {dtype: [] for dtype in cfg.dtypes}
    rows: list[dict] = []
    for dtype in cfg.dtypes:
        if cfg.attention.enabled:
            rows += attention_rows(cfg, device, progress, peaks[dtype], dtype)
        if cfg.tasks.enabled:
            peaks[dtype].append(matmul_peak_gflops(device, cfg.matmul_size, cfg.matmul_repeats, dtype))
            rows += task_rows(cfg, models, device, progress, dtype)
    if cfg.attention.enabled:
        rows += reference_rows(cfg, device, progress, peaks)
    # each row against the best its precision's matmuls showed in this run
    frame = pd.concat([with_peak_share(part, max(peaks[dtype]))
                       for dtype, part in pd.DataFrame(rows).groupby("dtype", sort=False)])
    context = {"device": device.type, "device_name": _device_name(device), "threads": torch.get_num_threads(),
               "torch": torch.__version__, "cpu_bf16_flags": " ".join(cpu_bf16_flags()) or "none",
               "compile": compile_backend(cfg.compile) or "none",
               "warmup": cfg.warmup, "iters": cfg.iters, "seed": cfg.seed}
    for key, value in context.items():
        frame[key] = value
    return frame


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()
