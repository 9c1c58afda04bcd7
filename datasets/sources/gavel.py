"""Gavel (OSDI'20, stanford-futuredata/gavel): throughputs of 26 job configs on K80/P100/V100.

`simulation_throughputs.json` and `physical_cluster_throughputs.json` are laid out as
`d[section][str((job_type, scale_factor))][str((other, scale_factor)) or "null"]`, where a section
is a GPU type (`v100`) or the same GPU type with its workers spread over servers
(`v100_unconsolidated`). `"null"` holds the job's throughput alone; another key holds the pair
`[self, other]` of throughputs when the two jobs share the GPUs; `[0, 0]` marks a pair that was
not measured.

Throughput unit. Gavel's profiler (`scheduler/scripts/profiling/measure_throughput.py`,
`_done_callback`) stores, for a job on `scale_factor` GPUs, the SUM over its workers of
`num_steps / execution_time`; each data-parallel worker runs one local batch per step, in
lockstep, so the job's iteration rate is `throughput / scale_factor` and one iteration takes
`scale_factor / throughput` seconds. The data confirms it: ResNet-50 (batch 64) on V100 reads
4.39 at 1 GPU and 17.30 at 8; read as whole-job iterations of 8 x 64 images that would be 31x the
1-GPU rate on 8 GPUs. Gavel's simulator counts steps in the same unit: it sets a job's
`total_steps = run_time * throughputs["v100"][(job, scale_factor)]["null"]` (`generate_job`), so a
trace job's run time on its requested V100s is `total_steps / throughput`.

Placement. Gavel places a multi-GPU job's workers "in a strided fashion to minimize the number of
servers used" (`scheduler.py`, `_assign_workers_to_job`), so the consolidated sections are read
as one server (`num_nodes = 1`, placement `"8"`). The `_unconsolidated` sections are the same
jobs with workers on different servers; how many servers the profiler used is not recorded, and
we take the fully spread case, one GPU per server (`num_nodes = scale_factor`, placement
`"11111111"`). At scale factor 1 an unconsolidated entry repeats the consolidated one (one GPU
cannot be spread) and is left out.

Which file. `gavel-scaling` and `gavel-interference` come from `simulation_throughputs.json`, the
complete table Gavel's simulator reads. `physical_cluster_throughputs.json` differs from it only
in 73 solo entries of the consolidated sections (re-measured on the physical cluster: e.g. V100
Recommendation is 10x faster there); its pair entries and its `_unconsolidated` sections are
identical to the simulation file's, so it yields only `gavel-physical-scaling` (consolidated solo
entries) and no separate interference dataset.

Zero throughputs (ResNet-50 batch 128 on 2/4/8 K80s: does not run) are dropped. In 69 of the
330 V100 pairs one side's co-located throughput equals its solo throughput exactly (speed 1.0,
mostly ResNet-18 on CIFAR-10); that is how the file has them, kept as published.

Traces. `traces/msr/seed=0/<vc>.trace` (one Philly virtual cluster each, the old 7-field layout)
and `traces/physical_cluster/*.trace` (10 fields). Arrival times are seconds. 1548 of the 15551
jobs (all in msr/) ask for a type on a GPU count Gavel never measured (Recommendation, A3C and
CycleGAN on 2+ GPUs, anything on 7, 12, 16+ GPUs): they have no run time and are dropped.
"""

from __future__ import annotations

import ast
import json
import logging
import re
from pathlib import Path

import pandas as pd

from perfcast.datasets.fetch import entries, fetch
from perfcast.datasets.registry import dataset
from perfcast.errors import PerfcastError

log = logging.getLogger(__name__)

SIMULATION = "gavel/simulation_throughputs.json"
PHYSICAL = "gavel/physical_cluster_throughputs.json"
TRACE_DIR = "gavel/traces/"
SOURCE = "Gavel (OSDI'20), github.com/stanford-futuredata/gavel"
UNCONSOLIDATED = "_unconsolidated"
# Gavel's simulator derives a job's step count from its throughput on this GPU type.
REFERENCE_GPU = "v100"

# Gavel model name -> (workload name, model family); datasets from gavel's job_table.py commands.
WORKLOADS: dict[str, tuple[str, str]] = {
    "ResNet-18": ("resnet18-cifar10", "resnet"),
    "ResNet-50": ("resnet50-imagenet", "resnet"),
    "Transformer": ("transformer-multi30k", "transformer"),
    "LM": ("lstm-wikitext2", "lstm"),
    "Recommendation": ("autoencoder-ml20m", "autoencoder"),
    "A3C": ("a3c-pong", "a3c"),
    "CycleGAN": ("cyclegan-monet2photo", "gan"),
}
# Configs named without a batch size: CycleGAN runs PyTorch-GAN's cyclegan.py at its default
# --batch_size 1; A3C has no minibatch (each of its 4 worker processes steps one environment).
UNNAMED_BATCH_SIZE = 1

