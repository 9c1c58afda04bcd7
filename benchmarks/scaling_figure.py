"""The figure of docs/predictors.md: predicted against measured step time on every cluster's
multi-GPU rows, each predicted by a model that never saw that cluster's scaling (leave one
cluster out, the one-GPU rows kept), one panel per cluster, perfect scaling beside it.

    .venv/bin/python -m benchmarks.scaling_figure [--family gbm] [--out docs/img/scaling-loco.png]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from benchmarks.accuracy import _scaling_rows
from perfcast.predictor import make_predictor
from perfcast.predictor.scaling import one_gpu_seconds
from perfcast.training.by_source import leave_one_cluster_out_folds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--family", default="gbm", choices=["gbm", "fcn"])
    parser.add_argument("--out", type=Path, default=Path("docs/img/scaling-loco.png"))
    args = parser.parse_args()
    rows = _scaling_rows()
    folds = list(leave_one_cluster_out_folds(rows))
    fig, axes = plt.subplots(1, len(folds), figsize=(4 * len(folds), 4.2))
    for ax, (train_idx, test_idx, cluster) in zip(axes, folds, strict=True):
        train, test = rows.iloc[train_idx], rows.iloc[test_idx]
        model = make_predictor("scaling", args.family).fit(train)
        answer = model.predict_interval(test.drop(columns=["step_time_s"]))
        y = test["step_time_s"].to_numpy()
        pred = answer["step_time_s"].to_numpy()
        perfect = one_gpu_seconds(train, test)
        ours = np.mean(np.abs(pred - y) / y) * 100
        napkin = np.nanmean(np.abs(perfect - y) / y) * 100
        ax.scatter(
            y, perfect, s=4, alpha=0.25, color="tab:gray", label=f"perfect scaling {napkin:.0f}%"
        )
        ax.scatter(y, pred, s=4, alpha=0.35, color="tab:blue", label=f"{args.family} {ours:.0f}%")
        lo, hi = np.nanmin([y.min(), pred.min()]) / 1.5, np.nanmax([y.max(), pred.max()]) * 1.5
        ax.plot([lo, hi], [lo, hi], color="black", lw=0.8)
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi))
        ax.set_title(f"{cluster} ({len(y):,} rows), MAPE", fontsize=10)
        ax.set_xlabel("measured step time (s)")
        ax.legend(fontsize=8, loc="upper left", markerscale=3)
    axes[0].set_ylabel("predicted step time (s)")
    fig.suptitle("Scaling on a cluster never seen at scale (leave one cluster out)", fontsize=11)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=90)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
