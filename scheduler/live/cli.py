"""`perfcast cluster|submit|jobs|job|run-trace`: live jobs on a Ray cluster.

State (SQLite database and checkpoints) lives in `--state` (default `$PERFCAST_HOME/live`).
`cluster up` starts a local Ray head (logical GPUs where there are none; a token of its own)
or records the address of an existing cluster, and starts the scheduler service
(`cluster serve`) that runs every job sent with `submit` and carries out the `job ...`
commands queued in the state database. `run-trace` replays a trace with a scheduler of its
own. `cluster down` stops the service and the Ray processes `cluster up` started, no others.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from perfcast.errors import PerfcastError
from perfcast.paths import state_dir
from perfcast.scheduler.live.local_cluster import ClusterError, LocalCluster, use_token
from perfcast.scheduler.live.predictions import PREDICTOR_HELP
from perfcast.scheduler.live.service import (
    cluster_info,
    mark_ready,
    record_cluster,
    register_service,
    service_process,
    start_service,
    stop_on_signals,
    stop_service,
)
from perfcast.scheduler.live.spec import JobSpec, load_job
from perfcast.tables import Column, fit
from perfcast.units import duration

if TYPE_CHECKING:
    from perfcast.scheduler.live.executor import RayExecutor
    from perfcast.scheduler.live.store import JobStore

# The store (torch, through checkpoints), traces (pandas) and Ray load inside the commands:
# `perfcast --help` stays fast.

app = typer.Typer(no_args_is_help=True, add_completion=False)
cluster_app = typer.Typer(
    help="Start, stop or inspect the Ray cluster live jobs run on.", no_args_is_help=True
)
job_app = typer.Typer(help="Suspend, resume, migrate or resize one live job.", no_args_is_help=True)
app.add_typer(cluster_app, name="cluster")
app.add_typer(job_app, name="job")
console = Console()

StateOpt = Annotated[
    Path | None, typer.Option("--state", help="state folder (default $PERFCAST_HOME/live)")
]
AddressOpt = Annotated[
    str | None,
    typer.Option("--address", help="Ray cluster address (default: the one `cluster up` set)"),
]


def _state(state: Path | None) -> Path:
    path = state or state_dir() / "live"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _store(state: Path | None) -> JobStore:
    from perfcast.scheduler.live.store import JobStore

    return JobStore(_state(state) / "state.db")


def _connect(state: Path | None, address: str | None, num_gpus: int = 4) -> None:
    """Connect to the cluster (given or recorded; with the token `cluster up` recorded for
    it), else start a local one for this process. The driver joins the namespace of this
    state's scheduler (`worker_namespace`)."""
    import ray

    from perfcast.scheduler.live.executor import worker_namespace

    info = cluster_info(_state(state))
    address = address or info.get("address")
    namespace = worker_namespace(_store(state))
    try:
        if address:
            use_token(info.get("token_path") if address == info.get("address") else None)
            ray.init(address=address, namespace=namespace, log_to_driver=False)
        else:
            ray.init(
                address="local",  # not the latest `ray start` cluster of whoever started one
                num_gpus=None if _has_cuda() else num_gpus,
                include_dashboard=False,
                namespace=namespace,
                log_to_driver=False,
            )
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise ClusterError(f"cannot reach the Ray cluster at {address or 'local'}: {err}") from None


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


PolicyOpt = Annotated[str, typer.Option(help="scheduling policy (see scheduler.policies)")]
PredictorOpt = Annotated[str | None, typer.Option("--predictor", help=PREDICTOR_HELP)]
PredictorUrlOpt = Annotated[
    str, typer.Option("--predictor-url", help="the prediction service, for --predictor http")
]
SparesOpt = Annotated[int, typer.Option(help="warm spare workers kept per node")]
IdleOpt = Annotated[
    int | None,
    typer.Option(
        "--idle-workers",
        help="idle workers a node keeps when jobs give theirs back, for the next launches "
        "(a new worker costs a process start); default: --spares",
    ),
]
GpuTypeOpt = Annotated[
    str | None,
    typer.Option(
        "--gpu-type",
        help="GPU type to predict for on nodes whose Ray resources name none (logical GPUs); "
        "a node's own accelerator_type is used where Ray reports one",
    ),
]
DEFAULT_PREDICTOR_URL = "http://127.0.0.1:8000"


