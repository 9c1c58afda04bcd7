"""One job's best configuration: GPU type, GPU count, placement over nodes and local batch size.

`recommend` enumerates every candidate in one DataFrame (GPU type × GPU count × node count ×
local batch size, GPUs spread as evenly as possible over the nodes), asks the prediction backend
for all their step times in ONE `predict("scaling", ...)` call (`predict_checked` where the
backend takes rows already checked: the request is checked once, not each candidate), derives
throughput, scaling efficiency, total time and cost (each with the interval implied by the step
time's p10/p90) as arrays, filters by deadline and budget, ranks by the objective and explains
the top few in one line each, a frame made of those rows only. Everything after the prediction
is column arithmetic, so 10^6 candidates are scored in about a second plus the backend's own
time (see docs/BENCHMARKS.md, section `optimizer`).

`search_engine_knobs` is the other half: continuous or very large spaces (threads, memory
limit, shuffle partitions of a big-data engine) searched with Optuna's seeded TPE sampler.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Literal, Protocol, runtime_checkable

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
from perfcast.predictor.backend import TASK_TABLES, PredictionBackend, Task
from perfcast.units import duration

Objective = Literal["min_time", "min_cost", "max_throughput_per_gpu"]
OBJECTIVES: tuple[Objective, ...] = ("min_time", "min_cost", "max_throughput_per_gpu")
CONFIG_COLUMNS = ("gpu_type", "num_nodes", "num_gpus", "placement", "local_batch_size")


class NoFeasibleConfigError(PerfcastError):
    """No candidate meets the deadline or the budget."""


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


@dataclass(frozen=True)
class Work:
    """How much the job has to do: `samples` in total, or `iterations` (steps) in total."""

    samples: float | None = None
    iterations: float | None = None

    def __post_init__(self) -> None:
        given = [v for v in (self.samples, self.iterations) if v is not None]
        if len(given) != 1 or not (math.isfinite(given[0]) and given[0] > 0):
            raise PerfcastError("work needs exactly one of samples or iterations, a number > 0")


@dataclass
class Recommendation:
    """The ranked top configurations and how many candidates were looked at."""

    top: pd.DataFrame  # one row per configuration, best first, with a `reason` column
    objective: str
    candidates: int  # enumerated and predicted
    unpredicted: int  # the backend gave no step time (NaN): dropped
    infeasible: int  # over the deadline or the budget
    notes: list[str] = field(default_factory=list)


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


@runtime_checkable
class CheckedRowsBackend(PredictionBackend, Protocol):
    """A backend that also predicts rows already checked against the data contract without
    checking them again (`serving.models.ServedModels`, the in-process champions): given the
    candidates of a checked request (`checked_candidates`), the 10^5 rows are not checked
    one by one."""

    def predict_checked(self, task: Task, rows: pd.DataFrame) -> pd.DataFrame: ...


def checked_candidates(candidates: pd.DataFrame) -> pd.DataFrame:
    """`enumerate_candidates`' rows as the contract's check of prediction rows returns them,
    checking the first row of each GPU pool only: the others differ from it in the columns
    that `enumerate_candidates` builds valid (GPUs, nodes, their placement, batch sizes >= 1),
    and the job's values are the request's, repeated. Where those rows' values are plain and
    valid and no column needs coercing (`contract.validates_as_is`), the candidates are the
    checked rows as they are; else the rows are checked as a frame, and a job column the check
    coerces takes its coerced value (text stays categorical: its one string). Where a pool's
    row fails, the whole table is checked, so the error is the one it always was."""
    kind, targets = TASK_TABLES["scaling"]
    source = "scaling prediction rows"  # as `TaskPredictor._check_rows` names them
    first = np.unique(candidates["gpu_type"].cat.codes.to_numpy(), return_index=True)[1]
    if validates_as_is(candidates, candidates.iloc[first], kind, exclude=targets):
        return candidates  # the job's values plain and valid, no column to coerce
    # their values as text, not a categorical's 10^4 placements checked for a few rows
    text = [n for n, t in candidates.dtypes.items() if isinstance(t, pd.CategoricalDtype)]
    pool_rows = candidates.iloc[first].astype(dict.fromkeys(text, object))
    try:
        clean = validate_prediction_rows(pool_rows, kind, targets, source=source)
    except ContractError:
        return validate_prediction_rows(candidates, kind, targets, source=source)
    checked = candidates.copy(deep=False)
    repeat = np.zeros(len(candidates), dtype=np.intp)
    for name, column in clean.items():
        if name in ("gpu_type", "placement") or column.dtype == pool_rows[name].dtype:
            continue  # built valid, or as it was
        if name in text and isinstance(column.dtype, pd.StringDtype):
            continue  # a categorical's text, the same strings
        checked[name] = column.take(repeat).set_axis(candidates.index)
    return checked


def score_candidates(
    candidates: pd.DataFrame, backend: PredictionBackend, work: Work | None
) -> pd.DataFrame:
    """Add predicted step time, throughput, efficiency, total time and cost, with intervals.

    Calls `backend.predict("scaling", ...)` once. Columns with `_p10`/`_p90` are the values
    implied by the step time's p10/p90 (for throughput, p10 comes from the p90 step time).
    """
    return _Scored(candidates, backend.predict("scaling", candidates), work).frame()


def _predicted(candidates: pd.DataFrame, backend: PredictionBackend) -> pd.DataFrame:
    """The backend's answer for `enumerate_candidates`' rows: `predict_checked` of
    `checked_candidates` where it has one, else `predict`."""
    if isinstance(backend, CheckedRowsBackend):
        return backend.predict_checked("scaling", checked_candidates(candidates))
    return backend.predict("scaling", candidates)


class _Scored:
    """`score_candidates`' columns without its frame of 10^5 rows: the candidates' columns
    and the new ones as arrays, by name (a new column replaces a job column of its name, as
    in the frame); `rows` makes the frame of only the rows asked for. Of every candidate,
    only the columns ranking reads are worked out at first; the `_ANSWER_ONLY` ones at the
    answer's rows, or of every row once one of them is asked for by name."""

    def __init__(self, candidates: pd.DataFrame, pred: pd.DataFrame, work: Work | None) -> None:
        if len(pred) != len(candidates):
            raise PerfcastError(
                f"the prediction backend answered {len(pred)} rows for {len(candidates)} candidates"
            )
        self.candidates = candidates.reset_index(drop=True)
        self.pred, self.work = pred, work
        self.new = _score_columns(self.candidates, pred, work, ranked_only=True)

    def __len__(self) -> int:
        return len(self.candidates)

    def __getitem__(self, name: str) -> np.ndarray | pd.Series:
        if name in _ANSWER_ONLY and name not in self.new:  # (a deadline's p90 time, say)
            self.new = _score_columns(self.candidates, self.pred, self.work)
        return self.new[name] if name in self.new else self.candidates[name]

    def frame(self) -> pd.DataFrame:
        return _joined(self.candidates, _score_columns(self.candidates, self.pred, self.work))

    def rows(self, positions: np.ndarray) -> pd.DataFrame:
        """`frame().iloc[positions]`, its index 0, 1, ...: the rows' columns worked out at
        them, each row's one-GPU reference found among every candidate."""
        chosen = self.candidates.iloc[positions].reset_index(drop=True)
        reference = _single_gpu_throughput(self.candidates, self.new["throughput"])[positions]
        pred = self.pred.iloc[positions]
        return _joined(chosen, _score_columns(chosen, pred, self.work, reference=reference))