_CONFIG = re.compile(r"^(?P<model>.+?)(?: \(batch size (?P<bsz>\d+)\))?$")


def _parse_key(key: str, path: Path) -> tuple[str, int]:
    """`"('ResNet-18 (batch size 64)', 2)"` -> `("ResNet-18 (batch size 64)", 2)`."""
    try:
        job_type, scale = ast.literal_eval(key)
        return str(job_type), int(scale)
    except (ValueError, SyntaxError, TypeError):
        raise PerfcastError(f"{path}: cannot read job key {key!r}") from None


def _config(job_type: str, where: str) -> dict[str, object]:
    """Workload features of a Gavel job type such as `ResNet-18 (batch size 64)`."""
    match = _CONFIG.match(job_type)
    model = match["model"] if match else job_type
    if model not in WORKLOADS:
        raise PerfcastError(f"{where}: unknown Gavel job type {job_type!r}")
    job, family = WORKLOADS[model]
    bsz = int(match["bsz"]) if match and match["bsz"] else UNNAMED_BATCH_SIZE
    return {"job": job, "model_family": family, "local_batch_size": bsz, "gavel_job_type": job_type}


def _read_throughputs(manifest_path: str) -> tuple[dict, Path]:
    path = fetch(manifest_path)
    with path.open() as fh:
        return json.load(fh), path


def _solo_rows(manifest_path: str, *, consolidated_only: bool) -> pd.DataFrame:
    data, path = _read_throughputs(manifest_path)
    rows, dropped = [], 0
    for section, jobs in data.items():
        consolidated = not section.endswith(UNCONSOLIDATED)
        if consolidated_only and not consolidated:
            continue
        gpu = section.removesuffix(UNCONSOLIDATED).lower()
        for key, measured in jobs.items():
            job_type, scale = _parse_key(key, path)
            if not consolidated and scale == 1:
                continue  # repeats the consolidated single-GPU entry
            throughput = float(measured["null"])
            if throughput <= 0:
                dropped += 1
                continue
            rows.append(
                {
                    **_config(job_type, f"{path} [{section}]"),
                    "gpu_type": gpu,
                    "num_nodes": 1 if consolidated else scale,
                    "num_gpus": scale,
                    "placement": str(scale) if consolidated else "1" * scale,
                    # summed worker steps/s -> seconds per data-parallel iteration
                    "step_time_s": scale / throughput,
                    "source": manifest_path,
                    "scale_factor": scale,
                    "consolidated": consolidated,
                    "throughput_steps_per_s": throughput,
                }
            )
    log.info("%s: dropped %d solo entries with zero throughput", manifest_path, dropped)
    return pd.DataFrame(rows)


@dataset(
    "gavel-scaling",
    "scaling",
    description="Step time of 26 job configs (7 models x batch sizes) alone on 1/2/4/8 K80, P100 "
    "or V100 GPUs, on one server or spread one GPU per server (Gavel's simulator table)",
    source=SOURCE,
    files=[SIMULATION],
    version=2,  # rows name their cluster (features.devices.INTERCONNECTS)
)
def gavel_scaling() -> pd.DataFrame:
    return _solo_rows(SIMULATION, consolidated_only=False).assign(cluster="gavel")


@dataset(
    "gavel-physical-scaling",
    "scaling",
    description="Step time of Gavel's job configs alone on 1/2/4/8 GPUs of one server, from the "
    "physical-cluster throughput table (73 entries re-measured, the rest as in gavel-scaling)",
    source=SOURCE,
    files=[PHYSICAL],
)
def gavel_physical_scaling() -> pd.DataFrame:
    return _solo_rows(PHYSICAL, consolidated_only=True)


