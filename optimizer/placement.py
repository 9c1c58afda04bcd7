"""Where jobs run: nodes and GPUs, sharing a GPU only when the predictions say it pays.

Jobs are placed in the order given (the policy's priority order). A job first gets GPUs of its
own, on as few nodes as possible (one node if any has room: the one with the least room that
fits, to keep big holes for big jobs). When the free GPUs are scattered so the job would span
more nodes than it needs, the predicted step times of the spread and the consolidated placement
are compared: the job waits for a consolidated placement when spreading is predicted to cost
more than `spread_tolerance`. A one-GPU job without a free GPU may share one with a running
one-GPU job when
- the predicted normalized throughputs of the pair add up to more than 1 (`a_speed + b_speed`
  from `predict("interference", ...)`: together they do more work than taking turns), and
- Salus's memory safety holds: persistent memory of both + the larger ephemeral memory <= the
  GPU's memory (ephemeral memory is only live during one job's iteration at a time).
All predictions are made up front in one `scaling` and one `interference` call, once per kind
of job and pair of kinds (`prediction_rows`). Free GPUs are bucketed by node class and free
count, and shareable GPUs grouped by what decides a pairing, so a job's placement looks at a few
buckets and groups, not at every node and GPU: 10,000 jobs on 10,000 GPUs place in seconds.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from perfcast.datasets.placements import even_placement
from perfcast.errors import PerfcastError
from perfcast.predictor.backend import PredictionBackend


@dataclass(frozen=True)
class Node:
    name: str
    gpu_type: str
    gpus: int
    gpu_memory_mb: float


@dataclass(frozen=True)
class PlacementJob:
    """A job to place. `features` holds its contract columns: at least `job` and
    `local_batch_size` (plus `amp` and any model features the predictors use)."""

    job_id: str
    features: Mapping[str, object]
    num_gpus: int
    persistent_mem_mb: float = 0.0  # model and optimizer state, resident while the job lives
    ephemeral_mem_mb: float = 0.0  # activations and workspace, live during an iteration only


@dataclass(frozen=True)
class Assignment:
    job_id: str
    gpus: tuple[tuple[str, int], ...]  # (node name, GPU index on the node)
    shares_with: str | None
    reason: str


@dataclass
class PlacementPlan:
    assignments: dict[str, Assignment] = field(default_factory=dict)
    waiting: dict[str, str] = field(default_factory=dict)  # job_id -> why it was not placed


def _validate(jobs: Sequence[PlacementJob], nodes: Sequence[Node]) -> None:
    if jobs and not nodes:
        raise PerfcastError("no nodes to place jobs on")
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise PerfcastError("node names must be unique")
    for node in nodes:
        if node.gpus < 1 or not node.gpu_memory_mb > 0:
            raise PerfcastError(f"node {node.name!r}: needs gpus >= 1 and gpu_memory_mb > 0")
    ids = [j.job_id for j in jobs]
    if len(set(ids)) != len(ids):
        raise PerfcastError("job ids must be unique")
    for job in jobs:
        where = f"job {job.job_id!r}"
        if job.num_gpus < 1:
            raise PerfcastError(f"{where}: num_gpus must be >= 1")
        missing = {"job", "local_batch_size"} - set(job.features)
        if missing:
            raise PerfcastError(f"{where}: features lack {', '.join(sorted(missing))}")
        memory = (job.persistent_mem_mb, job.ephemeral_mem_mb)
        if not all(math.isfinite(m) and m >= 0 for m in memory):
            raise PerfcastError(f"{where}: memory figures must be finite and >= 0")


def _fewest_nodes(gpus: int, per_node: Sequence[int]) -> int | None:
    """Fewest nodes that can hold `gpus` when nodes offer `per_node` GPUs each."""
    total = 0
    for k, size in enumerate(sorted(per_node, reverse=True), start=1):
        total += size
        if total >= gpus:
            return k
    return None


def _scaling_key(job: PlacementJob) -> Hashable:
    """What a job's step-time predictions depend on: its features and GPU count (jobs alike
    are predicted once)."""
    return (_frozen(job.features), job.num_gpus)


def _side_key(job: PlacementJob) -> Hashable:
    """What a job's side of a pair prediction depends on (`_side`)."""
    return _frozen(_side("", job))