def _joined(out: pd.DataFrame, new: dict[str, np.ndarray]) -> pd.DataFrame:
    """The candidates `out` (a 0, 1, ... index) with the `new` columns."""
    if any(name in out.columns for name in new):  # a job column of the same name: replaced
        out = out.copy(deep=False)
        for name, values in new.items():
            out[name] = values
        return out
    return pd.concat([out, pd.DataFrame(new, index=out.index)], axis=1)


_QUANTILES = ("", "_p10", "_p90")
# What `score_candidates` adds that ranking does not read of every candidate: the intervals
# and the efficiencies, read for the answer's few rows. The p90 total time (and the p10
# throughput it comes from) is ranking's: `min_time` ranks by it, a deadline is checked on it.
_ANSWER_ONLY = frozenset(
    {"throughput_p90", "total_time_s_p10", "cost_p10", "cost_p90"}
    | {f"scaling_efficiency{q}" for q in _QUANTILES}
)


def _score_columns(
    out: pd.DataFrame,
    pred: pd.DataFrame,
    work: Work | None,
    reference: np.ndarray | None = None,
    ranked_only: bool = False,
) -> dict[str, np.ndarray]:
    """The columns `score_candidates` adds to the candidates `out`, as arrays; `ranked_only`:
    the medians and the p90 total time (with the p10 throughput it comes from) only, no
    efficiency (the other intervals and the efficiencies of 10^5 candidates are read for the
    answer's few rows). `reference`: each row's one-GPU throughput where `out` is some of the
    candidates (else found among `out`)."""
    # (a quantile, the opposite one it comes from): a throughput's p10 comes from the step
    # time's p90, a time's p90 from the throughput's p10; ranking reads the median and p90 time
    opposites = (("", ""), ("_p10", "_p90"), ("_p90", "_p10"))
    step = {q: pred[f"step_time_s{q}"].to_numpy(dtype=float) for q in _QUANTILES}
    gpus = out["num_gpus"].to_numpy()
    global_batch = gpus * out["local_batch_size"].to_numpy()
    # arrays, joined to the candidates at once where a frame is wanted (one column at a
    # time, each insert into a 10^5-row frame costs more than its arithmetic)
    new: dict[str, np.ndarray] = {"global_batch_size": global_batch}
    new["step_time_s"], new["step_time_s_p10"], new["step_time_s_p90"] = step.values()
    if "flags" in pred.columns:  # what the model had not seen, per candidate
        flags = pred["flags"]  # text or categorical kept as stored (no 10^5 strings made)
        text = isinstance(flags.dtype, pd.StringDtype | pd.CategoricalDtype)
        new["flags"] = flags.array if text else flags.to_numpy()
    # samples/s; the p10 of throughput comes from the p90 of step time
    for q, s in opposites[:2] if ranked_only else opposites:
        new[f"throughput{q}"] = global_batch / step[s]
    new["throughput_per_gpu"] = new["throughput"] / gpus
    if not ranked_only:
        if reference is None:
            reference = _single_gpu_throughput(out, new["throughput"])
        for q in _QUANTILES:
            # per-GPU throughput ÷ one GPU's median throughput (same type and local batch)
            per_gpu = new[f"throughput{q}"] / gpus if q else new["throughput_per_gpu"]
            new[f"scaling_efficiency{q}"] = per_gpu / reference
    price = out["price_per_gpu_hour"].to_numpy(dtype=float)
    # a total time's p10 comes from the p10 step time, i.e. the p90 throughput
    for q, opposite in opposites[::2] if ranked_only else opposites:
        if work is None:
            seconds = np.full(len(out), np.nan)
        elif work.samples is not None:
            seconds = work.samples / new[f"throughput{opposite}"]
        else:
            seconds = work.iterations * step[q]
        new[f"total_time_s{q}"] = seconds
        if ranked_only and q:
            continue  # the cost's interval: the answer's rows only
        cost = seconds / 3600  # then * gpus * price, in place
        cost *= gpus
        cost *= price
        new[f"cost{q}"] = cost
    return new


