"""Decima (SIGCOMM'19, hongzimao/decima-sim): Spark TPC-H jobs as stage DAGs, one `plan`
contract table (a stage DAG is a plan whose nodes are stages).

`spark_env/tpch/<scale>/query_<n>.json` (converted from Decima's `.npy`, values unchanged)
holds one query at one input size (`2g` .. `50g`, read as TPC-H scale factor 2 .. 50):
- `adj_mat[i][j] == 1`: stage i feeds stage j (Decima's job_generator reads it so);
- `task_duration[i]`: for each number of executors Decima ran the query with (2 .. 100), the
  measured durations (ms) of stage i's tasks in the `first_wave` (the first task of each
  executor, JVM warm-up included) and the `rest_wave`; `fresh_durations` repeats the
  first-wave tasks that ran on a fresh executor. A stage's task count is first + rest.

The files hold no end-to-end job time, so the target is REPLAYED from the measured tasks: on E
executors, stages in the order they become ready (Spark's FIFO scheduler inside one job), each
task of a stage on the executor that frees first, with the durations measured at E executors.
One sample per (query, scale, executors); `threads` holds the executors.

Stage columns: `op` = "stage", `inputs` = the stages feeding it, `num_tasks` (at E), `task_ms`
= the mean of every measured task of the stage over all executor counts (the stage's profile,
what a history server reports for a recurring job; the same for every E), `latency_ms` = the
stage's summed task time at E. `cardinality` is missing: Decima records no row counts.
"""

from __future__ import annotations

import heapq
import json

import numpy as np
import pandas as pd

from perfcast.datasets.fetch import entries, fetch
from perfcast.datasets.registry import dataset
from perfcast.errors import ContractError

PREFIX = "decima/spark_env/tpch/"
ENGINE = "spark-decima"


def replay_ms(inputs: list[list[int]], durations: list[list[float]], executors: int) -> float:
    """Job completion time (ms) of a stage DAG on `executors` executors: stages in ready-time
    order, each task on the earliest free executor (list scheduling, no preemption)."""
    n = len(durations)
    children: list[list[int]] = [[] for _ in range(n)]
    for stage, parents in enumerate(inputs):
        for parent in parents:
            children[parent].append(stage)
    waiting = [len(parents) for parents in inputs]
    finish = [0.0] * n
    free = [0.0] * executors
    ready = [(0.0, s) for s in range(n) if waiting[s] == 0]
    heapq.heapify(ready)
    done = 0
    while ready:
        at, stage = heapq.heappop(ready)
        end = at
        for duration in durations[stage]:
            start = max(heapq.heappop(free), at)
            heapq.heappush(free, start + duration)
            end = max(end, start + duration)
        finish[stage] = end
        done += 1
        for child in children[stage]:
            waiting[child] -= 1
            if waiting[child] == 0:
                heapq.heappush(ready, (max(finish[p] for p in inputs[child]), child))
    if done != n:
        raise ContractError("the stage DAG has a cycle", column="inputs")
    return max(finish)


def _query_rows(path: str, record: dict) -> list[dict]:
    adjacency = np.asarray(record["adj_mat"], dtype=float)
    n = len(adjacency)
    inputs = [[int(i) for i in np.flatnonzero(adjacency[:, j])] for j in range(n)]
    stages = [record["task_duration"][str(i)] for i in range(n)]
    if len(stages) != n:
        raise ContractError(f"{n} stages in adj_mat but {len(stages)} task lists", file=path)
    profile_ms = [
        float(np.mean([d for wave in ("first_wave", "rest_wave") for ds in s[wave].values()
                       for d in ds]))
        for s in stages
    ]  # fmt: skip
    scale = record["scale"]
    query = f"tpch-q{int(record['query'])}"
    rows = []
    for executors in sorted({int(e) for e in stages[0]["first_wave"]}):
        key = str(executors)
        durations = [list(s["first_wave"][key]) + list(s["rest_wave"][key]) for s in stages]
        run = {
            "sample_id": f"spark-{query}-{scale}-e{executors}",
            "query": query,
            "engine": ENGINE,
            "scale_factor": float(scale.removesuffix("g")),
            "threads": executors,
            "memory_limit_mb": np.nan,
            "e2e_latency_ms": replay_ms(inputs, durations, executors),
        }
        for stage in range(n):
            rows.append(
                run
                | {
                    "node_id": stage,
                    "op": "stage",
                    "inputs": json.dumps(inputs[stage]),
                    "cardinality": np.nan,
                    "latency_ms": float(sum(durations[stage])),
                    "num_tasks": len(durations[stage]),
                    "task_ms": profile_ms[stage],
                }
            )
    return rows


@dataset(
    "decima-tpch-stages",
    "plan",
    description="Spark TPC-H stage DAGs (18 queries x 2g..50g x 2..100 executors); job time "
    "replayed from the measured task durations (no end-to-end time in the source)",
    source="Decima, Mao et al., SIGCOMM'19 (hongzimao/decima-sim)",
    files=[e.path for e in entries(PREFIX)],
)
def load_stages() -> pd.DataFrame:
    rows: list[dict] = []
    for entry in entries(PREFIX):
        record = json.loads(fetch(entry.path).read_text())
        rows.extend(_query_rows(entry.path, record))
    return pd.DataFrame(rows)