def _warm_spares(executor: RayExecutor) -> None:
    """Start the spare workers and wait for them, but only as long as an RPC: on a busy host a
    process start can take minutes, and a launch can take a spare still starting, so the
    scheduler goes on without them rather than failing. On a restarted state the idle workers
    its predecessor left are adopted first: only the spares still missing are started."""
    from ray.exceptions import GetTimeoutError

    executor.reclaim_orphans()
    try:
        executor.warm_spares()
    except GetTimeoutError:
        print("warning: spare workers still starting (a busy host); going on without waiting "
              "for them", file=sys.stderr, flush=True)  # fmt: skip


def _live_predictor(executor, policy, predictor: str | None, url: str, gpu_type: str | None):
    """The policy's `JobPredictor` over the chosen backend (None: no predictions)."""
    from perfcast.scheduler.cli import backend_factory
    from perfcast.scheduler.live.predictions import choose_predictor, live_predictor

    backend = choose_predictor(policy, predictor)  # champions: trained by the caller before
    if backend is None:
        return None
    inner = backend_factory(backend, url)(None)  # the live backends ignore the workload
    gpus_per_node = max(g.gpus_per_node for g in executor.nodes.cluster_spec().groups)
    return live_predictor(inner, gpu_type=gpu_type, gpus_per_node=max(gpus_per_node, 1))


@cluster_app.command("up")
def cluster_up(
    num_gpus: Annotated[
        int | None,
        typer.Option(help="GPUs to offer; default: the real ones, else 4 logical GPUs (CPU)"),
    ] = None,
    num_cpus: Annotated[int | None, typer.Option(help="CPUs to offer (default: all)")] = None,
    address: AddressOpt = None,
    token_file: Annotated[
        Path | None, typer.Option(help="with --address: that cluster's Ray auth token file")
    ] = None,
    policy: PolicyOpt = "fifo",
    predictor: PredictorOpt = None,
    predictor_url: PredictorUrlOpt = DEFAULT_PREDICTOR_URL,
    gpu_type: GpuTypeOpt = None,
    round_s: Annotated[float, typer.Option(help="seconds between scheduling rounds")] = 0.5,
    scheduler: Annotated[
        bool, typer.Option(help="start the scheduler service that runs submitted jobs")
    ] = True,
    state: StateOpt = None,
) -> None:
    """Start a local Ray head (or record an existing cluster) and the scheduler service."""
    from perfcast.scheduler.live.predictions import choose_predictor, prepare_predictor
    from perfcast.scheduler.policies import make_policy

    folder = _state(state)
    running = service_process(folder)
    if running:
        raise ClusterError(f"{folder}: a scheduler service runs (pid {running.pid}); "
                           "`perfcast cluster down` first")  # fmt: skip
    chosen = make_policy(policy)  # an unknown policy: refused before anything starts
    backend = choose_predictor(chosen, predictor)  # as is a predictor it cannot use
    if scheduler:  # missing champions trained here, not in the service's first round
        prepare_predictor(chosen, backend, echo=console.print)
    info, how = _adopt(folder, address), "adopted: it was still running"
    if info:
        pass  # the service is started again on the cluster an earlier `up` left
    elif address is None:
        gpus = num_gpus if num_gpus is not None else (None if _has_cuda() else 4)
        with console.status("starting the Ray head node"):
            local = LocalCluster.start(folder / "ray-auth-token", gpus, num_cpus)
        info = {"address": local.address, "token_path": local.token_path, "local": asdict(local)}
        how = "started"
    else:
        info = {"address": address, "token_path": str(token_file) if token_file else None}
        how = "recorded"
    record_cluster(folder, info)
    console.print(f"cluster at [bold]{info['address']}[/] ({how})")
    if scheduler:
        with console.status("starting the scheduler service"):
            pid = start_service(
                folder, policy, round_s, predictor=backend or "none", predictor_url=predictor_url,
                gpu_type=gpu_type,
            )  # fmt: skip
        predicted = f", {backend} predictions" if backend else ""
        console.print(
            f"scheduler service ({policy}{predicted}) running, pid {pid}; "
            f"log {folder / 'scheduler.log'}"
        )


def _adopt(folder: Path, address: str | None) -> dict:
    """The record of the cluster an earlier `cluster up` started on `folder` and left running
    (its service stopped or dead), to start the service on again instead of a second cluster
    beside it (which lost the first: `down` knew only the new one). Empty: none runs (what is
    left of a cluster whose head is gone is stopped). A different --address is refused."""
    info = cluster_info(folder)
    if not info.get("local"):
        return {}
    local = LocalCluster(**info["local"])
    if not local.head_alive():
        local.stop()
        return {}
    if address not in (None, info["address"]):
        raise ClusterError(
            f"{folder}: the Ray cluster `cluster up` started at {info['address']} still runs: "
            "`perfcast cluster down` first, or use another --state"
        )
    return info