@dataset(
    "gavel-interference",
    "interference",
    description="Speed of two single-GPU jobs sharing one K80, P100 or V100 (co-located "
    "throughput / solo throughput), each unordered pair once; unmeasured [0, 0] pairs dropped",
    source=SOURCE,
    files=[SIMULATION],
)
def gavel_interference() -> pd.DataFrame:
    data, path = _read_throughputs(SIMULATION)
    rows = []
    # Pairs are measured at scale factor 1 only, and the _unconsolidated sections repeat them.
    for gpu in (s for s in data if not s.endswith(UNCONSOLIDATED)):
        jobs = data[gpu]
        for key_a, measured in jobs.items():
            for key_b, pair in measured.items():
                if key_b == "null" or key_b < key_a:
                    continue  # the JSON holds both orders; keep one
                solo_a, solo_b = float(measured["null"]), float(jobs[key_b]["null"])
                if min(pair) <= 0 or min(solo_a, solo_b) <= 0:
                    continue  # [0, 0]: not measured
                if jobs[key_b].get(key_a) != [pair[1], pair[0]]:
                    raise PerfcastError(f"{path} [{gpu}]: {key_a} x {key_b} disagrees by order")
                a = _config(_parse_key(key_a, path)[0], str(path))
                b = _config(_parse_key(key_b, path)[0], str(path))
                rows.append(
                    {
                        "gpu_type": gpu.lower(),
                        "a_job": a["job"],
                        "a_batch_size": a["local_batch_size"],
                        "a_solo_throughput": solo_a,  # iterations/s: one GPU, one worker
                        "a_speed": pair[0] / solo_a,
                        "b_job": b["job"],
                        "b_batch_size": b["local_batch_size"],
                        "b_solo_throughput": solo_b,
                        "b_speed": pair[1] / solo_b,
                        "a_colocated_throughput": float(pair[0]),
                        "b_colocated_throughput": float(pair[1]),
                        "a_model_family": a["model_family"],
                        "b_model_family": b["model_family"],
                        "source": SIMULATION,
                    }
                )
    return pd.DataFrame(rows)


# parse_trace in gavel's scheduler/utils.py, old (7 fields) and current (10 fields) layouts.
TRACE_FIELDS = {
    7: ("job_type", "command", "num_steps_arg", "needs_data_dir", "total_steps",
        "arrival_time", "scale_factor"),
    10: ("job_type", "command", "working_directory", "num_steps_arg", "needs_data_dir",
         "total_steps", "scale_factor", "priority_weight", "SLO", "arrival_time"),
}  # fmt: skip


def _trace_lines(path: Path) -> list[dict[str, str]]:
    records = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        fields = line.split("\t")
        if len(fields) not in TRACE_FIELDS:
            raise PerfcastError(f"{path}, line {number}: {len(fields)} tab-separated fields")
        records.append(dict(zip(TRACE_FIELDS[len(fields)], fields, strict=True)))
    return records


def _trace(manifest_path: str, reference: dict) -> pd.DataFrame:
    path = fetch(manifest_path)
    name = manifest_path.removeprefix(TRACE_DIR).removesuffix(".trace")
    rows, unknown = [], 0
    for index, rec in enumerate(_trace_lines(path)):
        scale, steps = int(rec["scale_factor"]), int(rec["total_steps"])
        throughput = reference.get(str((rec["job_type"], scale)), {}).get("null", 0.0)
        if throughput <= 0:
            unknown += 1  # e.g. Recommendation on 4 GPUs: Gavel has no such config
            continue
        config = _config(rec["job_type"], f"{path}, line {index + 1}")
        rows.append(
            {
                "job_id": f"{name}/{index}",  # Gavel numbers a trace's jobs from 0
                "submit_time_s": float(rec["arrival_time"]),
                "num_gpus": scale,
                # total_steps counts steps summed over workers, as the throughput does
                "duration_s": steps / throughput,
                "vc": name.rsplit("/", 1)[-1] if name.startswith("msr/") else None,
                "job": config["job"],
                "batch_size": config["local_batch_size"],
                "iterations": round(steps / scale),
                "trace": name,
                "model_family": config["model_family"],
                "gavel_job_type": rec["job_type"],
                "gavel_total_steps": steps,
                "priority_weight": float(rec.get("priority_weight", 1.0)),
            }
        )
    log.info("%s: dropped %d jobs whose (type, scale factor) Gavel never measured", name, unknown)
    return pd.DataFrame(rows)


TRACE_FILES = [e.path for e in entries(TRACE_DIR) if e.path.endswith(".trace")]


@dataset(
    "gavel-traces",
    "trace",
    description="Gavel's job mixes: 15 Philly virtual-cluster traces (msr/) and 8 physical-cluster "
    "experiments; duration = run time on the requested V100s (total steps / Gavel throughput); "
    "jobs whose type and GPU count Gavel never measured are dropped",
    source=SOURCE,
    files=[SIMULATION, *TRACE_FILES],
)
def gavel_traces() -> pd.DataFrame:
    data, _ = _read_throughputs(SIMULATION)
    reference = data[REFERENCE_GPU]
    return pd.concat([_trace(p, reference) for p in TRACE_FILES], ignore_index=True)
