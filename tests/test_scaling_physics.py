"""The laws of data parallelism hold for every scaling answer, one row at a time
(`predictor.scaling_invariants`): swept over every known job and one never seen, every GPU
type with a datasheet, 1-128 GPUs on 1-16 nodes, local batches 1-4096 and links of
0.5-900 GB/s, each row against its physical variants, in random batches and alone."""

from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd
import pytest
from conftest import requires_data
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfcast import datasets
from perfcast.features.scaling import nominal_gradient_bytes
from perfcast.predictor import make_predictor
from perfcast.predictor.scaling_invariants import LAWS, random_rows, violations

pytestmark = requires_data

SCALING_DATA = ("pollux-scaling", "gavel-scaling", "muri-scaling", "sia-scaling")


@functools.cache
def _fitted(family: str):
    rows = pd.concat([datasets.load(name) for name in SCALING_DATA], ignore_index=True)
    # fcn's prior networks train 30 epochs (gbm ignores it): the per-parameter median beats
    # them on held-out jobs either way (0.27 against 0.38 at 30 and 0.40 at the default 300),
    # so the model answers exactly as at 300, for a third of the fit
    model = make_predictor("scaling", family, epochs=30).fit(rows)
    return model, sorted(rows["job"].unique())


@pytest.mark.parametrize("family", ["gbm", "fcn"])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), size=st.sampled_from([1, 7, 200]))
def test_no_row_breaks_a_law_alone_or_in_a_batch(family: str, seed: int, size: int) -> None:
    model, jobs = _fitted(family)
    rng = np.random.default_rng(seed)
    found = violations(model, random_rows(jobs, size, rng), rng, alone=5)
    assert found == dict.fromkeys(LAWS, 0)


def test_the_readmes_resnet18_is_faster_on_v100_than_k80_at_every_gpu_count() -> None:
    """The issue's example: Muri measured resnet18 (ImageNet) on V100 only; Gavel's
    resnet18-cifar10 figure on K80 is another job and must not stand in for it."""
    model, _ = _fitted("gbm")
    counts = [1, 2, 4, 8, 16]
    rows = pd.DataFrame(
        [
            {"job": "resnet18", "gpu_type": gpu, "num_gpus": n, "num_nodes": max(1, n // 8),
             "local_batch_size": batch}
            for gpu in ("v100", "k80") for n in counts for batch in (64, 128, 256)
        ]
    )  # fmt: skip
    step = model.predict(rows).reshape(2, len(counts), 3)
    assert (step[0] < step[1]).all()
    one_gpu = step[:, :1, :]
    assert (step >= one_gpu).all()  # no scaling efficiency above 100%


def test_observed_step_times_fix_a_new_clusters_answers() -> None:
    """`observe`: three measured configurations of a job on a cluster it was never measured
    at scale on move that job's answers there toward what was measured."""
    rows = pd.concat([datasets.load(name) for name in SCALING_DATA], ignore_index=True)
    held = (rows["cluster"] == "sia-rtx") & (rows["num_gpus"] > 1)
    model = make_predictor("scaling", "gbm").fit(rows[~held])
    test = rows[held & (rows["job"] == "resnet50-imagenet")]
    before = np.abs(np.log(model.predict(test) / test["step_time_s"])).mean()
    seen = test.sample(3, random_state=0)
    model.observe(seen)
    rest = test.drop(index=seen.index)
    after = np.abs(np.log(model.predict(rest) / rest["step_time_s"])).mean()
    assert after < before


def _reference_step(model, row: dict) -> float:
    """The model's equations for one row in plain Python (docs/predictors.md): what the
    vectorized path, grouping 10^5 rows by their codes, must answer."""
    law = model.law_
    compute = float(
        model.compute_seconds(row["job"], row["gpu_type"], [row["local_batch_size"]])[0][0]
    )
    n, nodes = row["num_gpus"], row["num_nodes"]
    if n == 1:
        return compute

    def sync(spread: int, link: float) -> float:
        job_bytes, latency = model.job_bytes_.get((row["job"], spread), (None, None))
        if job_bytes is None and (row["job"], 1 - spread) in model.job_bytes_:
            sign = 1.0 if spread == 1 else -1.0
            other, latency = model.job_bytes_[(row["job"], 1 - spread)]
            job_bytes = other + sign * model.across_ratio_
        if job_bytes is None:
            latency = model.prior_latency_[spread]
            job = np.array([row["job"]], dtype=object)
            nominal = nominal_gradient_bytes(job, np.array([np.nan]))
            job_bytes = float(model._prior_bytes(job, nominal, spread)[0])
        ring = 2 * (n - 1) / n / (link * 1e9) * (max(n, 2) / 2) ** law.growth[spread]
        return latency + math.exp(job_bytes) * ring

    s = sync(0, row["intra_node_bw_gbps"])
    if nodes > 1:
        s = max(s, sync(1, min(row["intra_node_bw_gbps"], row["inter_node_bw_gbps"])))
    if law.gamma == 1.0:
        return compute + s
    return (compute**law.gamma + s**law.gamma) ** (1 / law.gamma)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_the_vectorized_path_answers_the_equations_row_by_row(seed: int) -> None:
    model, jobs = _fitted("gbm")
    rows = random_rows(jobs, 300, np.random.default_rng(seed))
    got = model.predict(rows)
    want = np.array([_reference_step(model, row) for row in rows.to_dict("records")])
    np.testing.assert_allclose(got, want, rtol=1e-9)
