"""The recommendation's short list: the best ranked rows, diverse (no two the same GPU type,
count and spread unless nothing else is left), read off 10^5 ranked candidates without sorting
them all, and the Pareto front of time against cost."""

from __future__ import annotations

import numpy as np
import pandas as pd

from perfcast.optimizer.scoring import Scored, dense_codes, kind_codes

# Up to this many feasible rows, the recommendation ranks them all with one lexsort.
RANK_ALL_ROWS = 2048


def ranked_for_front(
    scored: Scored | pd.DataFrame, rows: np.ndarray, keys: list[np.ndarray], top_k: int
) -> np.ndarray:
    """Positions in `rows` (the feasible rows, ascending) of the rows `diverse_front` reads,
    in rank order: by `keys` (the primary first; NaN last), then by position, as
    `np.lexsort(keys[::-1])` orders every row. Past RANK_ALL_ROWS rows, only these are sorted:
    the first `top_k` (the best and the fill), the first of each GPU type (which numbers the
    types) and each (GPU type, GPUs) group's best by time, then cost, then rank (the front's
    candidates). `diverse_front` chooses the same rows from them as from every row ranked:
    each of its steps reads only these rows, or rows that rank after them."""
    if len(rows) <= RANK_ALL_ROWS:
        return np.lexsort(keys[::-1])
    every = len(rows) == len(scored)  # (ascending: each row at its place)
    time, cost, gpus = _front_axes(scored, None if every else rows)
    kind = kind_codes(scored) if every else kind_codes(scored)[rows]
    group = kind * (int(gpus.max()) + 1) + gpus.astype(np.int64)
    needed = [_leading(keys, top_k), _first_per_group(group, [time, cost, *keys])]
    if kind.min() < kind.max():  # (of one GPU type, the first row is the first `_leading`)
        needed.append(_first_per_group(kind, keys))
    subset = np.unique(np.concatenate(needed))
    return subset[np.lexsort([key[subset] for key in keys[::-1]])]


