"""Muri (SIGCOMM'22, Rivendile/Muri): multi-resource job traces measured on 8 nodes x 8 V100.

Every job row of Muri's traces carries its model's measured `iteration_time` (ms) and a 3-way
breakdown `resource_time_0..2` (ms) for the job's GPU count. Which resource each index is comes
from the values (and from `simulator/jobs.py`, whose table of the same numbers the traces use):
index 0 is data loading / CPU work (dominant for the RL models dqn and a2c, and for the small CNNs
fed from ImageNet), index 1 is GPU compute (dominant for bert/gpt2), index 2 is communication
(exactly 0 on 1 GPU, growing with the GPU count). The three parts overlap in time (Muri
interleaves them), so they do not add up to the iteration time.

`muri-scaling` is one row per (model, GPU count), 8 models x {1, 2, 4, 8, 16, 32} GPUs, read from
the simulator traces (the values are identical in every file, except resnet18 on 32 GPUs whose
communication time is 13 ms in the testbed `cluster_trace.csv` and 93 ms in every simulator file;
the simulator value is kept). The testbed is V100 ("8 nodes with 8 V100 GPUs per node",
cluster_exp/README.md; `cluster_spec/n8g8.csv`: 8 GPUs per node), so num_nodes = ceil(gpus / 8).

`muri-traces` is every job of the simulator traces and the testbed trace, with a `trace` column;
times in the files are milliseconds (the simulator divides `submit_time` and `duration` by 1000,
and `duration` = `iterations` x `iteration_time` ms within 1% on 95% of the rows). Note that
`trace3.csv` and `job_type_4.csv` are the same file (same sha256).
"""

from __future__ import annotations

import math

import pandas as pd

from perfcast.datasets.fetch import entries, fetch
from perfcast.datasets.registry import dataset

S_PER_MS = 1e-3
GPUS_PER_NODE = 8  # simulator/cluster_spec/n8g8.csv: num_gpu_p_node = 8
SIMULATOR_TRACES = "muri/simulator/trace-data/"
TESTBED_TRACE = "muri/cluster_exp/trace-data/cluster_trace.csv"
SOURCE = "Muri (SIGCOMM'22), github.com/Rivendile/Muri"


def _trace_paths() -> list[str]:
    return [e.path for e in entries(SIMULATOR_TRACES)] + [TESTBED_TRACE]


def _read(path: str) -> pd.DataFrame:
    trace = path.rsplit("/", 1)[-1].removesuffix(".csv")
    if path == TESTBED_TRACE:
        trace = "testbed/" + trace
    return pd.read_csv(fetch(path)).assign(trace=trace)


@dataset(
    "muri-scaling",
    "scaling",
    description=(
        "iteration time of 8 models (CNNs, BERT, GPT-2, DQN, A2C) on 1-32 V100 GPUs with the "
        "data loading / compute / communication breakdown"
    ),
    source=SOURCE,
    files=[e.path for e in entries(SIMULATOR_TRACES)],
    version=2,  # rows name their cluster (features.devices.INTERCONNECTS)
)
def muri_scaling() -> pd.DataFrame:
    jobs = pd.concat([_read(e.path) for e in entries(SIMULATOR_TRACES)], ignore_index=True)
    keys = ["model_name", "num_gpu", "batch_size"]
    times = ["iteration_time", "resource_time_0", "resource_time_1", "resource_time_2"]
    table = jobs.groupby(keys, as_index=False)[times].agg(lambda s: s.mode().iloc[0])
    return pd.DataFrame(
        {
            "job": table["model_name"],
            "gpu_type": "v100",
            "num_nodes": [math.ceil(g / GPUS_PER_NODE) for g in table["num_gpu"]],
            "num_gpus": table["num_gpu"],
            "local_batch_size": table["batch_size"],
            "step_time_s": table["iteration_time"] * S_PER_MS,
            "sync_time_s": table["resource_time_2"] * S_PER_MS,
            "load_time_s": table["resource_time_0"] * S_PER_MS,
            "compute_time_s": table["resource_time_1"] * S_PER_MS,
            "comm_time_s": table["resource_time_2"] * S_PER_MS,
            "source": "muri-scaling",
            "cluster": "muri",
        }
    )


@dataset(
    "muri-traces",
    "trace",
    description="Muri's simulator job mixes (trace1-4, *_pr, job_type_1-4) and its testbed trace",
    source=SOURCE,
    files=_trace_paths(),
)
def muri_traces() -> pd.DataFrame:
    jobs = pd.concat([_read(p) for p in _trace_paths()], ignore_index=True)
    return pd.DataFrame(
        {
            "job_id": jobs["trace"] + "/" + jobs["job_id"].astype(str),
            "submit_time_s": jobs["submit_time"] * S_PER_MS,
            "num_gpus": jobs["num_gpu"],
            "duration_s": jobs["duration"] * S_PER_MS,
            "job": jobs["model_name"],
            "batch_size": jobs["batch_size"],
            "iterations": jobs["iterations"],
            "trace": jobs["trace"],
            "iteration_time_s": jobs["iteration_time"] * S_PER_MS,
            "priority": jobs["priority"],
        }
    )
