"""Metrics of a simulated run, its table and its JCT CDF plot.

Deadline hits count jobs whose work completed by their deadline (a stopped trial does not).
Finish-time fairness is Themis's rho approximated as JCT over the job's run time alone at its
requested size (its traced duration): 1 means the job lost nothing to sharing the cluster.
"""

from __future__ import annotations

from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perfcast.scheduler.core.jobs import DONE
from perfcast.scheduler.sim.engine import SimResult
from perfcast.units import duration, log_ticks, number


def job_table(result: SimResult) -> pd.DataFrame:
    """One row per finished job."""
    done = [s for s in result.jobs.all.values() if s.status is DONE]
    specs = list(map(attrgetter("job"), done))
    n = len(done)

    def listed(rows: list[Any], name: str) -> list[Any]:
        return list(map(attrgetter(name), rows))

    def numbers(rows: list[Any], name: str, dtype: type) -> np.ndarray:
        return np.fromiter(map(attrgetter(name), rows), dtype, n)

    def maybe(rows: list[Any], name: str) -> np.ndarray | list[Any]:
        """A column of floats or None as floats, None as NaN: what pandas infers from the list
        (`pd.to_numeric` too), without its pass over the objects; all None stays a list
        (pandas makes that an object column)."""
        values = listed(rows, name)
        if all(v is None for v in values):
            return values
        return np.array(values, dtype=float)

    # column by column: a million jobs as a list of row tuples would hold every figure as a
    # Python object twice over (the tuples, then pandas's object array); the columns that are
    # never missing straight into typed arrays (pandas would convert a list again), each read
    # with one `attrgetter` pass (a generator per column costs twice as much)
    samples = numbers(done, "samples_done", float)
    total = numbers(specs, "total_samples", float)
    scores = listed(specs, "score")
    columns = {
        "job_id": listed(done, "job_id"),
        "job_type": listed(specs, "job_type"),
        "num_gpus": numbers(specs, "num_gpus", np.int64),
        "submit_s": numbers(specs, "submit_time_s", float),
        "start_s": maybe(done, "first_start_s"),
        "finish_s": maybe(done, "finish_s"),
        "duration_s": numbers(specs, "duration_s", float),
        "preemptions": numbers(done, "preemptions", np.int64),
        "migrations": numbers(done, "migrations", np.int64),
        "resizes": numbers(done, "resizes", np.int64),
        "gpu_s": numbers(done, "attained_gpu_s", float),
        "overhead_gpu_s": numbers(done, "overhead_gpu_s", float),
        "deadline_s": np.array(listed(specs, "deadline_s"), dtype=float),
        "completed": samples >= total * (1 - 1e-9),
        "progress": samples / total,
        "group": listed(specs, "group"),
        "metric": np.array(
            [
                job.metric_at(s.samples_done / job.total_samples) if score else None
                for s, job, score in zip(done, specs, scores, strict=True)
            ]
            if any(scores)
            else np.full(n, np.nan),
            dtype=float,
        ),
    }
    df = pd.DataFrame(columns)
    df["jct_s"] = df["finish_s"] - df["submit_s"]
    df["queue_s"] = df["start_s"] - df["submit_s"]
    df["ftf"] = df["jct_s"] / df["duration_s"]
    # a trial still running at its deadline: its progress then, pro rata over its run (exact
    # for an uninterrupted run), on its learning curve
    late = df["metric"].notna() & (df["finish_s"] > df["deadline_s"])
    share = ((df["deadline_s"] - df["start_s"]) / (df["finish_s"] - df["start_s"])).clip(0, 1)
    df["metric_at_deadline"] = df["metric"]
    for i in df.index[late]:
        df.loc[i, "metric_at_deadline"] = result.jobs[df.loc[i, "job_id"]].job.metric_at(
            share[i] * df.loc[i, "progress"]
        )
    return df


def summarize(result: SimResult, table: pd.DataFrame | None = None) -> dict[str, float | int | str]:
    """The run's headline figures (from its `job_table`, made here unless given)."""
    df = job_table(result) if table is None else table
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
        "gpu_hours": float(result.accounting.busy_gpu_s / 3600),
        # how the trace's jobs progressed, and how many were matched to a Pollux application
        "progress": result.workload.progress,
        "statistical_jobs": sum(result.workload.statistical_jobs.values()),
        "rounds": result.rounds,
        "events": result.events,
    }
    out |= result.policy_stats
    if has_deadline.any():
        timed = df[has_deadline]
        met = (timed["finish_s"] <= timed["deadline_s"]) & timed["completed"].astype(bool)
        out["deadline_jobs"] = int(has_deadline.sum())
        out["deadline_hits"] = int(met.sum())
    if df["metric"].notna().any():  # hyper-parameter searches: best metric by the deadline
        out["avg_best_metric"] = float(df.groupby("group")["metric_at_deadline"].max().mean())
        out["trials_started"] = int(df["start_s"].notna().sum())
    return out


def plot_jct_cdf(results: dict[str, pd.DataFrame], path: Path, title: str) -> Path:
    """One JCT CDF curve per run (label -> job table), as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    fig, ax = plt.subplots(figsize=(6, 4))
    for label, df in results.items():
        jct = np.sort(df["jct_s"].to_numpy(float))
        ax.plot(jct, np.arange(1, len(jct) + 1) / max(len(jct), 1), label=label)
    ax.set_xscale("log")
    # ticks at durations a person knows (10 min, 1 h, 1 d) read as `10 min`, never 10^3 or 1e+06
    lo, hi = ax.get_xlim()
    marks = log_ticks(max(lo, 1e-3), hi, seconds=True)
    ax.xaxis.set_major_locator(FixedLocator(marks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: duration(v)))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{number(100 * v)}%"))
    ax.set_xlabel("job completion time (log scale)")
    ax.set_ylabel("jobs done")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=120, bbox_inches="tight")
    plt.close(fig)
    tmp.replace(path)
    return path
