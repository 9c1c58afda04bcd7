"""Elastic allocation of GPUs and batch sizes to many jobs (Saxena et al., MASCOTS'20).

Each job says how fast it runs (predicted samples/s) for each (GPU count, global batch size)
it can use. `solve` (`allocate`: its allocation alone) chooses every job's GPU count and batch
size so that the total weighted throughput is as large as possible without using more than the
cluster's GPUs, honouring each job's minimum and maximum GPU count.

For each job the best batch size per GPU count is picked first (it never affects other jobs).
When every job's best option fits beside the others' (a lightly loaded cluster), that is the
optimum, found in one pass (`_own_bests`). Else, while the problem is small enough
(`dp_cells` up to `EXACT_CELLS`), an exact knapsack over GPUs combines them: a dynamic program
over jobs × GPUs used, each job's step one vectorized max-plus update over the GPU counts it
can use. Larger problems (10,000 jobs on 10,000 GPUs) go to `allocate_hull`: marginal gains
along each job's upper concave hull, taken best first. Its answer comes with a proof of
quality: the same gains taken fractionally bound the optimum from above
(`Solution.upper_bound`). `predicted_throughputs` fills the jobs'
tables from the scaling model. `allocate_greedy` (marginal gain per GPU) is the baseline and
`allocate_exhaustive` the brute-force checker for tiny cases.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.lib.stride_tricks import sliding_window_view

from perfcast.datasets.placements import even_placement, fewest_nodes
from perfcast.errors import PerfcastError
from perfcast.predictor.backend import PredictionBackend

Allocation = dict[str, tuple[int, int]]
NOT_RUNNING = (0, 0)  # (num_gpus, batch_size) of a job that gets no GPU


class InfeasibleAllocationError(PerfcastError):
    """The jobs' minimum GPU counts cannot all be met on the cluster."""


@dataclass(frozen=True)
class ElasticJob:
    """One job's options. `throughput` is read once, when the job is first allocated
    (`curve`): a scheduler that re-allocates the same jobs every round sorts each table once."""

    job_id: str
    throughput: dict[tuple[int, int], float]  # (num_gpus, global_batch_size) -> samples/s
    min_gpus: int = 0
    max_gpus: int | None = None
    weight: float = 1.0

    def __post_init__(self) -> None:
        where = f"elastic job {self.job_id!r}"
        if not self.job_id:
            raise PerfcastError("an elastic job needs a non-empty job_id")
        if self.min_gpus < 0:
            raise PerfcastError(f"{where}: min_gpus must be >= 0, got {self.min_gpus}")
        if self.max_gpus is not None and self.max_gpus < max(self.min_gpus, 1):
            raise PerfcastError(
                f"{where}: max_gpus={self.max_gpus} must be >= 1 and >= min_gpus={self.min_gpus}"
            )
        if not (math.isfinite(self.weight) and self.weight > 0):
            raise PerfcastError(f"{where}: weight must be a finite number > 0, got {self.weight}")
        for key, value in self.throughput.items():
            ok_key = (
                isinstance(key, tuple)
                and len(key) == 2
                and all(isinstance(k, int | np.integer) for k in key)
                and key[0] >= 1
                and key[1] >= 1
            )
            if not ok_key:
                raise PerfcastError(
                    f"{where}: throughput key {key!r} must be (num_gpus >= 1, batch_size >= 1)"
                )
            if not (math.isfinite(value) and value >= 0):
                raise PerfcastError(
                    f"{where}: throughput at {key} must be a finite number >= 0, got {value}"
                )

    @functools.cached_property
    def curve(self) -> tuple[np.ndarray, ...]:
        """Its GPU counts (sorted), the best samples/s on each and the batch reaching it (ties:
        the smaller batch)."""
        return _best_by_gpu_count(self.throughput)


@dataclass(frozen=True)
class PredictedJob:
    """A job whose throughput the scaling model predicts: on `gpu_type` nodes of
    `gpus_per_node` GPUs, for each local batch size, at every GPU count it may use."""

    job_id: str
    features: Mapping[str, object]  # contract columns other than the configuration
    gpu_type: str
    local_batch_sizes: Sequence[int]
    gpus_per_node: int = 8
    min_gpus: int = 0
    max_gpus: int | None = None