def _frozen(mapping: Mapping[str, object]) -> Hashable:
    items = tuple(sorted(mapping.items()))
    try:
        hash(items)
    except TypeError:  # a list-valued feature: compared by its text
        return repr(items)
    return items


class _Predictions:
    """Step times per (job kind, GPU type, node count) and pair speeds per (GPU type, kind of
    the job already there, kind of the newcomer), predicted in two calls, once per distinct
    kind: 10,000 jobs of a few dozen kinds make a few thousand rows, not 10^8 pairs."""

    def __init__(
        self, jobs: Sequence[PlacementJob], nodes: Sequence[Node], backend: PredictionBackend
    ) -> None:
        self.step: dict[tuple[Hashable, str, int], float] = {}
        self.pair: dict[tuple[str, Hashable, Hashable], tuple[float, float]] = {}
        sizes: dict[str, list[int]] = {}
        for node in nodes:
            sizes.setdefault(node.gpu_type, []).append(node.gpus)
        kinds = {_scaling_key(j): j for j in jobs if j.num_gpus > 1}
        rows, keys = [], []
        for kind, job in kinds.items():
            for gpu_type, per_node in sizes.items():
                least = _fewest_nodes(job.num_gpus, per_node)
                if least is None:
                    continue
                for k in range(least, min(job.num_gpus, len(per_node)) + 1):
                    rows.append(
                        {**job.features, "gpu_type": gpu_type, "num_gpus": job.num_gpus,
                         "num_nodes": k, "placement": even_placement(job.num_gpus, k)}
                    )  # fmt: skip
                    keys.append((kind, gpu_type, k))
        if rows:
            step = backend.predict("scaling", pd.DataFrame(rows))["step_time_s"].to_numpy()
            self.step = dict(zip(keys, step.astype(float), strict=True))
        singles = [j for j in jobs if j.num_gpus == 1]
        self.side = {j.job_id: _side_key(j) for j in singles}  # each one-GPU job's kind
        sides = {self.side[j.job_id]: j for j in singles} if len(singles) > 1 else {}
        rows, pair_keys = [], []
        for gpu_type in sizes:
            for host_kind, host in sides.items():
                for new_kind, new in sides.items():
                    rows.append({"gpu_type": gpu_type, **_side("a", host), **_side("b", new)})
                    pair_keys.append((gpu_type, host_kind, new_kind))
        if rows:
            speeds = backend.predict("interference", pd.DataFrame(rows))
            a_b = speeds[["a_speed", "b_speed"]].to_numpy(dtype=float)
            pairs = [(float(a), float(b)) for a, b in a_b]
            self.pair = dict(zip(pair_keys, pairs, strict=True))

    def step_time(self, job: PlacementJob, gpu_type: str, nodes: int) -> float:
        return self.step.get((_scaling_key(job), gpu_type, nodes), math.nan)

    def speeds(self, gpu_type: str, host: PlacementJob, new: PlacementJob) -> tuple[float, float]:
        """(speed of the job already on the GPU, speed of the newcomer) when they share it;
        NaN when not predicted."""
        key = (gpu_type, self.side[host.job_id], self.side[new.job_id])
        return self.pair.get(key, (math.nan, math.nan))


def prediction_rows(jobs: Sequence[PlacementJob], nodes: Sequence[Node]) -> int:
    """Rows `place` predicts: the distinct one-GPU job kinds squared × GPU types, plus each
    distinct multi-GPU job kind × GPU types × the node counts it may spread over."""
    by_type: dict[str, int] = {}
    for node in nodes:
        by_type[node.gpu_type] = by_type.get(node.gpu_type, 0) + 1
    sides = len({_side_key(j) for j in jobs if j.num_gpus == 1})
    kinds = {_scaling_key(j): j.num_gpus for j in jobs if j.num_gpus > 1}
    spreads = sum(min(g, n) for g in kinds.values() for n in by_type.values())
    return sides * sides * len(by_type) + spreads


def _side(prefix: str, job: PlacementJob) -> dict[str, object]:
    side = {
        f"{prefix}_job": job.features["job"],
        f"{prefix}_batch_size": job.features["local_batch_size"],
        f"{prefix}_mem_mb": job.persistent_mem_mb + job.ephemeral_mem_mb,
    }
    if "amp" in job.features:
        side[f"{prefix}_amp"] = job.features["amp"]
    return side


