"""How far to trust the scaling model on a cluster it has never seen, learned from clusters it
has: each training cluster's multi-GPU rows are held out in turn (their one-GPU rows kept) and
predicted by a model fitted without them.

On such a row the step is predicted in log space as
    log t1 + a * log(base / t1) + b * correction
where t1 is the one-GPU time (perfect scaling), base the physical estimate (t1 plus the
communication model's synchronization) and correction the model's learned log(step / base).
(a, b) = (0, 0) is perfect scaling, (1, 1) the full model. The weights chosen are the ones with
the lowest mean error relative to perfect scaling over the held-out clusters, each cluster
weighing the same, among those that lose to perfect scaling on none of them: (0, 0) always
qualifies, so on the clusters seen in calibration the blend is never worse than perfect
scaling. The interval is the blend's p50 moved by the p10 and p90 of its log errors on the
held-out clusters (each weighing the same), so it covers what a new cluster's errors were.

The correction enters the blend clipped to the central CORRECTION_RANGE of the corrections
the weights were calibrated on (each fold weighing the same): the weights were only checked
there, and a network's correction can run far beyond it on a GPU and network unlike any it
saw (fcn, on gavel's K80s across nodes: 2.4 in log, 11x, where calibration saw at most 1.6).

Rows on one node and rows across nodes get a blend each (`calibrate_by_spread`): their
synchronization crosses different links, the intra-node link a GPU type's server fixes
(NVLink, PCIe generation) and the network, which differs from cluster to cluster and is the
fact most often assumed, so how far the physics carries over differs between the two.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import numpy as np

from perfcast.predictor.regressors import QUANTILES

WEIGHT_GRID = np.linspace(0.0, 1.0, 11)
CORRECTION_RANGE = (0.05, 0.95)


@dataclass(frozen=True)
class HeldOutCluster:
    """One calibration fold, in log seconds: the held-out rows' measured step (`log_y`),
    one-GPU time (`log_t1`), physical base (`log_base`) and the model's correction."""

    log_y: np.ndarray
    log_t1: np.ndarray
    log_base: np.ndarray
    correction: np.ndarray
    multi_node: np.ndarray | None = None

    def part(self, keep: np.ndarray) -> HeldOutCluster:
        return HeldOutCluster(
            self.log_y[keep], self.log_t1[keep], self.log_base[keep], self.correction[keep]
        )

    def clipped(self, lo: float, hi: float) -> HeldOutCluster:
        return replace(self, correction=np.clip(self.correction, lo, hi))


@dataclass(frozen=True)
class NewClusterBlend:
    """The learned weights, the log-space offsets of p10 and p90 from p50, and the range the
    correction is clipped to."""

    physics_weight: float
    correction_weight: float
    p10_offset: float
    p90_offset: float
    correction_lo: float = -np.inf
    correction_hi: float = np.inf

    def p50(self, log_t1: np.ndarray, log_base: np.ndarray, correction: np.ndarray) -> np.ndarray:
        correction = np.clip(correction, self.correction_lo, self.correction_hi)
        return blend(log_t1, log_base, correction, self.physics_weight, self.correction_weight)


def blend(
    log_t1: np.ndarray, log_base: np.ndarray, correction: np.ndarray, a: float, b: float
) -> np.ndarray:
    """log t1 + a * log(base / t1) + b * correction."""
    return log_t1 + a * (log_base - log_t1) + b * correction


def mape_ratio(fold: HeldOutCluster, a: float, b: float) -> float:
    """The blend's mean absolute percentage error over perfect scaling's, on one fold."""
    perfect = np.mean(np.abs(np.expm1(fold.log_t1 - fold.log_y)))
    p50 = blend(fold.log_t1, fold.log_base, fold.correction, a, b)
    ours = np.mean(np.abs(np.expm1(p50 - fold.log_y)))
    return float(ours / perfect) if perfect > 0 else (0.0 if ours == 0 else np.inf)


def choose_weights(folds: list[HeldOutCluster]) -> tuple[float, float]:
    """(a, b) of WEIGHT_GRID with the lowest mean ratio to perfect scaling over `folds` among
    those no worse than perfect scaling on any fold; ties go to the smaller weights."""
    best = (1.0, 0.0, 0.0)  # perfect scaling: ratio 1 on every fold
    for a, b in itertools.product(WEIGHT_GRID, WEIGHT_GRID):
        ratios = [mape_ratio(fold, a, b) for fold in folds]
        if max(ratios) <= 1.0 and np.mean(ratios) < best[0] - 1e-12:
            best = (float(np.mean(ratios)), float(a), float(b))
    return best[1], best[2]


def calibrate(folds: list[HeldOutCluster]) -> NewClusterBlend:
    """The blend and its interval offsets from the held-out clusters (at least one)."""
    if not folds:
        raise ValueError("calibrating a new cluster's blend needs at least one held-out cluster")
    shares = [np.full(len(fold.correction), 1.0 / len(fold.correction)) for fold in folds]
    c_lo, c_hi = weighted_quantiles(
        np.concatenate([fold.correction for fold in folds]),
        np.concatenate(shares),
        CORRECTION_RANGE,
    )
    folds = [fold.clipped(c_lo, c_hi) for fold in folds]
    a, b = choose_weights(folds)
    errors = [
        fold.log_y - blend(fold.log_t1, fold.log_base, fold.correction, a, b) for fold in folds
    ]
    weights = [np.full(len(e), 1.0 / len(e)) for e in errors]
    lo, hi = weighted_quantiles(np.concatenate(errors), np.concatenate(weights), QUANTILES[::2])
    return NewClusterBlend(a, b, min(lo, 0.0), max(hi, 0.0), c_lo, c_hi)


def calibrate_by_spread(folds: list[HeldOutCluster]) -> dict[bool, NewClusterBlend]:
    """A blend for rows on one node (False) and one for rows across nodes (True), each from
    the folds' rows of that spread (`multi_node`); a spread no fold has gets the blend of
    all rows."""
    everywhere = calibrate(folds)
    blends = {}
    for spread in (False, True):
        parts = [fold.part(fold.multi_node == spread) for fold in folds]
        parts = [part for part in parts if len(part.log_y)]
        blends[spread] = calibrate(parts) if parts else everywhere
    return blends


def weighted_quantiles(values: np.ndarray, weights: np.ndarray, levels) -> list[float]:
    """The smallest value whose cumulative weight share reaches each level."""
    order = np.argsort(values)
    share = np.cumsum(weights[order]) / weights.sum()
    at = np.searchsorted(share, np.asarray(levels, dtype=float))
    return [float(values[order][min(i, len(values) - 1)]) for i in at]
