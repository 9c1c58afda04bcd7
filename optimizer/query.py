"""A big-data job's resources from its predicted run time: the threads (DuckDB) or executors
(Spark) and the memory limit that meet a deadline at the least cost.

`recommend_query` copies the job's DAG once per candidate (parallelism x memory limit), asks
the backend for every candidate's run time in ONE `predict("query", ...)` call, prices each
(parallelism x hours x price per unit, plus memory GB x hours x price per GB), keeps those whose
p90 time meets the deadline and ranks them cheapest first (the GPU recommendation's rule).
Without a deadline it ranks by cost alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perfcast.errors import ContractError, PerfcastError
from perfcast.predictor.backend import PredictionBackend

_SEP = "|"  # candidate sample_id = <job sample_id>|p<parallelism>|m<memory>


class NoFeasibleQueryConfigError(PerfcastError):
    """No candidate meets the deadline."""


@dataclass(frozen=True)
class QueryPrices:
    """What one unit of parallelism (a thread's core, an executor) and one GB of memory cost
    per hour; the defaults count core-hours only."""

    per_unit_hour: float = 1.0
    per_gb_hour: float = 0.0

    def __post_init__(self) -> None:
        for name in ("per_unit_hour", "per_gb_hour"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise PerfcastError(f"price {name} must be a finite number >= 0, got {value}")


def candidates(
    plan: pd.DataFrame, parallelism: Sequence[int], memory_limits_mb: Sequence[float | None]
) -> pd.DataFrame:
    """The job's DAG rows once per (parallelism, memory limit), each a sample of its own."""
    if plan.empty or plan["sample_id"].nunique() != 1:
        raise ContractError("a query recommendation needs the rows of exactly one job's DAG")
    if not parallelism or min(parallelism) < 1:
        raise PerfcastError("parallelism: give one or more thread/executor counts >= 1")
    limits = list(memory_limits_mb) or [None]
    if any(m is not None and not (math.isfinite(m) and m > 0) for m in limits):
        raise PerfcastError(f"memory limits must be > 0 MB (or null for the default): {limits}")
    job = str(plan["sample_id"].iloc[0])
    copies = []
    for units in sorted(set(parallelism)):
        for memory in limits:
            tag = "default" if memory is None else f"{memory:g}"
            copies.append(
                plan.assign(
                    sample_id=f"{job}{_SEP}p{units}{_SEP}m{tag}",
                    threads=int(units),
                    memory_limit_mb=np.nan if memory is None else float(memory),
                )
            )
    return pd.concat(copies, ignore_index=True)


def recommend_query(
    plan: pd.DataFrame,
    backend: PredictionBackend,
    parallelism: Sequence[int],
    memory_limits_mb: Sequence[float | None] = (None,),
    *,
    deadline_s: float | None = None,
    prices: QueryPrices | None = None,
    default_memory_gb: float = 0.0,
    top_k: int = 5,
) -> pd.DataFrame:
    """The top `top_k` candidates, cheapest first among those whose p90 meets `deadline_s`.
    `default_memory_gb` prices a candidate with the engine's default memory limit."""
    if deadline_s is not None and not (math.isfinite(deadline_s) and deadline_s > 0):
        raise PerfcastError(f"deadline_s must be > 0, got {deadline_s}")
    prices = prices or QueryPrices()
    grid = candidates(plan.drop(columns=["e2e_latency_ms"], errors="ignore"), parallelism,
                      memory_limits_mb)  # fmt: skip
    predicted = backend.predict("query", grid)
    runs = grid.drop_duplicates("sample_id").set_index("sample_id")
    out = pd.DataFrame(
        {
            "parallelism": runs["threads"].astype(int),
            "memory_limit_mb": runs["memory_limit_mb"].astype(float),
        }
    )
    for column, source in (("time_s", ""), ("time_s_p10", "_p10"), ("time_s_p90", "_p90")):
        out[column] = predicted[f"e2e_latency_ms{source}"].reindex(out.index) / 1000.0
    memory_gb = (out["memory_limit_mb"] / 1024.0).fillna(default_memory_gb)
    hourly = out["parallelism"] * prices.per_unit_hour + memory_gb * prices.per_gb_hour
    out["cost"] = hourly * out["time_s"] / 3600.0
    out["meets_deadline"] = True if deadline_s is None else out["time_s_p90"] <= deadline_s
    feasible = out[out["meets_deadline"]]
    if feasible.empty:
        fastest = out["time_s_p90"].min()
        raise NoFeasibleQueryConfigError(
            f"no configuration meets the deadline of {deadline_s:g} s: the fastest p90 is "
            f"{fastest:.3g} s (with {out.loc[out['time_s_p90'].idxmin(), 'parallelism']} "
            "threads/executors)"
        )
    ranked = feasible.sort_values(["cost", "time_s"], kind="stable").head(top_k)
    ranked = ranked.reset_index(drop=True)
    ranked.insert(0, "rank", np.arange(1, len(ranked) + 1))
    ranked["reason"] = [_reason(row, deadline_s) for row in ranked.itertuples()]
    return ranked


def _reason(row: object, deadline_s: float | None) -> str:
    memory = "default memory" if np.isnan(row.memory_limit_mb) else f"{row.memory_limit_mb:g} MB"
    text = (
        f"{row.parallelism} threads/executors, {memory}: {row.time_s:.3g} s "
        f"(p10-p90 {row.time_s_p10:.3g}-{row.time_s_p90:.3g} s), cost {row.cost:.3g}"
    )
    if deadline_s is not None:
        text += f"; p90 within the {deadline_s:g} s deadline"
    return text
