"""Co-location (interference) profiler: two training jobs at once on the same device.

Each job runs in its own process (spawned, so CUDA works), alone, then beside the other, then
alone again; a barrier starts the co-located pair together and both run for the same wall-clock
window, so their measured windows overlap. A job's speed is its co-located throughput divided
by the mean of its two solo throughputs around it, with the same settings: on a shared machine
whose background load drifts, a solo run measured once per session (as this profiler did until
2026-11-26) compared windows minutes apart, and the CPU pairs of 2026-11-23 read speeds of
0.2-0.5 for two one-thread jobs on two cores (0.7-1.1 measured on the quiet machine).
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pandas as pd
import psutil
import torch

from perfcast.errors import PerfcastError
from perfcast.features.profiling import zoo
from perfcast.features.profiling.counters import CounterSampler
from perfcast.features.profiling.memory import MB
from perfcast.features.profiling.step_profiler import (
    device_name,
    measure_memory,
    resolve_device,
    to_device,
    train_step,
)


@dataclass(frozen=True)
class JobSpec:
    job: str  # zoo job name, e.g. `resnet18` or `resnet18-w32-d18-i32`
    batch_size: int

    @classmethod
    def parse(cls, text: str) -> JobSpec:
        """`NAME:BATCH`, e.g. `mlp:64` or `resnet18-w32-d18-i32:16`."""
        name, sep, batch = text.rpartition(":")
        if not sep or not batch.isdigit() or int(batch) < 1:
            raise PerfcastError(f"cannot read job {text!r}; expected NAME:BATCH, e.g. mlp:64")
        zoo.parse_job(name)  # fail early on unknown names
        return cls(name, int(batch))


@dataclass(frozen=True)
class WindowSettings:
    device: str = "cpu"
    threads: int = 1  # torch intra-op threads per job process
    warmup: int = 3
    duration_s: float = 3.0


def run_window(
    job: JobSpec, settings: WindowSettings, barrier: Any | None = None
) -> dict[str, float]:
    """Train `job` for `settings.duration_s` seconds after warm-up; iterations/s and counters.
    Runs in a worker process."""
    torch.set_num_threads(settings.threads)
    dev = resolve_device(settings.device)
    built = zoo.build(zoo.parse_job(job.job))
    model = built.model.to(dev)
    optimizer = torch.optim.Adam(model.parameters())
    batch = to_device(built.make_batch(job.batch_size), dev)
    for _ in range(settings.warmup):
        train_step(model, optimizer, built.loss_fn, batch)
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == "cuda" else (lambda: None)
    sync()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)  # the peak of the measured window
    if barrier is not None:
        barrier.wait()
    steps = 0
    with CounterSampler(dev) as sampler:
        start = time.perf_counter()
        while time.perf_counter() - start < settings.duration_s:
            train_step(model, optimizer, built.loss_fn, batch)
            sync()
            steps += 1
    elapsed = time.perf_counter() - start
    _, _, peak, _ = measure_memory(model, optimizer, built.loss_fn, batch, dev)
    return {"throughput": steps / elapsed, "steps": steps, "mem_mb": peak / MB} | (
        sampler.summary.as_row()
    )


def _worker(job: JobSpec, settings: WindowSettings, barrier: Any, results: Any, key: str) -> None:
    try:
        results.put((key, run_window(job, settings, barrier)))
    except BaseException as err:  # report to the parent instead of dying silently
        if barrier is not None:
            barrier.abort()
        results.put((key, {"error": f"{type(err).__name__}: {err}"}))


def _run_processes(jobs: dict[str, JobSpec], settings: WindowSettings) -> dict[str, dict]:
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    barrier = ctx.Barrier(len(jobs)) if len(jobs) > 1 else None
    procs = [
        ctx.Process(target=_worker, args=(job, settings, barrier, results, key), daemon=True)
        for key, job in jobs.items()
    ]
    for p in procs:
        p.start()
    timeout = 120 + 4 * settings.duration_s
    deadline = time.monotonic() + timeout
    out: dict[str, dict] = {}
    try:
        while len(out) < len(procs):
            try:
                key, value = results.get(timeout=1.0)
                out[key] = value
                continue
            except queue.Empty:
                pass
            # a worker that died before reporting (killed, or failed to start) never will
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead and results.empty():
                raise PerfcastError(
                    f"a co-location worker exited with code {dead[0]} before reporting"
                )
            if time.monotonic() > deadline:
                raise PerfcastError(f"co-location workers gave no result within {timeout:.0f} s")
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
    errors = [f"{jobs[k].job}: {v['error']}" for k, v in out.items() if "error" in v]
    if errors:
        raise PerfcastError("profiling worker failed: " + "; ".join(errors))
    return out


def gpu_sharing(device: torch.device) -> str | None:
    """How two processes share `device`: `mps` where an MPS server runs (their kernels may
    run at once), else `time-slice` (the driver runs one process's kernels at a time); None
    on a CPU, where the operating system's scheduler shares cores instead."""
    if device.type != "cuda":
        return None
    for proc in psutil.process_iter(["name"]):
        if (proc.info["name"] or "").startswith("nvidia-cuda-mps"):
            return "mps"
    return "time-slice"


class ColocationSession:
    """Measures pairs on one device, each between solo runs of its two jobs."""

    def __init__(self, settings: WindowSettings) -> None:
        self.settings = settings
        device = resolve_device(settings.device)
        self.gpu_type = device_name(device)
        self.source = f"measured:{socket.gethostname()}"
        self.sharing = gpu_sharing(device)

    def solo(self, job: JobSpec) -> dict[str, float]:
        return _run_processes({"solo": job}, self.settings)["solo"]

    def pair(self, a: JobSpec, b: JobSpec) -> dict[str, Any]:
        """One contract `interference` row for `a` beside `b`: the pair's window between solo
        windows of each job, whose mean throughput is the solo one (counters: the first)."""
        before = {"a": self.solo(a), "b": self.solo(b)}
        together = _run_processes({"a": a, "b": b}, self.settings)
        after = {"a": self.solo(a), "b": self.solo(b)}
        row: dict[str, Any] = {"gpu_type": self.gpu_type}
        for side, job in (("a", a), ("b", b)):
            alone, shared = before[side], together[side]
            solo = (alone["throughput"] + after[side]["throughput"]) / 2
            row |= {
                f"{side}_job": job.job,
                f"{side}_batch_size": job.batch_size,
                f"{side}_solo_throughput": solo,
                f"{side}_gpu_util": alone["gpu_util"],
                f"{side}_mem_util": alone["mem_util"],
                f"{side}_mem_mb": alone["mem_mb"],
                f"{side}_speed": shared["throughput"] / solo,
                f"{side}_colocated_throughput": shared["throughput"],
                f"{side}_cpu_util": alone["cpu_util"],
                f"{side}_colocated_cpu_util": shared["cpu_util"],
                f"{side}_power_w": alone["power_w"],
            }
        return row | {
            "sharing": self.sharing,
            "threads": self.settings.threads,
            "window_s": self.settings.duration_s,
            "source": self.source,
        }


def colocate(
    pairs: Iterable[tuple[JobSpec, JobSpec]],
    settings: WindowSettings,
    on_pair: Callable[[], None] | None = None,
) -> pd.DataFrame:
    """Interference rows for each pair, each measured between solo runs of its jobs."""
    session = ColocationSession(settings)
    rows = []
    for a, b in pairs:
        rows.append(session.pair(a, b))
        if on_pair:
            on_pair()
    return pd.DataFrame(rows)
