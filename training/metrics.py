"""Accuracy figures reported by `perfcast evaluate`, the trainer and the benchmarks."""

from __future__ import annotations

import numpy as np
from scipy.stats import spearmanr


def regression_metrics(
    y: np.ndarray, pred: np.ndarray, p10: np.ndarray | None = None, p90: np.ndarray | None = None
) -> dict[str, float]:
    """n, mape (percent), mae, rmse, r2, spearman and, with an interval, its coverage."""
    y, pred = np.asarray(y, dtype=float).ravel(), np.asarray(pred, dtype=float).ravel()
    if y.shape != pred.shape or len(y) == 0:
        raise ValueError(f"need equal, non-empty arrays; got {y.shape} and {pred.shape}")
    err = pred - y
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    out = {
        "n": len(y),
        "mape": float(np.mean(np.abs(err) / np.abs(y)) * 100),
        "mae": float(np.mean(np.abs(err))),
        "rmse": float(np.sqrt(np.mean(err**2))),
        "r2": float(1 - np.sum(err**2) / ss_tot) if ss_tot > 0 else float("nan"),
        "spearman": float(spearmanr(y, pred).statistic) if len(y) > 2 else float("nan"),
    }
    if p10 is not None and p90 is not None:
        lo, hi = np.asarray(p10, dtype=float).ravel(), np.asarray(p90, dtype=float).ravel()
        out["interval_coverage"] = float(np.mean((y >= lo) & (y <= hi)))
    return out


def narrowest_width(y: np.ndarray, pred: np.ndarray, coverage: float) -> float:
    """The p90/p10 of the narrowest interval [pred * a, pred * b] (one a and b for every row)
    that holds `coverage` of `y`: the width any calibration of these point predictions must
    reach for that coverage, chosen knowing the answers. A calibrated interval wider than it
    pays for not knowing them; a target narrower than it needs a better p50 (or one whose
    errors some feature predicts), not a better calibration."""
    y, pred = np.asarray(y, dtype=float).ravel(), np.asarray(pred, dtype=float).ravel()
    ok = (y > 0) & (pred > 0)
    if not 0 < coverage <= 1 or not ok.any():
        raise ValueError(f"need coverage in (0, 1] and positive values; got {coverage}")
    errors = np.sort(np.log(y[ok] / pred[ok]))
    k = int(np.ceil(coverage * len(errors)))
    return float(np.exp(np.min(errors[k - 1 :] - errors[: len(errors) - k + 1])))
