"""`perfcast simulate`: replay a trace on a simulated cluster under a scheduling policy.

The command line is the top layer: here a predictor name becomes a prediction backend (the
in-process champions from `perfcast.training`, the HTTP client from `perfcast.serving`, or the
oracle), so the simulator below imports neither."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from perfcast.errors import PerfcastError
from perfcast.files import read_text
from perfcast.scheduler.sim.costs import DEFAULT_MIN_RUN_S, Costs
from perfcast.suggest import did_you_mean
from perfcast.units import duration, number, percent

if TYPE_CHECKING:
    from perfcast.predictor.backend import PredictionBackend
    from perfcast.scheduler.core.cluster import ClusterSpec
    from perfcast.scheduler.sim.run import BackendFactory
    from perfcast.scheduler.sim.workload import Workload

# The simulator, the policies and the models load inside the command: `perfcast --help` stays
# fast. An unknown --policy names every registered policy.

BACKENDS: tuple[str, ...] = ("inprocess", "http", "oracle")
DEFAULT_COSTS = Costs()


def backend_factory(name: str, url: str = "http://127.0.0.1:8000") -> BackendFactory:
    """The prediction backend a predictor name means: `inprocess` (champion models in memory),
    `http` (the prediction service at `url`) or `oracle` (true values)."""
    if name == "oracle":
        from perfcast.scheduler.sim.run import oracle_backend

        return oracle_backend
    if name == "inprocess":
        try:
            from perfcast.training.inprocess import InProcessBackend
        except ImportError as err:
            raise PerfcastError(
                f"the in-process predictors are not available ({err}); use --predictor oracle"
            ) from None

        def inprocess(workload: Workload) -> PredictionBackend:
            return InProcessBackend()

        return inprocess
    if name == "http":
        try:
            from perfcast.serving.client import PerfcastClient
        except ImportError as err:
            raise PerfcastError(
                f"the HTTP client is not available ({err}); use --predictor inprocess or oracle"
            ) from None

        def http(workload: Workload) -> PredictionBackend:
            return PerfcastClient(url)

        return http
    raise PerfcastError(f"unknown predictor {name!r}; choose one of {', '.join(BACKENDS)}")


def measured_gpu_types() -> list[str]:
    """The GPU types the simulator's scaling datasets measured step times on."""
    from perfcast import datasets
    from perfcast.datasets.registry import registry
    from perfcast.scheduler.sim.workload import SCALING_DATASETS

    known = registry()
    return sorted(
        {str(t) for n in SCALING_DATASETS if n in known for t in datasets.load(n)["gpu_type"]}
    )


def check_gpu_types(spec: ClusterSpec) -> None:
    """A GPU type no step time was measured on is refused, not replaced: the simulator would
    run its jobs at another GPU's measured step times (the catalog's rule) and report that
    GPU's figures under this one's name (`8x8:h100` gave exactly the V100 figures)."""
    from perfcast.features.devices import DEVICES, canonical_device

    measured = measured_gpu_types()
    for gpu in dict.fromkeys(g.gpu_type for g in spec.groups):
        if gpu in measured:
            continue
        same = canonical_device(gpu)
        if same in measured:
            hint = f" ({gpu!r} is {same!r} by another name: write {same})"
        elif same in DEVICES:
            hint = " (a GPU no scaling dataset measured)"
        else:
            hint = did_you_mean(gpu, measured) or " (not a GPU type perfcast knows)"
        raise PerfcastError(
            f"cluster {spec}: no step time was measured on {gpu!r}{hint}; its jobs would run "
            f"at another GPU's measured step times under its name. GPU types measured: "
            f"{', '.join(measured)}"
        )


def merged_parts(trace: str) -> list[str]:
    """The parts (`trace` column) a plain trace name merges into one simulated trace, when it
    has more than one: `muri-traces` is 13 traces, `muri-traces:PART` one of them."""
    from perfcast.scheduler.sim import hpsearch
    from perfcast.scheduler.sim.workload import read_trace

    if ":" in trace or Path(trace).suffix in (".csv", ".parquet") or trace == hpsearch.NAME:
        return []
    table = read_trace(trace)
    if "trace" not in table.columns:
        return []
    parts = sorted(table["trace"].dropna().astype(str).unique())
    return parts if len(parts) > 1 else []