def _single_gpu_throughput(scored: pd.DataFrame, throughput: np.ndarray) -> np.ndarray:
    """For each row: the same job's throughput on one GPU of the same type at the same local
    batch size (the first such row's that has one), the reference of (weak) scaling
    efficiency; NaN where there is none."""
    kind = _kind_codes(scored)
    size, sizes = _size_codes(scored["local_batch_size"].to_numpy())
    key = kind * sizes + size
    single = np.flatnonzero((scored["num_gpus"].to_numpy() == 1) & ~np.isnan(throughput))
    table = np.full((int(kind.max()) + 1 if len(kind) else 0) * sizes, np.nan)
    table[key[single[::-1]]] = throughput[single[::-1]]  # the last write: the first row
    return table[key]


def _size_codes(sizes: np.ndarray) -> tuple[np.ndarray, int]:
    """(code of each row's local batch size, how many codes): whole batch sizes as they
    are (`_dense_codes`), others factorized."""
    if sizes.dtype.kind in "iu":
        return _dense_codes(sizes.astype(np.int64, copy=False))
    codes, uniques = pd.factorize(sizes, use_na_sentinel=False)
    return codes.astype(np.int64, copy=False), len(uniques)


def _rank_columns(objective: Objective, deadline: bool) -> tuple[list[str], list[bool]]:
    if deadline:  # meet the deadline with the fewest resources: cheapest, else fewest GPUs
        return ["cost", "num_gpus", "total_time_s"], [True, True, True]
    if objective == "min_time":  # the p90 time: what the configuration can be vouched for
        return ["total_time_s_p90", "num_gpus", "num_nodes"], [True, True, True]
    if objective == "min_cost":
        return ["cost", "total_time_s"], [True, True]
    return ["throughput_per_gpu", "throughput"], [False, False]