class _FreeGpus:
    """The free GPUs of every node, with nodes bucketed by class (GPU type and memory) and by
    free count, in node order: a job finds the tightest node that holds it, or the roomiest
    nodes, without looking at every node."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.nodes = list(nodes)
        self.index = {n.name: i for i, n in enumerate(nodes)}
        self.free = [list(range(n.gpus)) for n in nodes]
        self.classes: dict[tuple[str, float], list[int]] = {}  # class -> its nodes, in order
        for i, node in enumerate(nodes):
            self.classes.setdefault((node.gpu_type, node.gpu_memory_mb), []).append(i)
        self.most = max((n.gpus for n in nodes), default=0)
        self.buckets = {c: [[] for _ in range(self.most + 1)] for c in self.classes}
        self.total = dict.fromkeys(self.classes, 0)
        for c, members in self.classes.items():
            for i in members:
                self.buckets[c][nodes[i].gpus].append(i)
                self.total[c] += nodes[i].gpus
        self._ideal: dict[tuple[tuple, int], int | None] = {}
        self._types: dict[float, dict[str, list[tuple[str, float]]]] = {}

    def types_for(self, need_mb: float) -> dict[str, list[tuple[str, float]]]:
        """The classes whose GPUs hold `need_mb`, grouped by GPU type, types in the order of
        their first such node."""
        if need_mb not in self._types:
            self._types[need_mb] = self._fitting(need_mb)
        return self._types[need_mb]

    def _fitting(self, need_mb: float) -> dict[str, list[tuple[str, float]]]:
        fitting = sorted((members[0], c) for c, members in self.classes.items() if c[1] >= need_mb)
        types: dict[str, list[tuple[str, float]]] = {}
        for _, c in fitting:
            types.setdefault(c[0], []).append(c)
        return types

    def ideal(self, classes: list[tuple[str, float]], gpus: int) -> int | None:
        key = (tuple(classes), gpus)
        if key not in self._ideal:
            sizes = [self.nodes[i].gpus for c in classes for i in self.classes[c]]
            self._ideal[key] = _fewest_nodes(gpus, sizes)
        return self._ideal[key]

    def tightest(self, classes: list[tuple[str, float]], gpus: int) -> int | None:
        """The node with the fewest free GPUs that still holds `gpus` (first in node order)."""
        for count in range(gpus, self.most + 1):
            heads = [self.buckets[c][count][0] for c in classes if self.buckets[c][count]]
            if heads:
                return min(heads)
        return None

    def roomiest(self, classes: list[tuple[str, float]], gpus: int) -> list[int]:
        """Nodes by most free GPUs (node order on ties) until they hold `gpus` together."""
        chosen, count = [], 0
        for free in range(self.most, 0, -1):
            for i in heapq.merge(*(self.buckets[c][free] for c in classes)):
                if count >= gpus:
                    return chosen
                chosen.append(i)
                count += free
        return chosen

    def free_in(self, classes: list[tuple[str, float]]) -> int:
        return sum(self.total[c] for c in classes)

    def take(self, i: int, gpus: int) -> list[int]:
        """Take up to `gpus` free GPUs of node `i` (lowest indices first)."""
        node = self.nodes[i]
        c = (node.gpu_type, node.gpu_memory_mb)
        before = len(self.free[i])
        taken = self.free[i][:gpus]
        del self.free[i][: len(taken)]
        bucket = self.buckets[c]
        bucket[before].pop(bisect.bisect_left(bucket[before], i))
        bisect.insort(bucket[before - len(taken)], i)
        self.total[c] -= len(taken)
        return taken


class _Singles:
    """GPUs held by one one-GPU job (those a newcomer may share), in the order they were
    taken, grouped by what decides a pairing: the node's GPU type and memory and the host's
    kind and memory. For each kind of newcomer the groups it may pair with are kept in order
    of predicted combined speed (groups that emptied are dropped as they are met), so a
    newcomer looks at few groups however many GPUs are held."""

    def __init__(self, predicted: _Predictions) -> None:
        self.predicted = predicted
        self.hosts: dict[tuple[str, int], tuple[PlacementJob, Node]] = {}
        self.rank: dict[tuple[str, int], int] = {}
        self.groups: dict[tuple, dict[tuple[str, int], None]] = {}
        self.created: list[tuple] = []  # groups in the order they were (re)created
        # newcomer kind -> (groups of `created` looked at, its pairings best first)
        self._pairings: dict[tuple, tuple[int, list[tuple]]] = {}

    def _group(self, job: PlacementJob, node: Node) -> tuple:
        memory = (job.persistent_mem_mb, job.ephemeral_mem_mb)
        return (node.gpu_type, node.gpu_memory_mb, self.predicted.side[job.job_id], memory)

    def add(self, gpu: tuple[str, int], job: PlacementJob, node: Node) -> None:
        self.hosts[gpu] = (job, node)
        self.rank[gpu] = len(self.rank)
        key = self._group(job, node)
        if key not in self.groups:
            self.created.append(key)
            self.groups[key] = {}
        self.groups[key][gpu] = None

    def remove(self, gpu: tuple[str, int]) -> None:
        job, node = self.hosts.pop(gpu)
        key = self._group(job, node)
        del self.groups[key][gpu]
        if not self.groups[key]:
            del self.groups[key]

    def best(self, job: PlacementJob) -> tuple | None:
        """(GPU, host, host's speed, newcomer's speed, node, combined) of the pairing with the
        highest predicted combined speed above 1 whose memory fits (Salus: both models stay
        resident; only one iteration's ephemeral memory is live), the earliest GPU on ties."""
        new = (self.predicted.side[job.job_id], job.persistent_mem_mb, job.ephemeral_mem_mb)
        seen, order = self._pairings.get(new, (0, []))
        for k in range(seen, len(self.created)):
            pairing = self._pairing(job, self.created[k])
            if pairing is not None:  # (-combined, when created) sorts best first, stably
                bisect.insort(order, (-pairing[0], k, *pairing[1:]))
        self._pairings[new] = (len(self.created), order)
        best, best_rank, i = None, -1, 0
        while i < len(order):
            negative, k, a_speed, b_speed = order[i]
            group = self.groups.get(self.created[k])
            if not group:  # emptied; if it fills again it is created again
                order.pop(i)
                continue
            if best is not None and -negative < best[-1]:
                break
            gpu = next(iter(group))
            if best is None or self.rank[gpu] < best_rank:
                other, node = self.hosts[gpu]
                best, best_rank = (gpu, other, a_speed, b_speed, node, -negative), self.rank[gpu]
            i += 1
        return best

    def _pairing(self, job: PlacementJob, key: tuple) -> tuple[float, float, float] | None:
        """(combined, host's speed, newcomer's speed) of `job` on a GPU of group `key`; None
        when its memory does not fit or the pair does not pay."""
        gpu_type, memory_mb, host_kind, (persistent, ephemeral) = key
        a_speed, b_speed = self.predicted.pair.get(
            (gpu_type, host_kind, self.predicted.side[job.job_id]), (math.nan, math.nan)
        )
        combined = a_speed + b_speed
        # the pair's memory is at least the newcomer's own: a node it fits is one it fits alone
        memory = persistent + job.persistent_mem_mb + max(ephemeral, job.ephemeral_mem_mb)
        return (combined, a_speed, b_speed) if memory <= memory_mb and combined > 1 else None


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
    free = _FreeGpus(nodes)
    singles = _Singles(predicted)
    biggest = max((n.gpu_memory_mb for n in nodes), default=0.0)
    plan = PlacementPlan()
    for job in jobs:
        need = job.persistent_mem_mb + job.ephemeral_mem_mb
        types = free.types_for(need)
        if not types:
            plan.waiting[job.job_id] = (
                f"needs {need:.0f} MB per GPU; the largest GPU has {biggest:.0f} MB"
            )
            continue
        placed, why_not = _exclusive(job, types, free, predicted, spread_tolerance)
        if placed is None and job.num_gpus == 1 and allow_sharing:
            placed, why_share = _shared(job, need, singles, predicted)
            why_not = f"{why_not}; {why_share}" if placed is None else why_not
        if placed is None:
            plan.waiting[job.job_id] = why_not
            continue
        plan.assignments[job.job_id] = placed
        if placed.shares_with is not None:  # the job already there now shares too
            singles.remove(placed.gpus[0])
            host = plan.assignments[placed.shares_with]
            plan.assignments[host.job_id] = replace(host, shares_with=job.job_id)
        elif job.num_gpus == 1:
            gpu = placed.gpus[0]
            singles.add(gpu, job, free.nodes[free.index[gpu[0]]])
    return plan


def _exclusive(
    job: PlacementJob,
    types: dict[str, list[tuple[str, float]]],
    free: _FreeGpus,
    predicted: _Predictions,
    tolerance: float,
) -> tuple[Assignment | None, str]:
    reasons = []
    for gpu_type, classes in types.items():
        ideal = free.ideal(classes, job.num_gpus)
        if ideal is None:
            reasons.append(f"no {job.num_gpus} {gpu_type} GPUs in the cluster")
            continue
        count = free.free_in(classes)
        if count < job.num_gpus:
            reasons.append(f"{count} free {gpu_type} GPUs, needs {job.num_gpus}")
            continue
        # one node if any fits (the tightest fit), else the nodes with the most free GPUs
        tight = free.tightest(classes, job.num_gpus)
        chosen = [tight] if tight is not None else free.roomiest(classes, job.num_gpus)
        spread = len(chosen)
        if spread == ideal:
            reason = f"{job.num_gpus} {gpu_type} GPU(s) on {spread} node(s), the fewest possible"
        else:
            at_spread = predicted.step_time(job, gpu_type, spread)
            at_ideal = predicted.step_time(job, gpu_type, ideal)
            penalty = at_spread / at_ideal - 1
            change = f"predicted step time {penalty:+.0%} on {spread} nodes vs {ideal}"
            if np.isnan(penalty):
                change = f"no step time predicted for {spread} vs {ideal} nodes"
            elif penalty > tolerance:
                reasons.append(f"waits for {ideal} node(s): {change}")
                continue
            reason = f"spread over {spread} {gpu_type} nodes: {change}"
        gpus, left = [], job.num_gpus
        for i in chosen:
            take = free.take(i, left)
            gpus += [(free.nodes[i].name, g) for g in take]
            left -= len(take)
        return Assignment(job.job_id, tuple(gpus), None, reason), ""
    return None, "; ".join(reasons) or "no free GPU"


def _shared(
    job: PlacementJob, need_mb: float, singles: _Singles, predicted: _Predictions
) -> tuple[Assignment | None, str]:
    best = singles.best(job)
    if best is None:
        return None, f"no GPU to share ({_refusals(job, need_mb, singles, predicted)})"
    gpu, other, a_speed, b_speed, node, combined = best
    reason = (
        f"shares {node.gpu_type} GPU {gpu[0]}:{gpu[1]} with {other.job_id}: predicted speeds "
        f"{b_speed:.2f} + {a_speed:.2f} = {combined:.2f} > 1; memory "
        f"{_pair_memory(other, job):.0f} MB <= {node.gpu_memory_mb:.0f} MB"
    )
    return Assignment(job.job_id, (gpu,), other.job_id, reason), ""


def _pair_memory(host: PlacementJob, new: PlacementJob) -> float:
    return (
        host.persistent_mem_mb
        + new.persistent_mem_mb
        + max(host.ephemeral_mem_mb, new.ephemeral_mem_mb)
    )


def _refusals(job: PlacementJob, need_mb: float, singles: _Singles, predicted: _Predictions) -> str:
    """Why the first three shareable GPUs (in the order they were taken) refused `job`."""
    refusals = []
    for other, node in singles.hosts.values():
        if node.gpu_memory_mb < need_mb:
            continue
        memory = _pair_memory(other, job)
        if memory > node.gpu_memory_mb:
            refusals.append(f"with {other.job_id}: {memory:.0f} MB > {node.gpu_memory_mb:.0f}")
        else:
            a_speed, b_speed = predicted.speeds(node.gpu_type, other, job)
            refusals.append(f"with {other.job_id}: combined speed {a_speed + b_speed:.2f} <= 1")
        if len(refusals) == 3:
            break
    return "; ".join(refusals) or "no one-GPU job to share with"
