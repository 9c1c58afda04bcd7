"""The candidate configurations of one job: every (GPU pool, GPU count, node count, local
batch size), GPUs spread as evenly as possible over the nodes, built as one DataFrame; and those
rows as the contract's check returns them, checking one row per pool (`checked_candidates`)."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from perfcast.datasets.contract import (
    MAX_GPUS,
    MAX_GPUS_PER_NODE,
    MAX_LOCAL_BATCH_SIZE,
    MAX_NODES,
    at_most_text,
    validate_prediction_rows,
    validates_as_is,
)
from perfcast.datasets.placements import even_placement
from perfcast.errors import ContractError, PerfcastError
from perfcast.predictor.backend import TASK_TABLES
from perfcast.predictor.base import CheckedRows

CONFIG_COLUMNS = ("gpu_type", "num_nodes", "num_gpus", "placement", "local_batch_size")


@dataclass(frozen=True)
class GpuPool:
    """GPUs of one type available to the job: `nodes` nodes of `gpus_per_node` each."""

    gpu_type: str
    gpus_per_node: int
    nodes: int
    price_per_gpu_hour: float | None = None

    def __post_init__(self) -> None:
        where = f"GPU pool {self.gpu_type!r}"
        if not self.gpu_type or self.gpu_type != self.gpu_type.lower():
            raise PerfcastError(f"{where}: gpu_type must be a non-empty lower-case name")
        if self.gpus_per_node < 1 or self.nodes < 1:
            raise PerfcastError(f"{where}: gpus_per_node and nodes must be >= 1")
        # the contract's bounds of a scaling row: every candidate of the pool is within them
        # (`checked_candidates` checks one row per pool)
        for what, value, bound in (
            ("gpus_per_node", self.gpus_per_node, MAX_GPUS_PER_NODE),
            ("nodes (num_nodes)", self.nodes, MAX_NODES),
            ("gpus_per_node * nodes (num_gpus)", self.gpus_per_node * self.nodes, MAX_GPUS),
        ):
            if value > bound:
                raise PerfcastError(f"{where}: {at_most_text(what, bound)}, got {value}")
        price = self.price_per_gpu_hour
        if price is not None and not (math.isfinite(price) and price >= 0):
            raise PerfcastError(f"{where}: price_per_gpu_hour must be >= 0, got {price}")


def enumerate_candidates(
    job: Mapping[str, object],
    pools: Sequence[GpuPool],
    local_batch_sizes: Sequence[int],
    gpu_counts: Sequence[int] | None = None,
) -> pd.DataFrame:
    """Every (pool, GPU count, node count, local batch size), GPUs spread evenly over nodes.

    One-GPU rows are always included (they are the reference for scaling efficiency); the
    `in_search` column says whether a row's GPU count is one the caller asked for.
    """
    if "job" not in job or not str(job["job"]):
        raise PerfcastError("the job description needs a non-empty 'job' name")
    clash = sorted(set(job) & {*CONFIG_COLUMNS, "in_search", "price_per_gpu_hour"})
    if clash:
        raise PerfcastError(f"the job description must not set {', '.join(clash)}")
    if not pools:
        raise PerfcastError("no GPU pools given")
    sizes = np.unique(np.asarray(local_batch_sizes, dtype=np.int64))
    if sizes.size == 0 or sizes[0] < 1:
        raise PerfcastError("local_batch_sizes must be a non-empty list of integers >= 1")
    if sizes[-1] > MAX_LOCAL_BATCH_SIZE:
        text = at_most_text("local_batch_size", MAX_LOCAL_BATCH_SIZE)
        raise PerfcastError(f"local_batch_sizes: {text}, got {sizes[-1]}")
    wanted = None if gpu_counts is None else np.unique(np.asarray(gpu_counts, dtype=np.int64))
    if wanted is not None and (wanted.size == 0 or wanted[0] < 1):
        raise PerfcastError("gpu_counts must be a non-empty list of integers >= 1")
    types = [p.gpu_type for p in pools]
    if len(set(types)) != len(types):
        raise PerfcastError("each gpu_type may appear in only one pool")
    per_pool = [_pool_candidates(pool, sizes, wanted) for pool in pools]
    columns = {name: _joined_pools([c[name] for c in per_pool]) for name in per_pool[0]}
    n = len(columns["num_gpus"])
    for name, value in job.items():
        # text as a categorical of one value: one string, not one per candidate
        columns[name] = _constant(value, n) if isinstance(value, str) else value
    return pd.DataFrame(columns)  # one frame made, not one per pool concatenated


def _joined_pools(parts: list[np.ndarray | pd.Categorical]) -> np.ndarray | pd.Categorical:
    """One column of the pools' candidates, in pool order: categoricals by the union of
    their categories."""
    if len(parts) == 1:
        return parts[0]
    if isinstance(parts[0], pd.Categorical):
        return union_categoricals(parts)
    return np.concatenate(parts)


def _constant(value: str, n: int) -> pd.Categorical:
    return pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=[value])


def candidate_count(
    pools: Sequence[GpuPool], local_batch_sizes: Sequence[int], gpu_counts: Sequence[int] | None
) -> int:
    """How many rows `enumerate_candidates` makes, worked out without making them (a request
    is refused on this before any work)."""
    sizes = len(set(local_batch_sizes))
    total = 0
    for pool in pools:
        per_node, nodes = pool.gpus_per_node, pool.nodes
        if gpu_counts is None:  # every g with k <= g <= k * per_node, for k = 1..nodes
            total += (per_node - 1) * nodes * (nodes + 1) // 2 + nodes
            continue
        for g in {1, *gpu_counts}:  # node counts from the fewest that hold g to g itself
            total += max(0, min(g, nodes) - math.ceil(g / per_node) + 1)
    return total * sizes


@functools.lru_cache(maxsize=64)
def _layout(
    per_node: int, pool_nodes: int, wanted: tuple[int, ...] | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, pd.CategoricalDtype]:
    """(GPUs, nodes, placement code, placements) of every (GPU count, node count) of a pool
    shape: the same for every request on that shape, so made once (10^4 placement strings)."""
    total = per_node * pool_nodes
    counts = np.arange(1, total + 1) if wanted is None else np.union1d([1], wanted)
    counts = counts[counts <= total]
    nodes = np.arange(1, pool_nodes + 1)
    gpus, spread = (a.ravel() for a in np.meshgrid(counts, nodes, indexing="ij"))
    fits = (spread <= gpus) & (gpus <= spread * per_node)
    gpus, spread = gpus[fits], spread[fits]
    placements = [even_placement(int(g), int(k)) for g, k in zip(gpus, spread, strict=True)]
    # each (GPUs, nodes) has its own placement string; code -1 is a missing placement
    known = np.array([p is not None for p in placements], dtype=bool)
    codes = np.where(known, np.cumsum(known) - 1, -1)
    for array in (gpus, spread, codes):
        array.flags.writeable = False
    return gpus, spread, codes, pd.CategoricalDtype([p for p in placements if p])


def _pool_candidates(
    pool: GpuPool, sizes: np.ndarray, wanted: np.ndarray | None
) -> dict[str, np.ndarray | pd.Categorical]:
    """The columns of one pool's candidates, in the candidate table's order."""
    key = None if wanted is None else tuple(wanted.tolist())
    gpus, spread, codes, placements = _layout(pool.gpus_per_node, pool.nodes, key)
    rows = len(gpus)
    in_search = np.ones(rows, bool) if wanted is None else np.isin(gpus, wanted)
    price = np.nan if pool.price_per_gpu_hour is None else pool.price_per_gpu_hour
    return {
        "gpu_type": _constant(pool.gpu_type, rows * sizes.size),
        "num_nodes": np.repeat(spread, sizes.size),
        "num_gpus": np.repeat(gpus, sizes.size),
        # categorical: one string per (GPUs, nodes), not one per row (10^6 rows stay cheap)
        "placement": pd.Categorical.from_codes(np.repeat(codes, sizes.size), dtype=placements),
        "local_batch_size": np.tile(sizes, rows),
        "in_search": np.repeat(in_search, sizes.size),
        "price_per_gpu_hour": np.full(rows * sizes.size, price),
    }


def checked_candidates(candidates: pd.DataFrame) -> CheckedRows:
    """`enumerate_candidates`' rows as the contract's check of prediction rows returns them
    (`CheckedRows`, which a predictor does not check again), checking the first row of each
    GPU pool only: the others differ from it in the columns that `enumerate_candidates`
    builds valid (GPUs, nodes, their placement, batch sizes >= 1), and the job's values are
    the request's, repeated. Where those rows' values are plain and valid and no column needs
    coercing (`contract.validates_as_is`), the candidates are the checked rows as they are;
    else the rows are checked as a frame, and a job column the check coerces takes its
    coerced value (text stays categorical: its one string). Where a pool's row fails, the
    whole table is checked, so the error is the one it always was."""
    kind, targets = TASK_TABLES["scaling"]
    source = "scaling prediction rows"  # as `TaskPredictor._check_rows` names them
    first = np.unique(candidates["gpu_type"].cat.codes.to_numpy(), return_index=True)[1]
    if validates_as_is(candidates, candidates.iloc[first], kind, exclude=targets):
        return CheckedRows(candidates)  # the job's values plain and valid, nothing to coerce
    # their values as text, not a categorical's 10^4 placements checked for a few rows
    text = [n for n, t in candidates.dtypes.items() if isinstance(t, pd.CategoricalDtype)]
    pool_rows = candidates.iloc[first].astype(dict.fromkeys(text, object))
    try:
        clean = validate_prediction_rows(pool_rows, kind, targets, source=source)
    except ContractError:
        return CheckedRows(validate_prediction_rows(candidates, kind, targets, source=source))
    checked = CheckedRows(candidates.copy(deep=False))
    repeat = np.zeros(len(candidates), dtype=np.intp)
    for name, column in clean.items():
        if name in ("gpu_type", "placement") or column.dtype == pool_rows[name].dtype:
            continue  # built valid, or as it was
        if name in text and isinstance(column.dtype, pd.StringDtype):
            continue  # a categorical's text, the same strings
        checked[name] = column.take(repeat).set_axis(candidates.index)
    return checked
