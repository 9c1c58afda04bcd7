"""Jobs to replay live: a YAML list of jobs, or a contract `trace` table scaled down in time.

A trace row becomes an MLP job whose steps are padded to `step_s` seconds, with
`duration_s * time_scale / step_s` iterations at the traced number of GPUs, submitted at
`submit_time_s * time_scale` (from the first submission). That keeps the trace's shape
(arrivals, sizes, lengths) at a scale a laptop runs in minutes.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from perfcast.files import read_text
from perfcast.scheduler.live.spec import JobSpec, JobSpecError, parse_job

BATCH_PER_GPU = 32


def load_trace(path: str | Path, *, time_scale: float, step_s: float) -> list[tuple[str, JobSpec]]:
    """(job id, spec) pairs in submission order."""
    path = Path(path)
    if path.suffix in (".yaml", ".yml"):
        return _from_yaml(path)
    if time_scale <= 0 or step_s <= 0:
        raise JobSpecError(f"{path}: time_scale and step_s must be positive")
    # here, not at the top: the contract's checks (pandera, pandas) cost a scheduler process
    # about a second of CPU to import, and a jobs YAML needs none of them
    from perfcast.datasets.io import read_table

    table = read_table(path, kind="trace").sort_values("submit_time_s", kind="stable")
    first = float(table["submit_time_s"].min())
    jobs = []
    for row in table.itertuples(index=False):
        gpus = max(int(row.num_gpus), 1)
        spec = JobSpec(
            name=str(row.job_id),
            iterations=max(1, round(float(row.duration_s) * time_scale / step_s)),
            num_gpus=gpus,
            batch_size=BATCH_PER_GPU * gpus,
            min_step_time_s=step_s,
            submit_time_s=(float(row.submit_time_s) - first) * time_scale,
            checkpoint_every=20,
        )
        jobs.append((str(row.job_id), spec))
    return jobs


def _from_yaml(path: Path) -> list[tuple[str, JobSpec]]:
    if not path.is_file():
        raise JobSpecError(f"{path}: no such jobs file")
    try:
        data = yaml.safe_load(read_text(path))
    except yaml.YAMLError as err:
        raise JobSpecError(f"{path}: not valid YAML: {err}") from None
    entries = data.get("jobs") if isinstance(data, dict) else data
    if not isinstance(entries, list) or not entries:
        raise JobSpecError(f"{path}: expected a non-empty list of jobs (or `jobs:` list)")
    jobs, seen = [], set()
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise JobSpecError(f"{path}: jobs[{i}] is not a mapping")
        entry = dict(entry)
        job_id = str(entry.pop("id", entry.get("name", f"job{i}")))
        if job_id in seen:
            raise JobSpecError(f"{path}: jobs[{i}]: duplicate id {job_id!r}")
        seen.add(job_id)
        jobs.append((job_id, parse_job(entry, f"{path}: jobs[{i}]")))
    return sorted(jobs, key=lambda j: j[1].submit_time_s)