@cluster_app.command("add-node")
def cluster_add_node(
    num_gpus: Annotated[int | None, typer.Option(help="GPUs of the new node")] = None,
    num_cpus: Annotated[int | None, typer.Option(help="CPUs of the new node")] = None,
    state: StateOpt = None,
) -> None:
    """Start another raylet on this machine, joined to the head `cluster up` started (the
    scheduler takes it in at its next round)."""
    folder = _state(state)
    info = cluster_info(folder)
    if not info.get("local"):
        raise ClusterError("no cluster started here: `perfcast cluster up` (without --address)")
    local = LocalCluster(**info["local"])
    gpus = num_gpus if num_gpus is not None else (None if _has_cuda() else 4)
    with console.status("starting a raylet"):
        local.add_node(gpus, num_cpus)
    record_cluster(folder, {**info, "local": asdict(local)})
    console.print(f"node {len(local.nodes)} of the cluster at {local.address} started")


@cluster_app.command("down")
def cluster_down(state: StateOpt = None) -> None:
    """Stop the scheduler service and the Ray processes `cluster up` started, and only
    those (a cluster given with --address is left running)."""
    folder = _state(state)
    info = cluster_info(folder)
    if not info:
        raise ClusterError("no cluster recorded: run `perfcast cluster up` first")
    stopped = stop_service(folder)
    console.print("scheduler service " + ("stopped" if stopped else "was not running"))
    if info.get("local"):
        ended = LocalCluster(**info["local"]).stop()
        console.print(f"cluster down: {ended} Ray processes of {info['address']} ended")
    elif info.get("address"):
        console.print(f"{info['address']} left running (not started by perfcast)")
    (folder / "cluster.json").unlink()


@cluster_app.command("serve")
def cluster_serve(
    policy: PolicyOpt = "fifo",
    predictor: PredictorOpt = None,
    predictor_url: PredictorUrlOpt = DEFAULT_PREDICTOR_URL,
    gpu_type: GpuTypeOpt = None,
    round_s: Annotated[float, typer.Option(help="seconds between scheduling rounds")] = 0.5,
    slice_s: Annotated[float, typer.Option(help="time-slice length for shared GPUs")] = 0.2,
    spares: SparesOpt = 1,
    idle_workers: IdleOpt = None,
    state: StateOpt = None,
) -> None:
    """Run the scheduler service in the foreground until SIGTERM or Ctrl-C (`cluster up`
    starts it in the background). A restarted service takes over the running jobs."""
    import ray

    from perfcast.scheduler.live.executor import RayExecutor
    from perfcast.scheduler.live.runner import LiveRunner
    from perfcast.scheduler.policies import make_policy

    stopping = stop_on_signals()
    folder = _state(state)
    running = service_process(folder)
    if running and running.pid != os.getpid():  # two schedulers would fight over its jobs
        raise ClusterError(f"{folder}: a scheduler service runs (pid {running.pid}); "
                           "`perfcast cluster down` stops it")  # fmt: skip
    chosen = make_policy(policy)
    register_service(folder, os.getpid())  # `submit` sees it, `down` stops it
    _connect(state, None)
    store = _store(state)
    executor = RayExecutor(
        store,
        folder / "checkpoints",
        slice_s=slice_s,
        spares_per_node=spares,
        idle_per_node=idle_workers,
    )
    _warm_spares(executor)
    predictions = _live_predictor(executor, chosen, predictor, predictor_url, gpu_type)
    runner = LiveRunner(executor, store, chosen, round_s=round_s, predictor=predictions)
    print(f"recovered: {runner.recover()}", flush=True)
    runner.step()
    mark_ready(folder, os.getpid())
    print(f"serving {store.path} with {policy}", flush=True)
    runner.serve(stopping)
    executor.pool.shutdown()  # the spares; jobs' workers stay for the next service
    ray.shutdown()
    print("stopped", flush=True)


