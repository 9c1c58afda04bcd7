"""Profile a PyTorch training step: time per mini-batch, memory, counters.

Timing: warm-up steps first, then `steps` measured steps; on CUDA each step is timed with CUDA
events (read after one synchronization at the end), elsewhere with a monotonic clock around
the step (CPU ops are synchronous). Memory: persistent from the tensors' storages on CPU and
from `torch.cuda.memory_allocated` on CUDA; ephemeral is the peak minus the persistent part on
CUDA, and the activations autograd saves (measured on one extra, untimed step) on CPU.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from perfcast.errors import PerfcastError
from perfcast.features.profiling.counters import CounterSampler, CounterSummary
from perfcast.features.profiling.memory import (
    MB,
    parameter_count,
    persistent_bytes,
    rss_bytes,
    saved_activation_bytes,
)

Batch = tuple[Tensor | tuple[Tensor, ...], Tensor]
LossFn = Callable[[Tensor, Tensor], Tensor]


@dataclass
class StepProfile:
    """What `profile_step` measured. Times in seconds, memory in MB (2**20 bytes)."""

    device: str  # `cpu` or the CUDA device's name, lower case
    batch_size: int
    step_times_s: list[float] = field(repr=False)
    step_time_s: float  # median
    step_time_p10_s: float
    step_time_p90_s: float
    throughput_samples_s: float  # batch size / median step time
    params_m: float
    persistent_mem_mb: float
    ephemeral_mem_mb: float
    peak_mem_mb: float
    rss_mb: float  # process resident set size after the steps (extra information, noisy)
    allocator_peak_mb: float  # torch.cuda.max_memory_allocated; NaN on CPU
    counters: CounterSummary

    def as_row(self) -> dict[str, float | int | str]:
        row = {k: v for k, v in asdict(self).items() if k not in {"step_times_s", "counters"}}
        return row | self.counters.as_row()


def device_name(device: torch.device) -> str:
    """`cpu`, or the CUDA device's name in lower case (the contract's `gpu_type`)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device).lower()
    return device.type


def resolve_device(device: str | torch.device) -> torch.device:
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise PerfcastError("--device cuda asked for, but this machine has no CUDA device")
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def to_device(batch: Batch, device: torch.device) -> Batch:
    inputs, target = batch
    if isinstance(inputs, tuple):
        return tuple(t.to(device) for t in inputs), target.to(device)
    return inputs.to(device), target.to(device)


def train_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: LossFn, batch: Batch
) -> Tensor:
    """One training iteration: forward, loss, backward, optimizer step."""
    inputs, target = batch
    optimizer.zero_grad(set_to_none=True)
    output = model(*inputs) if isinstance(inputs, tuple) else model(inputs)
    loss = loss_fn(output, target)
    loss.backward()
    optimizer.step()
    return loss


def profile_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    make_batch: Callable[[], Batch],
    *,
    loss_fn: LossFn = F.cross_entropy,
    device: str | torch.device = "cpu",
    warmup: int = 3,
    steps: int = 20,
    counters: bool = True,
    counter_hz: float = 20.0,
) -> StepProfile:
    """Profile `steps` training iterations of `model` after `warmup` untimed ones.

    `make_batch()` returns `(inputs, targets)` (inputs may be a tuple of tensors); it is called
    once and the batch is reused, so data loading is not part of the step. The model must
    already be on `device` and `optimizer` built over its parameters.
    """
    if steps < 1 or warmup < 0:
        raise PerfcastError(f"steps must be >= 1 and warmup >= 0 (got {steps}, {warmup})")
    dev = resolve_device(device)
    batch = to_device(make_batch(), dev)
    batch_size = int(batch[1].shape[0])
    model.train()
    for _ in range(warmup):
        train_step(model, optimizer, loss_fn, batch)
    cuda = dev.type == "cuda"
    if cuda:
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
    sampler = CounterSampler(dev, hz=counter_hz) if counters else None
    times = _timed_steps(model, optimizer, loss_fn, batch, steps, dev, sampler)
    persistent, ephemeral, peak, allocator_peak = measure_memory(
        model, optimizer, loss_fn, batch, dev
    )
    median = statistics.median(times)
    p10, p90 = _percentiles(times)
    return StepProfile(
        device=device_name(dev),
        batch_size=batch_size,
        step_times_s=times,
        step_time_s=median,
        step_time_p10_s=p10,
        step_time_p90_s=p90,
        throughput_samples_s=batch_size / median,
        params_m=parameter_count(model) / 1e6,
        persistent_mem_mb=persistent / MB,
        ephemeral_mem_mb=ephemeral / MB,
        peak_mem_mb=peak / MB,
        rss_mb=rss_bytes() / MB,
        allocator_peak_mb=allocator_peak / MB if cuda else math.nan,
        counters=sampler.summary if sampler else CounterSummary(),
    )


def _timed_steps(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: LossFn,
    batch: Batch,
    steps: int,
    dev: torch.device,
    sampler: CounterSampler | None,
) -> list[float]:
    with sampler if sampler else contextlib.nullcontext():
        if dev.type == "cuda":
            events = [
                (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                for _ in range(steps)
            ]
            for start, end in events:
                start.record()
                train_step(model, optimizer, loss_fn, batch)
                end.record()
            torch.cuda.synchronize(dev)
            return [start.elapsed_time(end) / 1000 for start, end in events]
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            train_step(model, optimizer, loss_fn, batch)
            times.append(time.perf_counter() - t0)
        return times


def measure_memory(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loss_fn: LossFn,
    batch: Batch,
    dev: torch.device,
) -> tuple[int, int, int, int]:
    """(persistent, ephemeral, peak, allocator peak) bytes, after the timed steps."""
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        allocator_peak = torch.cuda.max_memory_allocated(dev)
        # Between steps only weights, gradients and optimizer state (and the batch) are live.
        persistent = torch.cuda.memory_allocated(dev) - _batch_bytes(batch)
        return persistent, max(0, allocator_peak - persistent), allocator_peak, allocator_peak
    with saved_activation_bytes(model) as activations:
        train_step(model, optimizer, loss_fn, batch)
    persistent = persistent_bytes(model, optimizer)
    return persistent, activations[0], persistent + activations[0], 0


def _batch_bytes(batch: Batch) -> int:
    inputs, target = batch
    tensors = [*inputs, target] if isinstance(inputs, tuple) else [inputs, target]
    return sum(t.untyped_storage().nbytes() for t in tensors)


def _percentiles(times: list[float]) -> tuple[float, float]:
    if len(times) < 2:
        return times[0], times[0]
    deciles = statistics.quantiles(times, n=10, method="inclusive")
    return deciles[0], deciles[-1]
