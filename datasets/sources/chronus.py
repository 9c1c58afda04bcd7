"""Chronus (SoCC'21, S-Lab-System-Group/ChronusArtifact): Philly-derived job mixes with deadlines.

`data/exp/trace_job_Philly_{MIX1,MIX2,SLO}.csv` hold `job_id,user,num_gpu,submit_time,iterations,
model_name,duration,interval,expect_time_list,expect_value_list,best_effort,job_type`. Times are
seconds (Chronus's profiler buckets `submit_time // 3600` into hours). `expect_time_list` is a
'-'-separated list of completion times relative to submission with the utility of each in
`expect_value_list` ("159-189-229-289" / "10-8-5-2" for a soft-deadline job, one value for a
strict one); `deadline_s` is its first entry, the latest completion with full utility, and is
missing for best-effort jobs (their `expect_time_list` just repeats `submit_time`). The first
entry is never below `duration` in the three files. The `user` values look like virtual cluster
ids (`vc_6214e9`) and are kept as given.

No `chronus-scaling` dataset: `data/model_info.json` gives, per model and GPU count, the speed of
spreading the GPUs over 2 or 4 nodes relative to 1 node (1.0), with no absolute step time, and
the per-iteration samples in `training_trace/` state neither the GPU type nor the batch size,
both of which the scaling contract requires.
"""

from __future__ import annotations

import pandas as pd

from perfcast.datasets.fetch import entries, fetch
from perfcast.datasets.registry import dataset

TRACE_DIR = "chronus/data/exp/"


def _trace(path: str) -> pd.DataFrame:
    name = path.rsplit("/", 1)[-1].removesuffix(".csv").removeprefix("trace_job_")
    raw = pd.read_csv(fetch(path), dtype={"expect_time_list": str, "expect_value_list": str})
    best_effort = raw["job_type"] == "best"
    first_deadline = raw["expect_time_list"].str.split("-").str[0].astype(float)
    return pd.DataFrame(
        {
            "job_id": name + "/" + raw["job_id"].astype(str),
            "submit_time_s": raw["submit_time"].astype(float),
            "num_gpus": raw["num_gpu"],
            "duration_s": raw["duration"].astype(float),
            "user": raw["user"],
            "job": raw["model_name"],
            "iterations": raw["iterations"],
            "trace": name,
            "job_type": raw["job_type"],
            "deadline_s": first_deadline.mask(best_effort),
            "deadline_steps_s": raw["expect_time_list"].mask(best_effort),
            "deadline_values": raw["expect_value_list"].mask(best_effort),
        }
    )


@dataset(
    "chronus-traces",
    "trace",
    description="Philly-derived job mixes (MIX1, MIX2, SLO) with strict/soft deadlines",
    source="Chronus (SoCC'21), github.com/S-Lab-System-Group/ChronusArtifact",
    files=[e.path for e in entries(TRACE_DIR)],
)
def chronus_traces() -> pd.DataFrame:
    return pd.concat([_trace(e.path) for e in entries(TRACE_DIR)], ignore_index=True)
