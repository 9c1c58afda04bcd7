"""How a model does on what it has not seen: its error on splits by source, beside the napkin
answer on the same rows, scored at training and used to choose the champion.

A random fifth of the training rows says how the model does on data like its training; a
platform team asks about the next cluster. For scaling the split is the one the benchmarks
lead with: leave one cluster out (train on the other clusters plus the held-out cluster's
one-GPU rows, test on its multi-GPU rows), against perfect scaling from the one-GPU time.
A task whose training data has no such split (one cluster) gets no by-source score.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pandas as pd

from perfcast.predictor import make_predictor
from perfcast.predictor.scaling import one_gpu_seconds
from perfcast.training.evaluation import truth_and_predictions
from perfcast.training.metrics import regression_metrics

PREFIX = "by_source_"  # the metrics' prefix in MLflow and in `TrainResult.metrics`
# a challenger may be this much worse (relative MAPE) on random rows and still win by source
RANDOM_SLACK = 0.10


def leave_one_cluster_out_folds(rows: pd.DataFrame) -> Iterator[tuple[np.ndarray, ...]]:
    """The scaling headline: a cluster whose GPUs and links the model has not seen scale. For
    each cluster: train on the other clusters plus its one-GPU rows, test on its multi-GPU
    rows. Yields (train, test, cluster)."""
    multi = (rows["num_gpus"] > 1).to_numpy()
    for cluster in sorted(rows["cluster"].unique()):
        held = multi & (rows["cluster"] == cluster).to_numpy()
        if held.any():
            yield np.flatnonzero(~held), np.flatnonzero(held), cluster


def scaling_scores(family: str, rows: pd.DataFrame) -> dict[str, float]:
    """`family`'s leave-one-cluster-out MAPE, interval coverage and median p90/p10, and
    perfect scaling's MAPE on the same rows; {} with fewer than two clusters."""
    if "cluster" not in rows.columns or rows["cluster"].nunique() < 2:
        return {}
    truths, predicted, napkin = [], [], []
    for train_idx, test_idx, _ in leave_one_cluster_out_folds(rows):
        train, test = rows.iloc[train_idx], rows.iloc[test_idx]
        truth, frame = truth_and_predictions(make_predictor("scaling", family).fit(train), test)
        truths.append(truth)
        predicted.append(frame)
        napkin.append(one_gpu_seconds(train, test))
    y = np.concatenate(truths)
    p = pd.concat(predicted, ignore_index=True)
    m = regression_metrics(y, p["y"], p["y_p10"], p["y_p90"])
    t1 = np.concatenate(napkin)
    known = np.isfinite(t1)
    return {
        "mape": m["mape"],
        "coverage": m["interval_coverage"],
        "width": float(np.median(p["y_p90"] / p["y_p10"])),
        "napkin_mape": regression_metrics(y[known], t1[known])["mape"] if known.any() else np.nan,
        "n": float(len(y)),
    }


SCORERS: dict[str, Callable[[str, pd.DataFrame], dict[str, float]]] = {
    "scaling": scaling_scores,
}
SPLIT_NAMES = {"scaling": "leave-one-cluster-out"}  # how each scorer holds its sources out


def scores(task: str, family: str, rows: pd.DataFrame) -> dict[str, float]:
    """The task's by-source metrics of `family` trained on `rows`, keys prefixed with
    `PREFIX` ({} for a task or data without a split by source)."""
    scorer = SCORERS.get(task)
    found = scorer(family, rows) if scorer is not None else {}
    return {f"{PREFIX}{name}": value for name, value in found.items()}


def choose(
    task: str, families: tuple[str, ...], rows: pd.DataFrame, step: Callable[[str], None]
) -> dict[str, dict[str, float]] | None:
    """`--model auto` by source: each family's by-source metrics (`scores`) on `rows`, the
    family to choose being the one with the lowest `by_source_mape`; None where the task or
    the data has no split by source (auto then validates on random rows)."""
    if task not in SCORERS:
        return None
    found = {}
    for i, family in enumerate(families, 1):
        step(f"auto: {family} on each source held out ({i}/{len(families)})")
        found[family] = scores(task, family, rows)
        if not np.isfinite(found[family].get(f"{PREFIX}mape", np.nan)):
            return None
    return found


def promotion(challenger: dict[str, float], champion: dict[str, float]) -> tuple[bool, str] | None:
    """Whether a challenger replaces the champion by source, and why: it must not be worse on
    the split by source, nor worse on random rows by more than RANDOM_SLACK. None when the
    two cannot be compared by source (either lacks the score)."""
    key = f"{PREFIX}mape"
    if key not in challenger or key not in champion:
        return None
    new, old = challenger[key], champion[key]
    if not np.isfinite(new) or not np.isfinite(old):
        return None
    random_new, random_old = challenger.get("mape", np.nan), champion.get("mape", np.nan)
    if new > old:
        return False, f"worse on clusters it never saw: {new:.1f}% vs {old:.1f}%"
    if random_new > random_old * (1 + RANDOM_SLACK):
        return False, (
            f"no worse on clusters it never saw ({new:.1f}% vs {old:.1f}%) but worse on rows "
            f"like its training by more than {RANDOM_SLACK:.0%} ({random_new:.1f}% vs "
            f"{random_old:.1f}%)"
        )
    return True, f"on clusters it never saw: {new:.1f}% vs {old:.1f}%"