def _front_axes(
    scored: Scored | pd.DataFrame, rows: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`diverse_front`'s (time, cost, GPUs) of `rows` (None: every row): the total time
    (1 / throughput without work) and the cost (GPU-time on unpriced pools)."""

    def at_rows(name: str) -> np.ndarray:
        values = np.asarray(scored[name], dtype=float)
        return values if rows is None else values[rows]

    gpus, time, cost = at_rows("num_gpus"), at_rows("total_time_s"), at_rows("cost")
    if not np.isfinite(time).all():
        time = np.where(np.isfinite(time), time, 1 / at_rows("throughput"))
    if not np.isfinite(cost).all():
        cost = np.where(np.isfinite(cost), cost, time * gpus)
    return time, cost, gpus


def _leading(keys: list[np.ndarray], count: int) -> np.ndarray:
    """Positions (ascending) of rows among which are the first `count` in the order of
    `keys` then position (NaN last): those whose primary key is at most the `count`-th
    smallest, ties included; where fewer rows have one, the rest from the NaN rows."""
    primary, n = keys[0], len(keys[0])
    if count >= n:
        return np.arange(n)
    nan = np.isnan(primary)
    if not nan.any():
        return np.flatnonzero(primary <= np.partition(primary, count - 1)[count - 1])
    known = np.flatnonzero(~nan)
    if len(known) > count:
        kth = np.partition(primary[known], count - 1)[count - 1]
        return np.flatnonzero(primary <= kth)
    missing = np.flatnonzero(nan)
    if len(keys) == 1:  # no key left: the NaN rows in position order
        return np.concatenate([known, missing[: count - len(known)]])
    rest = _leading([key[missing] for key in keys[1:]], count - len(known))
    return np.sort(np.concatenate([known, missing[rest]]))


def _first_per_group(group: np.ndarray, keys: list[np.ndarray]) -> np.ndarray:
    """The first position of each group in the order of `keys` then position (NaN last, as
    a sort puts it), without sorting: each key keeps, per group, the rows at its least value
    among those the keys before kept (all of them where those are all NaN)."""
    codes, groups = dense_codes(group)
    alive = np.arange(len(group))
    for values in keys:
        every = len(alive) == len(group)
        value, code = (values, codes) if every else (values[alive], codes[alive])
        mine = _least_per_group(value, code, groups)[code]  # NaN where the group's all are
        alive = alive[(value == mine) | np.isnan(mine)]
    first = np.full(groups, len(group))
    np.minimum.at(first, codes[alive], alive)
    return first[first < len(group)]


def _least_per_group(values: np.ndarray, codes: np.ndarray, groups: int) -> np.ndarray:
    """Each group's least value, NaN skipped (NaN where all are, or none): one reduction
    over runs of equal codes where the codes never decrease (the candidates, in pool and GPU
    order), else np.fmin.at."""
    least = np.full(groups, np.nan)
    starts = np.flatnonzero(np.diff(codes, prepend=-1))
    if (np.diff(codes[starts]) > 0).all():  # each group one run of rows
        least[codes[starts]] = np.fmin.reduceat(values, starts)
    else:
        np.fmin.at(least, codes, values)
    return least


def diverse_front(scored: Scored | pd.DataFrame, ranked: np.ndarray, top_k: int) -> np.ndarray:
    """Positions in `ranked` (feasible rows, best first) of up to `top_k` configurations that
    differ: the best, then configurations on the Pareto front of time, cost and GPUs, each as
    far (in log scale) from those already chosen as possible, in rank order. Without this the
    top five of a large search are one option five times (32, 31, 30, 29, 28 GPUs).

    Time is the total time (or 1 / throughput without work), cost the price (or GPU-time on
    unpriced pools). The front is taken over the best row per GPU type and count: at the same
    GPUs of one pool, more time also costs more. Short fronts are filled in rank order."""
    if len(ranked) <= 1:
        return np.arange(len(ranked))
    time, cost, gpus = _front_axes(scored, ranked)
    # GPU types numbered in rank order (codes of the whole column first: no strings hashed)
    kind = pd.factorize(kind_codes(scored)[ranked])[0]
    group = kind * (int(gpus.max()) + 1) + gpus.astype(np.int64)
    candidates = _best_per_group(group, time, cost)
    candidates = candidates[np.lexsort((gpus[candidates], cost[candidates], time[candidates]))]
    front = _pareto_front(candidates, cost, gpus)
    points = np.log(np.column_stack([time, cost, gpus])[front])
    span = np.ptp(points, axis=0)
    points = points / np.where(span > 0, span, 1.0)
    chosen = [0]  # the objective's best, on the front or not
    distance = np.linalg.norm(points - np.log(np.array([time[0], cost[0], gpus[0]])) /
                              np.where(span > 0, span, 1.0), axis=1)  # fmt: skip
    while len(chosen) < top_k and distance.max() > 0:
        far = int(distance.argmax())
        chosen.append(front[far])
        distance = np.minimum(distance, np.linalg.norm(points - points[far], axis=1))
    rest = (i for i in range(len(ranked)) if i not in set(chosen))
    while len(chosen) < min(top_k, len(ranked)):
        chosen.append(next(rest))
    return np.array(sorted(chosen), dtype=np.int64)


def _pareto_front(candidates: np.ndarray, cost: np.ndarray, gpus: np.ndarray) -> list[int]:
    """The `candidates` (by time) no earlier one dominates: one at most as costly on as few
    GPUs or fewer. An earlier point dropped was itself dominated by a kept one, which then
    dominates what it dominates, so comparing against every earlier point (all at once, up to
    FRONT_BLOCK candidates) keeps what comparing against the kept ones kept."""
    if len(candidates) > FRONT_BLOCK:
        front: list[int] = []
        for i in candidates:  # by time: a point is dominated by an earlier one cheaper on both
            kept = np.asarray(front, dtype=np.int64)
            if front and ((cost[kept] <= cost[i]) & (gpus[kept] <= gpus[i])).any():
                continue
            front.append(int(i))
        return front
    c, g = cost[candidates], gpus[candidates]
    earlier = np.tri(len(candidates), k=-1, dtype=bool)  # [i, j]: j before i
    dominated = (earlier & (c[None, :] <= c[:, None]) & (g[None, :] <= g[:, None])).any(axis=1)
    return [int(i) for i in candidates[~dominated]]


FRONT_BLOCK = 2048


def _best_per_group(group: np.ndarray, time: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """The first position of each group with its least time, then its least cost (NaN last,
    as a sort puts it), the groups in increasing order: the first row of each group in
    `np.lexsort((positions, cost, time, group))`, without sorting every row."""
    codes, groups = pd.factorize(group)
    alive = np.ones(len(group), dtype=bool)
    for values in (time, cost):  # each key decides among the rows the one before kept
        rows = np.flatnonzero(alive)
        least = np.full(len(groups), np.nan)
        np.fmin.at(least, codes[rows], values[rows])  # NaN only where the group's all are
        mine = least[codes[rows]]
        alive[rows[(values[rows] != mine) & ~np.isnan(mine)]] = False
    rows = np.flatnonzero(alive)
    first = np.full(len(groups), len(group))
    np.minimum.at(first, codes[rows], rows)
    return first[np.argsort(groups, kind="stable")]
