"""Pollux (OSDI'21, petuum/adaptdl branch osdi21-artifact): T4 step times, Philly jobs, job mixes.

Testbed: nodes of 4 NVIDIA T4 GPUs (16 nodes, 64 GPUs). Per model (`traces/<app>/`):
`placements.csv` (`placement,local_bsz,step_time,sync_time`; placement = GPUs used on each node,
as digits, up to 4 nodes) and `scalability.csv` (`num_nodes,num_replicas,local_bsz,step_time,
sync_time`, 6 to 16 nodes, placement not recorded). Times are seconds per iteration: Pollux's
simulator (`simulator/applications.py`) multiplies them by iteration counts and compares the
result with `12 * 3600`; `step_time` includes `sync_time` (it adds `step_time - sync_time` per
extra gradient-accumulation step).

`traces/philly.csv` is Pollux's copy of the Microsoft Philly trace (`timestamp,duration,num_gpus,
gpu_time,cluster`): duration in seconds (`gpu_time == duration * num_gpus` on every row; the
longest job, 4.6e6 s = 53 days, fits in the 109 days the timestamps span, which minutes would not).

`workloads*/workload-N.csv` (`name,time,application,num_replicas,batch_size`: submit second,
model, GPUs, total batch size; kept as `global_batch_size`, with `batch_size` the per-GPU batch
as the trace contract has it) are the job mixes of Pollux's evaluation (`workloads-<load>` scale
the arrival rate; `workloads-realistic` has users' own choices). They state no run time: Pollux
runs each job to a fixed number of epochs. `duration_s` here is Pollux's own estimate of the run
time of the job as submitted (its `Application.get_configurations`): the iterations the
validation run at that batch size took to finish the app's epochs, times the step time of the
GPUs packed 4 per node at that local batch size (with gradient accumulation above the largest
measured local batch size), interpolated from placements/scalability exactly as Pollux does.
`benchmark/workloads*` are byte-identical copies of `workloads` and `workloads-realistic` and
are not read twice.
"""

from __future__ import annotations

import logging
import math
from functools import cache

import numpy as np
import pandas as pd
from scipy.interpolate import LinearNDInterpolator

from perfcast.datasets.fetch import entries, fetch
from perfcast.datasets.placements import read_placements
from perfcast.datasets.registry import dataset
from perfcast.errors import PerfcastError

log = logging.getLogger(__name__)

SOURCE = "Pollux (OSDI'21), github.com/petuum/adaptdl (osdi21-artifact)"
GPU_TYPE = "t4"
CLUSTER = "pollux"  # the scaling rows' cluster: the artifact's 16 x 4 T4 testbed
GPUS_PER_NODE = 4
PHILLY = "pollux/traces/philly.csv"

# Pollux application -> workload name (model-dataset, as in the paper's Table 1).
WORKLOADS: dict[str, tuple[str, str]] = {
    "bert": ("bert-squad", "bert"),
    "cifar10": ("resnet18-cifar10", "resnet"),
    "deepspeech2": ("deepspeech2-arctic", "deepspeech2"),
    "imagenet": ("resnet50-imagenet", "resnet"),
    "ncf": ("ncf-movielens", "ncf"),
    "yolov3": ("yolov3-voc", "yolo"),
}
# simulator/applications.py APPLICATIONS: epochs each job trains for, and yolov3's local cap.
MAX_EPOCHS = {"bert": 2, "cifar10": 100, "ncf": 10, "imagenet": 90, "deepspeech2": 80, "yolov3": 50}
MAX_LOCAL_BSZ = {"yolov3": 8}

WORKLOAD_FILES = [
    e.path
    for e in entries("pollux/workloads")  # not pollux/benchmark/: copies of two of these
    if e.path.endswith(".csv")
]


def _trace_file(app: str, name: str) -> str:
    return f"pollux/traces/{app}/{name}"


@cache
def _placements(app: str) -> pd.DataFrame:
    return read_placements(_trace_file(app, "placements.csv"))


@cache
def _scalability(app: str) -> pd.DataFrame:
    return pd.read_csv(fetch(_trace_file(app, "scalability.csv")))


