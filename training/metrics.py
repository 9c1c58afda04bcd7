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