def gpu_counts(min_gpus: int, max_gpus: int | None, total_gpus: int) -> range:
    """The GPU counts (>= 1) a job with these limits may get on `total_gpus`."""
    return range(max(min_gpus, 1), min(max_gpus or total_gpus, total_gpus) + 1)


def dp_cells(choices: Sequence[int], total_gpus: int) -> int:
    """Cells `allocate` computes: (total_gpus + 1) per usable GPU count (0 included) of each
    job; its time and memory grow with this number, which bounds a request."""
    return (total_gpus + 1) * sum(max(k, 1) for k in choices)


def predicted_throughputs(
    jobs: Sequence[PredictedJob], total_gpus: int, backend: PredictionBackend
) -> dict[str, dict[tuple[int, int], float]]:
    """Samples/s per (GPU count, global batch) of each job, in one backend call. GPUs go on
    as few nodes as possible, spread evenly."""
    frames, owners = [], []
    for job in jobs:
        counts = np.asarray(gpu_counts(job.min_gpus, job.max_gpus, total_gpus), dtype=np.int64)
        sizes = np.asarray(sorted(set(job.local_batch_sizes)), dtype=np.int64)
        if counts.size == 0 or sizes.size == 0:
            continue
        nodes = [fewest_nodes(int(g), job.gpus_per_node) for g in counts]
        spread = [even_placement(int(g), k) for g, k in zip(counts, nodes, strict=True)]
        frame = pd.DataFrame(
            {
                "gpu_type": job.gpu_type,
                "num_gpus": np.repeat(counts, sizes.size),
                "num_nodes": np.repeat(nodes, sizes.size),
                "placement": np.repeat(np.array(spread, dtype=object), sizes.size),
                "local_batch_size": np.tile(sizes, counts.size),
            }
        )
        for name, value in job.features.items():
            if name not in frame.columns:  # the configuration is the optimizer's to set
                frame[name] = value
        frames.append(frame)
        owners += [job.job_id] * len(frame)
    tables: dict[str, dict[tuple[int, int], float]] = {j.job_id: {} for j in jobs}
    if not frames:
        return tables
    frame = pd.concat(frames, ignore_index=True)
    step = backend.predict("scaling", frame)["step_time_s"].to_numpy(dtype=float)
    global_batch = (frame["num_gpus"] * frame["local_batch_size"]).to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = global_batch / step
    gpus = frame["num_gpus"].to_numpy()
    for owner, g, batch, r in zip(owners, gpus, global_batch, rate, strict=True):
        if math.isfinite(r) and r >= 0:
            tables[owner][(int(g), int(batch))] = float(r)
    return tables


# the exact DP up to this many cells (`dp_cells`: about 0.1 s); beyond, `allocate_hull`
EXACT_CELLS = 20_000_000


@dataclass(frozen=True)
class _Options:
    """Every job's usable GPU counts, sorted by job then GPU count: the best weighted
    throughput on that many GPUs and the global batch size reaching it (0 GPUs, value 0 and
    batch 0, for a job that may not run)."""

    owner: np.ndarray  # int64, index of the job
    gpus: np.ndarray  # int64
    value: np.ndarray  # float64, weighted samples/s
    batch: np.ndarray  # int64
    start: np.ndarray  # int64 per job: where its options begin in the arrays above (n + 1)

    def fewest(self) -> np.ndarray:
        """Each job's smallest usable GPU count (jobs without options: -1)."""
        n = len(self.start) - 1
        first = np.full(n, -1, dtype=np.int64)
        has = self.start[1:] > self.start[:-1]
        first[has] = self.gpus[self.start[:-1][has]]
        return first

    def dense(self, total_gpus: int) -> tuple[np.ndarray, np.ndarray]:
        """(value, batch) as (jobs, total_gpus + 1) tables, -inf and 0 where not usable."""
        n = len(self.start) - 1
        value = np.full((n, total_gpus + 1), -np.inf)
        batch = np.zeros((n, total_gpus + 1), dtype=np.int64)
        value[self.owner, self.gpus] = self.value
        batch[self.owner, self.gpus] = self.batch
        return value, batch


