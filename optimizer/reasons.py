"""Why each recommended configuration was chosen, in one line a person reads: its predicted
time and cost in human units, how it compares with the first, and whether its step time is
measured, near a measurement or extrapolated."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from perfcast.optimizer.scoring import Scored
from perfcast.units import duration

if TYPE_CHECKING:  # (configs imports this module)
    from perfcast.optimizer.configs import Objective


def nothing_feasible(
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


def reason_lines(
    top: pd.DataFrame,
    scored: Scored | pd.DataFrame,
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

    def __init__(self, scored: Scored | pd.DataFrame, top: pd.DataFrame) -> None:
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
