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

import contextlib
import multiprocessing as mp
import queue
import socket
import time
from collections.abc import Callable, Iterable, Iterator
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


@dataclass
class _Prepared:
    """A job built on its device: what each of its measured windows trains."""

    built: Any
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    batch: Any
    dev: torch.device


def _prepare(job: JobSpec, settings: WindowSettings) -> _Prepared:
    torch.set_num_threads(settings.threads)
    dev = resolve_device(settings.device)
    built = zoo.build(zoo.parse_job(job.job))
    model = built.model.to(dev)
    optimizer = torch.optim.Adam(model.parameters())
    batch = to_device(built.make_batch(job.batch_size), dev)
    return _Prepared(built, model, optimizer, batch, dev)


def _measure(
    job: _Prepared, settings: WindowSettings, barrier: Any | None = None
) -> dict[str, float]:
    model, optimizer, loss_fn, batch, dev = (
        job.model, job.optimizer, job.built.loss_fn, job.batch, job.dev
    )  # fmt: skip
    for _ in range(settings.warmup):
        train_step(model, optimizer, loss_fn, batch)
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
            train_step(model, optimizer, loss_fn, batch)
            sync()
            steps += 1
    elapsed = time.perf_counter() - start
    _, _, peak, _ = measure_memory(model, optimizer, loss_fn, batch, dev)
    return {"throughput": steps / elapsed, "steps": steps, "mem_mb": peak / MB} | (
        sampler.summary.as_row()
    )


def run_window(
    job: JobSpec, settings: WindowSettings, barrier: Any | None = None
) -> dict[str, float]:
    """Train `job` for `settings.duration_s` seconds after warm-up; iterations/s and counters.
    Runs in a worker process."""
    return _measure(_prepare(job, settings), settings, barrier)


def _serve(
    job: JobSpec, settings: WindowSettings, barrier: Any, commands: Any, results: Any, key: int
) -> None:
    """A worker process: builds `job` once, then measures one window per command (`True`:
    start together with the other worker at `barrier`; `False`: alone) until `None`."""
    try:
        prepared = _prepare(job, settings)
    except BaseException as err:  # report to the parent instead of dying silently
        results.put((key, {"error": f"{type(err).__name__}: {err}"}))
        return
    while (together := commands.get()) is not None:
        try:
            results.put((key, _measure(prepared, settings, barrier if together else None)))
        except BaseException as err:
            if together:
                barrier.abort()  # the other worker must not wait for this one forever
            results.put((key, {"error": f"{type(err).__name__}: {err}"}))


class _Worker:
    def __init__(self, ctx: Any, job: JobSpec, pool: _WorkerPool, key: int) -> None:
        self.job = job
        self.commands = ctx.Queue()
        self.process = ctx.Process(
            target=_serve,
            args=(job, pool.settings, pool.barrier, self.commands, pool.results, key),
            daemon=True,
        )
        self.process.start()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.commands.put(None)
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout=10)


class _WorkerPool:
    """Job processes kept alive across windows: each job's process (spawned, so CUDA works)
    starts and builds its model once per pair and then measures the pair's solo and
    co-located windows, instead of one process start (a torch import and a model build, about
    5 s of a 0.6 s window on a CPU) per window. A worker waits idle, on no CPU and running no
    kernel, while the other job's solo window runs."""

    def __init__(self, settings: WindowSettings) -> None:
        self.settings = settings
        self.ctx = mp.get_context("spawn")
        self.results = self.ctx.Queue()
        self.barrier = self.ctx.Barrier(2)  # inherited by every worker: spawn cannot send it
        self.workers: dict[int, _Worker] = {}
        self.wanted: list[JobSpec] = []
        self._next_key = 0

    def reserve(self, jobs: list[JobSpec]) -> None:
        """The next windows run `jobs` (one worker each): close the other workers now; the
        missing ones all start with the next window, so their start-ups overlap."""
        self.wanted = list(jobs)
        kept = self._match(self.wanted, start=False)
        for key in [k for k in self.workers if k not in kept]:
            self.workers.pop(key).close()

    def _match(self, jobs: list[JobSpec], *, start: bool = True) -> list[int]:
        """A distinct worker for each of `jobs`; where none is free, one is started (or, with
        `start=False`, none is)."""
        kept: list[int] = []
        for job in jobs:
            key = next((k for k, w in self.workers.items() if w.job == job and k not in kept), None)
            if key is None and start:
                key = self._start(job)
            if key is not None:
                kept.append(key)
        return kept

    def _start(self, job: JobSpec) -> int:
        key, self._next_key = self._next_key, self._next_key + 1
        self.workers[key] = _Worker(self.ctx, job, self, key)
        return key

    def run(self, jobs: dict[str, JobSpec]) -> dict[str, dict]:
        if len(jobs) > 2:
            raise ValueError("at most two jobs run together")
        self._match(self.wanted)
        chosen = dict(zip(self._match(list(jobs.values())), jobs, strict=True))
        for key in chosen:
            self.workers[key].commands.put(len(jobs) > 1)
        timeout = 120 + 4 * self.settings.duration_s
        deadline = time.monotonic() + timeout
        out: dict[str, dict] = {}
        while len(out) < len(chosen):
            try:
                key, value = self.results.get(timeout=1.0)
                if key in chosen:
                    out[chosen[key]] = value
                    if "error" in value:
                        break  # its partner may wait at a broken barrier: stop here
                continue
            except queue.Empty:
                pass
            # a worker that died before reporting (killed, or failed to start) never will
            dead = [
                self.workers[k].process.exitcode
                for k in chosen
                if self.workers[k].process.exitcode not in (None, 0)
            ]
            if dead and self.results.empty():
                raise PerfcastError(
                    f"a co-location worker exited with code {dead[0]} before reporting"
                )
            if time.monotonic() > deadline:
                raise PerfcastError(f"co-location workers gave no result within {timeout:.0f} s")
        errors = [f"{jobs[k].job}: {v['error']}" for k, v in out.items() if "error" in v]
        if errors:
            raise PerfcastError("profiling worker failed: " + "; ".join(errors))
        return out

    def close(self) -> None:
        for worker in self.workers.values():
            with contextlib.suppress(Exception):
                worker.commands.put(None)
        for worker in self.workers.values():
            worker.close()
        self.workers.clear()


_pool: _WorkerPool | None = None  # the workers of the running colocate(), if any


@contextlib.contextmanager
def _kept_workers(settings: WindowSettings, jobs: list[JobSpec]) -> Iterator[None]:
    """Windows inside run in kept worker processes: the enclosing block's, else new ones
    closed at the end of this block."""
    global _pool
    if _pool is not None and _pool.settings == settings:
        _pool.reserve(jobs)
        yield
        return
    _pool, outer = _WorkerPool(settings), _pool
    _pool.reserve(jobs)
    try:
        yield
    finally:
        _pool.close()
        _pool = outer


def _run_processes(jobs: dict[str, JobSpec], settings: WindowSettings) -> dict[str, dict]:
    """One window of `jobs` (one job alone, or two together), each in its own process: the
    session's kept workers, or processes started for this window alone."""
    if _pool is not None and _pool.settings == settings:
        return _pool.run(jobs)
    pool = _WorkerPool(settings)
    try:
        return pool.run(jobs)
    finally:
        pool.close()


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
        with _kept_workers(self.settings, [a, b]):
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
    with _kept_workers(settings, []):  # a job in consecutive pairs keeps its process
        for a, b in pairs:
            rows.append(session.pair(a, b))
            if on_pair:
                on_pair()
    return pd.DataFrame(rows)
