"""Metrics of a simulated run, its table and its JCT CDF plot.

Finish-time fairness is Themis's rho approximated as JCT over the job's run time alone at its
requested size (its traced duration): 1 means the job lost nothing to sharing the cluster.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from scheduler.core.jobs import JobStatus
from scheduler.sim.engine import SimResult


def job_table(result: SimResult) -> pd.DataFrame:
    """One row per finished job."""
    rows = [
        (
            s.job_id,
            s.job.job_type,
            s.job.num_gpus,
            s.job.submit_time_s,
            s.first_start_s,
            s.finish_s,
            s.job.duration_s,
            s.preemptions,
            s.migrations,
            s.resizes,
            s.attained_gpu_s,
            s.overhead_gpu_s,
            s.job.deadline_s,
        )
        for s in result.jobs.all.values()
        if s.status is JobStatus.DONE
    ]
    df = pd.DataFrame(
        rows,
        columns=[
            "job_id", "job_type", "num_gpus", "submit_s", "start_s", "finish_s", "duration_s",
            "preemptions", "migrations", "resizes", "gpu_s", "overhead_gpu_s", "deadline_s",
        ],
    )  # fmt: skip
    df["jct_s"] = df["finish_s"] - df["submit_s"]
    df["queue_s"] = df["start_s"] - df["submit_s"]
    df["ftf"] = df["jct_s"] / df["duration_s"]
    return df


def summarize(result: SimResult) -> dict[str, float | int | str]:
    """The run's headline figures."""
    df = job_table(result)
    jct = df["jct_s"].to_numpy(float)
    total_gpus = result.cluster.total_gpus
    capacity = total_gpus * result.makespan_s
    has_deadline = df["deadline_s"].notna()
    out: dict[str, float | int | str] = {
        "policy": result.policy,
        "trace": result.workload.name,
        "jobs": len(df),
        "avg_jct_s": float(jct.mean()) if len(jct) else 0.0,
        "median_jct_s": float(np.median(jct)) if len(jct) else 0.0,
        "p95_jct_s": float(np.percentile(jct, 95)) if len(jct) else 0.0,
        "p99_jct_s": float(np.percentile(jct, 99)) if len(jct) else 0.0,
        "makespan_s": float(result.makespan_s),
        "avg_queue_s": float(df["queue_s"].mean()) if len(df) else 0.0,
        "utilization": float(result.accounting.busy_gpu_s / capacity) if capacity else 0.0,
        "avg_ftf": float(df["ftf"].mean()) if len(df) else 0.0,
        "max_ftf": float(df["ftf"].max()) if len(df) else 0.0,
        "preemptions": int(df["preemptions"].sum()),
        "migrations": int(df["migrations"].sum()),
        "resizes": int(df["resizes"].sum()),
    }
    if has_deadline.any():
        met = df.loc[has_deadline, "finish_s"] <= df.loc[has_deadline, "deadline_s"]
        out["deadline_jobs"] = int(has_deadline.sum())
        out["deadline_hits"] = int(met.sum())
    return out


def plot_jct_cdf(results: dict[str, pd.DataFrame], path: Path, title: str) -> Path:
    """One JCT CDF curve per run (label -> job table), as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, df in results.items():
        jct = np.sort(df["jct_s"].to_numpy(float))
        ax.plot(jct, np.arange(1, len(jct) + 1) / max(len(jct), 1), label=label)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=120, bbox_inches="tight")
    plt.close(fig)
    tmp.replace(path)
    return path
