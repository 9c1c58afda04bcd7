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
scaling.

The interval is centred on a blend of its own: the (a, b) of the same grid whose log errors
on the held-out clusters spread least between their p10 and p90 (each cluster weighing the
same), moved by those two percentiles; p10 and p90 then take in p50 if it lies outside. The
p50's weights minimize the mean absolute percentage error, which rewards predicting low (an
overestimate costs without bound, an underestimate at most 100%): its errors on a new cluster
sit mostly above it, and around it the interval had to reach far up to cover them. On a new
cluster the errors are dominated by how far that cluster's synchronization differs from what
the physics assumed, one shift for most of its rows, so what narrows the interval is the
centre that brings the training clusters' shifts closest together. A per-row scale (locally
adaptive conformal: errors divided by the physics' predicted overhead or by the blend's
distance from perfect scaling) did not: a cluster's error was no larger where the physics
predicted more synchronization (sia-rtx: the most predicted, the smallest errors), and the
scaled intervals came out wider at the same coverage.

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
    """The learned weights of p50, the log-space offsets of p10 and p90 from the interval's
    centre, the range the correction is clipped to, and the weights of the interval's centre
    (None: p50's)."""

    physics_weight: float
    correction_weight: float
    p10_offset: float
    p90_offset: float
    correction_lo: float = -np.inf
    correction_hi: float = np.inf
    interval_weights: tuple[float, float] | None = None

    def p50(self, log_t1: np.ndarray, log_base: np.ndarray, correction: np.ndarray) -> np.ndarray:
        correction = np.clip(correction, self.correction_lo, self.correction_hi)
        return blend(log_t1, log_base, correction, self.physics_weight, self.correction_weight)

    def interval(
        self, log_t1: np.ndarray, log_base: np.ndarray, correction: np.ndarray
    ) -> np.ndarray:
        """Log p10, p50 and p90 (rows of a 3 x n array): p10 and p90 the centre (the blend of
        `interval_weights`, p50 where None) moved by the offsets, taking in p50 where it lies
        outside them, so p10 <= p50 <= p90."""
        correction = np.clip(correction, self.correction_lo, self.correction_hi)
        mid = blend(log_t1, log_base, correction, self.physics_weight, self.correction_weight)
        centre = mid
        if self.interval_weights is not None:
            centre = blend(log_t1, log_base, correction, *self.interval_weights)
        lo = np.fmin(centre + self.p10_offset, mid)
        hi = np.fmax(centre + self.p90_offset, mid)
        return np.vstack([lo, mid, hi])


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
    (ia, ib), (lo, hi) = narrowest_interval(folds, start=(a, b))
    return NewClusterBlend(a, b, lo, hi, c_lo, c_hi, interval_weights=(ia, ib))


def interval_offsets(folds: list[HeldOutCluster], a: float, b: float) -> tuple[float, float]:
    """The p10 and p90 of the log errors of blend (a, b) over `folds`, each weighing the same."""
    errors = [
        fold.log_y - blend(fold.log_t1, fold.log_base, fold.correction, a, b) for fold in folds
    ]
    weights = [np.full(len(e), 1.0 / len(e)) for e in errors]
    lo, hi = weighted_quantiles(np.concatenate(errors), np.concatenate(weights), QUANTILES[::2])
    return lo, hi


def narrowest_interval(
    folds: list[HeldOutCluster], start: tuple[float, float] = (0.0, 0.0)
) -> tuple[tuple[float, float], tuple[float, float]]:
    """((a, b), (p10, p90 offsets)) of the blend on WEIGHT_GRID whose log errors over `folds`
    have the narrowest p10-p90 (each fold weighing the same); ties keep `start` (p50's
    weights), then the grid's first."""
    best = (start, interval_offsets(folds, *start))
    for a, b in itertools.product(WEIGHT_GRID, WEIGHT_GRID):
        lo, hi = interval_offsets(folds, float(a), float(b))
        if hi - lo < best[1][1] - best[1][0] - 1e-12:
            best = ((float(a), float(b)), (lo, hi))
    return best


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
