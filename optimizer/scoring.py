"""What each candidate configuration achieves, from one prediction call: step time,
throughput, scaling efficiency, total time and cost, each with the interval its step time's
p10/p90 implies, worked out as arrays (only the columns ranking reads, for every candidate)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perfcast.errors import PerfcastError
from perfcast.optimizer.candidates import checked_candidates
from perfcast.predictor.backend import PredictionBackend


@dataclass(frozen=True)
class Work:
    """How much the job has to do: `samples` in total, or `iterations` (steps) in total."""

    samples: float | None = None
    iterations: float | None = None

    def __post_init__(self) -> None:
        given = [v for v in (self.samples, self.iterations) if v is not None]
        if len(given) != 1 or not (math.isfinite(given[0]) and given[0] > 0):
            raise PerfcastError("work needs exactly one of samples or iterations, a number > 0")


def score_candidates(
    candidates: pd.DataFrame, backend: PredictionBackend, work: Work | None
) -> pd.DataFrame:
    """Add predicted step time, throughput, efficiency, total time and cost, with intervals.

    Calls `backend.predict("scaling", ...)` once. Columns with `_p10`/`_p90` are the values
    implied by the step time's p10/p90 (for throughput, p10 comes from the p90 step time).
    """
    return Scored(candidates, backend.predict("scaling", candidates), work).frame()


def predicted(candidates: pd.DataFrame, backend: PredictionBackend) -> pd.DataFrame:
    """The backend's answer for `enumerate_candidates`' rows, handed to it as
    `checked_candidates`' `CheckedRows`: the request is checked once, not each candidate."""
    return backend.predict("scaling", checked_candidates(candidates))


class Scored:
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
    kind = kind_codes(scored)
    size, sizes = _size_codes(scored["local_batch_size"].to_numpy())
    key = kind * sizes + size
    single = np.flatnonzero((scored["num_gpus"].to_numpy() == 1) & ~np.isnan(throughput))
    table = np.full((int(kind.max()) + 1 if len(kind) else 0) * sizes, np.nan)
    table[key[single[::-1]]] = throughput[single[::-1]]  # the last write: the first row
    return table[key]


def _size_codes(sizes: np.ndarray) -> tuple[np.ndarray, int]:
    """(code of each row's local batch size, how many codes): whole batch sizes as they
    are (`dense_codes`), others factorized."""
    if sizes.dtype.kind in "iu":
        return dense_codes(sizes.astype(np.int64, copy=False))
    codes, uniques = pd.factorize(sizes, use_na_sentinel=False)
    return codes.astype(np.int64, copy=False), len(uniques)


def kind_codes(scored: Scored | pd.DataFrame) -> np.ndarray:
    """An integer code per GPU type of every scored row (a missing type its own code); a
    categorical's own codes, no strings hashed."""
    kinds = scored["gpu_type"]
    if isinstance(kinds.dtype, pd.CategoricalDtype):
        return kinds.array.codes.astype(np.int64) + 1
    return pd.factorize(kinds, use_na_sentinel=False)[0].astype(np.int64, copy=False)


def dense_codes(values: np.ndarray) -> tuple[np.ndarray, int]:
    """(code of each row, how many codes): non-negative integers as they are where they are
    not many more than the rows, else their factorization."""
    if len(values) and values.min() >= 0 and values.max() < max(4 * len(values), 4096):
        return values, int(values.max()) + 1
    codes, uniques = pd.factorize(values)
    return codes, len(uniques)