def _best_by_gpu_count(throughput: Mapping[tuple[int, int], float]) -> tuple[np.ndarray, ...]:
    """A throughput table's GPU counts (sorted), best samples/s on each and its batch (ties:
    the smaller batch)."""
    if not throughput:
        empty = np.zeros(0, dtype=np.int64)
        return empty, np.zeros(0), empty
    keys = np.asarray(list(throughput), dtype=np.int64).reshape(-1, 2)
    rates = np.fromiter(throughput.values(), float, len(keys))
    gpus, sizes = keys[:, 0], keys[:, 1]
    # the best rate (ties: the smaller batch) of each GPU count last in its run
    order = np.lexsort((-sizes, rates, gpus))
    gpus, sizes, rates = gpus[order], sizes[order], rates[order]
    last = np.ones(len(gpus), dtype=bool)
    last[:-1] = gpus[1:] != gpus[:-1]
    return gpus[last], rates[last], sizes[last]


def _options(jobs: Sequence[ElasticJob], total_gpus: int) -> _Options:
    # jobs that share one throughput table (the same model's curve) read it once
    curves: dict[int, tuple[np.ndarray, ...]] = {}
    parts = [_job_options(job, total_gpus, curves) for job in jobs]
    counts = np.fromiter((len(g) for g, _, _ in parts), np.int64, len(parts))
    start = np.concatenate([[0], np.cumsum(counts)])
    return _Options(
        owner=np.repeat(np.arange(len(jobs)), counts),
        gpus=np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, dtype=np.int64),
        value=np.concatenate([p[1] for p in parts]) if parts else np.zeros(0),
        batch=np.concatenate([p[2] for p in parts]) if parts else np.zeros(0, dtype=np.int64),
        start=start,
    )