def recommend(
    job: Mapping[str, object],
    pools: Sequence[GpuPool],
    backend: PredictionBackend,
    *,
    local_batch_sizes: Sequence[int],
    objective: Objective = "min_time",
    work: Work | None = None,
    deadline_s: float | None = None,
    max_cost: float | None = None,
    gpu_counts: Sequence[int] | None = None,
    top_k: int = 5,
) -> Recommendation:
    """The `top_k` configurations for `job` by `objective`, best first, each with a reason.

    `min_time` ranks by the p90 total time, a risk-aware time, not the median: a
    configuration the model extrapolates to (a new job, GPU type or spread, flagged) has a
    wider interval than a measured one, so of two with the same median time the measured one
    ranks first; ties go to fewer GPUs, then fewer nodes. `min_cost` ranks by the median
    cost, `max_throughput_per_gpu` by the median samples/s per GPU. With `deadline_s`, only
    configurations whose p90 total time meets it are kept, ranked by cost (fewest GPUs when
    unpriced); `max_cost` drops those whose predicted cost exceeds it. Each reason says
    whether the step time is measured (no flags), near a measurement (only
    `extrapolated_batch` or only `extrapolated_gpus`) or extrapolated (`new_job`,
    `new_gpu_type`, `unmeasured_config`, `no_interconnect_facts`, any other flag, or both of
    those two): `_provenance`.
    """
    if objective not in OBJECTIVES:
        raise PerfcastError(f"unknown objective {objective!r}; expected one of {OBJECTIVES}")
    needs_work = objective in ("min_time", "min_cost") or deadline_s is not None
    if needs_work and work is None:
        raise PerfcastError(f"objective {objective!r} and deadlines need the job's total work")
    if top_k < 1:
        raise PerfcastError("top_k must be >= 1")
    candidates = enumerate_candidates(job, pools, local_batch_sizes, gpu_counts)
    scored = _Scored(candidates, _predicted(candidates, backend), work)
    notes: list[str] = []

    # Select and rank on numpy columns; a frame is made of the top rows only.
    def column(name: str) -> np.ndarray:
        return np.asarray(scored[name], dtype=float)

    in_search = np.asarray(scored["in_search"], dtype=bool)
    eligible = in_search & np.isfinite(column("step_time_s"))
    unpredicted = int(in_search.sum() - eligible.sum())
    if unpredicted:
        notes.append(f"{unpredicted} candidate(s) without a predicted step time were dropped")
    if objective == "min_cost" or max_cost is not None:
        priced = np.isfinite(column("price_per_gpu_hour"))
        if not (eligible & priced).any():
            raise PerfcastError("min_cost and max_cost need a price_per_gpu_hour on some pool")
        if (eligible & ~priced).any():
            notes.append("pools without a price were left out of the cost ranking")
        eligible &= priced
    feasible = eligible.copy()
    if deadline_s is not None:
        feasible &= column("total_time_s_p90") <= deadline_s
    if max_cost is not None:
        feasible &= column("cost") <= max_cost
    if not feasible.any():
        pool = {name: column(name)[eligible] for name in ("total_time_s_p90", "cost")}
        raise NoFeasibleConfigError(_nothing_feasible(pool, deadline_s, max_cost))
    rows = np.flatnonzero(feasible)
    columns, ascending = _rank_columns(objective, deadline_s is not None)
    if deadline_s is not None and np.isnan(column("cost")[rows]).all():
        columns, ascending = columns[1:], ascending[1:]
    every = len(rows) == len(scored)  # (every row feasible: no 10^5-row gathers)
    keys = [
        (column(c) if every else column(c)[rows]) * (1 if up else -1)
        for c, up in zip(columns, ascending, strict=True)
    ]
    ranked = rows[_ranked_for_front(scored, rows, keys, top_k)]
    best = ranked[_diverse_front(scored, ranked, top_k)]
    top = scored.rows(best).drop(columns=["in_search"])
    top["placement"] = top["placement"].astype("string")
    for name in ("gpu_type", *job, "flags"):  # the categoricals of text: text again
        if name in top.columns and isinstance(top[name].dtype, pd.CategoricalDtype):
            top[name] = top[name].astype(str)
    top["reason"] = _reasons(top, scored, objective, deadline_s, max_cost)
    return Recommendation(
        top=top,
        objective=objective if deadline_s is None else f"deadline {deadline_s:g} s",
        candidates=len(scored),
        unpredicted=unpredicted,
        infeasible=int(eligible.sum() - feasible.sum()),
        notes=notes,
    )


