"""Training progress that counts statistical efficiency: the truth the Pollux artifact's
simulator (petuum/adaptdl, osdi21-artifact, `simulator/`) advances its jobs with, rebuilt from
its public traces (`pollux/traces/<app>/`; see ../shared/datasets/README.md).

- Work is measured in samples at the application's initial batch size (the smallest validated
  one, `init`): a step at global batch B counts `gain(B) = (var + sqr) / (var / s + sqr)`
  initial-batch steps, s = B / init, with the gradient's `sqr` and `var` of the current epoch
  read from `validation-<B>.csv` (interpolated between validated batch sizes). So a job's rate
  is its samples/s times the statistical efficiency `gain / s` (Pollux's goodput, eq. 8).
- Epoch e starts at the smallest `progress` any validation run had after e - 1 epochs; a job
  is done after its application's `max_epochs` (the artifact's `get_completion_epoch`).
- Step time depends on the placement (GPUs per node): measured placements are interpolated in
  the local batch; others are interpolated linearly over (nodes, GPUs, local batch) through
  the placement means and `scalability.csv` (the artifact's `get_throughput`). A placement
  outside everything measured (more GPUs on a node than the T4 nodes' 4, more replicas than
  the nodes measured held) is answered from the nearest measured (nodes, GPUs), scaled by
  Pollux's own throughput model (`facts/throughput.py`: compute, ring all-reduce growing with
  the replicas) fitted to the application's measurements: more GPUs never come for free, and
  a step time is never NaN.
- A global batch is split as the artifact's `Job.update_local_bsz` does: local batches above
  the largest measured one use gradient accumulation, and a one-GPU job above the initial
  batch accumulates at least once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np
import pandas as pd
from scipy.interpolate import LinearNDInterpolator

from perfcast.datasets.fetch import entries, fetch
from perfcast.datasets.placements import node_gpus, read_placements
from perfcast.datasets.sources.pollux import CLUSTER
from perfcast.errors import PerfcastError
from perfcast.scheduler.facts.throughput import ThroughputParams, fit_throughput

# Pollux application of each perfcast job type (datasets/sources/pollux.py names them), its
# epochs (the artifact's APPLICATIONS) and local batch cap where the artifact sets one.
APPLICATIONS = {
    "bert-squad": ("bert", 2, None),
    "resnet18-cifar10": ("cifar10", 100, None),
    "deepspeech2-arctic": ("deepspeech2", 80, None),
    "resnet50-imagenet": ("imagenet", 90, None),
    "ncf-movielens": ("ncf", 10, None),
    "yolov3-voc": ("yolov3", 50, 8),
}


@dataclass(frozen=True, slots=True)
class BatchSplit:
    """How a global batch runs on some GPUs: `atomic` samples per GPU per pass, `accum` extra
    passes before each synchronization."""

    atomic: int
    accum: int

    def global_batch(self, num_gpus: int) -> int:
        return num_gpus * self.atomic * (self.accum + 1)


class Application:
    """One Pollux application's measured step times and gradient statistics, measured on the
    cluster the scaling datasets name `cluster`."""

    cluster = CLUSTER

    def __init__(self, app: str, max_epochs: int, max_local: int | None) -> None:
        self.app, self.max_epochs = app, max_epochs
        self._model: ThroughputParams | None = None
        base = f"pollux/traces/{app}"
        validation = {}
        for entry in entries(f"{base}/validation-"):
            batch = int(entry.path.rsplit("-", 1)[1].removesuffix(".csv"))
            validation[batch] = pd.read_csv(fetch(entry.path))
        ordered = [validation[b] for b in sorted(validation)]
        epochs = min(len(v) for v in ordered)

        def column(name: str) -> np.ndarray:  # (batch sizes, epochs)
            return np.array([v[name].to_numpy(float)[:epochs] for v in ordered])

        self.batches = np.array(sorted(validation), dtype=float)
        self.sqr, self.var, progress = column("grad_sqr"), column("grad_var"), column("progress")
        # epoch e (from 0) starts at starts[e]; the job is done at starts[max_epochs]
        self.starts = np.concatenate([[0.0], progress.min(axis=0)])[: max_epochs + 1]
        self.init_batch = int(self.batches[0])
        placements = read_placements(f"{base}/placements.csv")
        self.placements = {
            p: part.sort_values("local_bsz") for p, part in placements.groupby("placement")
        }
        self.min_local = int(placements["local_bsz"].min())
        self.max_local = max_local or int(placements["local_bsz"].max())
        xs, ys = ["num_nodes", "num_replicas", "local_bsz"], ["step_time", "sync_time"]
        means = placements.groupby(xs, as_index=False)[ys].mean()
        spread = pd.read_csv(fetch(f"{base}/scalability.csv"))
        points = pd.concat([means, spread[xs + ys]], ignore_index=True)
        self._points = points
        self._spread = LinearNDInterpolator(points[xs].to_numpy(float), points[ys].to_numpy(float))
        self.max_nodes = int(points["num_nodes"].max())
        self.max_per_node = max(max(node_gpus(p)) for p in self.placements)

    @property
    def total_work(self) -> float:
        """Samples at the initial batch size to train for `max_epochs`."""
        return float(self.starts[-1]) * self.init_batch

    def split(self, batch: int, num_gpus: int) -> BatchSplit:
        local = math.ceil(batch / num_gpus - 1e-8)
        accum = math.ceil(local / self.max_local - 1e-8) - 1
        if num_gpus == 1 and batch > self.init_batch:
            accum = max(1, accum)
        atomic = math.ceil(local / (accum + 1) - 1e-8)
        atomic = min(atomic, int(self.batches[-1] / (num_gpus * (accum + 1))))
        return BatchSplit(max(atomic, 1), accum)

    @cache  # noqa: B019 - one Application per job type, kept for the process
    def step_and_sync(self, placement: tuple[int, ...], atomic: int) -> tuple[float, float]:
        """Seconds per step and of gradient sync at `atomic` samples per GPU."""
        rotation = min(placement[i:] + placement[:i] for i in range(len(placement)))
        key = "".join(map(str, rotation))
        rows = self.placements.get(key)
        if rows is not None:
            local = float(np.clip(atomic, rows["local_bsz"].iloc[0], rows["local_bsz"].iloc[-1]))
            step = float(np.interp(local, rows["local_bsz"], rows["step_time"]))
            sync = float(np.interp(local, rows["local_bsz"], rows["sync_time"]))
            return step, sync
        step, sync = self._spread([min(len(placement), 16), sum(placement), atomic])[0]
        if not math.isfinite(step):  # outside the measured hull: the nearest measured local
            nearest = float(np.clip(atomic, self.min_local, self.max_local))
            step, sync = self._spread([min(len(placement), 16), sum(placement), nearest])[0]
        if not math.isfinite(step):  # no measured placement is near: extrapolate
            step, sync = self._extrapolated(len(placement), sum(placement), atomic)
        if not (math.isfinite(step) and math.isfinite(sync) and 0 <= sync < step):
            raise PerfcastError(
                f"pollux application {self.app!r}: no finite step time for placement "
                f"{placement} at {atomic} samples per GPU (step {step}, sync {sync})"
            )
        return float(step), float(sync)

    @property
    def model(self) -> ThroughputParams:
        """Pollux's throughput model fitted to every measured step (once per application)."""
        if self._model is None:
            p = self._points
            self._model = fit_throughput(
                p["num_nodes"].to_numpy(),
                p["num_replicas"].to_numpy(),
                p["local_bsz"].to_numpy(float),
                (p["step_time"] - p["sync_time"]).to_numpy(float),
                p["step_time"].to_numpy(float),
            )
        return self._model

    def _extrapolated(self, nodes: int, replicas: int, atomic: int) -> tuple[float, float]:
        """(step, sync) of a configuration nothing measured covers: the nearest measured one
        (as many nodes as measured, at most `max_per_node` GPUs on each, the nearest measured
        local batch), its compute and step scaled by the fitted model's ratio between the two
        configurations. The ring's sync grows with the replicas, so throughput per GPU falls."""
        near_nodes = min(nodes, self.max_nodes)
        near_replicas = int(np.clip(replicas, near_nodes, self.max_per_node * near_nodes))
        local = float(np.clip(atomic, self.min_local, self.max_local))
        step, sync = self._spread([near_nodes, near_replicas, local])[0]
        if not math.isfinite(step):  # the hull's edge: one node's packed placement, measured
            near_nodes, near_replicas = 1, min(replicas, self.max_per_node)
            step, sync = self.step_and_sync((near_replicas,), int(local))
        m = self.model
        pass_s = (step - sync) * float(m.pass_time(atomic) / m.pass_time(local))
        ratio = m.optim_time(nodes, replicas, atomic) / m.optim_time(
            near_nodes, near_replicas, local
        )
        step = max(step * float(ratio), pass_s)
        return step, step - pass_s

    def epoch_at(self, work: float) -> int:
        """The epoch (from 0) a job is in after `work` initial-batch samples."""
        done = work / self.init_batch
        # a job synced onto a boundary is in the next epoch, whatever the float rounding
        epoch = int(np.searchsorted(self.starts, done + 1e-9 * (1 + done), side="right")) - 1
        return min(max(epoch, 0), self.max_epochs - 1)

    def next_boundary(self, work: float) -> float:
        """Work at which the job's current epoch ends."""
        return float(self.starts[self.epoch_at(work) + 1]) * self.init_batch

    def noise(self, batch: int, epoch: int) -> tuple[float, float]:
        """The gradient's (sqr, var) a job training at global `batch` measures in `epoch`."""
        b = float(np.clip(batch, self.batches[0], self.batches[-1]))
        sqr = float(np.interp(b, self.batches, self.sqr[:, epoch]))
        var = float(np.interp(b, self.batches, self.var[:, epoch]))
        return sqr, var

    def efficiency(self, batch: int, epoch: int, noise: tuple[float, float] | None = None) -> float:
        """Statistical efficiency of global batch `batch` in `epoch`: initial-batch samples
        gained per sample processed. `noise`: the (sqr, var) to extrapolate from (what a job
        reported at its own batch, as Pollux's scheduler knows it); default, the truth at
        `batch`."""
        sqr, var = noise if noise is not None else self.noise(batch, epoch)
        scale = batch / self.init_batch
        denom = var / scale + sqr
        gain = (var + sqr) / denom if denom > 0 else 1.0
        return gain / scale

    def run_time(self, placement: tuple[int, ...], batch: int) -> float:
        """Seconds to train for `max_epochs` alone on `placement` at global `batch`: what the
        simulator runs such a job for (the oracle's duration)."""
        total = 0.0
        for epoch in range(self.max_epochs):
            start, end = (float(self.starts[e]) * self.init_batch for e in (epoch, epoch + 1))
            if end > start:
                total += (end - start) / self.rate(placement, batch, start)
        return total

    def rate(self, placement: tuple[int, ...], batch: int, work: float) -> float:
        """Initial-batch samples per second of a job with global `batch` on `placement` after
        `work` samples of progress."""
        num_gpus = sum(placement)
        split = self.split(batch, num_gpus)
        step, sync = self.step_and_sync(placement, split.atomic)
        total_time = step + split.accum * (step - sync)
        processed = split.global_batch(num_gpus)
        return processed / total_time * self.efficiency(processed, self.epoch_at(work))


@cache
def application(job_type: str) -> Application | None:
    """The goodput truth of a job type, or None for types without Pollux traces."""
    if job_type not in APPLICATIONS:
        return None
    return Application(*APPLICATIONS[job_type])