def _scaling_rows(app: str) -> pd.DataFrame:
    placed, spread = _placements(app), _scalability(app)
    both = pd.concat(
        [
            placed.assign(source=_trace_file(app, "placements.csv")),
            spread.assign(placement=None, source=_trace_file(app, "scalability.csv")),
        ],
        ignore_index=True,
    )
    return scaling_frame(both, app, GPU_TYPE, cluster=CLUSTER)


def scaling_frame(both: pd.DataFrame, app: str, gpu_type: str, **extra: str) -> pd.DataFrame:
    """Scaling-contract rows from measurements in Pollux's format (placements.csv and
    scalability.csv columns, with `num_nodes`, `num_replicas` and `source`); Sia's artifact
    writes the same format. `extra` adds constant columns (e.g. cluster)."""
    job, family = WORKLOADS[app]
    frame = pd.DataFrame(
        {
            "job": job,
            "gpu_type": gpu_type,
            "num_nodes": both["num_nodes"],
            "num_gpus": both["num_replicas"],
            "placement": both["placement"],
            "local_batch_size": both["local_bsz"],
            "step_time_s": both["step_time"],  # seconds per iteration, sync included
            "sync_time_s": both["sync_time"],  # seconds
            "source": both["source"],
        }
    )
    return frame.assign(**extra, model_family=family, application=app)


@dataset(
    "pollux-scaling",
    "scaling",
    description="Step and gradient-sync time of 6 models on 1-64 T4 GPUs (4 per node) by "
    "placement and local batch size; placement known up to 4 nodes",
    source=SOURCE,
    files=[_trace_file(a, f) for a in WORKLOADS for f in ("placements.csv", "scalability.csv")],
    version=2,  # rows name their cluster (features.devices.INTERCONNECTS)
)
def pollux_scaling() -> pd.DataFrame:
    return pd.concat([_scaling_rows(app) for app in WORKLOADS], ignore_index=True)


@dataset(
    "pollux-philly",
    "trace",
    description="82k Microsoft Philly jobs (Pollux's copy): submit time from the first "
    "submission, run time in seconds, GPUs, virtual cluster; jobs with no positive run time "
    "would be dropped (there are none)",
    source=SOURCE,
    files=[PHILLY],
)
def pollux_philly() -> pd.DataFrame:
    raw = pd.read_csv(fetch(PHILLY), dtype={"cluster": str})
    submitted = pd.to_datetime(raw["timestamp"], format="%Y-%m-%d %H:%M:%S")
    table = pd.DataFrame(
        {
            "job_id": "philly/" + raw.index.astype(str),  # data row number from 0
            "submit_time_s": (submitted - submitted.min()).dt.total_seconds(),
            "num_gpus": raw["num_gpus"],
            "duration_s": raw["duration"].astype(float),  # seconds
            "vc": raw["cluster"],
            "gpu_time_s": raw["gpu_time"].astype(float),
            "submitted_at": raw["timestamp"],
        }
    )
    valid = table["duration_s"] > 0
    log.info("%s: dropped %d jobs with duration <= 0", PHILLY, int((~valid).sum()))
    return table[valid].reset_index(drop=True)


@cache
def _validation(app: str, batch_size: int) -> pd.DataFrame:
    path = _trace_file(app, f"validation-{batch_size}.csv")
    return pd.read_csv(fetch(path))


@cache
def _spread_interpolator(app: str) -> LinearNDInterpolator:
    xs, ys = ["num_nodes", "num_replicas", "local_bsz"], ["step_time", "sync_time"]
    means = _placements(app).groupby(xs, as_index=False)[ys].mean()
    points = pd.concat([means, _scalability(app)[xs + ys]], ignore_index=True)
    return LinearNDInterpolator(points[xs].to_numpy(float), points[ys].to_numpy(float))