@cluster_app.command("status")
def cluster_status(address: AddressOpt = None, state: StateOpt = None) -> None:
    """Nodes, GPUs and job counts."""
    from perfcast.scheduler.live.nodes import gpu_nodes

    _connect(state, address)
    table = Table("core node", "Ray node", "address", "GPUs", "CPUs")
    for index, node in enumerate(gpu_nodes()):
        res = node["Resources"]
        table.add_row(
            str(index), node["NodeID"][:12], node["NodeManagerAddress"],
            f"{res.get('GPU', 0):g}", f"{res.get('CPU', 0):g}",
        )  # fmt: skip
    console.print(table)
    counts: dict[str, int] = {}
    for record in _store(state).jobs():
        counts[record.status] = counts.get(record.status, 0) + 1
    console.print("jobs: " + (", ".join(f"{v} {k}" for k, v in counts.items()) or "none"))


@app.command("submit")
def submit(
    job_file: Annotated[Path, typer.Argument(help="JOB.yaml: the fields of a live job")],
    job_id: Annotated[
        str | None, typer.Option("--id", help="job id (default: name + time)")
    ] = None,
    state: StateOpt = None,
) -> None:
    """Queue a job; the scheduler service (`perfcast cluster up`) starts it."""
    from perfcast.scheduler.live.store import clock_now

    spec = load_job(job_file)
    store = _store(state)
    job_id = job_id or f"{spec.name}-{int(time.time() * 1000) % 10**9}"
    spec = spec.model_copy(update={"submit_time_s": clock_now(store)})
    store.add_job(job_id, spec.model_dump(), spec.submit_time_s)
    console.print(f"submitted [bold]{job_id}[/]")
    nodes = cluster_info(_state(state)).get("local", {}).get("nodes", [])
    offered = [n["num_gpus"] for n in nodes]  # None: a node's real GPUs, not known here
    if offered and None not in offered and spec.num_gpus > sum(offered):
        console.print(
            f"warning: {job_id} asks for {spec.num_gpus} GPUs and the cluster has "
            f"{sum(offered)}: it waits until nodes join (`perfcast cluster add-node`)"
        )
    if service_process(_state(state)) is None:
        console.print("no scheduler service runs on this state yet: `perfcast cluster up` "
                      "starts one")  # fmt: skip


def _jobs_rows(store: JobStore) -> list[dict[str, Any]]:
    """Each live job's figures, as `jobs --json` prints them (the table shows them)."""
    rows = []
    for r in store.jobs():
        spec = JobSpec(**r.spec)
        rows.append(
            {
                "job": r.job_id, "state": r.status,
                "nodes": sorted({n for n, _ in r.gpus}), "gpus": [list(g) for g in r.gpus],
                "iteration": r.iteration, "iterations": spec.iterations,
                "progress": r.samples_done / spec.total_samples,
                "measured_step_s": r.mean_step_time_s,
                "predicted_step_s": spec.min_step_time_s,
                "attempt": r.attempt, "metrics": r.metrics or {},
                "error": _last_line(r.error) if r.status in ("failed", "restarting") else None,
            }
        )  # fmt: skip
    return rows


# what `jobs` keeps at a narrow width or piped: job and state always, the error and progress
# next; the metrics and the attempt go first (--json has every column)
_JOB_COLUMNS = [
    Column("job", 0), Column("state", 0), Column("GPUs", 2), Column("progress", 1, "right"),
    Column("step (measured)", 2, "right"), Column("step (predicted)", 3, "right"),
    Column("iteration", 4, "right"), Column("node", 5), Column("attempt", 6, "right"),
    Column("metrics", 7, wrap=True), Column("error", 1, wrap=True, floor=24),
]  # fmt: skip


def _jobs_table(store: JobStore, width: int) -> Table:
    rows = [
        [r["job"], r["state"], ",".join(f"{n}:{g}" for n, g in r["gpus"]) or "-",
         f"{100 * r['progress']:.0f}%",
         duration(r["measured_step_s"]) if r["measured_step_s"] else "-",
         duration(r["predicted_step_s"]) if r["predicted_step_s"] else "-",
         str(r["iteration"]), ",".join(map(str, r["nodes"])) or "-",
         str(r["attempt"]),
         " ".join(f"{k}={v:.4g}" for k, v in r["metrics"].items()) or "-",
         r["error"] or "-"]
        for r in _jobs_rows(store)
    ]  # fmt: skip
    table, left_out = fit(_JOB_COLUMNS, rows, width, title="live jobs")
    if left_out:
        table.caption = f"{', '.join(left_out)} left out at {width} columns: --json has them"
    return table


