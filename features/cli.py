"""`perfcast profile ...`: measure jobs on this machine and write contract tables."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from perfcast.errors import PerfcastError

# torch, pandas and the profilers load inside the commands: `perfcast --help` stays fast.

app = typer.Typer(
    help="Profile jobs here: step time, memory, counters, co-location, DAGs, query plans.",
    no_args_is_help=True,
)
console = Console(stderr=True)

Out = Annotated[Path, typer.Option("--out", help="Output file, .csv or .parquet (atomic).")]
Device = Annotated[str, typer.Option("--device", help="cpu, cuda or cuda:N.")]
Threads = Annotated[
    int | None,
    typer.Option("--threads", help="torch intra-op CPU threads (default: torch's choice)."),
]
Width = Annotated[int | None, typer.Option(help="Model width (default: the zoo's).")]
Depth = Annotated[int | None, typer.Option(help="Model depth (default: the zoo's).")]
InputSize = Annotated[
    int | None, typer.Option(help="Features, image side or sequence length (default: the zoo's).")
]
ModelName = Annotated[
    str,
    typer.Option(
        "--model",
        help="Zoo model: mlp, resnet18, resnet50, lstm-lm, bert-encoder, gpt-decoder, ncf "
        "(or a job name such as resnet18-w32-d18-i32).",
    ),
]


class _Progress(Progress):
    """A live bar on a terminal; piped or logged, each task says it started (a live bar there
    shows nothing, so a minute-long measurement was silent)."""

    def add_task(self, description: str, *args: Any, **kwargs: Any) -> TaskID:
        if not self.console.is_terminal:
            self.console.print(f"{description} ...", highlight=False)
        return super().add_task(description, *args, **kwargs)


def progress() -> Progress:
    return _Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )


def int_list(text: str, option: str) -> list[int]:
    """`8,16,32` -> [8, 16, 32]; a clear error naming the option otherwise."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise PerfcastError(f"{option}: expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise PerfcastError(f"{option}: expected integers >= 1, got {text!r}")
    return values


def _zoo_spec(model: str, width: int | None, depth: int | None, input_size: int | None):
    from perfcast.features.profiling import zoo

    base = zoo.parse_job(model)
    return zoo.spec(
        base.name,
        width=width or base.width,
        depth=depth or base.depth,
        input_size=input_size or base.input_size,
    )


def _set_threads(threads: int | None) -> None:
    if threads is not None:
        if threads < 1:
            raise PerfcastError(f"--threads must be >= 1, got {threads}")
        import torch

        torch.set_num_threads(threads)


@app.command()
def run(
    model: ModelName,
    out: Out,
    batch_sizes: Annotated[str, typer.Option(help="Comma-separated batch sizes.")] = "8,16,32",
    device: Device = "cpu",
    steps: Annotated[int, typer.Option(help="Measured steps per batch size.")] = 20,
    warmup: Annotated[int, typer.Option(help="Untimed warm-up steps.")] = 3,
    width: Width = None,
    depth: Depth = None,
    input_size: InputSize = None,
    threads: Threads = None,
) -> None:
    """Profile a zoo model's training step at each batch size; writes `scaling` rows."""
    from perfcast.features.profiling.samples import (
        forward_gflops_per_sample,
        profile_zoo,
        scaling_row,
    )

    _set_threads(threads)
    spec = _zoo_spec(model, width, depth, input_size)
    sizes = int_list(batch_sizes, "--batch-sizes")
    gflops = forward_gflops_per_sample(spec)
    rows = []
    with progress() as bar:
        task = bar.add_task(f"profiling {spec.job}", total=len(sizes))
        for size in sizes:
            bar.update(task, description=f"{spec.job} batch {size}")
            result = profile_zoo(spec, size, device=device, warmup=warmup, steps=steps)
            rows.append(scaling_row(spec, result, gflops))
            bar.advance(task)
    import pandas as pd

    from perfcast.datasets.io import write_table

    path = write_table(pd.DataFrame(rows), out, kind="scaling")
    for row in rows:
        console.print(
            f"{row['job']} batch {row['local_batch_size']}: {1000 * row['step_time_s']:.2f} ms/step"
            f" (p10 {1000 * row['step_time_p10_s']:.2f}, p90 {1000 * row['step_time_p90_s']:.2f})"
        )
    console.print(f"wrote {path} ({len(rows)} scaling rows)")


@app.command()
def colocate(
    a: Annotated[str, typer.Option("--a", help="First job as NAME:BATCH, e.g. mlp:64.")],
    b: Annotated[str, typer.Option("--b", help="Second job as NAME:BATCH.")],
    out: Out,
    device: Device = "cpu",
    window: Annotated[float, typer.Option(help="Seconds each run is measured.")] = 3.0,
    warmup: Annotated[int, typer.Option(help="Untimed warm-up steps.")] = 3,
    threads: Annotated[int, typer.Option(help="torch CPU threads per job process.")] = 1,
) -> None:
    """Run two jobs alone, then together on the same device; writes an `interference` row."""
    from perfcast.features.profiling.colocate import JobSpec, WindowSettings
    from perfcast.features.profiling.colocate import colocate as measure

    if window <= 0 or threads < 1:
        raise PerfcastError("--window must be > 0 and --threads >= 1")
    pair = (JobSpec.parse(a), JobSpec.parse(b))
    settings = WindowSettings(device=device, threads=threads, warmup=warmup, duration_s=window)
    with progress() as bar:
        bar.add_task(f"{a} beside {b} (solo runs, then together)", total=None)
        frame = measure([pair], settings)
    from perfcast.datasets.io import write_table

    path = write_table(frame, out, kind="interference")
    row = frame.iloc[0]
    console.print(f"speeds: {a} {row['a_speed']:.3f}, {b} {row['b_speed']:.3f}")
    console.print(f"wrote {path} (1 interference row)")


