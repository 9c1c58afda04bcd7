"""The measured dataset committed under datasets/measured/<device>/: the zoo at a few sizes and
batch sizes, co-located pairs, forward DAGs and (on the CPU) TPC-H plans, all measured on one
machine.

Regenerate with `perfcast profile dataset --out datasets/measured/cpu` (see docs/profiling.md);
on a GPU machine `--device cuda --out datasets/measured/<gpu>` measures the GPU plan, which
sizes the same zoo as real jobs. `meta.json` lists each file's contract kind and description;
datasets/sources/measured.py registers every file it lists.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from rich.progress import Progress

from perfcast.atomic import atomic_write_text
from perfcast.datasets.io import write_table
from perfcast.features.profiling import zoo
from perfcast.features.profiling.colocate import JobSpec, WindowSettings, colocate
from perfcast.features.profiling.samples import (
    forward_gflops_per_sample,
    graph_sample,
    profile_zoo,
    scaling_row,
)
from perfcast.features.profiling.step_profiler import device_name, resolve_device


@dataclass(frozen=True)
class MeasurementPlan:
    """What one `perfcast profile dataset` session measures on one kind of device."""

    zoo: list[tuple[zoo.ZooSpec, tuple[int, ...]]]  # (zoo spec, batch sizes) for zoo_scaling
    pairs: list[tuple[str, str]]  # co-located jobs, `JOB:BATCH` each
    window_s: float  # how long each job of a pair runs beside the other
    graph_batches: tuple[int, ...]
    tpch_plans: bool  # DuckDB runs on the CPU: its plans are measured by the CPU session only

    @property
    def steps(self) -> int:
        """Progress-bar steps: one per measurement."""
        return (
            sum(len(b) for _, b in self.zoo)
            + len(dict.fromkeys(s for s, _ in self.zoo)) * len(self.graph_batches)
            + 1
            + len(self.pairs)
            + (len(QUERIES) * len(SCALES) if self.tpch_plans else 0)
        )


# Small enough that the whole dataset takes minutes on 2 CPU cores.
CPU_PLAN = MeasurementPlan(
    zoo=[
        (zoo.spec("mlp", width=256, depth=3), (16, 64, 256)),
        (zoo.spec("mlp", width=1024, depth=4), (16, 64, 256)),
        (zoo.spec("resnet18", width=16), (8, 32)),
        (zoo.spec("resnet18", width=32), (8, 32)),
        (zoo.spec("resnet50", width=16), (8, 16)),
        (zoo.spec("lstm-lm", width=256, depth=2), (8, 32)),
        (zoo.spec("bert-encoder", width=128, depth=2), (8, 32)),
        (zoo.spec("bert-encoder", width=256, depth=4), (8, 16)),
        (zoo.spec("gpt-decoder", width=128, depth=2), (8, 32)),
        (zoo.spec("gpt-decoder", width=256, depth=4), (8, 16)),
        (zoo.spec("ncf", width=32, depth=3), (64, 256, 1024)),
        (zoo.spec("ncf", width=64, depth=3), (64, 256, 1024)),
    ],
    pairs=[
        ("mlp-w1024-d4-i784:64", "resnet18-w16-d18-i32:8"),
        ("mlp-w1024-d4-i784:64", "gpt-decoder-w128-d2-i64:8"),
        ("resnet18-w16-d18-i32:8", "gpt-decoder-w128-d2-i64:8"),
        ("resnet18-w16-d18-i32:8", "ncf-w32-d3-i2:256"),
        ("gpt-decoder-w128-d2-i64:8", "lstm-lm-w256-d2-i32:8"),
        ("ncf-w32-d3-i2:256", "lstm-lm-w256-d2-i32:8"),
        ("mlp-w1024-d4-i784:64", "mlp-w1024-d4-i784:64"),
    ],
    window_s=4.0,  # the slowest CPU job makes ~9 steps a second: 2 s windows counted ~18
    graph_batches=(8, 32),
    tpch_plans=True,
)

# Real sizes: ResNet-50 at 64 channels on 64x64 images (the zoo's CIFAR-style stem does not
# downsample, so this costs about what the ImageNet ResNet-50 does on 224x224, whose stem does),
# BERT-base (768 wide, 12 layers, 128 tokens), a GPT of the same size on 256 tokens, a 1024-wide
# LSTM language model, CIFAR ResNet-18 and NCF. The pairs mix compute-bound, memory-bound and
# launch-bound jobs, each also beside itself.
_RN50, _RN18 = "resnet50-w64-d50-i64", "resnet18-w64-d18-i32"
_BERT, _GPT = "bert-encoder-w768-d12-i128", "gpt-decoder-w768-d12-i256"
_LSTM, _NCF, _MLP = "lstm-lm-w1024-d2-i35", "ncf-w64-d3-i2", "mlp-w4096-d4-i784"
GPU_PLAN = MeasurementPlan(
    zoo=[
        (zoo.parse_job(_MLP), (256, 1024, 4096)),
        (zoo.parse_job(_RN18), (64, 256, 1024)),
        (zoo.parse_job(_RN50), (32, 64, 128)),
        (zoo.parse_job(_LSTM), (32, 128)),
        (zoo.parse_job(_BERT), (8, 32, 64)),
        (zoo.parse_job(_GPT), (8, 32)),
        (zoo.parse_job(_NCF), (1024, 8192, 65536)),
    ],
    pairs=[
        (f"{_RN50}:64", f"{_BERT}:32"),
        (f"{_RN50}:64", f"{_NCF}:8192"),
        (f"{_RN50}:64", f"{_RN50}:64"),
        (f"{_RN18}:256", f"{_GPT}:8"),
        (f"{_RN18}:256", f"{_LSTM}:128"),
        (f"{_BERT}:32", f"{_GPT}:8"),
        (f"{_BERT}:32", f"{_BERT}:32"),
        (f"{_NCF}:8192", f"{_LSTM}:128"),
        (f"{_GPT}:8", f"{_NCF}:8192"),
        (f"{_MLP}:1024", f"{_RN18}:256"),
    ],
    window_s=2.0,
    graph_batches=(8, 32),
    tpch_plans=False,
)
STEPS, WARMUP = 15, 3
QUERIES = (1, 3, 5, 6, 10, 12, 14, 19)
SCALES = (0.01, 0.05)
QUERY_THREADS = (1, 2)
MEMORY_LIMITS_MB = (None, 64)  # DuckDB's default (80% of RAM), and a tight limit

FILES = {
    "zoo_scaling.csv": ("scaling", "perfcast's model zoo: one training step alone, per size"),
    "colocation.csv": ("interference", "pairs of zoo jobs sharing this device, two processes"),
    "zoo_graphs.csv": ("graph", "forward operator DAGs (torch.fx) of the zoo, per batch size"),
    "tpch_plans.csv": ("plan", "DuckDB plans of TPC-H queries (tpchgen-cli data)"),
}


def plan_for(dev: torch.device) -> MeasurementPlan:
    return GPU_PLAN if dev.type == "cuda" else CPU_PLAN


def _scaling(plan: MeasurementPlan, device: str, tick: Callable[[str], None]) -> pd.DataFrame:
    rows = []
    for spec, batches in plan.zoo:
        gflops = forward_gflops_per_sample(spec)
        for batch in batches:
            tick(f"scaling {spec.job} batch {batch}")
            result = profile_zoo(spec, batch, device=device, warmup=WARMUP, steps=STEPS)
            rows.append(scaling_row(spec, result, gflops))
    return pd.DataFrame(rows)


def _graphs(plan: MeasurementPlan, device: str, tick: Callable[[str], None]) -> pd.DataFrame:
    frames = []
    for spec in dict.fromkeys(s for s, _ in plan.zoo):
        for batch in plan.graph_batches:
            tick(f"graph {spec.job} batch {batch}")
            frames.append(graph_sample(spec, batch, device=device, steps=5, node_latency=True))
    return pd.concat(frames, ignore_index=True)


def _colocation(plan: MeasurementPlan, device: str, tick: Callable[[str], None]) -> pd.DataFrame:
    pairs = [(JobSpec.parse(a), JobSpec.parse(b)) for a, b in plan.pairs]
    tick("co-located pairs")
    settings = WindowSettings(device=device, threads=1, warmup=WARMUP, duration_s=plan.window_s)
    return colocate(pairs, settings, on_pair=lambda: tick("co-located pairs"))


def _plans(plan: MeasurementPlan, device: str, tick: Callable[[str], None]) -> pd.DataFrame:
    from perfcast.features.profiling import query_plans  # DuckDB: only where plans are measured

    frames = []
    for scale in SCALES:
        con = query_plans.connect(query_plans.generate_tpch(scale))
        for q in QUERIES:
            tick(f"TPC-H q{q} sf {scale:g}")
            for threads in QUERY_THREADS:
                for limit in MEMORY_LIMITS_MB:
                    frames.append(
                        query_plans.profile_query(
                            con, q, scale=scale, threads=threads, memory_limit_mb=limit
                        )
                    )
    return pd.concat(frames, ignore_index=True)


# In the order measured; the pairs come before the graphs, being the scarcer data on a GPU.
MEASURE = {
    "zoo_scaling.csv": _scaling,
    "colocation.csv": _colocation,
    "zoo_graphs.csv": _graphs,
    "tpch_plans.csv": _plans,
}


def generate(out: Path, *, device: str = "cpu", progress: Progress | None = None) -> dict[str, int]:
    """Measure the device's plan and write it under `out`; returns file name -> rows.

    Each table is written (atomically) as soon as it is measured, and meta.json after it, listing
    the tables written so far: a session cut short leaves a smaller dataset, never a torn one."""
    dev = resolve_device(device)
    plan = plan_for(dev)
    torch.set_num_threads(1)  # the machine is shared: one thread per job keeps runs comparable
    task = progress.add_task("measuring", total=plan.steps) if progress else None

    def tick(what: str) -> None:
        if progress is not None and task is not None:
            progress.update(task, description=what, advance=1)

    started = time.time()
    meta = {
        "host": socket.gethostname(),
        "device": device_name(dev),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "torch": torch.__version__,
        "command": f"perfcast profile dataset --out {out} --device {device}",
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "note": "measured on a shared machine: other processes ran beside these jobs"
        if dev.type == "cpu"
        else "one job, or one co-located pair, at a time on the device",
        "files": {},
    }
    written: dict[str, int] = {}
    for name, measure in MEASURE.items():
        if name == "tpch_plans.csv" and not plan.tpch_plans:
            continue
        table = measure(plan, str(dev), tick)
        kind, description = FILES[name]
        write_table(table, out / name, kind=kind)
        written[name] = len(table)
        meta["files"][name] = {"kind": kind, "description": description}
        meta["minutes"] = round((time.time() - started) / 60, 1)
        atomic_write_text(out / "meta.json", json.dumps(meta, indent=2))
    return written