def _last_line(error: str | None) -> str:
    """The exception line of a traceback (its last non-empty line), for a table cell."""
    lines = [line for line in (error or "").splitlines() if line.strip()]
    return lines[-1].strip()[:120] if lines else "-"


@app.command("jobs")
def jobs(
    watch: Annotated[bool, typer.Option("--watch", "-w", help="refresh until Ctrl-C")] = False,
    state: StateOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list, every column.")] = (
        False
    ),
) -> None:
    """Live jobs: state, GPUs, progress, measured vs predicted step time, the error of a failed
    one. Columns that do not fit the terminal are left out by priority and named."""
    store = _store(state)
    if as_json:
        print(json.dumps(_jobs_rows(store)))
        return
    if not watch:
        console.print(_jobs_table(store, console.width))
        return
    with Live(_jobs_table(store, console.width), console=console, refresh_per_second=2) as live:
        try:
            while True:
                time.sleep(0.5)
                live.update(_jobs_table(store, console.width))
        except KeyboardInterrupt:
            pass


@job_app.command("show")
def job_show(job_id: str, state: StateOpt = None) -> None:
    from perfcast.scheduler.live.store import StoreError

    """One job in full: its record, the error it failed with, and its event log."""
    store = _store(state)
    try:
        record = store.job(job_id)
    except StoreError as err:
        raise PerfcastError(str(err)) from None
    fields = Table("field", "value", title=f"job {job_id}", show_header=False)
    shown = ("status", "gpus", "batch_size", "share", "attempt", "iteration", "samples_done",
             "mean_step_time_s", "first_start_s", "finish_s", "metrics", "held")  # fmt: skip
    for name in shown:
        fields.add_row(name, str(getattr(record, name)))
    console.print(fields)
    if record.error:
        console.print(f"[bold]error[/] ({record.status}):", highlight=False)
        console.print(record.error, markup=False, highlight=False)
    events = Table("at", "event", "detail", title="events")
    for event in store.events(job_id):
        at = time.strftime("%H:%M:%S", time.localtime(event["at"]))
        events.add_row(at, event["kind"], event["detail"][-200:])
    console.print(events)


def _parse_gpus(text: str | None) -> list[list[int]]:
    if not text:
        return []
    try:
        return [[int(x) for x in slot.split(":")] for slot in text.split(",")]
    except ValueError:
        raise typer.BadParameter(f"{text!r}: expected NODE:GPU,... e.g. 0:1,0:2") from None


def _queue(state: Path | None, job_id: str, kind: str, args: dict) -> None:
    from perfcast.scheduler.live.store import StoreError

    store = _store(state)
    try:
        command_id = store.add_command(job_id, kind, args)
    except StoreError as err:
        raise PerfcastError(str(err)) from None
    console.print(f"queued {kind} of {job_id} (command {command_id}); waiting for the scheduler")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        outcome = store.command_outcome(command_id)
        if outcome:
            console.print(outcome)
            if outcome.startswith("refused"):
                raise typer.Exit(1)
            return
        time.sleep(0.2)
    console.print("no scheduler answered yet: the command stays queued for `perfcast run-trace`")


@job_app.command("suspend")
def job_suspend(job_id: str, state: StateOpt = None) -> None:
    """Suspend a running job at its next mini-batch boundary (state kept)."""
    _queue(state, job_id, "suspend", {})


@job_app.command("resume")
def job_resume(
    job_id: str,
    gpus: Annotated[str | None, typer.Option(help="NODE:GPU,... (default: any free)")] = None,
    state: StateOpt = None,
) -> None:
    """Resume a suspended job."""
    _queue(state, job_id, "resume", {"gpus": _parse_gpus(gpus)})


@job_app.command("migrate")
def job_migrate(
    job_id: str,
    gpus: Annotated[str, typer.Option(help="target GPUs NODE:GPU,... (same count)")],
    state: StateOpt = None,
) -> None:
    """Move a running job to other GPUs: checkpoint, restore there, continue."""
    _queue(state, job_id, "migrate", {"gpus": _parse_gpus(gpus)})


