"""ElasticFlow (ASPLOS'23, microsoft/elasticflow-traces): 69k jobs from 10 GPU clusters.

`raw-traces/clusterNN.csv` holds `job_id,submission_time,duration,num_gpu`. Both times are in
seconds: durations start at exactly 600 (a 10-minute filter) with medians of 1-5 hours, and the
submissions of every cluster span about 60 days (5.2 million); read as minutes they would span
ten years. Submission times share one origin across the files, not each cluster's own start, so
`submit_time_s` is made relative to each cluster's first submission (the raw value is kept as
`raw_submission_s`). The job ids are UUIDs; they are prefixed with the cluster so that a job id
is unique across the combined table.
"""

from __future__ import annotations

import pandas as pd

from perfcast.datasets.fetch import entries, fetch
from perfcast.datasets.registry import dataset

TRACE_DIR = "elasticflow/raw-traces/"


def _cluster_trace(path: str) -> pd.DataFrame:
    cluster = path.rsplit("/", 1)[-1].removesuffix(".csv")
    raw = pd.read_csv(fetch(path))
    return pd.DataFrame(
        {
            "job_id": cluster + "/" + raw["job_id"],
            "submit_time_s": raw["submission_time"] - raw["submission_time"].min(),
            "num_gpus": raw["num_gpu"],
            "duration_s": raw["duration"].astype(float),
            "vc": cluster,
            "raw_submission_s": raw["submission_time"],
        }
    )


@dataset(
    "elasticflow-traces",
    "trace",
    description="69k real DL training jobs from 10 production GPU clusters (vc = cluster)",
    source="ElasticFlow (ASPLOS'23), github.com/microsoft/elasticflow-traces",
    files=[e.path for e in entries(TRACE_DIR)],
)
def elasticflow_traces() -> pd.DataFrame:
    return pd.concat([_cluster_trace(e.path) for e in entries(TRACE_DIR)], ignore_index=True)