def _job_options(
    job: ElasticJob, total_gpus: int, curves: dict[int, tuple[np.ndarray, ...]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A job's usable GPU counts on `total_gpus` GPUs (0 first when it may wait), its weighted
    samples/s and batch on each. Kept on the job for its last `total_gpus`: a scheduler
    allocates the same jobs on the same cluster every round."""
    memo = job.__dict__.get("_options_memo")
    if memo is not None and memo[0] == total_gpus:
        return memo[1]
    curve = curves.get(id(job.throughput))
    if curve is None:
        curve = curves[id(job.throughput)] = job.curve
    g, rate, size = curve
    usable = gpu_counts(job.min_gpus, job.max_gpus, total_gpus)
    lo, hi = np.searchsorted(g, [usable.start, max(usable.stop, usable.start)])
    idle = int(job.min_gpus == 0)  # not running is a choice, worth 0
    found = (
        np.concatenate([np.zeros(idle, dtype=np.int64), g[lo:hi]]),
        np.concatenate([np.zeros(idle), rate[lo:hi] * job.weight]),
        np.concatenate([np.zeros(idle, dtype=np.int64), size[lo:hi]]),
    )
    job.__dict__["_options_memo"] = (total_gpus, found)  # frozen: as cached_property stores
    return found


def _check_minimums(jobs: Sequence[ElasticJob], options: _Options, total_gpus: int) -> None:
    ids = [j.job_id for j in jobs]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise PerfcastError(f"job_id {dup!r} appears more than once")
    if total_gpus < 0:
        raise PerfcastError(f"total_gpus must be >= 0, got {total_gpus}")
    fewest = options.fewest()
    cannot_run = [jobs[i].job_id for i in np.flatnonzero(fewest < 0)]
    if cannot_run:
        raise InfeasibleAllocationError(
            f"job(s) {', '.join(cannot_run[:5])} have min_gpus > 0 but no throughput for any "
            f"GPU count between their min_gpus and min(max_gpus, {total_gpus} GPUs)"
        )
    # The fewest GPUs each job can run on; their sum must fit.
    if fewest.sum() > total_gpus:
        needy = sorted(((int(g), jobs[i].job_id) for i, g in enumerate(fewest) if g), reverse=True)
        named = ", ".join(f"{job} ({g})" for g, job in needy[:5])
        raise InfeasibleAllocationError(
            f"the jobs need at least {int(fewest.sum())} GPUs in total but the cluster has "
            f"{total_gpus}; the largest minimums: {named}"
        )


def _result(jobs: Sequence[ElasticJob], options: _Options, chosen: np.ndarray) -> Allocation:
    """The allocation picking option `chosen[i]` (an index into `options`) for job i."""
    gpus, batch = options.gpus[chosen].tolist(), options.batch[chosen].tolist()
    return {
        job.job_id: (g, b) if g else NOT_RUNNING
        for job, g, b in zip(jobs, gpus, batch, strict=True)
    }


def _chosen_at(options: _Options, gpus: np.ndarray) -> np.ndarray:
    """The option index of each job on `gpus[i]` GPUs (one of its usable counts)."""
    keys = options.owner * (int(options.gpus.max(initial=0)) + 1) + options.gpus
    wanted = np.arange(len(gpus)) * (int(options.gpus.max(initial=0)) + 1) + gpus
    return np.searchsorted(keys, wanted)


@dataclass(frozen=True)
class Solution:
    """An allocation, its total weighted throughput and an upper bound on the optimum's:
    equal to it when the exact DP solved the problem, else the fractional solution along the
    jobs' hulls (`allocate_hull`)."""

    allocation: Allocation
    value: float
    upper_bound: float
    exact: bool

    @property
    def gap(self) -> float:
        """At most this fraction of the optimal total weighted throughput is lost."""
        return max(0.0, 1.0 - self.value / self.upper_bound) if self.upper_bound > 0 else 0.0


def solve(jobs: Sequence[ElasticJob], total_gpus: int, exact_cells: int = EXACT_CELLS) -> Solution:
    """Each job's (num_gpus, batch_size) maximizing total weighted throughput on `total_gpus`:
    each job's own best where they all fit (`_own_bests`, at any size), else the exact DP up to
    `exact_cells` cells (`dp_cells`), else `allocate_hull`'s answer.

    A job with `min_gpus == 0` may get `(0, 0)`: not running. Raises
    `InfeasibleAllocationError` when the minimums cannot all be met.
    """
    options = _options(jobs, total_gpus)
    _check_minimums(jobs, options, total_gpus)
    chosen = _own_bests(options, total_gpus)
    if chosen is None:
        if dp_cells(np.diff(options.start).tolist(), total_gpus) > exact_cells:
            return _hull(jobs, options, total_gpus)
        chosen = _chosen_at(options, _exact(options, total_gpus))
    value = float(options.value[chosen].sum())
    return Solution(_result(jobs, options, chosen), value, value, exact=True)


def allocate(jobs: Sequence[ElasticJob], total_gpus: int) -> Allocation:
    """`solve`'s allocation."""
    return solve(jobs, total_gpus).allocation


# How far each job's best option must beat its others, relative to the sum of the jobs' bests,
# for `_own_bests` to answer: far above what rounding in the DP's sums can bridge (n * 2^-52
# of that sum for n jobs: 2e-10 at a million jobs).
OWN_BEST_GAP = 1e-8
# read once: np.finfo costs microseconds a call, and a scheduler asks every round
_TINY = float(np.finfo(float).tiny)


def own_best_margin(best_sum: float) -> float:
    """How far each job's own best must beat its next option for `solve` to answer with every
    job's own best, given the sum of the jobs' bests (absolute values)."""
    return OWN_BEST_GAP * (best_sum + _TINY)


@dataclass(frozen=True)
class OwnBest:
    """A job's own best option, as `_own_bests` picks it: its GPU count and batch (0 and 0 for
    waiting when nothing beats it), the weighted samples/s there and by how much that beats the
    job's next option (NaN when an option is NaN). `solve` answers with every job's own best
    exactly when these fit on the cluster together and every margin exceeds `own_best_margin`:
    a scheduler that keeps these per job can tell so without the jobs' option tables."""

    gpus: int
    batch: int
    value: float
    margin: float


def own_best(job: ElasticJob, total_gpus: int) -> OwnBest:
    """`job`'s own best option on `total_gpus` GPUs (`OwnBest`)."""
    gpus, value, batch = _job_options(job, total_gpus, {})
    if value.size == 0:  # it must run and cannot: `solve` raises
        return OwnBest(0, 0, math.nan, math.nan)
    best = value.max()  # NaN if any option is
    first = int(np.argmax(value == best))  # the fewest GPUs among equals
    second = np.delete(value, first).max(initial=-np.inf)
    return OwnBest(int(gpus[first]), int(batch[first]), float(best), float(best - second))


def _own_bests(options: _Options, total_gpus: int) -> np.ndarray | None:
    """Each job's best option (an index into `options`) when these fit on `total_gpus`
    together, else None. The objective is a sum over jobs, so then no allocation is better:
    this is the optimum the DP finds (a lightly loaded cluster, every round of a simulation),
    at the cost of a pass over the options instead of jobs x GPUs. Only where each job's best
    is unique and beats its next option by more than rounding in the DP's sums could bridge
    (`OWN_BEST_GAP`) does it answer, so the answer is the DP's, ties and all; else None."""
    n = len(options.start) - 1
    if n == 0 or len(options.value) == 0:
        return None
    starts = options.start[:-1]
    best = np.maximum.reduceat(options.value, starts)
    is_best = options.value == best[options.owner]
    # the first (fewest GPUs) best of each job; a job whose best is NaN has none
    at_best = np.flatnonzero(is_best)
    jobs_with, first = np.unique(options.owner[at_best], return_index=True)
    if len(jobs_with) != n:
        return None
    chosen = at_best[first]
    if int(options.gpus[chosen].sum()) > total_gpus:
        return None
    others = options.value.copy()
    others[chosen] = -np.inf
    second = np.maximum.reduceat(others, starts)  # -inf for a job of one option
    margin = own_best_margin(float(np.abs(best).sum()))
    if not (best - second > margin).all():  # an exact or near tie, or NaN: the DP decides
        return None
    return chosen


def _exact(options: _Options, total_gpus: int) -> np.ndarray:
    """The GPU count of each job in an optimal allocation (the DP over jobs × GPUs used)."""
    # no column above the jobs' largest usable counts summed is ever reached (best[c] stays
    # -inf there): the tables stop at it, the same DP on the columns that matter (on a
    # lightly loaded cluster of 10^4 GPUs, a few hundred)
    ends = options.start[1:]
    largest = options.gpus[ends[ends > options.start[:-1]] - 1]  # each job's options ascend
    width = min(total_gpus, int(largest.sum())) + 1
    table, _ = options.dense(width - 1)
    n = len(table)
    # best[c] = best total value of the jobs so far using exactly c GPUs.
    best = np.full(width, -np.inf)
    best[0] = 0.0
    choice = np.zeros((n, width), dtype=np.int32)
    # padded[width + c - g] = best[c - g] (-inf for c < g); window[c, t] = padded[c + t] is a
    # strided view, so window[c, width - g] = best[c - g] needs no copy of `best`.
    padded = np.full(2 * width, -np.inf)
    window = sliding_window_view(padded, width + 1)
    columns = np.arange(width)
    reach = 0  # the most GPUs the jobs so far can use: best[c] is -inf above it
    for i in range(n):
        usable = options.gpus[options.start[i] : options.start[i + 1]]
        padded[width:] = best
        # candidates[c, k] = best[c - g_k] + value of this job on g_k GPUs: one column per
        # usable count, so a job costs (GPUs + 1) × its choices (see `dp_cells`); only the
        # rows c the jobs so far can reach, the others stay -inf
        lo, hi = int(usable[0]), int(usable[-1])
        reach = min(reach + hi, width - 1)
        rows = reach + 1
        if hi - lo + 1 == usable.size:  # a contiguous range: a view, no gather
            shifted = window[:rows, width - hi : width - lo + 1][:, ::-1]
            candidates = shifted + table[i, lo : hi + 1]
        else:
            candidates = window[:rows, width - usable] + table[i, usable]
        pick = candidates.argmax(axis=1)  # first maximum: the fewest GPUs on ties
        best[:rows] = candidates[columns[:rows], pick]
        choice[i, :rows] = usable[pick]
    used = int(np.argmax(best))  # the fewest GPUs reaching the optimum
    if not np.isfinite(best[used]):
        raise InfeasibleAllocationError(
            f"no allocation meets every job's GPU limits on {total_gpus} GPUs"
        )
    gpus = np.zeros(n, dtype=np.int64)
    for i in range(n - 1, -1, -1):
        gpus[i] = choice[i, used]
        used -= gpus[i]
    return gpus


def allocate_hull(jobs: Sequence[ElasticJob], total_gpus: int) -> Solution:
    """Marginal gains along each job's upper concave hull (weighted samples/s against GPUs,
    from the fewest GPUs it can run on), taken in order of gain per GPU while they fit; then
    GPUs left over go to the single moves that add the most. The work is a sort of the jobs'
    hull segments, so 10,000 jobs on 10,000 GPUs take well under a second.

    The fractional solution along the hulls (the same order, the first segment that does
    not fit taken in part) is at least the optimum: `Solution.upper_bound`.
    """
    options = _options(jobs, total_gpus)
    _check_minimums(jobs, options, total_gpus)
    return _hull(jobs, options, total_gpus)


def _upper_hull(options: _Options) -> np.ndarray:
    """A mask of the options on their job's upper concave hull (GPUs against value): a point
    under the chord of its hull neighbours is not on it, so removing every such point at
    once is exact; repeated until none is left."""
    alive = np.ones(len(options.gpus), dtype=bool)
    x, y, owner = options.gpus.astype(float), options.value, options.owner
    while True:
        idx = np.flatnonzero(alive)
        if idx.size < 3:
            return alive
        prev, mid, nxt = idx[:-2], idx[1:-1], idx[2:]
        inner = (owner[prev] == owner[mid]) & (owner[nxt] == owner[mid])
        # mid on or under the chord prev-nxt: (y_mid - y_prev)(x_nxt - x_prev) <= ...
        cross = (y[mid] - y[prev]) * (x[nxt] - x[prev]) - (y[nxt] - y[prev]) * (x[mid] - x[prev])
        under = inner & (cross <= 0)
        if not under.any():
            return alive
        alive[mid[under]] = False


def _hull(jobs: Sequence[ElasticJob], options: _Options, total_gpus: int) -> Solution:
    n = len(jobs)
    first = options.start[:-1]  # each job starts on its fewest GPUs (checked to fit)
    chosen = first.copy()
    free = total_gpus - int(options.gpus[first].sum())
    on_hull = np.flatnonzero(_upper_hull(options))
    # hull segments: consecutive hull points of one job, with the GPUs and value they add
    a, b = on_hull[:-1], on_hull[1:]
    same = options.owner[a] == options.owner[b]
    a, b = a[same], b[same]
    extra = options.gpus[b] - options.gpus[a]
    gain = options.value[b] - options.value[a]
    slope = gain / extra
    useful = slope > 0
    a, b, extra, gain, slope = a[useful], b[useful], extra[useful], gain[useful], slope[useful]
    # best gain per GPU first; within a job slopes fall, so its segments stay in order
    order = np.lexsort((options.gpus[a], options.owner[a], -slope))
    a, b, extra, gain, slope = a[order], b[order], extra[order], gain[order], slope[order]
    # the longest prefix that fits is taken whole; past it, each segment in turn
    fits = int(np.searchsorted(np.cumsum(extra), free, side="right"))
    np.maximum.at(chosen, options.owner[b[:fits]], b[:fits])
    free -= int(extra[:fits].sum())
    bound = float(gain[:fits].sum()) + (gain[fits] * free / extra[fits] if fits < len(b) else 0)
    stuck = np.zeros(n, dtype=bool)  # a job whose next segment did not fit takes no more
    owners_b = options.owner[b]
    for k in range(fits, len(b)):
        if free == 0:
            break
        job = owners_b[k]
        if stuck[job] or chosen[job] != a[k]:
            stuck[job] = True
            continue
        if extra[k] <= free:
            chosen[job], free = b[k], free - int(extra[k])
        else:
            stuck[job] = True
    chosen = _spend_left_over(options, chosen, free)
    value = float(options.value[chosen].sum())
    upper = float(options.value[first].sum()) + bound
    return Solution(_result(jobs, options, chosen), value, max(upper, value), exact=False)


def _spend_left_over(
    options: _Options, chosen: np.ndarray, free: int, rounds: int = 64
) -> np.ndarray:
    """Give GPUs left over to the move (one job to a larger usable count that fits) that adds
    the most value, again while one adds any, for at most `rounds` moves (each costs a pass
    over every option; the gap that may remain is in the proven bound)."""
    chosen = chosen.copy()
    for _ in range(rounds):
        if free <= 0:
            return chosen
        now = chosen[options.owner]
        extra = options.gpus - options.gpus[now]
        gain = np.where((extra > 0) & (extra <= free), options.value - options.value[now], 0.0)
        best = int(np.argmax(gain))
        if not gain[best] > 0:
            return chosen
        chosen[options.owner[best]] = best
        free -= int(extra[best])
    return chosen


def allocate_greedy(jobs: Sequence[ElasticJob], total_gpus: int) -> Allocation:
    """Marginal-gain greedy baseline: start every job at the fewest GPUs it can run on, then
    repeatedly grow the job whose next usable GPU count adds the most weighted throughput per
    extra GPU, while GPUs remain and the gain is positive. Not optimal; compare with `allocate`.
    """
    options = _options(jobs, total_gpus)
    _check_minimums(jobs, options, total_gpus)
    value, _ = options.dense(total_gpus)
    finite = np.isfinite(value)
    gpus = finite.argmax(axis=1)
    free = total_gpus - int(gpus.sum())
    while free > 0:
        gain, step = np.full(len(jobs), -np.inf), np.zeros(len(jobs), dtype=np.int64)
        for i, g in enumerate(gpus):
            larger = np.flatnonzero(finite[i, g + 1 : g + 1 + free])
            if larger.size:
                step[i] = larger[0] + 1
                gain[i] = (value[i, g + step[i]] - value[i, g]) / step[i]
        i = int(np.argmax(gain))
        if not gain[i] > 0:
            break
        gpus[i] += step[i]
        free -= int(step[i])
    return _result(jobs, options, _chosen_at(options, gpus))


def allocate_exhaustive(jobs: Sequence[ElasticJob], total_gpus: int) -> Allocation:
    """Brute force over every combination of GPU counts; for checking `allocate` on tiny cases."""
    options = _options(jobs, total_gpus)
    _check_minimums(jobs, options, total_gpus)
    ranges = [range(options.start[i], options.start[i + 1]) for i in range(len(jobs))]
    best_value, best = -math.inf, None
    for combo in itertools.product(*ranges):
        if options.gpus[list(combo)].sum() <= total_gpus:
            value = options.value[list(combo)].sum()
            if value > best_value:
                best_value, best = value, combo
    if best is None:
        raise InfeasibleAllocationError(f"no allocation fits on {total_gpus} GPUs")
    return _result(jobs, options, np.asarray(best, dtype=np.int64))


def total_throughput(jobs: Sequence[ElasticJob], allocation: Allocation) -> float:
    """Total weighted throughput of `allocation` (samples/s)."""
    return sum(
        job.weight * job.throughput[allocation[job.job_id]]
        for job in jobs
        if allocation[job.job_id][0] > 0
    )