def _step_and_sync(app: str, num_replicas: int, local_bsz: int) -> tuple[float, float]:
    """Pollux's `get_throughput` for GPUs packed 4 per node: seconds per step and of sync."""
    full, rest = divmod(num_replicas, GPUS_PER_NODE)
    nodes = [GPUS_PER_NODE] * full + ([rest] if rest else [])
    rotation = min(tuple(nodes[i:] + nodes[:i]) for i in range(len(nodes)))
    placement = "".join(map(str, rotation))
    rows = _placement_curve(app, placement)
    if len(rows):
        step = np.interp(local_bsz, rows["local_bsz"], rows["step_time"], left=np.nan, right=np.nan)
        sync = np.interp(local_bsz, rows["local_bsz"], rows["sync_time"], left=np.nan, right=np.nan)
        return float(step), float(sync)
    step, sync = _spread_interpolator(app)([min(len(nodes), 16), num_replicas, local_bsz])[0]
    return float(step), float(sync)


@cache
def _placement_curve(app: str, placement: str) -> pd.DataFrame:
    """The measured step and sync times of `app` at `placement`, by local batch size."""
    placed = _placements(app)
    return placed[placed["placement"] == placement].sort_values("local_bsz")


@cache  # the workload files repeat a few sizes: 7,680 jobs, far fewer distinct runs
def _estimated_run(app: str, num_replicas: int, batch_size: int) -> tuple[float, int]:
    """Seconds and iterations to train `app` for its epochs at this size (Pollux's estimate)."""
    local_bsz = math.ceil(batch_size / num_replicas)
    max_local = MAX_LOCAL_BSZ.get(app, int(_placements(app)["local_bsz"].max()))
    accum_steps = math.ceil(local_bsz / max_local) - 1
    atomic_bsz = math.ceil(local_bsz / (accum_steps + 1))
    step, sync = _step_and_sync(app, num_replicas, atomic_bsz)
    step += accum_steps * (step - sync)  # an accumulation step computes but does not sync
    iterations = int(_validation(app, batch_size)["iteration"].iloc[MAX_EPOCHS[app] - 1])
    return iterations * step, iterations


def _workload(path: str) -> pd.DataFrame:
    raw = pd.read_csv(fetch(path))
    unknown = set(raw["application"]) - set(WORKLOADS)
    if unknown:
        raise PerfcastError(f"{path}: unknown application(s) {', '.join(sorted(unknown))}")
    name = path.removeprefix("pollux/").removesuffix(".csv")
    runs = [
        _estimated_run(app, int(n), int(b))
        for app, n, b in zip(
            raw["application"], raw["num_replicas"], raw["batch_size"], strict=True
        )
    ]
    return pd.DataFrame(
        {
            "job_id": name + "/" + raw["name"],
            "submit_time_s": raw["time"].astype(float),
            "num_gpus": raw["num_replicas"],
            "duration_s": [seconds for seconds, _ in runs],
            "job": raw["application"].map(lambda a: WORKLOADS[a][0]),
            # the trace contract's batch_size is per GPU; Pollux's files give the total batch
            "batch_size": -(-raw["batch_size"] // raw["num_replicas"]),
            "global_batch_size": raw["batch_size"],
            "iterations": [iterations for _, iterations in runs],
            "trace": name,
            "application": raw["application"],
            "duration_estimated": True,
        }
    )


@dataset(
    "pollux-workloads",
    "trace",
    description="Pollux's evaluation job mixes (5 load variants x 8 workloads): submit time, "
    "model, GPUs, batch size; duration is Pollux's estimate of the run as submitted (validation "
    "iterations x interpolated T4 step time), not a measurement",
    source=SOURCE,
    version=2,  # 2: batch_size per GPU, the total batch in global_batch_size
    files=[
        *WORKLOAD_FILES,
        *(e.path for e in entries("pollux/traces/") if "/validation-" in e.path),
        *(_trace_file(a, f) for a in WORKLOADS for f in ("placements.csv", "scalability.csv")),
    ],
)
def pollux_workloads() -> pd.DataFrame:
    table = pd.concat([_workload(p) for p in WORKLOAD_FILES], ignore_index=True)
    unknown = table["duration_s"].isna()
    log.info("pollux workloads: dropped %d jobs outside the measured step times", unknown.sum())
    return table[~unknown].reset_index(drop=True)