@job_app.command("resize")
def job_resize(
    job_id: str,
    num_gpus: Annotated[int | None, typer.Option(help="new number of workers")] = None,
    gpus: Annotated[str | None, typer.Option(help="or the exact GPUs NODE:GPU,...")] = None,
    batch_size: Annotated[
        int | None, typer.Option(help="new global batch (default: same per-worker batch)")
    ] = None,
    state: StateOpt = None,
) -> None:
    """Change a running job's workers and batch size (learning rate scaled linearly)."""
    if num_gpus is None and gpus is None:
        raise typer.BadParameter("give --num-gpus or --gpus")
    args = {"num_gpus": num_gpus, "gpus": _parse_gpus(gpus), "batch_size": batch_size}
    _queue(state, job_id, "resize", args)


@app.command("run-trace")
def run_trace(
    trace: Annotated[Path, typer.Argument(help="jobs YAML (list of jobs) or a trace CSV/Parquet")],
    policy: Annotated[str, typer.Option(help="scheduling policy (see scheduler.policies)")],
    address: AddressOpt = None,
    state: StateOpt = None,
    time_scale: Annotated[
        float, typer.Option(help="trace CSV: real seconds per traced second")
    ] = 0.01,
    step_s: Annotated[float, typer.Option(help="trace CSV: step time of the replayed jobs")] = 0.05,
    round_s: Annotated[float, typer.Option(help="seconds between scheduling rounds")] = 0.5,
    slice_s: Annotated[float, typer.Option(help="time-slice length for shared GPUs")] = 0.2,
    spares: SparesOpt = 1,
    idle_workers: IdleOpt = None,
    num_gpus: Annotated[int, typer.Option(help="logical GPUs of a local cluster")] = 4,
    predictor: PredictorOpt = None,
    predictor_url: PredictorUrlOpt = DEFAULT_PREDICTOR_URL,
    gpu_type: GpuTypeOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="last line: a JSON summary")] = False,
) -> None:
    """Drive a trace through the scheduler core on the Ray cluster, to the last job.

    Re-running it on the same --state after a crash continues the run: finished jobs are not
    run again and running ones are taken over. Exits 1 if a job failed (past its
    max_restarts); `perfcast job show ID` gives its error."""
    import ray

    from perfcast.scheduler.live.executor import RayExecutor
    from perfcast.scheduler.live.predictions import choose_predictor, prepare_predictor
    from perfcast.scheduler.live.runner import LiveRunner
    from perfcast.scheduler.live.trace import load_trace
    from perfcast.scheduler.policies import make_policy

    entries = load_trace(trace, time_scale=time_scale, step_s=step_s)
    chosen = make_policy(policy)
    backend = choose_predictor(chosen, predictor)  # refused before Ray starts
    prepare_predictor(chosen, backend, echo=console.print)  # missing champions: trained now
    running = service_process(_state(state))
    if running:  # two schedulers on one state would fight over its jobs
        raise ClusterError(
            f"a scheduler service runs on this state (pid {running.pid}): "
            "send it jobs with `perfcast submit`, or use another --state"
        )
    _connect(state, address, num_gpus)
    store = _store(state)
    executor = RayExecutor(
        store,
        _state(state) / "checkpoints",
        slice_s=slice_s,
        spares_per_node=spares,
        idle_per_node=idle_workers,
    )
    _warm_spares(executor)  # before the run's clock starts
    predictions = _live_predictor(executor, chosen, predictor, predictor_url, gpu_type)
    runner = LiveRunner(executor, store, chosen, round_s=round_s, predictor=predictions)
    recovered = runner.recover()
    known = {r.job_id for r in store.jobs()}
    for job_id, spec in entries:
        if job_id not in known:
            runner.submit(job_id, spec)
    if any(recovered.values()):
        console.print(f"recovered from {store.path}: {recovered}", highlight=False)
    total = len(store.jobs())
    progress = Progress(
        TextColumn("[bold]run-trace"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=Console(stderr=True),
    )  # fmt: skip
    with progress:
        task = progress.add_task("jobs", total=total)
        summary = runner.run(
            on_round=lambda r: progress.update(task, completed=total - r.unfinished())
        )
    executor.shutdown()
    ray.shutdown()
    table = Table("jobs", "finished", "failed", "avg JCT s", "p99 JCT s", "makespan s")
    table.add_row(
        str(summary.jobs), str(summary.finished), str(summary.failed),
        *(f"{v:.2f}" if math.isfinite(v) else "-" for v in
          (summary.avg_jct_s, summary.p99_jct_s, summary.makespan_s)),
    )  # fmt: skip
    console.print(table)
    if as_json:
        print(json.dumps(summary.as_dict()))
    if summary.failed:  # the errors: `perfcast job show ID`
        raise typer.Exit(1)
