"""True performance of job types, from measured tables: step times (scaling contract) and
co-location speeds (interference contract). The simulator advances jobs with these; the oracle
prediction backend answers with them.

Rules for configurations that were not measured (documented in docs/scheduler.md):
- GPU type: a job type measured on other GPU types uses the type measured most (step times are
  not converted between types).
- Local batch size: the nearest measured one (in log scale), step time scaled linearly with the
  batch (per-GPU throughput kept).
- GPU count: piecewise-linear in log2(GPUs) between measured counts over consolidated runs
  (fewest nodes); beyond the largest count the last segment's slope continues; below the
  smallest count the smallest count's step time is used.
- Pairs on one GPU: measured pairs only (nearest measured batch sizes); an unmeasured pair has
  no speed and is never packed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perfcast.errors import PerfcastError


class CatalogError(PerfcastError):
    """A job type or configuration the measured tables cannot answer for."""


@dataclass(frozen=True, slots=True)
class _Curve:
    log_gpus: np.ndarray  # log2 of measured GPU counts, ascending
    step_s: np.ndarray  # step time at each count

    def at(self, num_gpus: int) -> float:
        x = math.log2(max(num_gpus, 1))
        xs, ys = self.log_gpus, self.step_s
        if x <= xs[0] or len(xs) == 1:
            return float(ys[0]) if x <= xs[0] else float(ys[-1])
        if x >= xs[-1]:
            slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
            return float(ys[-1] + max(slope, 0.0) * (x - xs[-1]))
        return float(np.interp(x, xs, ys))


class ScalingCatalog:
    """Step time of (job type, GPU type, GPUs, local batch size) from scaling-contract rows."""

    def __init__(self, table: pd.DataFrame, gpus_per_node: int = 8) -> None:
        if table.empty:
            raise CatalogError("no scaling measurements to build job types from")
        self.gpus_per_node = gpus_per_node
        df = table.copy()
        df["job"] = df["job"].astype(str).str.lower()
        # consolidated runs only: the fewest nodes measured for each count
        fewest = df.groupby(["job", "gpu_type", "num_gpus"])["num_nodes"].transform("min")
        df = df[df["num_nodes"] == fewest]
        grouped = df.groupby(["job", "gpu_type", "local_batch_size", "num_gpus"], sort=True)
        points = grouped["step_time_s"].median().reset_index()
        self._curves: dict[tuple[str, str, int], _Curve] = {}
        for (job, gpu, lbs), part in points.groupby(["job", "gpu_type", "local_batch_size"]):
            self._curves[(job, gpu, int(lbs))] = _Curve(
                np.log2(part["num_gpus"].to_numpy(float)), part["step_time_s"].to_numpy(float)
            )
        counts = df.groupby(["job", "gpu_type"]).size()
        self._main_gpu = {job: str(c.idxmax()[1]) for job, c in counts.groupby(level=0)}
        self._batches: dict[tuple[str, str], np.ndarray] = {
            (job, gpu): np.array(sorted({k[2] for k in self._curves if k[:2] == (job, gpu)}))
            for job, gpu in counts.index
        }
        by_job = df.groupby("job")
        self._max_gpus = by_job["num_gpus"].max().to_dict()
        # the reference local batch: the most measured one on the main GPU type
        self._ref_batch = {}
        for job, gpu in self._main_gpu.items():
            part = df[(df["job"] == job) & (df["gpu_type"] == gpu)]
            self._ref_batch[job] = int(part["local_batch_size"].mode().iloc[0])
        self._cache: dict[tuple[str, str, int, int], float] = {}  # step times
        # samples/s by (job, GPU type, GPUs, global batch): a trace of a million jobs asks for
        # a few hundred distinct ones, once per job
        self._rates: dict[tuple[str, str, int, int], float] = {}

    def job_types(self) -> list[str]:
        return sorted(self._main_gpu)

    def has(self, job_type: str) -> bool:
        return job_type in self._main_gpu

    def max_measured_gpus(self, job_type: str) -> int:
        return int(self._max_gpus[job_type])

    def reference_local_batch(self, job_type: str) -> int:
        return self._ref_batch[job_type]

    def measured_local_batches(self, job_type: str) -> list[int]:
        gpu = self._main_gpu[job_type]
        return [int(b) for b in self._batches[(job_type, gpu)]]

    def step_time(self, job_type: str, gpu_type: str, num_gpus: int, local_batch: int) -> float:
        key = (job_type, gpu_type, num_gpus, local_batch)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        if job_type not in self._main_gpu:
            raise CatalogError(f"job type {job_type!r} has no scaling measurements")
        gpu = gpu_type if (job_type, gpu_type) in self._batches else self._main_gpu[job_type]
        batches = self._batches[(job_type, gpu)]
        near = int(batches[np.argmin(np.abs(np.log2(batches) - math.log2(max(local_batch, 1))))])
        value = self._curves[(job_type, gpu, near)].at(num_gpus) * local_batch / near
        self._cache[key] = value
        return value

    def step_times(self, keys: Sequence[tuple[str, str, int, int]]) -> np.ndarray:
        return np.array([self.step_time(*k) for k in keys], dtype=float)

    def throughput(self, job_type: str, gpu_type: str, num_gpus: int, batch: int) -> float:
        """Samples per second at global batch `batch` on `num_gpus` GPUs."""
        key = (job_type, gpu_type, num_gpus, batch)
        rate = self._rates.get(key)
        if rate is None:
            local = max(1, batch // max(num_gpus, 1))
            rate = local * num_gpus / self.step_time(job_type, gpu_type, num_gpus, local)
            self._rates[key] = rate
        return rate


@dataclass(frozen=True, slots=True)
class PairSpeed:
    a_speed: float
    b_speed: float
    a_mem_mb: float | None
    b_mem_mb: float | None


class InterferenceCatalog:
    """Measured speeds of two jobs sharing one GPU (each as a fraction of its speed alone)."""

    def __init__(self, table: pd.DataFrame | None) -> None:
        self._pairs: dict[tuple[str, str, str], list[tuple[int, int, PairSpeed]]] = {}
        if table is None or table.empty:
            return
        df = table.copy()
        for side in ("a", "b"):
            df[f"{side}_job"] = df[f"{side}_job"].astype(str).str.lower()
            if f"{side}_mem_mb" not in df:
                df[f"{side}_mem_mb"] = np.nan
        cols = ["gpu_type", "a_job", "b_job", "a_batch_size", "b_batch_size"]
        cols += ["a_speed", "b_speed", "a_mem_mb", "b_mem_mb"]
        for gpu, aj, bj, ab, bb, sa, sb, ma, mb in df[cols].itertuples(index=False):
            ma = None if pd.isna(ma) else float(ma)
            mb = None if pd.isna(mb) else float(mb)
            self._pairs.setdefault((str(gpu).lower(), aj, bj), []).append(
                (int(ab), int(bb), PairSpeed(float(sa), float(sb), ma, mb))
            )
            self._pairs.setdefault((str(gpu).lower(), bj, aj), []).append(
                (int(bb), int(ab), PairSpeed(float(sb), float(sa), mb, ma))
            )

    def __bool__(self) -> bool:
        return bool(self._pairs)

    def memory_mb(self, job_type: str, batch: int) -> float | None:
        """Measured GPU memory of a job type at the nearest measured batch, if any pair row
        recorded it."""
        seen = [
            (b, p.a_mem_mb)
            for k, v in self._pairs.items()
            if k[1] == job_type
            for b, _, p in v
            if p.a_mem_mb is not None
        ]
        if not seen:
            return None
        return min(seen, key=lambda item: abs(math.log2(item[0] / max(batch, 1))))[1]

    def job_types(self) -> set[str]:
        return {k[1] for k in self._pairs}

    def pair(
        self, gpu_type: str, a_job: str, a_batch: int, b_job: str, b_batch: int
    ) -> PairSpeed | None:
        """The measured pair nearest in batch sizes, on `gpu_type` or, if not measured there,
        on any GPU type; None when the two job types were never measured together."""
        options = self._pairs.get((gpu_type, a_job, b_job))
        if options is None:
            others = [v for k, v in self._pairs.items() if k[1:] == (a_job, b_job)]
            if not others:
                return None
            options = others[0]

        def distance(item: tuple[int, int, PairSpeed]) -> float:
            return abs(math.log2(item[0] / max(a_batch, 1))) + abs(
                math.log2(item[1] / max(b_batch, 1))
            )

        return min(options, key=distance)[2]
