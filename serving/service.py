"""What each endpoint (and each CLI command) does: request model in, domain call, response
model out. The HTTP routes and `perfcast recommend|allocate|place` both call these."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping

import numpy as np
import pandas as pd
from fastapi import Response
from pydantic_core import to_json
from starlette.concurrency import run_in_threadpool

from perfcast.errors import ContractError, PerfcastError
from perfcast.optimizer import candidates, configs, elastic, placement, scoring
from perfcast.predictor.backend import TASK_TABLES, PredictionBackend
from perfcast.serving import limits, schemas
from perfcast.serving.batching import PredictionBatcher
from perfcast.serving.errors import JobColumnError
from perfcast.serving.models import ServedModels
from perfcast.serving.settings import Settings


def model_ref(models: ServedModels, task: str) -> schemas.ModelRef:
    c = models.champion(task)
    return schemas.ModelRef(task=task, family=c.family, version=c.version, run_id=c.run_id)


def prediction_records(
    answer: pd.DataFrame | Mapping[str, np.ndarray],
) -> list[dict[str, object]]:
    """Records for JSON from an answer's columns (a frame's, or `predict_interval`'s with
    `columns=True`), column by column (a tenth of the time of pandas' row-wise paths): NaN
    and infinities become null (JSON has no NaN), `flags` a list."""
    columns = {}
    for name, series in answer.items():
        values = series.tolist()
        if series.dtype.kind == "f":
            if not np.isfinite(series).all():
                values = [v if math.isfinite(v) else None for v in values]
        elif name == "flags":  # a few distinct flag sets, each split once
            split = {v: split_flags(v) for v in set(values)}
            values = [split[v] for v in values]
        else:  # e.g. runtime's sample_id; a missing text value is NaN
            values = [None if isinstance(v, float) and not math.isfinite(v) else v for v in values]
        columns[str(name)] = values
    names = list(columns)
    return [dict(zip(names, row, strict=True)) for row in zip(*columns.values(), strict=True)]


def split_flags(value: object) -> list[str]:
    """The predictor's `flags` string ("new_job,new_gpu_type", "" when none) as a list."""
    return [t for t in value.split(",") if t] if isinstance(value, str) else []


SMALL = 64  # rows: cheaper to serialize on the event loop than to hop to a worker thread


async def predict(
    models: ServedModels,
    batcher: PredictionBatcher,
    task: str,
    rows: list[dict],
    settings: Settings | None = None,
    gone: Callable[[], Awaitable[bool]] | None = None,
) -> Response:
    """The JSON answer of `POST /v1/predict/<task>` (`schemas.PREDICT_MODELS[task][1]`),
    serialized here: FastAPI's own path (dump, validate again, serialize) cost 3x the rest of
    the request's conversions (10,000 rows: ~90 ms of ~170). `gone` says whether the client
    has left (its rows are then dropped from the queue)."""
    body = await predict_json(models, batcher, task, rows, settings, gone)
    return Response(body, media_type="application/json")


async def predict_json(
    models: ServedModels,
    batcher: PredictionBatcher,
    task: str,
    rows: list[dict],
    settings: Settings | None = None,
    gone: Callable[[], Awaitable[bool]] | None = None,
) -> bytes:
    """`predict`'s answer as JSON bytes (the route's fast path sends them itself)."""
    ref = model_ref_dict(models, task)  # 503 before any work when there is no model
    limits.check_predict(rows, settings or Settings())
    small = len(rows) <= SMALL
    out = await batcher.predict(task, rows, gone)  # a per-sample task's sample_id first
    answer = {"task": task, "model": ref, "targets": list(TASK_TABLES[task][1])}
    if small:
        return to_json({**answer, "predictions": prediction_records(out)})
    return await run_in_threadpool(
        lambda: to_json({**answer, "predictions": prediction_records(out)})
    )


_REFS: dict[str, tuple[object, dict[str, str]]] = {}  # task -> (champion, its ModelRef dumped)


def model_ref_dict(models: ServedModels, task: str) -> dict[str, str]:
    """`model_ref(models, task).model_dump()`, worked out once per champion."""
    champion = models.champion(task)
    cached = _REFS.get(task)
    if cached is None or cached[0] is not champion:
        ref = schemas.ModelRef(
            task=task, family=champion.family, version=champion.version, run_id=champion.run_id
        )
        cached = _REFS[task] = (champion, ref.model_dump())
    return dict(cached[1])


def _num(value: object) -> float | None:
    x = float(value)
    return x if math.isfinite(x) else None


def _interval(row: pd.Series, name: str) -> schemas.Interval:
    return schemas.Interval(
        value=_num(row[name]), p10=_num(row[f"{name}_p10"]), p90=_num(row[f"{name}_p90"])
    )


def recommend(
    models: ServedModels,
    req: schemas.RecommendRequest,
    backend: PredictionBackend | None = None,
    settings: Settings | None = None,
) -> schemas.RecommendResponse:
    limits.check_recommend(req, settings or Settings())
    ref = model_ref(models, "scaling")
    work = scoring.Work(**req.work.model_dump()) if req.work else None
    try:
        result = configs.recommend(
            req.job,
            [candidates.GpuPool(**p.model_dump()) for p in req.pools],
            backend or models,
            local_batch_sizes=req.local_batch_sizes,
            objective=req.objective,
            work=work,
            deadline_s=req.deadline_s,
            max_cost=req.max_cost,
            gpu_counts=req.gpu_counts,
            top_k=req.top_k,
        )
    except ContractError as err:
        if err.column in req.job:
            raise JobColumnError(err) from None
        raise
    top = [
        schemas.ConfigOut(
            rank=rank,
            gpu_type=str(row["gpu_type"]),
            num_nodes=int(row["num_nodes"]),
            num_gpus=int(row["num_gpus"]),
            placement=None if pd.isna(row["placement"]) else str(row["placement"]),
            local_batch_size=int(row["local_batch_size"]),
            global_batch_size=int(row["global_batch_size"]),
            step_time_s=_interval(row, "step_time_s"),
            throughput=_interval(row, "throughput"),
            throughput_per_gpu=_num(row["throughput_per_gpu"]),
            scaling_efficiency=_num(row["scaling_efficiency"]),
            total_time_s=_interval(row, "total_time_s"),
            cost=_interval(row, "cost"),
            reason=str(row["reason"]),
            flags=split_flags(row.get("flags")),
        )
        for rank, (_, row) in enumerate(result.top.iterrows(), start=1)
    ]
    return schemas.RecommendResponse(
        objective=result.objective,
        candidates=result.candidates,
        unpredicted=result.unpredicted,
        infeasible=result.infeasible,
        notes=result.notes,
        model=ref,
        top=top,
    )


def allocate(
    models: ServedModels,
    req: schemas.AllocateRequest,
    backend: PredictionBackend | None = None,
    settings: Settings | None = None,
) -> schemas.AllocateResponse:
    ids = [j.job_id for j in req.jobs]
    if len(set(ids)) != len(ids):
        raise PerfcastError(f"job_id {next(i for i in ids if ids.count(i) > 1)!r} repeats")
    limits.check_allocate(req, settings or Settings())
    to_predict = [
        elastic.PredictedJob(
            j.job_id,
            j.job,
            j.gpu_type,
            j.local_batch_sizes,
            j.gpus_per_node,
            j.min_gpus,
            j.max_gpus,
        )
        for j in req.jobs
        if j.job is not None
    ]
    predicted = (
        elastic.predicted_throughputs(to_predict, req.total_gpus, backend or models)
        if to_predict
        else {}
    )
    jobs = []
    for job in req.jobs:
        table = predicted.get(job.job_id) or {}
        if job.throughput is not None:
            table = {(p.num_gpus, p.batch_size): p.samples_per_s for p in job.throughput}
        jobs.append(elastic.ElasticJob(job.job_id, table, job.min_gpus, job.max_gpus, job.weight))
    solution = elastic.solve(
        jobs, req.total_gpus, exact_cells=(settings or Settings()).max_allocation_cells
    )
    allocations, total, weighted = [], 0.0, 0.0
    for job in jobs:
        gpus, batch = solution.allocation[job.job_id]
        rate = job.throughput.get((gpus, batch)) if gpus else 0.0
        total += rate or 0.0
        weighted += (rate or 0.0) * job.weight
        allocations.append(
            schemas.JobAllocation(
                job_id=job.job_id, num_gpus=gpus, batch_size=batch, samples_per_s=rate
            )
        )
    return schemas.AllocateResponse(
        total_gpus=req.total_gpus,
        used_gpus=sum(a.num_gpus for a in allocations),
        total_throughput=total,
        weighted_throughput=weighted,
        predicted_jobs=len(to_predict),
        exact=solution.exact,
        optimality_gap=solution.gap,
        allocations=allocations,
    )


def place(
    models: ServedModels,
    req: schemas.PlaceRequest,
    backend: PredictionBackend | None = None,
    settings: Settings | None = None,
) -> schemas.PlaceResponse:
    limits.check_place(req, settings or Settings())
    plan = placement.place(
        [placement.PlacementJob(**j.model_dump()) for j in req.jobs],
        [placement.Node(**n.model_dump()) for n in req.nodes],
        backend or models,
        spread_tolerance=req.spread_tolerance,
        allow_sharing=req.allow_sharing,
    )
    return schemas.PlaceResponse(
        assignments=[
            schemas.AssignmentOut(
                job_id=a.job_id,
                gpus=[schemas.GpuRef(node=n, gpu=g) for n, g in a.gpus],
                shares_with=a.shares_with,
                reason=a.reason,
            )
            for a in plan.assignments.values()
        ],
        waiting=[schemas.WaitingOut(job_id=j, reason=r) for j, r in plan.waiting.items()],
    )


OBSERVED_TASK = "scaling"  # the task whose champion takes measured rows


def observe(
    models: ServedModels, rows: list[dict], settings: Settings | None = None
) -> schemas.ObserveResponse:
    """`POST /v1/observe`: measured scaling rows added to the served champion (in memory:
    until the next reload or restart), which answers the next requests with them."""
    models.champion(OBSERVED_TASK)  # 503 before any work when there is no model
    limits.check_predict(rows, settings or Settings())
    champion, total = models.observe(OBSERVED_TASK, pd.DataFrame.from_records(rows))
    ref = schemas.ModelRef(
        task=OBSERVED_TASK,
        family=champion.family,
        version=champion.version,
        run_id=champion.run_id,
    )
    return schemas.ObserveResponse(
        task=OBSERVED_TASK, observed=len(rows), observed_rows=total, model=ref
    )


def _by_source_first(metrics: dict) -> dict[str, float | None]:
    """What a new cluster should expect (`by_source_*`) first, then rows like its training."""
    ordered = sorted(metrics.items(), key=lambda kv: not kv[0].startswith("by_source_"))
    return {k: _num(v) for k, v in ordered}


def models_info(models: ServedModels) -> schemas.ModelsResponse:
    loaded = models.champions()
    infos = []
    for task in models.tasks:
        c = loaded.get(task)
        if c is None:
            infos.append(schemas.ModelInfo(task=task, loaded=False, reason=models.reason(task)))
            continue
        infos.append(
            schemas.ModelInfo(
                task=task,
                loaded=True,
                family=c.family,
                version=c.version,
                run_id=c.run_id,
                trained_at=c.trained_at,
                metrics=_by_source_first(c.metrics),
                warning=models.warning(task),
                observed_rows=models.observed_rows(task)
                if callable(getattr(c.predictor, "observe", None))
                else None,
            )
        )
    return schemas.ModelsResponse(models=infos)
