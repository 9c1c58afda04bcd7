"""`perfcast serve`, and `perfcast recommend|allocate|place FILE.yaml`: the service's decisions
from the command line, through the same code (in-process, or a running service with --server)."""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import os
import threading
from pathlib import Path
from typing import Annotated

import typer
import yaml
from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.table import Table

from perfcast.errors import PerfcastError
from perfcast.files import read_text
from perfcast.predictor.backend import TASKS
from perfcast.units import duration

# Schemas, the service and the models load inside the commands: `perfcast --help` stays fast.

app = typer.Typer()
console = Console()
err_console = Console(stderr=True)

SERVER_HELP = "URL of a running perfcast service to ask instead of loading models here."
JSON_HELP = "Print the JSON answer (the same as the HTTP API's) instead of a table."


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    tasks: Annotated[str, typer.Option(help="Comma-separated tasks to serve.")] = ",".join(TASKS),
    train_missing: Annotated[
        bool, typer.Option(help="Train and register the default model of tasks without one.")
    ] = True,
    log_level: Annotated[str, typer.Option(help="uvicorn log level.")] = "info",
) -> None:
    """Serve predictions and recommendations over HTTP (OpenAPI docs at /docs).

    Models are the MLflow registry's `champion` of each task; a task without one gets the
    default model trained from the shipped public data after the port opens (GET /readyz says
    which is training; say --no-train-missing to skip).
    """
    import uvicorn

    from perfcast.serving import server
    from perfcast.serving.app import create_app
    from perfcast.serving.models import ServedModels
    from perfcast.serving.settings import Settings
    from perfcast.training.trainer import ensure_champions

    served = tuple(t.strip() for t in tasks.split(",") if t.strip())
    unknown = [t for t in served if t not in TASKS]
    if unknown:
        raise PerfcastError(f"unknown task(s) {', '.join(unknown)}; expected some of {TASKS}")
    settings = dataclasses.replace(Settings.from_env(), tasks=served)
    if settings.api_key is None and not _loopback(host):
        raise PerfcastError(
            f"refusing to serve on {host} without PERFCAST_API_KEY: other machines could "
            "reach the service; set a key, or serve on 127.0.0.1"
        )
    if not _loopback(host) and "PERFCAST_ALLOWED_HOSTS" not in os.environ:
        # other machines reach it by names we cannot know: the API key guards it
        settings = dataclasses.replace(settings, allowed_hosts=("*",))
    from perfcast.serving import logs

    logs.configure(log_level)
    with err_console.status("loading models ..."):
        models = ServedModels(settings.tasks, freeze_heap=True)
        models.reload()
        api = create_app(settings, models)
    missing = models.missing
    if missing and train_missing:
        # the port opens now: the loaded tasks answer, /readyz reports the training
        models.training = {t: _waiting(missing, t) for t in missing}
        threading.Thread(
            target=_train_missing, args=(models, missing, ensure_champions), daemon=True
        ).start()
    elif missing:
        err_console.print(f"[yellow]no model for {', '.join(missing)}: those answer 503[/]")
    err_console.print(f"perfcast serving on http://{host}:{port} (docs: /docs)")
    running = uvicorn.Server(server.config(api, settings, host, port, log_level=log_level))
    running.run()
    if not running.started:  # uvicorn said why (e.g. the port is taken)
        raise PerfcastError(f"could not serve on {host}:{port}")


def _waiting(tasks: list[str], task: str) -> str:
    ahead = tasks[: tasks.index(task)]
    after = f" after {', '.join(ahead)}" if ahead else ""
    return f"its default model is trained when the service starts ({', '.join(tasks)}, one " \
        f"at a time): waiting{after}"  # fmt: skip


def _train_missing(models, tasks: list[str], ensure_champions) -> None:
    """Train the default model of each task without a champion, one at a time; each task
    answers as soon as its model is trained, not after the last one (minutes later). A task
    whose training fails says why in /readyz and its 503s; the others go on."""
    for number, task in enumerate(tasks, start=1):
        models.training[task] = f"training its default {task} model now ({number} of {len(tasks)})"
        try:
            ensure_champions([task], echo=err_console.print)
        except Exception as err:  # one task's failure (of any kind) must not stop the others
            log = logging.getLogger("perfcast.serving")
            if isinstance(err, PerfcastError):
                log.warning("could not train a default %s model: %s", task, err)
            else:
                log.exception("training the default %s model failed", task)
            why = str(err).split("\n")[0][:300] or type(err).__name__
            err_console.print(f"[yellow]could not train a default {task} model:[/] {why}")
            models.training[task] = f"training its default model failed: {why}"
            continue
        models.training.pop(task, None)
        models.reload()
    still = models.missing
    if still:
        err_console.print(f"[yellow]no model for {', '.join(still)}: those answer 503[/]")
    else:
        err_console.print("every served task has a model: ready")


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _read(path: Path, model: type[BaseModel]) -> BaseModel:
    try:
        data = yaml.safe_load(read_text(path))
    except OSError as err:
        raise PerfcastError(f"cannot read {path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise PerfcastError(f"{path} is not valid YAML: {err}") from None
    try:
        return model.model_validate(data)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}"
            for e in err.errors()[:5]
        )
        raise PerfcastError(f"{path}: {problems}") from None


