"""Optimizer speed and quality: the elastic DP, its greedy baseline, one-job configuration scoring.

Run: `.venv/bin/python -m benchmarks.optimizer` (writes section `optimizer` of docs/BENCHMARKS.md).

- Elastic allocation: the exact DP and the hull allocation up to 2,000 jobs × 4,096 GPUs, the
  hull alone on 10,000 jobs × 10,000 GPUs. Job throughput curves are Pollux's measured T4 scaling
  (`pollux/traces/<model>/placements.csv` and `scalability.csv`, 1-64 GPUs: samples/s = GPUs ×
  local batch / step time, the best node spread per GPU count and batch), one model per job
  in turn. Weights make models comparable: 1 / the model's best throughput.
- The hull's and the greedy baseline's total weighted throughput as ratios to the DP's.
- Configuration scoring: `recommend` over 10^5 and 10^6 candidates. The backend is the
  champion `scaling` model when one is registered (InProcessBackend), else a ScalingPredictor
  (gbm) fitted here on Pollux's measured placements; the section says which.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.report import write_section
from perfcast.datasets.fetch import fetch
from perfcast.datasets.registry import load
from perfcast.optimizer.candidates import GpuPool, enumerate_candidates
from perfcast.optimizer.configs import recommend
from perfcast.optimizer.elastic import (
    EXACT_CELLS,
    ElasticJob,
    allocate_greedy,
    allocate_hull,
    solve,
    total_throughput,
)
from perfcast.optimizer.placement import Node, PlacementJob, place, prediction_rows
from perfcast.optimizer.scoring import Work
from perfcast.predictor.backend import PredictionBackend

COMMAND = ".venv/bin/python -m benchmarks.optimizer"
MODELS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")


def pollux_placements() -> pd.DataFrame:
    """Pollux's measured T4 step times (1-16 GPUs, 4 per node) as scaling-contract rows, from
    the `pollux-scaling` loader (job = the model's folder name)."""
    table = load("pollux-scaling")
    placed = table[table["placement"].notna()]
    columns = ["job", "gpu_type", "num_nodes", "num_gpus", "placement", "local_batch_size",
               "step_time_s"]  # fmt: skip
    return placed.assign(job=placed["application"])[columns].reset_index(drop=True)


def pollux_curves() -> dict[str, dict[tuple[int, int], float]]:
    """Per model: (GPUs, global batch) -> measured samples/s, the best node spread; from the
    placements (1-16 GPUs) and the scalability runs (6-64 GPUs)."""
    small = pollux_placements()
    small = small.rename(columns={"job": "model", "num_gpus": "gpus", "local_batch_size": "bsz"})
    curves = {}
    for model in MODELS:
        big = pd.read_csv(fetch(f"pollux/traces/{model}/scalability.csv"))
        big = big.rename(columns={"num_replicas": "gpus", "local_bsz": "bsz"})
        big = big.assign(step_time_s=big["step_time"])
        rows = pd.concat([small[small["model"] == model], big], ignore_index=True)
        rows["global_batch"] = rows["gpus"] * rows["bsz"]
        rows["rate"] = rows["global_batch"] / rows["step_time_s"]
        best = rows.groupby(["gpus", "global_batch"])["rate"].max()
        curves[model] = {(int(g), int(b)): float(r) for (g, b), r in best.items()}
    return curves


def elastic_jobs(count: int) -> list[ElasticJob]:
    """`count` jobs, the six models in turn; weight 1 / best throughput makes models comparable."""
    curves = pollux_curves()
    jobs = []
    for i in range(count):
        curve = curves[MODELS[i % len(MODELS)]]
        jobs.append(ElasticJob(f"job{i}", curve, weight=1 / max(curve.values())))
    return jobs


def _best_of(
    runs: int, fn: Callable[..., object], jobs: list[ElasticJob], *args: object
) -> tuple[float, Any]:
    """The fastest of `runs` calls `fn(jobs, *args)`, each on fresh copies of the jobs: a job
    keeps what it worked out for its last cluster size (as a scheduler's jobs do from round to
    round), which would make every call after the first a warm one."""
    times, result = [], None
    for _ in range(runs):
        fresh = [dataclasses.replace(job) for job in jobs]
        start = time.perf_counter()
        result = fn(fresh, *args)
        times.append(time.perf_counter() - start)
    return min(times), result


def elastic_section() -> str:
    all_jobs = elastic_jobs(10_000)
    lines = [
        "| jobs | GPUs | exact DP (s, best of 3) | hull (s, best of 3) | hull ÷ DP throughput | "
        "hull's proven gap | greedy ÷ DP throughput | GPUs used by the hull |",
        "|---|---|---|---|---|---|---|---|",
    ]
    sizes = ((1000, 64), (1000, 512), (100, 512), (20, 512), (1000, 2048), (2000, 4096))
    for count, total in (*sizes, (1000, 10_000), (10_000, 10_000)):
        jobs = all_jobs[:count]
        hull_s, hull = _best_of(3, allocate_hull, jobs, total)
        exact_cols = ["–", "–", "–"]  # past the exact DP's reach: the hull's own bound only
        if (count, total) in sizes:
            dp_s, dp = _best_of(3, solve, jobs, total, 10**12)
            greedy = allocate_greedy(jobs, total) if total <= 512 else None
            greedy_ratio = total_throughput(jobs, greedy) / dp.value if greedy else math.nan
            exact_cols = [f"{dp_s:.3f}", f"{hull.value / dp.value:.6f}", _ratio(greedy_ratio)]
        used = sum(g for g, _ in hull.allocation.values())
        lines.append(
            f"| {count:,} | {total:,} | {exact_cols[0]} | {hull_s:.3f} | {exact_cols[1]} | "
            f"{hull.gap:.2e} | {exact_cols[2]} | {used:,} |"
        )
    # worst case for the DP: every job usable on every GPU count 1..512 (synthetic curves)
    dense = [
        ElasticJob(f"synthetic{i}", {(g, 32 * g): g ** (0.5 + i % 5 / 10) for g in range(1, 513)})
        for i in range(1000)
    ]
    dense_s, dense_dp = _best_of(3, solve, dense, 512, 10**12)
    dense_hull_s, dense_hull = _best_of(3, allocate_hull, dense, 512)
    return (
        "Curves: Pollux's measured T4 scaling (6 models in turn, 1-64 GPUs, several batch "
        "sizes each); weight = 1 / the model's best samples/s. `solve` runs the exact DP up to "
        f"{EXACT_CELLS:,} cells and the hull allocation beyond; both are timed on every size "
        "where the DP runs. The hull's proven gap is 1 − its value ÷ the fractional optimum "
        "along the hulls, an upper bound on how far from optimal it is, known without the DP. "
        "Greedy runs only up to 512 GPUs (its loop takes one GPU step at a time).\n\n"
        + "\n".join(lines)
        + "\n\n"
        f"Worst case for the DP (synthetic curves usable at every GPU count 1..512, 1,000 jobs × "
        f"512 GPUs): DP {dense_s:.3f} s; hull {dense_hull_s:.3f} s at "
        f"{dense_hull.value / dense_dp.value:.6f} of the DP. Targets: 10,000 jobs × 10,000 GPUs "
        "in < 1 s, within 1% of the exact DP where it runs."
    )


def _ratio(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.4f}"


class TimedBackend:
    """Wraps a backend to time its predict calls."""

    def __init__(self, inner: PredictionBackend) -> None:
        self.inner, self.seconds = inner, 0.0

    def predict(self, task: str, rows: pd.DataFrame) -> pd.DataFrame:
        start = time.perf_counter()
        try:
            return self.inner.predict(task, rows)
        finally:
            self.seconds += time.perf_counter() - start


def scaling_backend() -> tuple[PredictionBackend, str]:
    from perfcast.training.inprocess import InProcessBackend
    from perfcast.training.model_store import load_champion

    if load_champion("scaling") is not None:
        return InProcessBackend(tasks=("scaling",)), "InProcessBackend (registered champion)"
    from perfcast.predictor.scaling import ScalingPredictor

    rows = pollux_placements()
    predictor = ScalingPredictor(model="gbm").fit(rows)

    class Fitted:
        def predict(self, task: str, rows: pd.DataFrame) -> pd.DataFrame:
            return predictor.predict_interval(rows).reset_index(drop=True)

    return Fitted(), f"ScalingPredictor(gbm) fitted on {len(rows)} Pollux placement rows"


def gavel_backend() -> PredictionBackend:
    """Scaling and interference gbm models fitted here on Gavel's measurements (K80, P100,
    V100), answering as a service would."""
    from perfcast.predictor.interference import InterferencePredictor
    from perfcast.predictor.scaling import ScalingPredictor

    fitted = {
        "scaling": ScalingPredictor(model="gbm").fit(load("gavel-scaling")),
        "interference": InterferencePredictor(model="gbm").fit(load("gavel-interference")),
    }

    class Fitted:
        def predict(self, task: str, rows: pd.DataFrame) -> pd.DataFrame:
            return fitted[task].predict_interval(rows).reset_index(drop=True)

    return Fitted()


def placement_jobs(count: int) -> list[PlacementJob]:
    """A synthetic mix of Gavel's measured kinds: 70% one-GPU jobs of its co-location kinds
    (job, batch size), the rest 2, 4 or 8 GPUs of its scaling jobs; memory by batch size."""
    pairs = load("gavel-interference")[["a_job", "a_batch_size"]].drop_duplicates()
    singles = list(pairs.itertuples(index=False, name=None))
    scaling = load("gavel-scaling")[["job", "local_batch_size"]].drop_duplicates()
    multis = list(scaling.itertuples(index=False, name=None))
    rng = np.random.default_rng(0)
    jobs = []
    for i in range(count):
        gpus = int(rng.choice([1, 2, 4, 8], p=[0.7, 0.1, 0.1, 0.1]))
        pool = singles if gpus == 1 else multis
        job, batch = pool[int(rng.integers(len(pool)))]
        features = {"job": job, "local_batch_size": int(batch)}
        jobs.append(PlacementJob(f"j{i}", features, gpus, 1_500.0, 20.0 * int(batch)))
    return jobs


def placement_section() -> str:
    backend = TimedBackend(gavel_backend())
    lines = [
        "| jobs | GPUs (nodes × 8) | place (s) | of which predictions (s) | rows predicted | "
        "pairs of jobs (the old rows) | placed | sharing a GPU |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for count, node_count in ((1_000, 125), (10_000, 1_250)):
        nodes = [
            Node(f"n{i}", ("k80", "p100", "v100")[i % 3], 8, (12_000.0, 16_000.0, 16_000.0)[i % 3])
            for i in range(node_count)
        ]
        jobs = placement_jobs(count)
        backend.seconds = 0.0
        start = time.perf_counter()
        plan = place(jobs, nodes, backend)
        seconds = time.perf_counter() - start
        singles = sum(j.num_gpus == 1 for j in jobs)
        shared = sum(a.shares_with is not None for a in plan.assignments.values())
        lines.append(
            f"| {count:,} | {8 * node_count:,} | {seconds:.2f} | {backend.seconds:.2f} | "
            f"{prediction_rows(jobs, nodes):,} | {singles * (singles - 1) // 2 * 3:,} | "
            f"{len(plan.assignments):,} | {shared:,} |"
        )
    return (
        "Jobs: a synthetic mix of Gavel's measured kinds (70% one-GPU jobs of its 26 co-location "
        "kinds, the rest 2, 4 or 8 GPUs of its scaling jobs), placed on K80, P100 and V100 "
        "nodes in turn; predictions from gbm models fitted here on gavel-scaling and "
        "gavel-interference. Rows are predicted once per kind of job and pair of kinds; the "
        "placement before predicted one row per pair of one-GPU jobs and GPU type (1,000 "
        "one-GPU jobs on 4 types: 15.2 s).\n\n" + "\n".join(lines) + "\n\nTarget: 10,000 jobs "
        "placed in < 1 s."
    )


def config_section() -> str:
    backend, name = scaling_backend()
    # 64 nodes of 4 T4s (the hardware the data was measured on); the local batch size grid of
    # 16 or 160 sizes between Pollux's smallest and largest imagenet batch sets the count
    pools = [GpuPool("t4", gpus_per_node=4, nodes=64, price_per_gpu_hour=0.35)]
    grids = [np.unique(np.linspace(20, 200, n).round().astype(int)) for n in (16, 160)]
    lines = [
        "| candidates | enumerate (s) | backend predict (s) | recommend total (s) | "
        "scoring without the backend (s) |",
        "|---|---|---|---|---|",
    ]
    for sizes in grids:
        start = time.perf_counter()
        enumerate_candidates({"job": "imagenet"}, pools, sizes)
        enum_s = time.perf_counter() - start
        timed = TimedBackend(backend)
        start = time.perf_counter()
        rec = recommend(
            {"job": "imagenet"}, pools, timed, local_batch_sizes=sizes, work=Work(samples=1.28e7)
        )
        total_s = time.perf_counter() - start
        lines.append(
            f"| {rec.candidates:,} | {enum_s:.2f} | {timed.seconds:.2f} | {total_s:.2f} | "
            f"{total_s - timed.seconds:.2f} |"
        )
    return (
        f"Backend: {name}. Job `imagenet` on 64 nodes × 4 T4 ($0.35/GPU-hour), every GPU count "
        "1-256 and node spread, 16 or 160 local batch sizes in 20-200; `min_time` for 1.28e7 "
        "samples, one `predict` call per recommendation. (Beyond the 16 GPUs it was trained on "
        "the model extrapolates; this measures speed, not accuracy.)\n\n" + "\n".join(lines)
    )


def main() -> None:
    np.seterr(all="ignore")
    load = os.getloadavg()[0]
    body = (
        f"Load average when started: {load:.1f} on {os.cpu_count()} CPUs (other work shares the "
        "machine; times are wall-clock).\n\n### Elastic allocation (MASCOTS'20 DP)\n\n"
        + elastic_section()
    )
    body += "\n\n### Placement of many jobs\n\n" + placement_section()
    body += "\n\n### One-job configuration scoring\n\n" + config_section()
    path = write_section("optimizer", "Optimizer", COMMAND, body)
    print(body)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
