"""Properties of the runtime task's physical base and of its models, drawn by hypothesis over
the real NeuSight graphs: an identity op costs nothing, more FLOPs or bandwidth never make a
node's roofline slower, and a fitted model is a function of its rows and seed alone."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import requires_data
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfcast import datasets
from perfcast.features.graphs import op_table, with_roofline
from perfcast.predictor.runtime import OpLatencyModel

pytestmark = requires_data
torch.set_num_threads(1)
_FIXTURES = [HealthCheck.function_scoped_fixture]


@pytest.fixture(scope="module")
def graphs() -> pd.DataFrame:
    return datasets.load("neusight-graphs")


def _one(graphs: pd.DataFrame, mode: str, pick: int) -> pd.DataFrame:
    ids = graphs.loc[(graphs["mode"] == mode) & (graphs["op"] == "dropout"), "sample_id"].unique()
    return graphs[graphs["sample_id"] == ids[pick % len(ids)]]


@settings(max_examples=25, deadline=None, suppress_health_check=_FIXTURES)
@given(pick=st.integers(0, 200), flops=st.floats(0, 1e12), nbytes=st.floats(0, 1e12))
def test_dropout_costs_nothing_in_inference_and_its_bytes_in_training(
    graphs: pd.DataFrame, pick: int, flops: float, nbytes: float
) -> None:
    """Dropout is the identity under `model.eval()`: an inference graph's roofline is the same
    whatever flops and bytes its dropout nodes were estimated at; in training it moves them."""
    for mode in ("inference", "train"):
        sample = _one(graphs, mode, pick)
        dropout = sample["op"] == "dropout"
        changed = sample.assign(
            flops=sample["flops"].where(~dropout, flops),
            bytes=sample["bytes"].where(~dropout, nbytes),
        )
        before, after = with_roofline(sample), with_roofline(changed)
        if mode == "inference":
            pd.testing.assert_series_equal(before["roofline_ms"], after["roofline_ms"])
            assert (after.loc[dropout, "roofline_ms"] == 0).all()
        else:
            expected = np.maximum(flops / (after["peak_op_tflops"] * 1e12),
                                  nbytes / (after["mem_bw_gbps"] * 1e9)) * 1e3  # fmt: skip
            np.testing.assert_allclose(after.loc[dropout, "roofline_ms"], expected[dropout])


@settings(max_examples=25, deadline=None, suppress_health_check=_FIXTURES)
@given(
    pick=st.integers(0, 200),
    faster_compute=st.floats(1.0, 10.0),
    faster_memory=st.floats(1.0, 10.0),
)
def test_more_flops_and_bandwidth_never_make_a_node_slower_on_the_roofline(
    graphs: pd.DataFrame, pick: int, faster_compute: float, faster_memory: float
) -> None:
    """A GPU with `faster_compute` times the FLOPs and `faster_memory` times the bandwidth
    never runs a node slower on the roofline, nor faster than the larger of the two."""
    sample = _one(graphs, "inference", pick)
    faster = sample.assign(
        peak_tflops_fp32=sample["peak_tflops_fp32"] * faster_compute,
        mem_bw_gbps=sample["mem_bw_gbps"] * faster_memory,
    )
    before, after = with_roofline(sample)["roofline_ms"], with_roofline(faster)["roofline_ms"]
    assert (after <= before * (1 + 1e-12)).all()
    # and no node gains more than the larger of the two speedups
    most = max(faster_compute, faster_memory)
    assert (after >= before / most * (1 - 1e-12)).all()


@settings(max_examples=3, deadline=None, suppress_health_check=_FIXTURES)
@given(seed=st.integers(0, 1000))
def test_the_op_model_is_a_function_of_its_rows_and_seed(graphs: pd.DataFrame, seed: int) -> None:
    """Seeds are averaged, not drawn at fit time: the same rows and seed give the same
    per-node ratios, which are the mean of the members'."""
    small = graphs[graphs["device"].isin(["Tesla_T4", "Tesla_P4"])]
    ops = op_table(small)
    one = OpLatencyModel(seed, n_members=2).fit(ops)
    two = OpLatencyModel(seed, n_members=2).fit(ops)
    np.testing.assert_array_equal(one.log_ratio(ops), two.log_ratio(ops))
    X = one._features(ops)
    members = np.mean([m.predict(X) for m in one.models_], axis=0)
    np.testing.assert_allclose(one.log_ratio(ops), members)