@app.command()
def graph(
    model: ModelName,
    out: Out,
    batch_size: Annotated[int, typer.Option(help="Batch size of the sample.", min=1)] = 8,
    device: Device = "cpu",
    mode: Annotated[str, typer.Option(help="train or inference.")] = "train",
    latency: Annotated[bool, typer.Option(help="Measure each node's forward latency too.")] = True,
    steps: Annotated[int, typer.Option(help="Steps timed for the end-to-end latency.")] = 10,
    width: Width = None,
    depth: Depth = None,
    input_size: InputSize = None,
    threads: Threads = None,
) -> None:
    """Extract a zoo model's operator DAG (torch.fx); writes one `graph` sample."""
    from perfcast.features.profiling.samples import graph_sample

    if mode not in ("train", "inference"):
        raise PerfcastError(f"--mode must be train or inference, got {mode!r}")
    _set_threads(threads)
    spec = _zoo_spec(model, width, depth, input_size)
    with progress() as bar:
        bar.add_task(f"tracing and timing {spec.job}", total=None)
        table = graph_sample(
            spec, batch_size, device=device, mode=mode, steps=steps, node_latency=latency
        )
    from perfcast.datasets.io import write_table

    path = write_table(table, out, kind="graph")
    gflops = table["flops"].sum() / 1e9
    console.print(f"{spec.job}: {len(table)} nodes, {gflops:.3f} forward GFLOPs")
    console.print(f"wrote {path} (graph sample {table['sample_id'].iloc[0]})")


@app.command()
def query(
    out: Out,
    queries: Annotated[str, typer.Option(help="TPC-H query numbers.")] = "1,3,5,6",
    scale: Annotated[float, typer.Option(help="TPC-H scale factor (1 = 1 GB).")] = 0.01,
    threads: Annotated[str, typer.Option(help="DuckDB thread counts to run under.")] = "1,2",
    memory_limits: Annotated[
        str, typer.Option(help="DuckDB memory limits in MB; empty for DuckDB's default.")
    ] = "",
    repeats: Annotated[int, typer.Option(help="Runs of each setting.", min=1)] = 1,
) -> None:
    """Profile TPC-H query plans in DuckDB (EXPLAIN ANALYZE); writes `plan` rows."""
    from perfcast.features.profiling import query_plans

    numbers = int_list(queries, "--queries")
    thread_counts = int_list(threads, "--threads")
    limits: list[int | None] = (
        int_list(memory_limits, "--memory-limits") if memory_limits else [None]
    )
    with progress() as bar:
        bar.add_task(f"generating TPC-H sf {scale:g} (cached)", total=None)
        con = query_plans.connect(query_plans.generate_tpch(scale))
    frames = []
    runs = [
        (q, t, m, r) for q in numbers for t in thread_counts for m in limits for r in range(repeats)
    ]
    with progress() as bar:
        task = bar.add_task("running queries", total=len(runs))
        for q, t, m, r in runs:
            bar.update(task, description=f"q{q} threads {t} memory {m or 'default'}")
            frames.append(
                query_plans.profile_query(
                    con, q, scale=scale, threads=t, memory_limit_mb=m, repeat=r
                )
            )
            bar.advance(task)
    import pandas as pd

    from perfcast.datasets.io import write_table

    table = pd.concat(frames, ignore_index=True)
    path = write_table(table, out, kind="plan")
    console.print(f"wrote {path} ({len(runs)} plans, {len(table)} operator rows)")


@app.command()
def dataset(
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Folder for the measured dataset (default: datasets/measured/<device>, e.g. "
            "cpu or h100).",
        ),
    ] = None,
    device: Device = "cpu",
) -> None:
    """Regenerate a measured dataset on this machine: zoo step times, co-located pairs and
    operator graphs (plus TPC-H plans on the CPU), in one folder with its meta.json. A CUDA
    device measures the GPU plan, with the zoo at real sizes (ResNet-50, BERT-base)."""
    from perfcast.features.devices import canonical_device
    from perfcast.features.profiling.measured_dataset import generate
    from perfcast.features.profiling.step_profiler import device_name, resolve_device

    if out is None:
        folder = canonical_device(device_name(resolve_device(device))).replace(" ", "-")
        out = Path("datasets/measured") / folder
    with progress() as bar:
        files = generate(out, device=device, progress=bar)
    for name, rows in files.items():
        console.print(f"wrote {out / name} ({rows} rows)")
