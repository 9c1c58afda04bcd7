"""The live cluster as the running scheduler (`perfcast run-trace`) records it in its SQLite
store: GPUs and their occupants, jobs, and the latest decisions with their reasons."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from perfcast.scheduler.live.spec import JobSpec
from perfcast.scheduler.live.store import JobStore, StoreError
from perfcast.serving.live_error import job_errors

RECENT_EVENTS = 40
# the store's record of the cluster's GPU nodes in core node order, [{node_id, gpus, gpu_type}]
# (the executor's `NodeView` writes it as it sees nodes join)
NODES_KEY = "ray_nodes"
# events that are the scheduler's decisions (the executor logs each with its reason/detail)
DECISIONS = ("launch", "suspend", "resume", "migrate", "resize", "timeslice", "stop", "restart")


def live_state(path: Path, champion: object = None) -> dict[str, Any]:
    """The page's JSON: `present` false (and why) when there is no store at `path`. With the
    `scaling` champion, each job it predicts gets its predicted step time and interval."""
    if not path.is_file():
        return {
            "present": False,
            "store": str(path),
            "reason": f"no live scheduler state at {path}: start one with `perfcast cluster up` "
            "and `perfcast run-trace TRACE --policy fifo` (or set PERFCAST_LIVE_STATE)",
        }
    try:
        store = JobStore(path)
    except StoreError as err:
        return {"present": False, "store": str(path), "reason": str(err)}
    try:
        records = store.jobs()
        events = store.events()[-RECENT_EVENTS:]
        nodes = store.get_meta(NODES_KEY)
    finally:
        store.close()
    jobs = [_job(r) for r in records]
    predicted = _champion_steps(records, champion)
    for job in jobs:
        job["champion"] = predicted.get(job["job_id"])
    return {
        "present": True,
        "store": str(path),
        "jobs": jobs,
        "gpus": _gpus(jobs, json.loads(nodes) if nodes else None),
        "events": [
            {**e, "decision": e["kind"] in DECISIONS or e["kind"].startswith("operator")}
            for e in reversed(events)
        ],
        "counts": {
            s: sum(j["status"] == s for j in jobs) for s in sorted({j["status"] for j in jobs})
        },
    }


def _job(r) -> dict[str, Any]:
    spec = JobSpec(**r.spec)
    return {
        "job_id": r.job_id,
        "model": spec.model,
        "status": r.status,
        "gpus": [list(g) for g in r.gpus],
        "share": r.share,
        "batch_size": r.batch_size,
        "iteration": r.iteration,
        "iterations": spec.iterations,
        "progress": r.samples_done / spec.total_samples if spec.total_samples else None,
        "measured_step_s": r.mean_step_time_s,
        "last_step_s": r.last_step_time_s,
        # what `perfcast jobs` shows as the predicted step time: the step time a trace replay
        # pads each step to (the trace's prediction for the job)
        "predicted_step_s": spec.min_step_time_s or None,
        "attempt": r.attempt,
        "error": (r.error or "").strip().splitlines()[-1][:200] if r.error else None,
    }


def _champion_steps(records: list, champion: object) -> dict[str, dict[str, float]]:
    """The champion's step time and p10-p90 for each job the live error counts, by job id."""
    if champion is None:
        return {}
    counted, _ = job_errors(records, champion)
    return {
        j.job_id: {"step_s": j.predicted_step_s, "p10_s": j.p10_s, "p90_s": j.p90_s}
        for j in counted
    }


def _gpus(jobs: list[dict[str, Any]], nodes: list[dict] | None) -> list[dict[str, Any]]:
    """Every GPU of the cluster's `nodes` (as the executor records them) with its occupants,
    several when packed or time-sliced, none when idle; without the record (a store of an
    earlier version), only the GPUs jobs hold."""
    held: dict[tuple[int, int], list[dict[str, str]]] = {}
    for node, entry in enumerate(nodes or ()):
        for gpu in range(int(entry["gpus"])):
            held[(node, gpu)] = []
    for job in jobs:
        if job["status"] != "running":
            continue
        for node, gpu in job["gpus"]:
            held.setdefault((node, gpu), []).append(
                {"job_id": job["job_id"], "share": job["share"]}
            )
    return [
        {
            "node": node,
            "gpu": gpu,
            "type": nodes[node]["gpu_type"] if nodes and node < len(nodes) else None,
            "occupants": occupants,
        }
        for (node, gpu), occupants in sorted(held.items())
    ]
