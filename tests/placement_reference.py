"""The placement as it was written first (every node and every pair of one-GPU jobs looked at
for each job), kept as the reference `tests/test_optimizer_placement.py` checks the bucketed
placement against: the same plan, assignment for assignment and reason for reason."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pandas as pd

from perfcast.datasets.placements import even_placement
from perfcast.optimizer.placement import (
    Assignment,
    Node,
    PlacementJob,
    PlacementPlan,
    _fewest_nodes,
    _side,
    _validate,
)
from perfcast.predictor.backend import PredictionBackend


class _Predictions:
    """Step times per (job, GPU type, node count) and pair speeds, predicted in two calls."""

    def __init__(
        self, jobs: Sequence[PlacementJob], nodes: Sequence[Node], backend: PredictionBackend
    ) -> None:
        self.step: dict[tuple[str, str, int], float] = {}
        self.pair: dict[tuple[str, str, str], tuple[float, float]] = {}
        sizes: dict[str, list[int]] = {}
        for node in nodes:
            sizes.setdefault(node.gpu_type, []).append(node.gpus)
        rows, keys = [], []
        for job in (j for j in jobs if j.num_gpus > 1):
            for gpu_type, per_node in sizes.items():
                least = _fewest_nodes(job.num_gpus, per_node)
                if least is None:
                    continue
                for k in range(least, min(job.num_gpus, len(per_node)) + 1):
                    rows.append(
                        {**job.features, "gpu_type": gpu_type, "num_gpus": job.num_gpus,
                         "num_nodes": k, "placement": even_placement(job.num_gpus, k)}
                    )  # fmt: skip
                    keys.append((job.job_id, gpu_type, k))
        if rows:
            step = backend.predict("scaling", pd.DataFrame(rows))["step_time_s"].to_numpy()
            self.step = dict(zip(keys, step.astype(float), strict=True))
        singles = [j for j in jobs if j.num_gpus == 1]
        rows, keys = [], []
        for gpu_type in sizes:
            for i, a in enumerate(singles):
                for b in singles[i + 1 :]:
                    rows.append({"gpu_type": gpu_type, **_side("a", a), **_side("b", b)})
                    keys.append((gpu_type, a.job_id, b.job_id))
        if rows:
            speeds = backend.predict("interference", pd.DataFrame(rows))
            a_b = speeds[["a_speed", "b_speed"]].to_numpy(dtype=float)
            pairs = [(float(a), float(b)) for a, b in a_b]
            self.pair = dict(zip(keys, pairs, strict=True))

    def speeds(self, gpu_type: str, a: str, b: str) -> tuple[float, float]:
        """(speed of a, speed of b) when sharing a GPU; NaN when not predicted."""
        if (gpu_type, a, b) in self.pair:
            return self.pair[(gpu_type, a, b)]
        b_speed, a_speed = self.pair.get((gpu_type, b, a), (math.nan, math.nan))
        return a_speed, b_speed


def place(
    jobs: Sequence[PlacementJob],
    nodes: Sequence[Node],
    backend: PredictionBackend,
    *,
    spread_tolerance: float = 0.05,
    allow_sharing: bool = True,
) -> PlacementPlan:
    """Assign `jobs` (in priority order) to GPUs of `nodes`; see the module docstring."""
    _validate(jobs, nodes)
    predicted = _Predictions(jobs, nodes, backend)
    free = {n.name: list(range(n.gpus)) for n in nodes}
    tenants: dict[tuple[str, int], list[PlacementJob]] = {}
    plan = PlacementPlan()
    for job in jobs:
        need = job.persistent_mem_mb + job.ephemeral_mem_mb
        fitting = [n for n in nodes if n.gpu_memory_mb >= need]
        if not fitting:
            biggest = max(n.gpu_memory_mb for n in nodes)
            plan.waiting[job.job_id] = (
                f"needs {need:.0f} MB per GPU; the largest GPU has {biggest:.0f} MB"
            )
            continue
        placed, why_not = _exclusive(job, fitting, free, predicted, spread_tolerance)
        if placed is None and job.num_gpus == 1 and allow_sharing:
            placed, why_share = _shared(job, fitting, tenants, predicted)
            why_not = f"{why_not}; {why_share}" if placed is None else why_not
        if placed is None:
            plan.waiting[job.job_id] = why_not
            continue
        for gpu in placed.gpus:
            tenants.setdefault(gpu, []).append(job)
        plan.assignments[job.job_id] = placed
        if placed.shares_with is not None:  # the job already there now shares too
            host = plan.assignments[placed.shares_with]
            plan.assignments[host.job_id] = replace(host, shares_with=job.job_id)
    return plan


def _exclusive(
    job: PlacementJob,
    nodes: Sequence[Node],
    free: dict[str, list[int]],
    predicted: _Predictions,
    tolerance: float,
) -> tuple[Assignment | None, str]:
    reasons = []
    for gpu_type in dict.fromkeys(n.gpu_type for n in nodes):
        typed = [n for n in nodes if n.gpu_type == gpu_type]
        ideal = _fewest_nodes(job.num_gpus, [n.gpus for n in typed])
        if ideal is None:
            reasons.append(f"no {job.num_gpus} {gpu_type} GPUs in the cluster")
            continue
        # one node if any fits (the tightest fit), else the nodes with the most free GPUs
        roomy = [n for n in typed if len(free[n.name]) >= job.num_gpus]
        if roomy:
            chosen = [min(roomy, key=lambda n: len(free[n.name]))]
        else:
            chosen, count = [], 0
            for node in sorted(typed, key=lambda n: -len(free[n.name])):
                if count >= job.num_gpus or not free[node.name]:
                    break
                chosen.append(node)
                count += len(free[node.name])
            if count < job.num_gpus:
                reasons.append(f"{count} free {gpu_type} GPUs, needs {job.num_gpus}")
                continue
        spread = len(chosen)
        if spread == ideal:
            reason = f"{job.num_gpus} {gpu_type} GPU(s) on {spread} node(s), the fewest possible"
        else:
            at_spread = predicted.step.get((job.job_id, gpu_type, spread), math.nan)
            at_ideal = predicted.step.get((job.job_id, gpu_type, ideal), math.nan)
            penalty = at_spread / at_ideal - 1
            change = f"predicted step time {penalty:+.0%} on {spread} nodes vs {ideal}"
            if np.isnan(penalty):
                change = f"no step time predicted for {spread} vs {ideal} nodes"
            elif penalty > tolerance:
                reasons.append(f"waits for {ideal} node(s): {change}")
                continue
            reason = f"spread over {spread} {gpu_type} nodes: {change}"
        gpus, left = [], job.num_gpus
        for node in chosen:
            take = free[node.name][:left]
            del free[node.name][: len(take)]
            gpus += [(node.name, i) for i in take]
            left -= len(take)
        return Assignment(job.job_id, tuple(gpus), None, reason), ""
    return None, "; ".join(reasons) or "no free GPU"


def _shared(
    job: PlacementJob,
    nodes: Sequence[Node],
    tenants: dict[tuple[str, int], list[PlacementJob]],
    predicted: _Predictions,
) -> tuple[Assignment | None, str]:
    by_name = {n.name: n for n in nodes}
    best, best_combined, refusals = None, 1.0, []
    for gpu, there in tenants.items():
        node = by_name.get(gpu[0])
        if node is None or len(there) != 1 or there[0].num_gpus != 1:
            continue
        other = there[0]
        a_speed, b_speed = predicted.speeds(node.gpu_type, other.job_id, job.job_id)
        combined = a_speed + b_speed
        # Salus: both models stay resident; only one iteration's ephemeral memory is live
        memory = (
            other.persistent_mem_mb
            + job.persistent_mem_mb
            + max(other.ephemeral_mem_mb, job.ephemeral_mem_mb)
        )
        if memory > node.gpu_memory_mb:
            refusals.append(f"with {other.job_id}: {memory:.0f} MB > {node.gpu_memory_mb:.0f}")
        elif not combined > 1:
            refusals.append(f"with {other.job_id}: combined speed {combined:.2f} <= 1")
        elif combined > best_combined:
            best, best_combined = (gpu, other, a_speed, b_speed, memory, node), combined
    if best is None:
        shown = "; ".join(refusals[:3]) or "no one-GPU job to share with"
        return None, f"no GPU to share ({shown})"
    gpu, other, a_speed, b_speed, memory, node = best
    reason = (
        f"shares {node.gpu_type} GPU {gpu[0]}:{gpu[1]} with {other.job_id}: predicted speeds "
        f"{b_speed:.2f} + {a_speed:.2f} = {best_combined:.2f} > 1; memory {memory:.0f} MB "
        f"<= {node.gpu_memory_mb:.0f} MB"
    )
    return Assignment(job.job_id, (gpu,), other.job_id, reason), ""