# Up to this many feasible rows, the recommendation ranks them all with one lexsort.
RANK_ALL_ROWS = 2048


def _ranked_for_front(
    scored: _Scored | pd.DataFrame, rows: np.ndarray, keys: list[np.ndarray], top_k: int
) -> np.ndarray:
    """Positions in `rows` (the feasible rows, ascending) of the rows `_diverse_front` reads,
    in rank order: by `keys` (the primary first; NaN last), then by position, as
    `np.lexsort(keys[::-1])` orders every row. Past RANK_ALL_ROWS rows, only these are sorted:
    the first `top_k` (the best and the fill), the first of each GPU type (which numbers the
    types) and each (GPU type, GPUs) group's best by time, then cost, then rank (the front's
    candidates). `_diverse_front` chooses the same rows from them as from every row ranked:
    each of its steps reads only these rows, or rows that rank after them."""
    if len(rows) <= RANK_ALL_ROWS:
        return np.lexsort(keys[::-1])
    every = len(rows) == len(scored)  # (ascending: each row at its place)
    time, cost, gpus = _front_axes(scored, None if every else rows)
    kind = _kind_codes(scored) if every else _kind_codes(scored)[rows]
    group = kind * (int(gpus.max()) + 1) + gpus.astype(np.int64)
    needed = [_leading(keys, top_k), _first_per_group(group, [time, cost, *keys])]
    if kind.min() < kind.max():  # (of one GPU type, the first row is the first `_leading`)
        needed.append(_first_per_group(kind, keys))
    subset = np.unique(np.concatenate(needed))
    return subset[np.lexsort([key[subset] for key in keys[::-1]])]


