"""The measured dataset committed under datasets/measured/<device>/: the zoo at a few sizes and
batch sizes, co-located pairs, forward DAGs and TPC-H plans, all measured on this machine.

Regenerate with `perfcast profile dataset --out datasets/measured/cpu` (see docs/profiling.md).
`meta.json` lists each file's contract kind and description; datasets/sources/measured.py
registers every file it lists.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import torch
from rich.progress import Progress

from perfcast.atomic import atomic_write_text
from perfcast.datasets.io import write_table
from perfcast.features.profiling import query_plans, zoo
from perfcast.features.profiling.colocate import JobSpec, WindowSettings, colocate
from perfcast.features.profiling.samples import (
    forward_gflops_per_sample,
    graph_sample,
    profile_zoo,
    scaling_row,
)
from perfcast.features.profiling.step_profiler import device_name, resolve_device

# (zoo spec, batch sizes): small enough that the whole dataset takes minutes on 2 CPU cores
ZOO_PLAN: list[tuple[zoo.ZooSpec, tuple[int, ...]]] = [
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
]
STEPS, WARMUP = 15, 3
PAIRS = [
    ("mlp-w1024-d4-i784:64", "resnet18-w16-d18-i32:8"),
    ("mlp-w1024-d4-i784:64", "gpt-decoder-w128-d2-i64:8"),
    ("resnet18-w16-d18-i32:8", "gpt-decoder-w128-d2-i64:8"),
    ("resnet18-w16-d18-i32:8", "ncf-w32-d3-i2:256"),
    ("gpt-decoder-w128-d2-i64:8", "lstm-lm-w256-d2-i32:8"),
    ("ncf-w32-d3-i2:256", "lstm-lm-w256-d2-i32:8"),
    ("mlp-w1024-d4-i784:64", "mlp-w1024-d4-i784:64"),
]
WINDOW_S = 2.0
GRAPH_BATCHES = (8, 32)
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


def _scaling(device: str, tick: Callable[[str], None]) -> pd.DataFrame:
    rows = []
    for spec, batches in ZOO_PLAN:
        gflops = forward_gflops_per_sample(spec)
        for batch in batches:
            tick(f"scaling {spec.job} batch {batch}")
            result = profile_zoo(spec, batch, device=device, warmup=WARMUP, steps=STEPS)
            rows.append(scaling_row(spec, result, gflops))
    return pd.DataFrame(rows)


def _graphs(device: str, tick: Callable[[str], None]) -> pd.DataFrame:
    frames = []
    for spec in dict.fromkeys(s for s, _ in ZOO_PLAN):
        for batch in GRAPH_BATCHES:
            tick(f"graph {spec.job} batch {batch}")
            frames.append(graph_sample(spec, batch, device=device, steps=5, node_latency=True))
    return pd.concat(frames, ignore_index=True)


def _colocation(device: str, tick: Callable[[str], None]) -> pd.DataFrame:
    pairs = [(JobSpec.parse(a), JobSpec.parse(b)) for a, b in PAIRS]
    tick("co-located pairs")
    settings = WindowSettings(device=device, threads=1, warmup=WARMUP, duration_s=WINDOW_S)
    return colocate(pairs, settings, on_pair=lambda: tick("co-located pairs"))


def _plans(tick: Callable[[str], None]) -> pd.DataFrame:
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


def generate(out: Path, *, device: str = "cpu", progress: Progress | None = None) -> dict[str, int]:
    """Measure everything and write it under `out`; returns file name -> rows."""
    dev = resolve_device(device)
    torch.set_num_threads(1)  # the machine is shared: one thread per job keeps runs comparable
    total = (
        sum(len(b) for _, b in ZOO_PLAN)
        + len(dict.fromkeys(s for s, _ in ZOO_PLAN)) * len(GRAPH_BATCHES)
        + 1
        + len(PAIRS)
        + len(QUERIES) * len(SCALES)
    )
    task = progress.add_task("measuring", total=total) if progress else None

    def tick(what: str) -> None:
        if progress is not None and task is not None:
            progress.update(task, description=what, advance=1)

    started = time.time()
    tables = {
        "zoo_scaling.csv": _scaling(str(dev), tick),
        "zoo_graphs.csv": _graphs(str(dev), tick),
        "colocation.csv": _colocation(str(dev), tick),
        "tpch_plans.csv": _plans(tick),
    }
    for name, table in tables.items():
        write_table(table, out / name, kind=FILES[name][0])
    meta = {
        "host": socket.gethostname(),
        "device": device_name(dev),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "torch": torch.__version__,
        "command": f"perfcast profile dataset --out {out} --device {device}",
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "minutes": round((time.time() - started) / 60, 1),
        "note": "measured on a shared machine: other processes ran beside these jobs",
        "files": {n: {"kind": k, "description": d} for n, (k, d) in FILES.items()},
    }
    atomic_write_text(out / "meta.json", json.dumps(meta, indent=2))
    return {name: len(table) for name, table in tables.items()}
