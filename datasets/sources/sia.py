"""Sia (SOSP'23, siasosp23/artifacts): step times of Pollux's jobs on two other GPU clusters.

The Sia simulator ships, per job, the same tables as Pollux's artifact
(`sia-simulator/traces/<job>/placements-<cluster>.csv`: `placement,local_bsz,step_time,
sync_time`, placement = GPUs used on each node as digits; `scalability-<cluster>.csv`:
`num_nodes,num_replicas,local_bsz,step_time,sync_time`, placement not recorded) for a cluster
of RTX 2080 Ti GPUs (`rtx`: placements up to 2 nodes x 8 GPUs, scalability rows on 2-3 nodes)
and one of Quadro RTX 6000 GPUs (`quad`: one node, 1-4 GPUs). Times are seconds per iteration,
`step_time` including `sync_time` as in Pollux. The jobs are Pollux's (bert, cifar10,
deepspeech2, imagenet, ncf, yolov3), so they take Pollux's workload names: the same job
measured on three clusters.

Not read: `scalability-quad.csv` repeats `placements-quad.csv` row for row (same values, 1 node);
`gpt_pmp` (rtx only) is a pipeline-model-parallel job with no one-GPU row, whose values are a
formula rather than measurements (`step_time` = 0.099 x local_bsz, `sync_time` = 0.22 +
0.1075 x nodes, larger than `step_time`).
"""

from __future__ import annotations

import pandas as pd

from perfcast.datasets.fetch import fetch
from perfcast.datasets.placements import read_placements
from perfcast.datasets.registry import dataset
from perfcast.datasets.sources.pollux import WORKLOADS, scaling_frame

SOURCE = "Sia (SOSP'23), github.com/siasosp23/artifacts (sia-simulator/traces)"
# the artifact's cluster suffix -> (gpu_type, cluster name in features.devices.INTERCONNECTS)
CLUSTERS = {"rtx": ("rtx2080ti", "sia-rtx"), "quad": ("rtx6000", "sia-quad")}
APPS = sorted(WORKLOADS)


def _path(app: str, name: str) -> str:
    return f"sia/traces/{app}/{name}"


def _files(app: str, suffix: str) -> list[str]:
    names = [f"placements-{suffix}.csv"] + (["scalability-rtx.csv"] if suffix == "rtx" else [])
    return [_path(app, n) for n in names]


def _placements(path: str) -> pd.DataFrame:
    return read_placements(path).assign(source=path)


def _cluster_rows(app: str, suffix: str) -> pd.DataFrame:
    placed_path, *spread_path = _files(app, suffix)
    parts = [_placements(placed_path)]
    for path in spread_path:
        parts.append(pd.read_csv(fetch(path)).assign(placement=None, source=path))
    both = pd.concat(parts, ignore_index=True)
    gpu_type, cluster = CLUSTERS[suffix]
    return scaling_frame(both, app, gpu_type, cluster=cluster)


@dataset(
    "sia-scaling",
    "scaling",
    description="Step and gradient-sync time of Pollux's 6 models on an RTX 2080 Ti cluster "
    "(1-24 GPUs, 8 per node) and a Quadro RTX 6000 node (1-4 GPUs), by placement and local "
    "batch size",
    source=SOURCE,
    files=[f for suffix in CLUSTERS for app in APPS for f in _files(app, suffix)],
)
def sia_scaling() -> pd.DataFrame:
    return pd.concat(
        [_cluster_rows(app, suffix) for suffix in CLUSTERS for app in APPS], ignore_index=True
    )
