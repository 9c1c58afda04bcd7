"""One job's best configuration: GPU type, GPU count, placement over nodes and local batch size.

`recommend` runs four steps, each in its own module:
1. `candidates`: every (GPU type, GPU count, node count, local batch size) in one DataFrame, GPUs
   spread as evenly as possible over the nodes;
2. `scoring`: ONE `predict("scaling", ...)` call for all of them, as `CheckedRows` (the
   request is checked once, not each candidate), then throughput, scaling efficiency, total
   time and cost with their intervals, as arrays;
3. here: filtered by deadline and budget, ranked by the objective; `front`: a short list of
   configurations that differ, read off the ranking;
4. `reasons`: one line each on why it was chosen.
Everything after the prediction is column arithmetic on 10^5-10^6 candidates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from perfcast.errors import PerfcastError
from perfcast.optimizer.candidates import GpuPool, enumerate_candidates
from perfcast.optimizer.front import diverse_front, ranked_for_front
from perfcast.optimizer.reasons import nothing_feasible, reason_lines
from perfcast.optimizer.scoring import Scored, Work, predicted
from perfcast.predictor.backend import PredictionBackend

Objective = Literal["min_time", "min_cost", "max_throughput_per_gpu"]


OBJECTIVES: tuple[Objective, ...] = ("min_time", "min_cost", "max_throughput_per_gpu")


class NoFeasibleConfigError(PerfcastError):
    """No candidate meets the deadline or the budget."""


@dataclass
class Recommendation:
    """The ranked top configurations and how many candidates were looked at."""

    top: pd.DataFrame  # one row per configuration, best first, with a `reason` column
    objective: str
    candidates: int  # enumerated and predicted
    unpredicted: int  # the backend gave no step time (NaN): dropped
    infeasible: int  # over the deadline or the budget
    notes: list[str] = field(default_factory=list)


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
    scored = Scored(candidates, predicted(candidates, backend), work)
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
        raise NoFeasibleConfigError(nothing_feasible(pool, deadline_s, max_cost))
    rows = np.flatnonzero(feasible)
    columns, ascending = _rank_columns(objective, deadline_s is not None)
    if deadline_s is not None and np.isnan(column("cost")[rows]).all():
        columns, ascending = columns[1:], ascending[1:]
    every = len(rows) == len(scored)  # (every row feasible: no 10^5-row gathers)
    keys = [
        (column(c) if every else column(c)[rows]) * (1 if up else -1)
        for c, up in zip(columns, ascending, strict=True)
    ]
    ranked = rows[ranked_for_front(scored, rows, keys, top_k)]
    best = ranked[diverse_front(scored, ranked, top_k)]
    top = scored.rows(best).drop(columns=["in_search"])
    top["placement"] = top["placement"].astype("string")
    for name in ("gpu_type", *job, "flags"):  # the categoricals of text: text again
        if name in top.columns and isinstance(top[name].dtype, pd.CategoricalDtype):
            top[name] = top[name].astype(str)
    top["reason"] = reason_lines(top, scored, objective, deadline_s, max_cost)
    return Recommendation(
        top=top,
        objective=objective if deadline_s is None else f"deadline {deadline_s:g} s",
        candidates=len(scored),
        unpredicted=unpredicted,
        infeasible=int(eligible.sum() - feasible.sum()),
        notes=notes,
    )
