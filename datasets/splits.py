"""Honest train/test splits: by row (random), by unseen job, by unseen GPU type, by unseen
placement, by unseen workloads (interference: both jobs of a test pair, or either), and for
query plans by unseen query or by the largest input scale. Each split returns (train index,
test index) pairs over a table's rows; for the graph and plan tables, rows of one sample always
fall on the same side."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd
from sklearn.model_selection import GroupKFold, KFold

from perfcast.errors import PerfcastError

SPLITS = ("random", "job", "gpu_type", "placement", "query", "scale", "workload")


def group_column(kind: str, split: str) -> str | None:
    """The column whose values must not be shared between train and test for `split`."""
    if split == "random":
        return "sample_id" if kind in ("graph", "plan") else None
    columns = {
        ("scaling", "job"): "job",
        ("scaling", "gpu_type"): "gpu_type",
        ("scaling", "placement"): "_placement",
        ("interference", "job"): "_pair_jobs",  # both jobs of a test pair unseen
        ("interference", "workload"): "_any_job",  # a job of each test pair unseen
        ("interference", "gpu_type"): "gpu_type",
        ("graph", "job"): "model",
        ("graph", "gpu_type"): "device",
        ("trace", "job"): "job",
        ("plan", "query"): "query",  # a query never seen, on any engine
        ("plan", "scale"): "_largest_scale",
    }
    if (kind, split) not in columns:
        raise PerfcastError(f"split {split!r} does not apply to {kind} tables")
    return columns[(kind, split)]


def _groups(table: pd.DataFrame, column: str) -> pd.Series:
    if column == "_placement":
        return table["num_nodes"].astype(str) + "x" + table["num_gpus"].astype(str)
    return table[column].astype(str)


def _unseen_pair_folds(
    table: pd.DataFrame, n_folds: int, seed: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Folds over workloads: test pairs have both jobs in the fold's held-out workloads,
    training pairs have neither; pairs with one of each are left out of that fold."""
    jobs = np.array(sorted(set(table["a_job"]) | set(table["b_job"])))
    if len(jobs) < 4:
        raise PerfcastError("an unseen-job split needs at least four distinct workloads")
    for _, held in KFold(min(n_folds, len(jobs)), shuffle=True, random_state=seed).split(jobs):
        test_jobs = set(jobs[held])
        a_in, b_in = table["a_job"].isin(test_jobs), table["b_job"].isin(test_jobs)
        test = np.flatnonzero((a_in & b_in).to_numpy())
        if len(test):
            yield np.flatnonzero((~a_in & ~b_in).to_numpy()), test


def _workload_folds(
    table: pd.DataFrame, n_folds: int, seed: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Folds over workloads: test pairs have a job (either, or both) in the fold's held-out
    workloads, training pairs have neither. With `n_folds` the number of workloads, this is
    leave one workload out (a pair of two workloads is then tested twice, once for each)."""
    a_job, b_job = table["a_job"].astype(str), table["b_job"].astype(str)
    jobs = np.array(sorted(set(a_job) | set(b_job)))
    if len(jobs) < 2:
        raise PerfcastError("a workload split needs at least two distinct workloads")
    for _, held in KFold(min(n_folds, len(jobs)), shuffle=True, random_state=seed).split(jobs):
        test = (a_job.isin(jobs[held]) | b_job.isin(jobs[held])).to_numpy()
        if test.any() and not test.all():
            yield np.flatnonzero(~test), np.flatnonzero(test)


def _largest_scale_fold(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """One fold: each engine's largest input scale is predicted from its smaller ones (an
    extrapolation in data size)."""
    by_engine = table.groupby("engine")["scale_factor"]
    several = by_engine.transform("nunique") >= 2  # an engine seen at one scale only trains
    if not several.any():
        raise PerfcastError("a scale split needs an engine measured at two scales or more")
    test = ((table["scale_factor"] == by_engine.transform("max")) & several).to_numpy()
    return np.flatnonzero(~test), np.flatnonzero(test)


def folds(
    table: pd.DataFrame, kind: str, split: str, n_folds: int = 5, seed: int = 0
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Cross-validation folds of `table` for `split`."""
    if split not in SPLITS:
        raise PerfcastError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    column = group_column(kind, split)
    positions = np.arange(len(table))
    if column is None:
        yield from KFold(n_folds, shuffle=True, random_state=seed).split(positions)
        return
    if column == "_pair_jobs":
        yield from _unseen_pair_folds(table, n_folds, seed)
        return
    if column == "_any_job":
        yield from _workload_folds(table, n_folds, seed)
        return
    if column == "_largest_scale":
        yield _largest_scale_fold(table)
        return
    groups = _groups(table, column).to_numpy()
    unique = pd.unique(groups)
    if len(unique) < 2:
        raise PerfcastError(f"split {split!r} needs at least two distinct {column} values")
    if column in ("gpu_type", "device"):  # leave one group out: every GPU is unseen once
        n_folds = len(unique)
    # shuffle group order so folds are not alphabetical, then fold by group
    order = {g: i for i, g in enumerate(np.random.default_rng(seed).permutation(unique))}
    coded = np.array([order[g] for g in groups])
    yield from GroupKFold(min(n_folds, len(unique))).split(positions, groups=coded)