def _answer(
    request: BaseModel, endpoint: str, response: type[BaseModel], server: str | None
) -> BaseModel:
    """The service's answer: from a running server, or computed here with the champions."""
    if server:
        from perfcast.serving.client import PerfcastClient

        with PerfcastClient(server) as client:
            body = getattr(client, endpoint)(request.model_dump(mode="json", exclude_none=True))
        return response.model_validate(body)
    from perfcast.serving import service
    from perfcast.serving.models import ServedModels

    tasks = ("scaling", "interference") if endpoint == "place" else ("scaling",)
    with err_console.status("loading models ..."):
        models = ServedModels(tasks)
        models.reload()
    return getattr(service, endpoint)(models, request)


def flag_text(flags: list[str]) -> str:
    """A flagged row's warning: each token with what it means."""
    from perfcast.predictor.base import FLAGS

    return "; ".join(f"{t}: {FLAGS.get(t, 'see perfcast.predictor.base.FLAGS')}" for t in flags)


def _num(value: float | None, fmt: str = ".3g") -> str:
    return "-" if value is None else format(value, fmt)


@app.command()
def recommend(
    job_file: Annotated[Path, typer.Argument(metavar="JOB.yaml", help="The job and its options.")],
    server: Annotated[str | None, typer.Option(help=SERVER_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """The best configurations of one job (see examples/job.yaml; fields as POST
    /v1/recommend): GPU type, GPUs, nodes, local batch size, with predicted step time,
    throughput, scaling efficiency, total time, cost and a reason each."""
    from perfcast.serving import schemas
    from perfcast.serving.routers.query import recommend_job_file

    if recommend_job_file(job_file, server, as_json):  # a query job (see examples/query_job.yaml)
        return
    request = _read(job_file, schemas.RecommendRequest)
    answer = _answer(request, "recommend", schemas.RecommendResponse, server)
    if as_json:
        print(answer.model_dump_json(indent=2))
        return
    from perfcast.tables import Column, fit

    console.print(
        f"{request.job['job']}: {answer.objective}, {answer.candidates} candidates", highlight=False
    )
    columns = [
        Column("#", 0, justify="right"),
        Column("GPUs×type, nodes, batch", 0),
        Column("step", 0, justify="right"),
        Column("time", 0, justify="right"),
        Column("cost $", 1, justify="right"),
        Column("samples/s", 2, justify="right"),
        Column("eff.", 3, justify="right"),
        Column("step p10–p90", 4, justify="right"),
    ]
    rows = [
        [str(c.rank), f"{c.num_gpus}×{c.gpu_type}, {c.num_nodes}, {c.local_batch_size}",
         duration(c.step_time_s.value), duration(c.total_time_s.value),
         _num(c.cost.value, ",.2f"), _num(c.throughput.value, ",.0f"),
         _num(c.scaling_efficiency, ".0%"),
         f"{duration(c.step_time_s.p10)}–{duration(c.step_time_s.p90)}"]
        for c in answer.top
    ]  # fmt: skip
    table, left_out = fit(columns, rows, console.width)
    console.print(table)
    if left_out:
        console.print(
            f"({', '.join(left_out)} left out at {console.width} columns: --json or a wider "
            "terminal)",
            highlight=False,
        )
    for c in answer.top:
        console.print(f"{c.rank}. {c.reason}", highlight=False)
    for c in answer.top:
        if c.flags:
            err_console.print(
                f"[yellow]warning:[/] {c.rank}. {flag_text(c.flags)}", highlight=False
            )
    for note in answer.notes:
        console.print(f"[yellow]note:[/] {note}")


@app.command()
def allocate(
    jobs_file: Annotated[
        Path, typer.Argument(metavar="JOBS.yaml", help="The cluster's GPUs and the jobs.")
    ],
    server: Annotated[str | None, typer.Option(help=SERVER_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """GPUs and batch size for many elastic jobs, maximizing total weighted throughput (see
    examples/jobs.yaml; fields as POST /v1/allocate). Throughputs are given or predicted."""
    from perfcast.serving import schemas

    request = _read(jobs_file, schemas.AllocateRequest)
    answer = _answer(request, "allocate", schemas.AllocateResponse, server)
    if as_json:
        print(answer.model_dump_json(indent=2))
        return
    quality = (
        "optimal"
        if answer.exact
        else f"within {answer.optimality_gap:.2%} of optimal (hull allocation: too large for the "
        "exact DP)"
    )
    table = Table(
        title=f"{answer.used_gpus} of {answer.total_gpus} GPUs, "
        f"{answer.total_throughput:.0f} samples/s in total, {quality}"
    )
    for column in ("job", "GPUs", "global batch", "samples/s"):
        table.add_column(column, justify="right")
    for a in answer.allocations:
        table.add_row(a.job_id, str(a.num_gpus), str(a.batch_size), _num(a.samples_per_s, ".0f"))
    console.print(table)


@app.command()
def place(
    cluster_file: Annotated[
        Path, typer.Argument(metavar="CLUSTER.yaml", help="The nodes and the jobs to place.")
    ],
    server: Annotated[str | None, typer.Option(help=SERVER_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Nodes and GPUs for jobs in priority order, sharing a GPU only when predicted to pay
    (see examples/cluster.yaml; fields as POST /v1/place)."""
    from perfcast.serving import schemas

    request = _read(cluster_file, schemas.PlaceRequest)
    answer = _answer(request, "place", schemas.PlaceResponse, server)
    if as_json:
        print(answer.model_dump_json(indent=2))
        return
    for a in answer.assignments:
        gpus = ", ".join(f"{g.node}:{g.gpu}" for g in a.gpus)
        console.print(f"[bold]{a.job_id}[/] -> {gpus}: {a.reason}", highlight=False)
    for w in answer.waiting:
        console.print(f"[yellow]{w.job_id} waits[/]: {w.reason}", highlight=False)