def _front_axes(
    scored: _Scored | pd.DataFrame, rows: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_diverse_front`'s (time, cost, GPUs) of `rows` (None: every row): the total time
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


def _kind_codes(scored: _Scored | pd.DataFrame) -> np.ndarray:
    """An integer code per GPU type of every scored row (a missing type its own code); a
    categorical's own codes, no strings hashed."""
    kinds = scored["gpu_type"]
    if isinstance(kinds.dtype, pd.CategoricalDtype):
        return kinds.array.codes.astype(np.int64) + 1
    return pd.factorize(kinds, use_na_sentinel=False)[0].astype(np.int64, copy=False)


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
    codes, groups = _dense_codes(group)
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


def _dense_codes(values: np.ndarray) -> tuple[np.ndarray, int]:
    """(code of each row, how many codes): non-negative integers as they are where they are
    not many more than the rows, else their factorization."""
    if len(values) and values.min() >= 0 and values.max() < max(4 * len(values), 4096):
        return values, int(values.max()) + 1
    codes, uniques = pd.factorize(values)
    return codes, len(uniques)


def _diverse_front(scored: _Scored | pd.DataFrame, ranked: np.ndarray, top_k: int) -> np.ndarray:
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
    kind = pd.factorize(_kind_codes(scored)[ranked])[0]
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


def _nothing_feasible(
    pool: Mapping[str, np.ndarray], deadline_s: float | None, max_cost: float | None
) -> str:
    """Why none of the eligible candidates (`pool`: their p90 total times and costs) fits."""
    if not len(pool["cost"]):
        return "the backend predicted no step time for any candidate"
    parts = []
    if deadline_s is not None:
        fastest = pd.Series(pool["total_time_s_p90"]).min()  # NaN skipped
        parts.append(f"the deadline of {deadline_s:g} s (fastest p90 time: {fastest:.0f} s)")
    if max_cost is not None:
        cheapest = pd.Series(pool["cost"]).min()
        parts.append(f"the budget of ${max_cost:g} (cheapest: ${cheapest:.2f})")
    return "no configuration meets " + " and ".join(parts)


def _reasons(
    top: pd.DataFrame,
    scored: _Scored | pd.DataFrame,
    objective: Objective,
    deadline_s: float | None,
    max_cost: float | None,
) -> list[str]:
    headline = {
        "min_time": "fastest at p90",
        "min_cost": "cheapest",
        "max_throughput_per_gpu": "most samples/s per GPU",
    }[objective]
    if deadline_s is not None:
        headline = f"fewest resources meeting the {duration(deadline_s)} deadline at p90"
    if max_cost is not None:
        headline += f" under the ${max_cost:g} budget"
    related = _Related(scored, top)
    reasons = []
    rows = _reason_records(top)
    for rank, row in enumerate(rows, start=1):
        what = headline if rank == 1 else f"#{rank}"
        # per-GPU throughput over one GPU's: the scaling model keeps T(n) >= T(1), above 1
        # only by rounding; a backend of measured step times goes above it by their noise
        # (1.02 on Pollux's imagenet). Shown as at most perfect scaling; the column keeps it.
        efficiency = 1.0 if row.scaling_efficiency > 1 else row.scaling_efficiency
        text = (
            f"{what}: {row.num_gpus}×{row.gpu_type} on {row.num_nodes} node(s), "
            f"{row.throughput:,.0f} samples/s, {efficiency:.0%} scaling efficiency"
        )
        if np.isfinite(row.total_time_s):
            text += f", {duration(row.total_time_s)}"
            if np.isfinite(row.total_time_s_p90):
                text += f" (p90 {duration(row.total_time_s_p90)})"
        if np.isfinite(row.cost):
            text += f", ${row.cost:.2f}"
        if rank > 1:
            text += _versus_first(rows[0], row, objective, deadline_s)
        text += related.spread_penalty(row)
        text += _provenance(row.flags)
        reasons.append(text)
    return reasons


# Flags of a step time one step from a measurement (`predictor.base.FLAGS`): alone, the
# configuration is a measured one at another local batch, or at more GPUs than measured.
_NEAR_FLAGS = frozenset({"extrapolated_batch", "extrapolated_gpus"})


def _provenance(flags: object) -> str:
    """What a configuration's step time rests on, from its `flags` (comma-separated tokens):
    measured (none), near a measurement (`extrapolated_batch` or `extrapolated_gpus` alone)
    or extrapolated (a new job, GPU type or synchronization, links assumed, any other token,
    or both of those two); nothing where the backend gave no flags (not text)."""
    if not isinstance(flags, str):
        return ""
    tokens = {token.strip() for token in flags.split(",")} - {""}
    if not tokens:
        return "; step time measured"
    if len(tokens) == 1 and tokens <= _NEAR_FLAGS:
        return "; step time near a measurement"
    return "; step time extrapolated"


# The columns a reason reads of its row.
_REASON_COLUMNS = (
    "num_gpus",
    "gpu_type",
    "num_nodes",
    "local_batch_size",
    "throughput",
    "throughput_per_gpu",
    "scaling_efficiency",
    "total_time_s",
    "total_time_s_p90",
    "cost",
    "flags",
)


def _reason_records(top: pd.DataFrame) -> list[SimpleNamespace]:
    """The rows of `top` as records of `_REASON_COLUMNS`, each value the Python scalar
    `itertuples` gives, without slicing the frame once per column of ~35 (~2 ms); `flags`
    None where the backend gave none."""
    none = [None] * len(top)
    values = [top[name].tolist() if name in top else none for name in _REASON_COLUMNS]
    rows = zip(*values, strict=True)
    return [SimpleNamespace(**dict(zip(_REASON_COLUMNS, row, strict=True))) for row in rows]


def _versus_first(
    first: SimpleNamespace, row: object, objective: Objective, deadline_s: float | None
) -> str:
    column = {"min_time": "total_time_s_p90", "min_cost": "cost"}.get(
        objective, "throughput_per_gpu"
    )  # what the objective ranks by
    if deadline_s is not None:
        column = "cost" if np.isfinite(first.cost) else "num_gpus"
    ref, value = float(getattr(first, column)), float(getattr(row, column))
    if not (np.isfinite(ref) and ref > 0):
        return ""
    label = {"total_time_s_p90": "p90 time", "throughput_per_gpu": "samples/s per GPU"}.get(
        column, column
    )
    return f" ({value / ref - 1:+.0%} {label} vs #1)"


class _Related:
    """The rows a reason may compare a top row with: same GPU type, count and local batch
    size, as arrays of the scored candidates' columns (no frame of 10^5 rows filtered)."""

    def __init__(self, scored: _Scored | pd.DataFrame, top: pd.DataFrame) -> None:
        self.rows = np.flatnonzero(np.isin(np.asarray(scored["num_gpus"]), top["num_gpus"]))
        kinds = scored["gpu_type"].iloc[self.rows]
        self.kind, self.kinds = pd.factorize(kinds, use_na_sentinel=False)
        self.gpus = np.asarray(scored["num_gpus"])[self.rows]
        self.bsz = np.asarray(scored["local_batch_size"])[self.rows]
        self.nodes = np.asarray(scored["num_nodes"])[self.rows]
        self.throughput = np.asarray(scored["throughput"])[self.rows]

    def spread_penalty(self, row: object) -> str:
        """How much throughput spreading over more nodes costs vs the fewest nodes possible
        (the first row with the fewest nodes of those like `row`)."""
        kind = list(self.kinds).index(row.gpu_type)
        same = np.flatnonzero(
            (self.kind == kind) & (self.gpus == row.num_gpus) & (self.bsz == row.local_batch_size)
        )
        fewest = same[np.argmin(self.nodes[same])]
        fewest_nodes, fewest_throughput = self.nodes[fewest], self.throughput[fewest]
        if fewest_nodes == row.num_nodes or not np.isfinite(fewest_throughput):
            return ""
        loss = 1 - row.throughput / fewest_throughput
        return (
            f"; {row.num_nodes} nodes {'cost' if loss >= 0 else 'gain'} {abs(loss):.0%} "
            f"throughput vs {fewest_nodes}"
        )


Knob = tuple[str, float, float] | tuple[str, float, float, bool] | Sequence[object]


def search_engine_knobs(
    objective_fn: Callable[[dict[str, object]], float],
    space: Mapping[str, Knob],
    n_trials: int,
    *,
    seed: int = 0,
) -> tuple[dict[str, object], float]:
    """Minimize `objective_fn(params)` over `space` with Optuna's TPE sampler (seeded).

    `space` maps a knob name to ("int", low, high), ("float", low, high[, log]) or a list of
    choices. Returns the best params and their value. Use it where the space is too large or
    continuous to enumerate (engine threads, memory limit, shuffle partitions, …).
    """
    import optuna

    if n_trials < 1:
        raise PerfcastError("n_trials must be >= 1")
    for name, spec in space.items():
        _check_knob(name, spec)

    def trial_value(trial: optuna.Trial) -> float:
        params = {name: _suggest(trial, name, spec) for name, spec in space.items()}
        return float(objective_fn(params))

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed))
    study.optimize(trial_value, n_trials=n_trials)
    return dict(study.best_params), float(study.best_value)


def _check_knob(name: str, spec: Knob) -> None:
    if isinstance(spec, tuple) and spec and spec[0] in ("int", "float"):
        if len(spec) not in (3, 4) or not spec[1] <= spec[2]:
            raise PerfcastError(
                f"knob {name!r}: expected (kind, low, high[, log]) with low <= high"
            )
    elif isinstance(spec, str) or not isinstance(spec, Sequence) or len(spec) == 0:
        raise PerfcastError(f"knob {name!r}: expected ('int'|'float', low, high) or choices")


def _suggest(trial: object, name: str, spec: Knob) -> object:
    if isinstance(spec, tuple) and spec[0] == "int":
        return trial.suggest_int(name, int(spec[1]), int(spec[2]), log=bool(spec[3:4] and spec[3]))
    if isinstance(spec, tuple) and spec[0] == "float":
        return trial.suggest_float(name, spec[1], spec[2], log=bool(spec[3:4] and spec[3]))
    return trial.suggest_categorical(name, list(spec))