def shown(key: str, value: object) -> str:
    """A simulation figure as a person reads it: durations (`*_s`) in human units, the
    utilization as a percent, counts with commas."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if key.endswith("_s"):
        return duration(float(value))
    if key == "utilization":
        return percent(float(value))
    return number(float(value))


app = typer.Typer(no_args_is_help=True)
console = Console(stderr=True)

JSON_KEYS = ("jobs", "avg_jct_s", "p99_jct_s", "makespan_s", "avg_queue_s", "utilization")


@app.command()
def simulate(
    trace: Annotated[
        str,
        typer.Option(
            help="Trace dataset (e.g. muri-traces, or DATASET:PART such as "
            "muri-traces:testbed/cluster_trace, elasticflow-traces:cluster01) or a CSV/Parquet "
            "file in the trace contract."
        ),
    ],
    cluster: Annotated[
        str,
        typer.Option(
            help="Cluster: NODESxGPUS:TYPE (e.g. 16x8:v100, or 4x8:v100,2x4:k80) or a YAML file."
        ),
    ],
    policy: Annotated[
        str,
        typer.Option(
            help="Policy: fifo, tiresias, srtf, gandiva, elastic, pollux, hypersched, ..."
        ),
    ],
    predictor: Annotated[
        str, typer.Option(help=f"Prediction backend for decisions: {', '.join(BACKENDS)}.")
    ] = "oracle",
    url: Annotated[str, typer.Option(help="Service URL for --predictor http.")] = (
        "http://127.0.0.1:8000"
    ),
    load: Annotated[float, typer.Option(help="Arrival density: submit times / load.")] = 1.0,
    max_jobs: Annotated[int | None, typer.Option(help="Only the first N jobs.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the job-type draw (unnamed jobs).")] = 0,
    round_s: Annotated[
        float | None,
        typer.Option(help="Decide only every N seconds (fixed rounds); default: after events."),
    ] = None,
    min_run_s: Annotated[
        float,
        typer.Option(
            help="Minimum quantum: no job is preempted within N seconds of its (re)start."
        ),
    ] = DEFAULT_MIN_RUN_S,
    progress: Annotated[
        str,
        typer.Option(
            help="How jobs named as Pollux's applications progress: duration (their traced "
            "duration_s), statistical (Pollux's epochs at statistical efficiency, T4 step "
            "times), or auto (statistical only for pollux-workloads)."
        ),
    ] = "auto",
    policy_option: Annotated[
        list[str] | None,
        typer.Option(
            help="A policy parameter KEY=VALUE, repeatable (e.g. tiresias thresholds=57600, "
            "or thresholds=3600,36000 for two)."
        ),
    ] = None,
    restart_s: Annotated[
        float, typer.Option(help="Seconds a preempted job pays to resume (checkpoint-restart).")
    ] = DEFAULT_COSTS.restart_s,
    start_s: Annotated[
        float, typer.Option(help="Seconds a job pays at its first start (Pollux's artifact: 30).")
    ] = DEFAULT_COSTS.start_s,
    resize_s: Annotated[
        float, typer.Option(help="Seconds a running job pays to change its GPU count.")
    ] = DEFAULT_COSTS.resize_s,
    migrate_s: Annotated[
        float, typer.Option(help="Seconds a running job pays to move to other GPUs.")
    ] = DEFAULT_COSTS.migrate_s,
    out: Annotated[
        Path | None, typer.Option(help="Folder for metrics.json, jobs.csv and jct_cdf.png.")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the metrics as JSON on the last line.")
    ] = False,
) -> None:
    """Simulate a trace: jobs progress at measured step times; the policy decides from the
    chosen predictions. Prints the JCT, queueing, utilization and fairness figures."""
    from perfcast.scheduler.core.cluster import ClusterSpec
    from perfcast.scheduler.policies import parse_policy_options
    from perfcast.scheduler.sim.run import prepare_workload, run_simulation, write_outputs

    if Path(cluster).is_file():
        read_text(cluster)  # not UTF-8: an error naming the file, not a traceback
    spec = ClusterSpec.parse(cluster)
    check_gpu_types(spec)
    parts = merged_parts(trace)
    if parts:
        shown_parts = ", ".join(parts[:4]) + (", ..." if len(parts) > 4 else "")
        console.print(
            f"[bold yellow]warning:[/] {trace} is {len(parts)} traces ({shown_parts}), "
            f"simulated here as one merged trace; name one as {trace}:{parts[0]}",
            highlight=False,
        )
    options = parse_policy_options(policy_option or [])
    backend = backend_factory(predictor, url)
    costs = Costs(restart_s=restart_s, start_s=start_s, resize_s=resize_s, migrate_s=migrate_s)
    if progress not in ("auto", "duration", "statistical"):
        raise PerfcastError(f"--progress {progress!r}: choose auto, duration or statistical")
    workload = prepare_workload(
        trace,
        spec,
        load=load,
        max_jobs=max_jobs,
        seed=seed,
        progress=None if progress == "auto" else progress,
    )
    if workload.dropped:
        for why, count in workload.dropped.items():
            console.print(f"dropped {count} job(s): {why}")
    if workload.statistical_jobs:
        matched = ", ".join(f"{t} x{n}" for t, n in sorted(workload.statistical_jobs.items()))
        console.print(
            f"statistical progress (Pollux's application models, T4 step times) for "
            f"{sum(workload.statistical_jobs.values())} job(s) matched by name: {matched}"
        )
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,  # piped, a live bar only adds a blank line
    ) as bar:
        task = bar.add_task(f"{policy} on {spec}", total=len(workload.jobs))
        last = [0]

        def show_progress(done: int, total: int) -> None:
            if done - last[0] >= 200 or done == total:
                bar.update(task, completed=done)
                last[0] = done

        run = run_simulation(
            workload,
            spec,
            policy,
            policy_options=options,
            backend=backend,
            predictor=predictor,
            costs=costs,
            on_progress=show_progress,
            round_s=round_s,
            min_run_s=min_run_s,
        )
    used = run.summary["predictor"]
    decided = "no predictions" if used == "none" else f"{used} predictions"
    # the title on its own line, never wrapped inside the table's width
    Console().print(f"{trace} on {spec}, {policy} ({decided})", highlight=False, soft_wrap=True)
    table = Table()
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in run.summary.items():
        if key not in ("policy", "trace", "predictor"):
            table.add_row(key, shown(key, value))
    Console().print(table)
    if out is not None:
        for path in write_outputs(run, out):
            console.print(f"wrote {path}")
    if as_json:
        print(json.dumps({k: run.summary[k] for k in JSON_KEYS} | run.summary))
