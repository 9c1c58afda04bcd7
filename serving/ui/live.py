"""The live cluster as the running scheduler (`perfcast run-trace`) records it in its SQLite
store: GPUs and their occupants, jobs, and the latest decisions with their reasons."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from perfcast.paths import state_dir
from perfcast.scheduler.live.spec import JobSpec
from perfcast.scheduler.live.store import JobStore, StoreError

RECENT_EVENTS = 40
# events that are the scheduler's decisions (the executor logs each with its reason/detail)
DECISIONS = ("launch", "suspend", "resume", "migrate", "resize", "timeslice", "stop", "restart")


def default_store_path() -> Path:
    """Where `perfcast run-trace` keeps its state unless given `--state`
    (`PERFCAST_LIVE_STATE` points the dashboard at another folder)."""
    folder = os.environ.get("PERFCAST_LIVE_STATE")
    return (Path(folder) if folder else state_dir() / "live") / "state.db"


def live_state(path: Path) -> dict[str, Any]:
    """The page's JSON: `present` false (and why) when there is no store at `path`."""
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
    finally:
        store.close()
    jobs = [_job(r) for r in records]
    return {
        "present": True,
        "store": str(path),
        "jobs": jobs,
        "gpus": _gpus(jobs),
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


def _gpus(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each GPU a job holds now, with its occupants (several when packed or time-sliced)."""
    held: dict[tuple[int, int], list[dict[str, str]]] = {}
    for job in jobs:
        if job["status"] != "running":
            continue
        for node, gpu in job["gpus"]:
            held.setdefault((node, gpu), []).append(
                {"job_id": job["job_id"], "share": job["share"]}
            )
    return [
        {"node": node, "gpu": gpu, "occupants": occupants}
        for (node, gpu), occupants in sorted(held.items())
    ]
